//! The crate map a newcomer reads is the one Cargo builds.
//!
//! `docs/design.md`'s crate table says which of our crates each crate uses, and README's "Layout"
//! says where every crate lives. Both drift silently when a dependency is added or a crate is split,
//! so these tests read the workspace manifests and compare. A third test keeps unused dependencies
//! out of the product graph: every normal dependency must be named by the crate's non-test code
//! (a dependency that only tests use belongs in `[dev-dependencies]`, where it is not linked into
//! the binary).
//!
//! The manifests are read with a small line parser rather than a TOML crate: ours are plain
//! `name = { workspace = true }` lists, and a form it does not understand fails the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// One workspace member: where it is, its package name, and its normal dependencies.
#[derive(Debug)]
struct Member {
    path: String,
    name: String,
    dependencies: Vec<Dependency>,
}

/// A normal dependency: its name in the manifest, the identifier its code uses, and whether a
/// feature brings it in (then the feature's code, e.g. a `testing` fixture module, uses it).
#[derive(Debug)]
struct Dependency {
    name: String,
    ident: String,
    optional: bool,
}

/// The `members = [...]` list of the root manifest.
fn member_paths() -> Vec<String> {
    let text = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = text
        .find("\nmembers = [")
        .expect("root manifest has a members list");
    let list = &text[start..];
    let list = &list[..list.find(']').unwrap()];
    list.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// Reads a member's manifest: `[package] name` and every `[dependencies]` /
/// `[target.….dependencies]` entry.
fn member(path: &str) -> Member {
    let text = fs::read_to_string(root().join(path).join("Cargo.toml")).unwrap();
    let mut section = String::new();
    let mut name = None;
    let mut dependencies = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).to_string();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if section == "package" && key == "name" {
            name = Some(value.trim_matches('"').to_string());
        }
        let is_dependencies = section == "dependencies"
            || (section.starts_with("target.") && section.ends_with(".dependencies"));
        if is_dependencies {
            // `alias = { package = "real", ... }` is named by its alias in code.
            dependencies.push(Dependency {
                name: key.to_string(),
                ident: key.replace('-', "_"),
                optional: value.contains("optional = true"),
            });
        }
    }
    Member {
        path: path.to_string(),
        name: name.unwrap_or_else(|| panic!("{path}/Cargo.toml has no package name")),
        dependencies,
    }
}

fn members() -> Vec<Member> {
    member_paths().iter().map(|p| member(p)).collect()
}

/// Our crates' short names as the design table writes them: `unisched-dra` is `dra`.
fn short(name: &str) -> String {
    name.strip_prefix("unisched-").unwrap_or(name).to_string()
}

/// The rows of the table under `## Crates` in docs/design.md: path → (crate, uses).
fn design_table() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let text = fs::read_to_string(root().join("docs/design.md")).unwrap();
    let section = text
        .split("\n## Crates\n")
        .nth(1)
        .expect("design.md has a Crates section");
    let mut rows = BTreeMap::new();
    for line in section.lines() {
        if line.starts_with("## ") {
            break;
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(
            cells.len(),
            4,
            "a crate row has path, crate, responsibility, uses: {line}"
        );
        let path = cells[0].trim_matches('`').to_string();
        let krate = cells[1].trim_matches('`').to_string();
        let uses = cells[3]
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty() && *u != "–")
            .map(str::to_string)
            .collect();
        rows.insert(path, (krate, uses));
    }
    rows
}

#[test]
fn design_crate_table_is_the_cargo_graph() {
    let members = members();
    let ours: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
    let table = design_table();
    let mut problems = Vec::new();
    for m in &members {
        let Some((krate, uses)) = table.get(&m.path) else {
            problems.push(format!("{}: no row in docs/design.md's crate table", m.path));
            continue;
        };
        if *krate != m.name {
            problems.push(format!(
                "{}: the table names {krate}, Cargo.toml {}",
                m.path, m.name
            ));
        }
        let cargo: BTreeSet<String> = m
            .dependencies
            .iter()
            .filter(|dep| ours.contains(&dep.name))
            .map(|dep| short(&dep.name))
            .collect();
        if *uses != cargo {
            problems.push(format!(
                "{}: the table says it uses {uses:?}, its [dependencies] name {cargo:?}",
                m.path
            ));
        }
    }
    for path in table.keys() {
        if !members.iter().any(|m| &m.path == path) {
            problems.push(format!(
                "{path}: in docs/design.md's crate table but not a workspace member"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/design.md and the manifests disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_layout_lists_every_crate() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let layout = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("README has a Layout section");
    let missing: Vec<String> = members()
        .into_iter()
        .map(|m| m.path)
        .filter(|p| !layout.contains(&format!("| `{p}` |")) && !layout.contains(&format!("| `{p}/` |")))
        .collect();
    assert!(missing.is_empty(), "README's Layout lacks rows for {missing:?}");
}

/// Every `.rs` file of a member's product code: `src/` (and `build.rs`), without test modules
/// and, unless `with_features` (the code optional dependencies serve), the fixture modules that
/// only tests compile.
fn product_sources(dir: &Path, with_features: bool, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                product_sources(&path, with_features, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && (with_features || name != "testing.rs") {
            let text = fs::read_to_string(&path).unwrap();
            // A module's tests sit at its end behind `#[cfg(test)]`: what follows is not product code.
            let product = match text.find("#[cfg(test)]\nmod ") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.push(product);
        }
    }
}

/// Dependencies that no `ident::` path names, and why they are linked all the same.
const LINKED_WITHOUT_A_PATH: &[(&str, &str, &str)] = &[];

#[test]
fn every_dependency_is_used_by_product_code() {
    let mut unused = Vec::new();
    for m in members() {
        let dir = root().join(&m.path);
        let (mut sources, mut feature_sources) = (Vec::new(), Vec::new());
        product_sources(&dir.join("src"), false, &mut sources);
        product_sources(&dir.join("src"), true, &mut feature_sources);
        if let Ok(build) = fs::read_to_string(dir.join("build.rs")) {
            sources.push(build);
        }
        for Dependency {
            name: dep,
            ident,
            optional,
        } in &m.dependencies
        {
            let searched = if *optional { &feature_sources } else { &sources };
            let allowed = LINKED_WITHOUT_A_PATH
                .iter()
                .any(|(krate, d, _)| *krate == m.name && d == dep);
            let named = searched.iter().any(|s| {
                s.contains(&format!("{ident}::"))
                    || s.contains(&format!("use {ident}"))
                    || s.contains(&format!("{ident}!"))
                    || s.contains(&format!("extern crate {ident}"))
            });
            if !named && !allowed {
                unused.push(format!("{} → {dep}", m.name));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "dependencies no product code uses (remove them, or move them to [dev-dependencies]):\n{}",
        unused.join("\n")
    );
}

/// The check above finds what it is meant to find.
#[test]
fn a_dependency_only_tests_name_is_found_unused() {
    let dir = std::env::temp_dir().join(format!("unisched-workspace-map-{}", std::process::id()));
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("src/lib.rs"),
        "pub fn f() -> u8 { serde_json::json!(1).as_u64().unwrap_or(0) as u8 }\n\n#[cfg(test)]\nmod tests {\n    use unisched_resource::Quantity;\n}\n",
    )
    .unwrap();
    let mut sources = Vec::new();
    product_sources(&dir.join("src"), false, &mut sources);
    fs::remove_dir_all(&dir).unwrap();
    let joined = sources.join("\n");
    assert!(joined.contains("serde_json::"));
    assert!(
        !joined.contains("unisched_resource"),
        "test modules are not product code"
    );
}
