//! The repository's Dockerfile ships the binary the build produces, the way the manifests run it.
//!
//! There is no Docker engine in CI, so this parses the Dockerfile instead of building it; the
//! build itself is `e2e/kind/image-check.sh`, which runs where Docker exists and reports SKIPPED
//! (exit 77, not a pass) elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{fs, path::PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// One instruction: keyword (upper case) and its arguments, continuation lines joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(rest) => {
                current.push_str(rest);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                let (k, a) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
                out.push((k.to_ascii_uppercase(), a.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// `name = "…"` of a `[[bin]]` / `[package]` table in a Cargo.toml, the simple way.
fn toml_value(text: &str, table: &str, key: &str) -> String {
    let mut in_table = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_table = t == table;
            continue;
        }
        if in_table
            && let Some((k, v)) = t.split_once('=')
            && k.trim() == key
        {
            return v.trim().trim_matches('"').to_string();
        }
    }
    panic!("{key} not found in {table}")
}

#[test]
fn dockerfile_copies_the_release_binary_into_a_non_root_runtime_stage() {
    let ins = instructions(&read("Dockerfile"));
    let bin = toml_value(&read("cmd/unisched/Cargo.toml"), "[[bin]]", "name");
    let package = toml_value(&read("cmd/unisched/Cargo.toml"), "[package]", "name");
    let version = toml_value(&read("Cargo.toml"), "[workspace.package]", "version");

    let froms: Vec<&String> = ins.iter().filter(|(k, _)| k == "FROM").map(|(_, a)| a).collect();
    assert_eq!(froms.len(), 2, "multi-stage: build, then runtime: {froms:?}");
    let build_stage = froms[0]
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[0].eq_ignore_ascii_case("AS"))
        .map(|w| w[1].to_string())
        .expect("the build stage is named");
    assert!(
        froms[1].contains("distroless/cc") || froms[1] == "scratch",
        "runtime base: {}",
        froms[1]
    );

    // The build stage builds the binary in release mode and strips it.
    let runs: Vec<&String> = ins.iter().filter(|(k, _)| k == "RUN").map(|(_, a)| a).collect();
    let build = runs
        .iter()
        .find(|r| r.contains("cargo build"))
        .expect("a cargo build");
    assert!(build.contains("--release"), "{build}");
    assert!(build.contains(&format!("-p {package}")), "{build}");
    let produced = format!("target/release/{bin}");
    assert!(
        build.contains(&format!("strip --strip-all {produced}")),
        "stripped: {build}"
    );

    // The runtime stage copies exactly that file and runs it.
    let runtime_start = ins.iter().rposition(|(k, _)| k == "FROM").unwrap();
    let runtime = &ins[runtime_start..];
    let copy = runtime
        .iter()
        .find(|(k, _)| k == "COPY")
        .map(|(_, a)| a.clone())
        .expect("COPY in the runtime stage");
    let parts: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(parts[0], format!("--from={build_stage}"), "{copy}");
    assert!(parts[1].ends_with(&produced), "copies the built binary: {copy}");
    let dest = parts[2];
    let entry = runtime
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, a)| a.clone())
        .expect("ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(&entry).expect("exec-form ENTRYPOINT");
    assert_eq!(
        entry,
        vec![dest.to_string()],
        "the entrypoint is the copied binary"
    );

    // Non-root, the numeric user the Deployment runs as.
    let user = runtime
        .iter()
        .find(|(k, _)| k == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    assert_eq!(user, "65532:65532");
    assert!(read("deploy/manifests/deployment.yaml").contains("runAsUser: 65532"));

    // OCI labels, the version defaulting to the workspace's.
    let args: Vec<&String> = runtime
        .iter()
        .filter(|(k, _)| k == "ARG")
        .map(|(_, a)| a)
        .collect();
    assert!(
        args.iter().any(|a| **a == format!("VERSION={version}")),
        "{args:?}"
    );
    let labels: String = runtime
        .iter()
        .filter(|(k, _)| k == "LABEL")
        .map(|(_, a)| a.as_str())
        .collect();
    for l in [
        "org.opencontainers.image.version=\"${VERSION}\"",
        "org.opencontainers.image.title=",
    ] {
        assert!(labels.contains(l), "label {l} in {labels}");
    }

    // The build context leaves local build output out, and the kind script uses this Dockerfile.
    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
    let kind = read("e2e/kind/run.sh");
    assert!(
        kind.contains("docker build") && !kind.contains("<<'DOCKER'"),
        "run.sh builds the repository's Dockerfile"
    );
}
