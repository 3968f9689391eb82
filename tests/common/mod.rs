//! What the end-to-end tests of `flotilla serve` share: the binary under test, the first line a
//! child prints (its addresses, as JSON) and a field of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};

/// Headless Chromium through chromedriver.
pub mod browser;

/// The Kubernetes tests' shared parts.
#[cfg(feature = "kubernetes-tests")]
pub mod k8s;

/// The `flotilla` binary under test.
pub fn flotilla() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
}

/// The documents `flotilla install ARGS` prints (it must succeed).
#[allow(dead_code)]
pub fn installed(args: &[&str]) -> Vec<serde_json::Value> {
    let out = flotilla().arg("install").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    serde_saphyr::from_multiple::<serde_json::Value>(&yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The first stdout line of a child (its address line); the rest is drained so that the child
/// never blocks on a full pipe.
pub fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).expect("read the first line");
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    line
}

/// A string field of a JSON line.
pub fn json_field(line: &str, field: &str) -> String {
    let value: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"));
    value[field].as_str().expect("field").to_owned()
}

/// A two-thread tokio runtime for a test's async part.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
