//! Every scenario shipped with the repository passes the loader's strict validation (unknown
//! fields, admission), so tightening validation cannot silently break the examples.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Directories that hold a scenario: a `scenario.yaml`, or numbered step sub-directories.
fn scenario_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    let is_steps = entries.iter().any(|p| {
        p.is_dir()
            && p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(|c: char| c.is_ascii_digit()))
    });
    if is_steps || dir.join("scenario.yaml").is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    for p in entries.iter().filter(|p| p.is_dir()) {
        scenario_dirs(p, out);
    }
}

#[test]
fn shipped_scenarios_load() {
    let root = repo_root();
    // The quickstart is one step of loose files, which the walk does not take for a scenario.
    let mut dirs = vec![root.join("examples/quickstart")];
    scenario_dirs(&root.join("examples"), &mut dirs);
    scenario_dirs(&root.join("e2e/scenarios"), &mut dirs);
    assert!(dirs.len() > 10, "found only {dirs:?}");
    let mut failures = Vec::new();
    for d in &dirs {
        let target = if d.join("scenario.yaml").is_file() {
            d.join("scenario.yaml")
        } else {
            d.clone()
        };
        if let Err(e) = unisched_sim::scenario::load(&[target]) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
