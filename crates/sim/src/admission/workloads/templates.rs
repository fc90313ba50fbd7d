//! The field rules kube-apiserver 1.37 declares on the `scheduling.k8s.io/v1beta1` Workload types
//! (its declarative validation), walked in the order of the generated code: the spec's one-of
//! (`podGroupTemplates` or `compositePodGroupTemplates`), the controller reference, then each
//! template list and each template's fields.
//!
//! On an update these rules ratchet as upstream's do: a value equal to its old counterpart
//! (template lists are matched by name) is not looked at again, and a changed value of an
//! immutable field is refused without looking further. Templates may not be added to or removed
//! from any list once the Workload exists; only a gang's `minCount` / `minGroupCount` may change.
//!
//! The feature-gated fields (`compositePodGroupTemplates`, `schedulingConstraints`,
//! `resourceClaims`, `preemptionPolicy`) are checked as kube-apiserver checks them with their gates
//! on: the simulator serves those fields, and has no gates of its own for the control plane.

use serde_json::{Map, Value};

use super::formats::{label_key, long_name, path_segment_name, short_name};
use super::printing::{wire_composite_template, wire_pod_group_template, wire_resource_claim};
use super::{COMPOSITES, POD_GROUPS, TEMPLATES_MAX, items_of};
use crate::admission::one_of_message;
use crate::error::Cause;

/// At most this many topology constraints per template.
const TOPOLOGY_MAX: usize = 1;
/// kube-apiserver's `MaxPodGroupResourceClaims`.
const RESOURCE_CLAIMS_MAX: usize = 4;
/// The highest priority a template may ask for (the highest user-definable priority).
const PRIORITY_MAX: i64 = 1_000_000_000;
/// The preemption policies, sorted as upstream lists them.
const PREEMPTION_POLICIES: [&str; 2] = ["Never", "PreemptLowerPriority"];

/// `v` unless it is JSON `null`.
fn set(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn field<'a>(v: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    set(v.and_then(|v| v.get(key)))
}

fn text<'a>(v: Option<&'a Value>, key: &str) -> &'a str {
    field(v, key).and_then(Value::as_str).unwrap_or_default()
}

/// Whether a value counts as absent in a comparison: Go's semantic equality treats a nil and an
/// empty list (or map) alike.
fn empty(v: Option<&Value>) -> bool {
    match set(v) {
        None => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// Go's semantic equality of two decoded values: absent, `null` and empty lists are the same.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    if empty(a) || empty(b) {
        return empty(a) && empty(b);
    }
    match (set(a), set(b)) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => same_objects(x, y),
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(Some(p), Some(q)))
        }
        (x, y) => x == y,
    }
}

fn same_objects(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    x.keys().chain(y.keys()).all(|k| same(x.get(k), y.get(k)))
}

/// The name a template list is keyed by.
fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// Which template type a list holds.
#[derive(Clone, Copy)]
enum TemplateKind {
    PodGroup,
    Composite,
}

/// The checks of one create or update, collecting causes.
struct Rules<'a> {
    causes: &'a mut Vec<Cause>,
    updating: bool,
}

impl Rules<'_> {
    fn cause(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.causes.push(Cause {
            field: field.into(),
            message: message.into(),
        });
    }

    /// An update that leaves the value as it was: not checked again.
    fn unchanged(&self, new: Option<&Value>, old: Option<&Value>) -> bool {
        self.updating && same(new, old)
    }

    /// An optional field whose value may not change: the value to check further, if any. Called
    /// only for a changed value, so on an update it is refused.
    fn immutable<'v>(&mut self, path: &str, new: Option<&'v Value>) -> Option<&'v Value> {
        if self.updating {
            self.cause(path, "Invalid value: null: field is immutable");
            return None;
        }
        new
    }

    /// One-of: exactly one of `members` is set (`is_set` says which). On an update that sets the
    /// same members as before, not checked.
    fn one_of(
        &mut self,
        path: &str,
        new: Option<&Value>,
        old: Option<&Value>,
        members: &[&str],
        is_set: fn(Option<&Value>) -> bool,
    ) {
        if self.updating
            && members
                .iter()
                .all(|m| is_set(field(new, m)) == is_set(field(old, m)))
        {
            return;
        }
        if let Some(message) = one_of_message(members, |m| is_set(field(new, m))) {
            self.cause(path, message);
        }
    }

    /// A value's format problems, each its own cause.
    fn format(&mut self, path: &str, value: &str, problems: Vec<String>) {
        for problem in problems {
            self.cause(path, format!("Invalid value: {value:?}: {problem}"));
        }
    }

    /// A required string field checked by `check`.
    fn required(
        &mut self,
        path: &str,
        new: Option<&Value>,
        old: Option<&Value>,
        key: &str,
        check: fn(&str) -> Vec<String>,
    ) {
        let value = text(new, key);
        if self.updating && value == text(old, key) {
            return;
        }
        let path = format!("{path}.{key}");
        if value.is_empty() {
            self.cause(path, "Required value");
        } else {
            self.format(&path, value, check(value));
        }
    }

    fn spec(&mut self, spec: &Value, old: Option<&Value>) {
        let new = Some(spec);
        if self.unchanged(new, old) {
            return;
        }
        self.one_of("spec", new, old, &[POD_GROUPS, COMPOSITES], |list| !empty(list));
        self.controller_ref(field(new, "controllerRef"), field(old, "controllerRef"));
        self.templates(
            &format!("spec.{POD_GROUPS}"),
            field(new, POD_GROUPS),
            field(old, POD_GROUPS),
            TemplateKind::PodGroup,
        );
        self.templates(
            &format!("spec.{COMPOSITES}"),
            field(new, COMPOSITES),
            field(old, COMPOSITES),
            TemplateKind::Composite,
        );
    }

    fn controller_ref(&mut self, new: Option<&Value>, old: Option<&Value>) {
        const PATH: &str = "spec.controllerRef";
        if self.unchanged(new, old) {
            return;
        }
        let Some(reference) = self.immutable(PATH, new) else {
            return;
        };
        let group = text(Some(reference), "apiGroup");
        if !group.is_empty() {
            self.format(&format!("{PATH}.apiGroup"), group, long_name(group));
        }
        self.required(PATH, Some(reference), None, "kind", path_segment_name);
        self.required(PATH, Some(reference), None, "name", path_segment_name);
    }

    /// A list of templates: its size, no templates added or removed by an update, names unique
    /// within the list, then each template that is new or changed.
    fn templates(&mut self, path: &str, new: Option<&Value>, old: Option<&Value>, kind: TemplateKind) {
        if self.unchanged(new, old) {
            return;
        }
        let items = items_of(new);
        let old_items = items_of(old);
        let mut stop = items.is_empty();
        if items.len() > TEMPLATES_MAX {
            self.cause(
                path,
                format!(
                    "Too many: {}: must have at most {TEMPLATES_MAX} items",
                    items.len()
                ),
            );
            stop = true;
        }
        if self.updating {
            for (i, item) in items.iter().enumerate() {
                if !old_items.iter().any(|o| name_of(o) == name_of(item)) {
                    self.cause(format!("{path}[{i}]"), "Forbidden: item may not be added");
                    stop = true;
                }
            }
            for gone in old_items {
                if !items.iter().any(|n| name_of(n) == name_of(gone)) {
                    self.cause(path, "Forbidden: item may not be removed");
                    stop = true;
                }
            }
        }
        if stop {
            return;
        }
        for (i, item) in items.iter().enumerate() {
            if items[..i].iter().any(|earlier| name_of(earlier) == name_of(item)) {
                let shown = match kind {
                    TemplateKind::PodGroup => wire_pod_group_template(item),
                    TemplateKind::Composite => wire_composite_template(item),
                };
                self.cause(format!("{path}[{i}]"), format!("Duplicate value: {shown}"));
            }
        }
        for (i, item) in items.iter().enumerate() {
            let old_item = old_items.iter().find(|o| name_of(o) == name_of(item));
            if self.updating && old_item.is_some_and(|o| same(Some(item), Some(o))) {
                continue;
            }
            let item_path = format!("{path}[{i}]");
            match kind {
                TemplateKind::PodGroup => self.pod_group_template(&item_path, item, old_item),
                TemplateKind::Composite => self.composite_template(&item_path, item, old_item),
            }
        }
    }

    fn pod_group_template(&mut self, path: &str, template: &Value, old: Option<&Value>) {
        let new = Some(template);
        self.required(path, new, old, "name", short_name);
        self.policy(
            path,
            field(new, "schedulingPolicy"),
            field(old, "schedulingPolicy"),
            "minCount",
        );
        self.constraints(path, new, old);
        self.resource_claims(path, field(new, "resourceClaims"), field(old, "resourceClaims"));
        self.disruption_mode(path, new, old);
        self.priority_fields(path, new, old);
    }

    fn composite_template(&mut self, path: &str, template: &Value, old: Option<&Value>) {
        let new = Some(template);
        self.required(path, new, old, "name", short_name);
        self.policy(
            path,
            field(new, "schedulingPolicy"),
            field(old, "schedulingPolicy"),
            "minGroupCount",
        );
        self.constraints(path, new, old);
        self.disruption_mode(path, new, old);
        self.priority_fields(path, new, old);
        self.templates(
            &format!("{path}.{POD_GROUPS}"),
            field(new, POD_GROUPS),
            field(old, POD_GROUPS),
            TemplateKind::PodGroup,
        );
        self.templates(
            &format!("{path}.{COMPOSITES}"),
            field(new, COMPOSITES),
            field(old, COMPOSITES),
            TemplateKind::Composite,
        );
    }

    /// A template's scheduling policy: one of `basic` and `gang`, which may not be swapped by an
    /// update; the gang's quorum (`quorum`) set and positive.
    fn policy(&mut self, template: &str, new: Option<&Value>, old: Option<&Value>, quorum: &str) {
        if self.unchanged(new, old) {
            return;
        }
        let path = format!("{template}.schedulingPolicy");
        self.one_of(&path, new, old, &["basic", "gang"], |v| set(v).is_some());
        let (basic, old_basic) = (field(new, "basic"), field(old, "basic"));
        if !self.unchanged(basic, old_basic) {
            self.immutable(&format!("{path}.basic"), basic);
        }
        let (gang, old_gang) = (field(new, "gang"), field(old, "gang"));
        if self.unchanged(gang, old_gang) {
            return;
        }
        let gang_path = format!("{path}.gang");
        if self.updating {
            match (old_gang, gang) {
                (None, Some(_)) => {
                    self.cause(
                        &gang_path,
                        "Invalid value: null: field cannot be set once created",
                    );
                    return;
                }
                (Some(_), None) => {
                    self.cause(
                        &gang_path,
                        "Invalid value: null: field cannot be cleared once set",
                    );
                    return;
                }
                _ => {}
            }
        }
        if gang.is_none() || self.unchanged(field(gang, quorum), field(old_gang, quorum)) {
            return;
        }
        let count = field(gang, quorum).and_then(Value::as_i64).unwrap_or(0);
        let quorum_path = format!("{gang_path}.{quorum}");
        if count == 0 {
            self.cause(quorum_path, "Required value");
        } else if count < 1 {
            self.cause(
                quorum_path,
                format!("Invalid value: {count}: must be greater than or equal to 1"),
            );
        }
    }

    /// Scheduling constraints (immutable): at most one topology constraint, each with a label key.
    fn constraints(&mut self, template: &str, new: Option<&Value>, old: Option<&Value>) {
        let (constraints, old_constraints) = (
            field(new, "schedulingConstraints"),
            field(old, "schedulingConstraints"),
        );
        if self.unchanged(constraints, old_constraints) {
            return;
        }
        let path = format!("{template}.schedulingConstraints");
        let Some(constraints) = self.immutable(&path, constraints) else {
            return;
        };
        let topology = items_of(field(Some(constraints), "topology"));
        if topology.len() > TOPOLOGY_MAX {
            self.cause(
                format!("{path}.topology"),
                format!(
                    "Too many: {}: must have at most {TOPOLOGY_MAX} item",
                    topology.len()
                ),
            );
            return;
        }
        for (i, constraint) in topology.iter().enumerate() {
            self.required(
                &format!("{path}.topology[{i}]"),
                Some(constraint),
                None,
                "key",
                label_key,
            );
        }
    }

    /// A PodGroupTemplate's resource claims (immutable): at most four, unique names, each naming
    /// exactly one of a claim and a claim template.
    fn resource_claims(&mut self, template: &str, new: Option<&Value>, old: Option<&Value>) {
        if self.unchanged(new, old) {
            return;
        }
        let path = format!("{template}.resourceClaims");
        if self.updating {
            self.immutable(&path, new);
            return;
        }
        let claims = items_of(new);
        if claims.len() > RESOURCE_CLAIMS_MAX {
            self.cause(
                &path,
                format!(
                    "Too many: {}: must have at most {RESOURCE_CLAIMS_MAX} items",
                    claims.len()
                ),
            );
            return;
        }
        for (i, claim) in claims.iter().enumerate() {
            if claims[..i]
                .iter()
                .any(|earlier| name_of(earlier) == name_of(claim))
            {
                self.cause(
                    format!("{path}[{i}]"),
                    format!("Duplicate value: {}", wire_resource_claim(claim)),
                );
            }
        }
        for (i, claim) in claims.iter().enumerate() {
            let claim_path = format!("{path}[{i}]");
            let claim = Some(claim);
            self.one_of(
                &claim_path,
                claim,
                None,
                &["resourceClaimName", "resourceClaimTemplateName"],
                |v| set(v).is_some(),
            );
            self.required(&claim_path, claim, None, "name", short_name);
            for key in ["resourceClaimName", "resourceClaimTemplateName"] {
                if let Some(name) = field(claim, key) {
                    let name = name.as_str().unwrap_or_default();
                    self.format(&format!("{claim_path}.{key}"), name, long_name(name));
                }
            }
        }
    }

    /// A disruption mode (immutable): one of `single` and `all`.
    fn disruption_mode(&mut self, template: &str, new: Option<&Value>, old: Option<&Value>) {
        let (mode, old_mode) = (field(new, "disruptionMode"), field(old, "disruptionMode"));
        if self.unchanged(mode, old_mode) {
            return;
        }
        let path = format!("{template}.disruptionMode");
        if let Some(mode) = self.immutable(&path, mode) {
            self.one_of(&path, Some(mode), None, &["single", "all"], |v| set(v).is_some());
        }
    }

    /// Priority class name, priority and preemption policy: all immutable.
    fn priority_fields(&mut self, template: &str, new: Option<&Value>, old: Option<&Value>) {
        let class = text(new, "priorityClassName");
        if !(self.updating && class == text(old, "priorityClassName")) {
            let path = format!("{template}.priorityClassName");
            if self.updating {
                self.immutable(&path, None);
            } else if !class.is_empty() {
                self.format(&path, class, long_name(class));
            }
        }
        let (priority, old_priority) = (field(new, "priority"), field(old, "priority"));
        if !self.unchanged(priority, old_priority) {
            let path = format!("{template}.priority");
            let value = self.immutable(&path, priority).and_then(Value::as_i64);
            if let Some(value) = value.filter(|v| *v > PRIORITY_MAX) {
                self.cause(
                    path,
                    format!("Invalid value: {value}: must be less than or equal to {PRIORITY_MAX}"),
                );
            }
        }
        let (policy, old_policy) = (field(new, "preemptionPolicy"), field(old, "preemptionPolicy"));
        if !self.unchanged(policy, old_policy) {
            let path = format!("{template}.preemptionPolicy");
            let value = self
                .immutable(&path, policy)
                .map(|p| p.as_str().unwrap_or_default());
            if let Some(value) = value.filter(|v| !PREEMPTION_POLICIES.contains(v)) {
                let supported = PREEMPTION_POLICIES.map(|p| format!("{p:?}")).join(", ");
                self.cause(
                    path,
                    format!("Unsupported value: {value:?}: supported values: {supported}"),
                );
            }
        }
    }
}

/// Appends the declarative problems of a Workload spec; `old_spec` is the stored spec on an
/// update (`None` on create).
pub(super) fn check_spec(spec: &Value, old_spec: Option<&Value>, causes: &mut Vec<Cause>) {
    let mut rules = Rules {
        causes,
        updating: old_spec.is_some(),
    };
    rules.spec(spec, old_spec);
}
