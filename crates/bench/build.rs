//! Embeds the workload files of `e2e/perf/` into the library, so `unisched-bench` runs from any
//! directory. `--workloads-dir` (or `Catalog::load_dir`) reads them from disk instead.

use std::{
    env, fs,
    io::Write,
    path::{Path, PathBuf},
};

fn collect(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let rel = path
                .strip_prefix(base)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            out.push((rel, path));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let perf = manifest.join("../../e2e/perf");
    println!("cargo:rerun-if-changed={}", perf.display());
    let mut files = Vec::new();
    collect(&perf, &perf, &mut files);
    for (_, p) in &files {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_default()).join("embedded.rs");
    let mut f = match fs::File::create(&out) {
        Ok(f) => f,
        Err(e) => panic!("cannot write {}: {e}", out.display()),
    };
    let mut text = String::from(
        "/// Workload files of `e2e/perf/`, by path relative to it.\npub const EMBEDDED: &[(&str, &str)] = &[\n",
    );
    for (rel, path) in &files {
        let abs = fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        text.push_str(&format!(
            "    ({rel:?}, include_str!({:?})),\n",
            abs.display().to_string()
        ));
    }
    text.push_str("];\n");
    if let Err(e) = f.write_all(text.as_bytes()) {
        panic!("cannot write {}: {e}", out.display());
    }
}
