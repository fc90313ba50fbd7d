//! The repository's Dockerfile ships the binary the build produces, the way the manifests run it.
//!
//! This reads the Dockerfile and the script that assembles its build context
//! (`deploy/image/build`); the build itself, and runs of the image, are `e2e/image/run`, which CI
//! runs with podman.
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
fn dockerfile_copies_the_static_release_binary_into_a_non_root_scratch_image() {
    let ins = instructions(&read("Dockerfile"));
    let bin = toml_value(&read("cmd/unisched/Cargo.toml"), "[[bin]]", "name");
    let package = toml_value(&read("cmd/unisched/Cargo.toml"), "[package]", "name");
    let version = toml_value(&read("Cargo.toml"), "[workspace.package]", "version");

    // One stage on an empty base: nothing to pull, nothing but what the COPYs put there.
    let froms: Vec<&String> = ins.iter().filter(|(k, _)| k == "FROM").map(|(_, a)| a).collect();
    assert_eq!(froms, ["scratch"], "{froms:?}");
    assert!(
        !ins.iter().any(|(k, _)| k == "RUN"),
        "a scratch image has no shell to RUN in"
    );

    // The context script builds the binary in release mode, static, and strips it into the
    // context as `unisched`.
    let script = read("deploy/image/build");
    let build = script
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build in deploy/image/build");
    assert!(build.contains("--release"), "{build}");
    assert!(build.contains(&format!("-p {package}")), "{build}");
    assert!(build.contains("--target \"$target\""), "{build}");
    assert!(
        script.contains("target=x86_64-unknown-linux-musl"),
        "static: the musl target"
    );
    assert!(
        script.contains(&format!("$target/release/{bin}")),
        "the binary of that build"
    );
    assert!(
        script.contains("strip --strip-all -o \"$context/unisched\""),
        "stripped into the context"
    );
    assert!(
        script.contains("-f \"$root/Dockerfile\" \"$context\""),
        "builds this Dockerfile"
    );

    // The image copies exactly that file and runs it.
    let copies: Vec<Vec<&str>> = ins
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, a)| a.split_whitespace().collect())
        .collect();
    let copy = copies.iter().find(|c| c[0] == "unisched").expect("COPY unisched");
    let dest = copy[1];
    let entry = ins
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
    // A CA bundle where TLS libraries look for one.
    assert!(
        copies
            .iter()
            .any(|c| c[..] == ["ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt"]),
        "{copies:?}"
    );

    // Non-root, the numeric user the Deployment runs as, with its passwd and group entries.
    let user = ins
        .iter()
        .find(|(k, _)| k == "USER")
        .map(|(_, a)| a.clone())
        .expect("USER");
    assert_eq!(user, "65532:65532");
    assert!(
        copies.iter().any(|c| c[..] == ["passwd", "group", "/etc/"]),
        "{copies:?}"
    );
    assert!(
        read("deploy/image/passwd")
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "passwd names 65532"
    );
    assert!(
        read("deploy/image/group")
            .lines()
            .any(|l| l == "nonroot:x:65532:"),
        "group names 65532"
    );
    assert!(read("deploy/manifests/deployment.yaml").contains("runAsUser: 65532"));

    // OCI labels, the version defaulting to the workspace's.
    let args: Vec<&String> = ins.iter().filter(|(k, _)| k == "ARG").map(|(_, a)| a).collect();
    assert!(
        args.iter().any(|a| **a == format!("VERSION={version}")),
        "{args:?}"
    );
    let labels: String = ins
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

    // The kind script and CI build the image with the same script.
    assert!(read("e2e/kind/run.sh").contains("deploy/image/build"));
    assert!(read("e2e/image/run").contains("deploy/image/build"));
}
