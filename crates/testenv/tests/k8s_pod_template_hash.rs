//! Flotilla's pod-template hash is checked (in `flotilla-core`'s unit tests) against golden
//! vectors and a Go type graph committed beside it. This test shows that they are what Argo
//! Rollouts computes: it builds the podhash helper from the test environment's module graph
//! (Argo Rollouts v1.10's `utils/hash.ComputePodTemplateHash`, Kubernetes' own types), runs it
//! on the committed cases and compares its output with the committed files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn committed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/src/rollout/pod_template_hash")
        .join(name)
}

fn run(helper: &Path, mode: &str, input: Option<&[u8]>) -> Value {
    let mut child = Command::new(helper)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the podhash helper runs");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "podhash {mode}: {}", out.status);
    serde_json::from_slice(&out.stdout).expect("podhash prints JSON")
}

fn read(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(committed(name)).unwrap()).unwrap()
}

#[test]
fn the_committed_vectors_and_type_graph_are_what_argo_computes() {
    let helper = flotilla_testenv::podhash().expect("the podhash helper builds");
    assert_eq!(
        run(&helper, "schema", None),
        read("go-types.json"),
        "go-types.json is not the helper's output: regenerate it (docs/testing.md)"
    );
    let cases = std::fs::read(committed("cases.json")).unwrap();
    assert_eq!(
        run(&helper, "vectors", Some(&cases)),
        read("vectors.json"),
        "vectors.json is not what Argo computes for cases.json: regenerate it (docs/testing.md)"
    );
}
