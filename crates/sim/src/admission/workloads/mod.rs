//! scheduling.k8s.io/v1beta1 Workloads: the template trees kube-apiserver 1.37 accepts on create
//! and update.
//!
//! A Workload lists either PodGroupTemplates or CompositePodGroupTemplates, and a composite
//! template nests more of both. The scheduler builds its PodGroup and CompositePodGroup hierarchy
//! from these trees and finds templates by name, so a tree it could not walk (too deep, a name used
//! twice, a composite with nothing under it) must be refused when it is written, with the answer
//! kube-apiserver gives.
//!
//! As kube-apiserver does, the answer lists two groups of causes:
//!
//! 1. the rules its validation code still makes by hand, over the whole tree (this module): every
//!    template name unique across the whole tree, at most [`TEMPLATE_DEPTH_MAX`] levels counting
//!    the pod group templates at the bottom, one priority for every template, and each composite
//!    with at least one child. They are checked on every create and update.
//! 2. the rules declared on the types (`templates`): one of the two lists, list sizes, names as
//!    DNS labels, scheduling policies, and what an update may not change.
//!
//! Known difference: the depth cause prints the offending composite's child list as kube-apiserver
//! prints it, Go's encoding of its internal templates (`printing`); the sim prints it from the
//! object as written, so a value the API server would have defaulted or normalised on decoding
//! prints as written.

mod formats;
mod printing;
mod templates;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use serde_json::Value;

use super::push;
use crate::error::Cause;

/// kube-apiserver's `WorkloadMaxTemplateDepth`: how many levels a tree may have, a top-level
/// composite being the first and the pod group templates under the deepest composites the last.
/// A composite on this level is refused, so composites nest at most three deep.
pub const TEMPLATE_DEPTH_MAX: usize = 4;
/// kube-apiserver's `WorkloadMaxPodGroupTemplates`: at most this many templates in each list.
pub const TEMPLATES_MAX: usize = 8;

/// The field of a spec or composite listing pod group templates.
const POD_GROUPS: &str = "podGroupTemplates";
/// The field of a spec or composite listing composite templates.
const COMPOSITES: &str = "compositePodGroupTemplates";

/// The entries of a list field (none when it is absent or not a list).
fn items_of(list: Option<&Value>) -> &[Value] {
    list.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn children<'a>(template: &'a Value, list: &str) -> &'a [Value] {
    items_of(template.get(list))
}

fn name_of(template: &Value) -> &str {
    template.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// Appends the Workload's problems: the hand-written tree rules, then the declarative field rules.
/// `old` is the stored Workload on an update.
pub fn check_workload(obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    check_names_unique(spec, causes);
    check_depth(spec, causes);
    check_one_priority(spec, causes);
    for (i, composite) in children(spec, COMPOSITES).iter().enumerate() {
        check_has_children(&format!("spec.{COMPOSITES}[{i}]"), composite, causes);
    }
    let old_spec = old.map(|o| o.get("spec").unwrap_or(&Value::Null));
    templates::check_spec(spec, old_spec, causes);
}

/// No template name twice in the tree. Names are collected level by level, depth first: a list's
/// names are compared with those of every template seen before it (its ancestors, their earlier
/// subtrees and the top-level pod group templates), not with each other (duplicates within one
/// list are the declarative check's).
fn check_names_unique(spec: &Value, causes: &mut Vec<Cause>) {
    let mut seen: HashSet<&str> = children(spec, POD_GROUPS).iter().map(name_of).collect();
    composite_list_names("spec", children(spec, COMPOSITES), &mut seen, causes);
}

fn composite_list_names<'a>(
    parent: &str,
    list: &'a [Value],
    seen: &mut HashSet<&'a str>,
    causes: &mut Vec<Cause>,
) {
    for (i, composite) in list.iter().enumerate() {
        duplicate(
            &format!("{parent}.{COMPOSITES}[{i}].name"),
            name_of(composite),
            seen,
            causes,
        );
    }
    seen.extend(list.iter().map(name_of));
    for (i, composite) in list.iter().enumerate() {
        let path = format!("{parent}.{COMPOSITES}[{i}]");
        let pod_groups = children(composite, POD_GROUPS);
        for (j, template) in pod_groups.iter().enumerate() {
            duplicate(
                &format!("{path}.{POD_GROUPS}[{j}].name"),
                name_of(template),
                seen,
                causes,
            );
        }
        seen.extend(pod_groups.iter().map(name_of));
        composite_list_names(&path, children(composite, COMPOSITES), seen, causes);
    }
}

fn duplicate(field: &str, name: &str, seen: &HashSet<&str>, causes: &mut Vec<Cause>) {
    if seen.contains(name) {
        push(causes, field, format!("Duplicate value: {name:?}"));
    }
}

/// At most [`TEMPLATE_DEPTH_MAX`] levels under each top-level composite, reported at that
/// composite with its child list as the bad value.
fn check_depth(spec: &Value, causes: &mut Vec<Cause>) {
    fn fits(composite: &Value, level: usize) -> bool {
        level < TEMPLATE_DEPTH_MAX
            && children(composite, COMPOSITES)
                .iter()
                .all(|child| fits(child, level + 1))
    }
    for (i, composite) in children(spec, COMPOSITES).iter().enumerate() {
        if !fits(composite, 1) {
            push(
                causes,
                format!("spec.{COMPOSITES}[{i}]"),
                format!(
                    "Invalid value: {}: maximum template hierarchy depth is {TEMPLATE_DEPTH_MAX}",
                    printing::internal_composite_list(composite.get(COMPOSITES))
                ),
            );
        }
    }
}

/// The priority a template asks for: its class name and its priority, if set.
fn priority_of(template: &Value) -> (&str, Option<i64>) {
    (
        template
            .get("priorityClassName")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        template.get("priority").and_then(Value::as_i64),
    )
}

/// Every template of the tree asks for the same priority (class name and value), the first one
/// met (top-level pod group templates first, then each composite before its subtree) setting it.
/// Reported once, at `spec`.
fn check_one_priority(spec: &Value, causes: &mut Vec<Cause>) {
    fn agrees<'a>(first: &mut Option<(&'a str, Option<i64>)>, template: &'a Value) -> bool {
        let priority = priority_of(template);
        *first.get_or_insert(priority) == priority
    }
    fn subtree_agrees<'a>(first: &mut Option<(&'a str, Option<i64>)>, composite: &'a Value) -> bool {
        agrees(first, composite)
            && children(composite, COMPOSITES)
                .iter()
                .all(|child| subtree_agrees(first, child))
            && children(composite, POD_GROUPS)
                .iter()
                .all(|template| agrees(first, template))
    }
    let mut first = None;
    if !children(spec, POD_GROUPS).iter().all(|t| agrees(&mut first, t)) {
        push(
            causes,
            "spec",
            "Invalid value: null: detected multiple priority configurations",
        );
        return;
    }
    if !children(spec, COMPOSITES)
        .iter()
        .all(|c| subtree_agrees(&mut first, c))
    {
        push(
            causes,
            "spec",
            "Invalid value: null: all priority and priorityClassName values must be identical, detected multiple values",
        );
    }
}

/// A composite has at least one child template, and so do the composites under it.
fn check_has_children(path: &str, composite: &Value, causes: &mut Vec<Cause>) {
    if children(composite, POD_GROUPS).is_empty() && children(composite, COMPOSITES).is_empty() {
        push(
            causes,
            path,
            format!(
                "Invalid value: {:?}: must have at least one child PodGroupTemplate or CompositePodGroupTemplate",
                name_of(composite)
            ),
        );
    }
    for (i, child) in children(composite, COMPOSITES).iter().enumerate() {
        check_has_children(&format!("{path}.{COMPOSITES}[{i}]"), child, causes);
    }
}
