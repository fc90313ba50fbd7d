//! Names read from upstream's Go sources in the Go module cache: the in-tree plugins, the fields
//! of `KubeSchedulerConfiguration` v1 and of each plugin's args, and the feature gates the
//! scheduler reads.
//!
//! The sources are the modules `e2e/upstream/build` downloads to build kube-scheduler for the
//! tier, so they are present whenever the tier runs; their absence fails the test. Parsing is by
//! lines, enough for gofmt'ed declarations: struct fields with a `json:"…"` tag, `Name = "…"`
//! constants, `features.Gate` references. Each extraction also has a floor on how much it finds,
//! so that a change of layout upstream shows up as a failure, not as a pass over nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

/// The modules the page describes, as `e2e/upstream/go.mod` pins them.
pub const KUBERNETES: &str = "k8s.io/kubernetes@v1.37.2";
pub const KUBE_SCHEDULER: &str = "k8s.io/kube-scheduler@v0.37.2";
pub const COMPONENT_BASE: &str = "k8s.io/component-base@v0.37.2";

/// The import path of the gate constants.
const FEATURES_IMPORT: &str = "\"k8s.io/kubernetes/pkg/features\"";
/// The package qualifier of component-base's configuration types in kube-scheduler's.
const COMPONENT_BASE_QUALIFIER: &str = "componentbaseconfigv1alpha1.";

/// Where the three modules are.
pub struct Sources {
    kubernetes: PathBuf,
    kube_scheduler: PathBuf,
    component_base: PathBuf,
}

impl Sources {
    /// Finds the modules under `go env GOMODCACHE`; panics (never skips) when `go` or a module is
    /// missing, or when `e2e/upstream/go.mod` pins other versions than the page describes.
    pub fn locate() -> Self {
        let upstream = super::repo().join("e2e/upstream");
        let go_mod = read(&upstream.join("go.mod"));
        for pin in [
            "k8s.io/kubernetes v1.37.2",
            "k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.37.2",
            "k8s.io/component-base => k8s.io/component-base v0.37.2",
        ] {
            assert!(
                go_mod.contains(pin),
                "e2e/upstream/go.mod does not pin `{pin}`: move these tests and docs/upstream-parity.md with it"
            );
        }
        let out = Command::new("go")
            .args(["env", "GOMODCACHE"])
            .current_dir(&upstream)
            .output()
            .expect("running `go env GOMODCACHE` (the tier needs Go: e2e/upstream/build)");
        assert!(
            out.status.success(),
            "go env GOMODCACHE: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cache = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let module = |name: &str| {
            let dir = cache.join(name);
            assert!(
                dir.is_dir(),
                "{} is missing: run e2e/upstream/build, which downloads it",
                dir.display()
            );
            dir
        };
        Sources {
            kubernetes: module(KUBERNETES),
            kube_scheduler: module(KUBE_SCHEDULER),
            component_base: module(COMPONENT_BASE),
        }
    }

    fn plugins_dir(&self) -> PathBuf {
        self.kubernetes.join("pkg/scheduler/framework/plugins")
    }

    /// Every in-tree plugin name: the constants of `names/names.go` and the keys of
    /// `NewInTreeRegistry` in `registry.go` (resolved to the names their packages give them).
    pub fn plugin_names(&self) -> BTreeSet<String> {
        let names_go = read(&self.plugins_dir().join("names/names.go"));
        let constants = string_constants(&names_go);
        let mut names: BTreeSet<String> = constants.values().cloned().collect();
        for (package, ident) in registry_keys(&read(&self.plugins_dir().join("registry.go"))) {
            let name = self
                .plugin_constant(&package, &ident, &constants)
                .unwrap_or_else(|| panic!("registry.go: cannot resolve {package}.{ident} to a plugin name"));
            names.insert(name);
        }
        assert!(
            names.len() >= 20,
            "only {} plugin names found: {names:?}",
            names.len()
        );
        names
    }

    /// The value of `ident` in a plugin package: `ident = names.X` or `ident = "…"`.
    fn plugin_constant(
        &self,
        package: &str,
        ident: &str,
        names: &BTreeMap<String, String>,
    ) -> Option<String> {
        for file in go_files(&self.plugins_dir().join(package), false) {
            for line in read(&file).lines() {
                let line = line.trim().trim_start_matches("const ");
                let Some((left, right)) = line.split_once('=') else {
                    continue;
                };
                if left.split_whitespace().next() != Some(ident) {
                    continue;
                }
                let right = right.trim();
                if let Some(constant) = right.strip_prefix("names.") {
                    return names.get(identifier_prefix(constant)).cloned();
                }
                if let Some(literal) = string_literal(right) {
                    return Some(literal.to_string());
                }
            }
        }
        None
    }

    /// Every field of `KubeSchedulerConfiguration` as a dotted path of json names
    /// (`profiles[].plugins.filter.enabled[].name`), through component-base's embedded types.
    pub fn configuration_paths(&self) -> Vec<String> {
        let types = self.scheduler_types();
        let base = go_structs(&read(&self.component_base.join("config/v1alpha1/types.go")));
        let mut paths = Vec::new();
        walk_struct(
            "KubeSchedulerConfiguration",
            "",
            &types,
            Some(&base),
            &mut paths,
            0,
        );
        assert!(
            paths.len() >= 50,
            "only {} configuration paths found: {paths:?}",
            paths.len()
        );
        paths
    }

    /// Every field of every `…Args` type, by args type, as dotted paths inside the args.
    pub fn args_paths(&self) -> BTreeMap<String, Vec<String>> {
        let types = self.scheduler_types();
        let mut out = BTreeMap::new();
        for name in types.keys().filter(|n| n.ends_with("Args")) {
            let mut paths = Vec::new();
            walk_struct(name, "", &types, None, &mut paths, 0);
            out.insert(name.clone(), paths);
        }
        assert!(
            out.len() >= 8,
            "only {} args types found: {:?}",
            out.len(),
            out.keys()
        );
        out
    }

    /// The structs of kube-scheduler's `config/v1/types*.go`.
    fn scheduler_types(&self) -> BTreeMap<String, Vec<GoField>> {
        let dir = self.kube_scheduler.join("config/v1");
        let mut types = BTreeMap::new();
        for file in go_files(&dir, false) {
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("types") {
                types.extend(go_structs(&read(&file)));
            }
        }
        assert!(
            types.contains_key("KubeSchedulerConfiguration"),
            "no KubeSchedulerConfiguration in {}",
            dir.display()
        );
        types
    }

    /// The gates `pkg/scheduler` reads: every constant of `pkg/features/kube_features.go` that a
    /// non-test file under `pkg/scheduler` names through its import of that package.
    pub fn scheduler_gates(&self) -> BTreeSet<String> {
        let declared = gate_constants(&read(&self.kubernetes.join("pkg/features/kube_features.go")));
        assert!(declared.len() >= 100, "only {} gates declared", declared.len());
        let mut gates = BTreeSet::new();
        for file in go_files(&self.kubernetes.join("pkg/scheduler"), true) {
            let text = read(&file);
            let Some(alias) = features_alias(&text) else {
                continue;
            };
            let qualifier = format!("{alias}.");
            let mut rest = text.as_str();
            while let Some(at) = rest.find(&qualifier) {
                let before = rest[..at].chars().next_back();
                rest = &rest[at + qualifier.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
                    continue;
                }
                if let Some(name) = declared.get(identifier_prefix(rest)) {
                    gates.insert(name.clone());
                }
            }
        }
        assert!(
            gates.len() >= 20,
            "only {} scheduler gates found: {gates:?}",
            gates.len()
        );
        gates
    }
}

/// One struct field: its json name (`""` for an inlined embedded struct) and its Go type.
#[derive(Debug)]
struct GoField {
    json: String,
    ty: String,
}

/// Appends the paths of a struct's fields under `prefix`, recursing into the structs it knows
/// (`base`: component-base's, reached through their package qualifier).
fn walk_struct(
    name: &str,
    prefix: &str,
    types: &BTreeMap<String, Vec<GoField>>,
    base: Option<&BTreeMap<String, Vec<GoField>>>,
    paths: &mut Vec<String>,
    depth: usize,
) {
    assert!(depth < 10, "struct nesting too deep at {prefix}");
    let Some(fields) = types.get(name) else {
        return;
    };
    for field in fields {
        let list = field.ty.starts_with("[]") || field.ty.starts_with("*[]");
        let bare = field.ty.trim_start_matches(['*', '[', ']']);
        let (nested_types, nested) = match bare.strip_prefix(COMPONENT_BASE_QUALIFIER) {
            Some(n) => (base, n),
            None if bare.contains('.') => (None, bare),
            None => (Some(types), bare),
        };
        if field.json.is_empty() {
            // Embedded with `json:""`: its fields are this struct's (TypeMeta's are apiVersion/kind).
            if let Some(t) = nested_types {
                walk_struct(nested, prefix, t, base, paths, depth + 1);
            }
            continue;
        }
        let path = format!("{prefix}{}{}", field.json, if list { "[]" } else { "" });
        paths.push(path.clone());
        if let Some(t) = nested_types {
            walk_struct(nested, &format!("{path}."), t, base, paths, depth + 1);
        }
    }
}

/// The structs of a gofmt'ed file with their tagged fields (untagged fields are not serialised).
fn go_structs(text: &str) -> BTreeMap<String, Vec<GoField>> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Vec<GoField>)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("type ") {
            if let Some(name) = rest.strip_suffix(" struct {") {
                current = Some((name.trim().to_string(), Vec::new()));
            }
            continue;
        }
        if line.starts_with('}') {
            if let Some((name, fields)) = current.take() {
                out.insert(name, fields);
            }
            continue;
        }
        let Some((_, fields)) = current.as_mut() else {
            continue;
        };
        let code = line.trim();
        if code.starts_with("//") {
            continue;
        }
        let Some((declaration, tag)) = code.split_once('`') else {
            continue;
        };
        let Some(json) = tag.split("json:\"").nth(1).and_then(|t| t.split('"').next()) else {
            continue;
        };
        let json = json.split(',').next().unwrap_or_default();
        if json == "-" {
            continue;
        }
        let tokens: Vec<&str> = declaration.split_whitespace().collect();
        let ty = match tokens.as_slice() {
            [embedded] => *embedded,
            [_, ty] => *ty,
            _ => panic!("cannot read the struct field {code:?}"),
        };
        fields.push(GoField {
            json: json.to_string(),
            ty: ty.to_string(),
        });
    }
    out
}

/// `Ident = "value"` (in a const block or `const Ident = "value"`): ident → value.
fn string_constants(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim().trim_start_matches("const ");
        let Some((left, right)) = line.split_once('=') else {
            continue;
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        if let ([ident], Some(value)) = (left.as_slice(), string_literal(right.trim())) {
            out.insert(ident.to_string(), value.to_string());
        }
    }
    out
}

/// `Ident featuregate.Feature = "Name"`: ident → name.
fn gate_constants(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((left, right)) = line.trim().split_once('=') else {
            continue;
        };
        if let ([ident, "featuregate.Feature"], Some(name)) = (
            left.split_whitespace().collect::<Vec<_>>().as_slice(),
            string_literal(right.trim()),
        ) {
            out.insert(ident.to_string(), name.to_string());
        }
    }
    out
}

/// `(package, ident)` of each `package.Ident: factory,` entry of `NewInTreeRegistry`.
fn registry_keys(text: &str) -> Vec<(String, String)> {
    let body = text
        .split("func NewInTreeRegistry")
        .nth(1)
        .expect("registry.go has NewInTreeRegistry");
    let mut keys = Vec::new();
    for line in body.lines() {
        let line = line.trim();
        if line.starts_with("return ") {
            break;
        }
        let Some((key, _)) = line.split_once(':') else {
            continue;
        };
        if let Some((package, ident)) = key.split_once('.')
            && [package, ident]
                .iter()
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            keys.push((package.to_string(), ident.to_string()));
        }
    }
    assert!(keys.len() >= 20, "only {} registry entries found", keys.len());
    keys
}

/// The name a file imports `k8s.io/kubernetes/pkg/features` as (`features` unless aliased).
fn features_alias(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains(FEATURES_IMPORT))?;
    let before = line.trim().trim_start_matches("import ");
    let alias = before.split_whitespace().next()?;
    Some(if alias.starts_with('"') {
        "features".to_string()
    } else {
        alias.to_string()
    })
}

/// The contents of a leading `"…"` literal.
fn string_literal(text: &str) -> Option<&str> {
    text.strip_prefix('"')?.split('"').next()
}

/// The Go identifier at the start of `text`.
fn identifier_prefix(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The non-test `.go` files of a directory (and its subdirectories when `recursive`), sorted.
fn go_files(dir: &Path, recursive: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if recursive {
                out.extend(go_files(&path, true));
            }
        } else if path.extension().is_some_and(|e| e == "go") && !path.to_string_lossy().ends_with("_test.go")
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}
