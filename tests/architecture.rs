//! The house's structural invariants (ARCHITECTURE.md), checked on the resolved crate graph
//! (`cargo metadata`) and on the sources: the core performs no I/O, and the controller does
//! not link the agent's data plane.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every package's normal (non-dev, non-build) dependencies, by name, from the resolved graph.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc names its host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            &host,
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| names[d["pkg"].as_str().unwrap()].to_owned())
            .collect();
        graph.insert(names[node["id"].as_str().unwrap()].to_owned(), deps);
    }
    graph
}

/// Every package `package` links, itself excluded.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, package: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(next) = todo.pop() {
        for dep in graph.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `flotilla-core` links no I/O crate, directly or not, and its sources name no file,
/// socket, process or environment API: it takes text, observations and `now`, and returns
/// decisions.
#[test]
fn the_core_performs_no_io() {
    let graph = graph();
    let linked = closure(&graph, "flotilla-core");
    for io in [
        "tokio", "hyper", "reqwest", "git2", "redb", "mio", "socket2", "kube", "axum",
    ] {
        assert!(
            !linked.contains(io),
            "flotilla-core links {io}: the core must perform no I/O"
        );
    }
    let mut files = Vec::new();
    sources(&root().join("crates/core/src"), &mut files);
    assert!(files.len() > 50, "the core's sources were found");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for api in [
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "SystemTime::now",
            "Instant::now",
        ] {
            assert!(
                !text.contains(api),
                "{} uses {api}: the core must perform no I/O and read no clock",
                file.display()
            );
        }
    }
}

/// The controller reaches agents through their backend crate (wire types, client, adapter)
/// and never links the agent's data plane (router, workloads); the backend crate links no
/// server either.
#[test]
fn the_controller_does_not_link_the_agents_data_plane() {
    let graph = graph();
    for package in ["flotilla-runtime", "flotilla-agent-backend"] {
        let linked = closure(&graph, package);
        assert!(
            !linked.contains("flotilla-agent"),
            "{package} links flotilla-agent (the agent's server: router, workloads)"
        );
    }
    let runtime = closure(&graph, "flotilla-runtime");
    assert!(runtime.contains("flotilla-agent-backend"));
    assert!(runtime.contains("flotilla-core"));
}

/// Adapters depend on the core and never on each other; only the runtime wires several.
#[test]
fn adapters_depend_on_the_core_only() {
    let graph = graph();
    for adapter in [
        "flotilla-providers",
        "flotilla-git",
        "flotilla-agent-backend",
        "flotilla-kube",
    ] {
        let ours: BTreeSet<String> = closure(&graph, adapter)
            .into_iter()
            .filter(|p| p.starts_with("flotilla"))
            .collect();
        let allowed: BTreeSet<String> = if adapter == "flotilla-git" {
            BTreeSet::new()
        } else {
            BTreeSet::from(["flotilla-core".to_owned()])
        };
        assert_eq!(ours, allowed, "{adapter} links {ours:?}");
    }
}
