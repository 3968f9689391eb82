//! End-to-end tests of `flotilla lint`: the Argo Rollouts corpus, the shipped example fleet, and
//! hostile input, through the real binary and its exit codes.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/argo-rollouts")
}

struct Outcome {
    code: i32,
    diagnostics: Vec<Value>,
    stderr: String,
}

fn lint(args: &[&str]) -> Outcome {
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .arg("lint")
        .args(["--output", "json"])
        .args(args)
        .output()
        .expect("run flotilla");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let diagnostics = if output.stdout.is_empty() {
        Vec::new()
    } else {
        let value: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON {e}: {stdout}"));
        value["diagnostics"].as_array().cloned().unwrap_or_default()
    };
    Outcome {
        code: output.status.code().unwrap_or(-1),
        diagnostics,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn errors(outcome: &Outcome) -> Vec<&Value> {
    outcome
        .diagnostics
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect()
}

#[test]
fn every_valid_corpus_file_lints_without_error() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus().join("lint"))
        .expect("corpus present beside the project")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("valid")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus lint files: {files:?}");
    for file in files {
        let outcome = lint(&[file.to_str().unwrap()]);
        assert_eq!(
            outcome.code,
            0,
            "{}: {:?}",
            file.display(),
            errors(&outcome)
        );
    }
}

#[test]
fn every_corpus_example_lints_without_error() {
    let outcome = lint(&[corpus().join("examples").to_str().unwrap()]);
    assert_eq!(outcome.code, 0, "{:?}", errors(&outcome));
    // Every Rollout and template was decoded (a decode failure would be an error above), and
    // the other kinds were reported as ignored or understood, never failed.
    let ignored: Vec<&str> = outcome
        .diagnostics
        .iter()
        .filter(|d| d["rule"] == "ignored-kind")
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert!(ignored.contains(&"VirtualService"), "{ignored:?}");
    assert!(!ignored.contains(&"Rollout"));
}

/// Each invalid upstream fixture fails with exit 1 and an error naming the field upstream names.
#[test]
fn every_invalid_corpus_file_fails_naming_the_field() {
    let cases = [
        (
            "invalid.yml",
            "spec.strategy.canary.maxSurge",
            "MaxSurge and MaxUnavailable",
        ),
        (
            "invalid-multiple-docs.yml",
            "spec.strategy.canary.maxSurge",
            "MaxSurge and MaxUnavailable",
        ),
        (
            "invalid-empty-rollout-vsvc.yml",
            "spec.selector",
            "selector",
        ),
        (
            "invalid-unknown-field.yml",
            "spec.strategy.unknown-strategy",
            "unknown field `unknown-strategy`",
        ),
        (
            "invalid-service-labels.yml",
            "spec.strategy.canary.canaryService",
            "app=",
        ),
        (
            "invalid-ping-pong.yml",
            "spec.strategy.canary.pingPong.pingService",
            "app=",
        ),
        (
            "invalid-ingress-smi-multi.yml",
            "spec.strategy.canary.canaryService",
            "app=",
        ),
        (
            "invalid-nginx-canary.yml",
            "steps[1].experiment.templates[0].weight",
            "SMI, ALB, Istio",
        ),
    ];
    for (file, path, reason) in cases {
        let outcome = lint(&[corpus().join("lint").join(file).to_str().unwrap()]);
        assert_eq!(outcome.code, 1, "{file}: {:?}", outcome.diagnostics);
        let found = errors(&outcome).into_iter().any(|d| {
            d["path"].as_str().unwrap().ends_with(path)
                && d["message"].as_str().unwrap().contains(reason)
        });
        assert!(
            found,
            "{file}: no error at {path} mentioning {reason:?}: {:#?}",
            outcome.diagnostics
        );
    }
    // The multi-document file's error is in its second document, with that document's line.
    let outcome = lint(&[corpus()
        .join("lint/invalid-multiple-docs.yml")
        .to_str()
        .unwrap()]);
    assert!(errors(&outcome)[0]["line"].as_u64().unwrap() > 20);
}

#[test]
fn the_example_fleet_lints_clean() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet");
    let outcome = lint(&[examples.to_str().unwrap()]);
    assert_eq!(outcome.code, 0, "{:#?}", outcome.diagnostics);
    assert!(
        outcome.diagnostics.is_empty(),
        "undeserved findings: {:#?}",
        outcome.diagnostics
    );
}

/// A GitOps directory's per-cluster overlays are checked as the daemon reads them, not linted
/// as manifests: a good one passes, bad ones are `overlay` errors naming file, line and field.
#[test]
fn overlays_under_a_directory_are_checked_as_the_daemon_reads_them() {
    let dir = tempdir::Dir::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet");
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("clusters")).unwrap();
    std::fs::write(
        dir.path().join("clusters/prod-us-east.yaml"),
        "rollout: payment-api\nenv: {DB_REGION: us-east-1}\npin: {rejects: \"abc\", image: \"payment-api:1.8.3\"}\n",
    )
    .unwrap();
    let outcome = lint(&[dir.path().to_str().unwrap()]);
    assert_eq!(outcome.code, 0, "{:#?}", outcome.diagnostics);
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    std::fs::write(
        dir.path().join("clusters/prod-eu-west.yaml"),
        "rollout: payment-api\nimgae: payment-api:1.8.2\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("clusters/prod-mars.yaml"),
        "rollout: payment-api\nimage: payment-api:1.8.2\n",
    )
    .unwrap();
    let outcome = lint(&[dir.path().to_str().unwrap()]);
    assert_eq!(outcome.code, 1, "{:#?}", outcome.diagnostics);
    let found: Vec<(String, u64, String)> = errors(&outcome)
        .iter()
        .map(|d| {
            let file = d["file"].as_str().unwrap();
            (
                file.rsplit('/').next().unwrap().to_owned(),
                d["line"].as_u64().unwrap(),
                format!("{} {}", d["rule"], d["message"]),
            )
        })
        .collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!((found[0].0.as_str(), found[0].1), ("prod-eu-west.yaml", 2));
    assert!(
        found[0].2.contains("overlay") && found[0].2.contains("imgae"),
        "{found:#?}"
    );
    assert_eq!(found[1].0, "prod-mars.yaml");
    assert!(found[1].2.contains("in no Fleet"), "{found:#?}");
}

fn temp_file(name: &str, bytes: &[u8]) -> (tempdir::Dir, PathBuf) {
    let dir = tempdir::Dir::new();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

mod tempdir {
    //! A temporary directory removed on drop (no crate needed for this much).
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Dir(PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "flotilla-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Hostile input gets exactly one clear error each, quickly and in bounded memory.
#[test]
fn bad_input_gets_one_clear_error_each() {
    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let mut big = b"apiVersion: v1\nkind: ConfigMap\ndata:\n".to_vec();
    while big.len() < 50 * 1024 * 1024 {
        big.extend_from_slice(
            b"  key: value value value value value value value value value value\n",
        );
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.yaml", Vec::new(), "empty"),
        (
            "binary.yaml",
            vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0],
            "binary",
        ),
        ("big.yaml", big, "MiB"),
        (
            "dup.yaml",
            b"apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nkind: Rollout\n".to_vec(),
            "duplicate key",
        ),
        (
            "tabs.yaml",
            b"apiVersion: v1\nkind: Service\nmetadata:\n\tname: x\n".to_vec(),
            "tabs",
        ),
        ("bomb.yaml", bomb.into_bytes(), "billion laughs"),
    ];
    for (name, bytes, needle) in cases {
        let (_dir, path) = temp_file(name, &bytes);
        let started = std::time::Instant::now();
        let outcome = lint(&[path.to_str().unwrap()]);
        assert_eq!(
            outcome.code, 1,
            "{name}: {:?} {}",
            outcome.diagnostics, outcome.stderr
        );
        assert_eq!(
            errors(&outcome).len(),
            1,
            "{name}: {:#?}",
            outcome.diagnostics
        );
        let error = errors(&outcome)[0];
        assert!(
            error["message"].as_str().unwrap().contains(needle),
            "{name}: {error}"
        );
        assert!(
            error["file"].as_str().unwrap().ends_with(name),
            "{name}: {error}"
        );
        assert!(error["line"].as_u64().unwrap() >= 1);
        assert!(
            started.elapsed().as_secs() < 20,
            "{name} took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn unreadable_input_and_usage_errors_exit_2() {
    let outcome = lint(&["/nonexistent/rollout.yaml"]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(outcome.stderr.contains("/nonexistent/rollout.yaml"));
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .arg("lint")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["lint", "--no-such-flag", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn strict_turns_warnings_into_failures() {
    let file = corpus().join("lint/valid.yml");
    assert_eq!(lint(&[file.to_str().unwrap()]).code, 0);
    assert_eq!(lint(&["--strict", file.to_str().unwrap()]).code, 1);
    // -f works like a positional file.
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["lint", "-f", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
}

/// A Rollout that needs what an agent cluster cannot do (a header route on two headers, a
/// mirror on a path) is refused by name, at the Rollout's field; the same Rollout on one
/// header lints clean.
#[test]
fn a_rollout_needing_what_a_clusters_backend_lacks_is_refused_by_name() {
    let fleet = r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {name: edge}
spec:
  clusters:
    - {name: east, endpoint: {agent: "http://127.0.0.1:7101"}}
---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {name: app}
spec:
  fleet: edge
  rollout: app
  waves:
    list:
      - {cluster: east, wave: 1}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: app}
spec:
  replicas: 2
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, image: "app:1.0"}]
  strategy:
    canary:
      canaryService: app-canary
      stableService: app-stable
      trafficRouting:
        plugins: {flotilla/agent: {}}
        managedRoutes: [{name: beta}, {name: shadow}]
      steps:
        - setWeight: 10
        - setHeaderRoute:
            name: beta
            match:
              - {headerName: x-beta, headerValue: {exact: "1"}}
              - {headerName: x-tier, headerValue: {exact: gold}}
        - setMirrorRoute:
            name: shadow
            percentage: 10
            match:
              - path: {prefix: /api}
        - pause: {}
"#;
    let (_dir, path) = temp_file("fleet.yaml", fleet.as_bytes());
    let outcome = lint(&[path.to_str().unwrap()]);
    let refused: Vec<&Value> = errors(&outcome)
        .into_iter()
        .filter(|d| d["rule"] == "backend/capability")
        .collect();
    assert_eq!(refused.len(), 2, "{:#?}", outcome.diagnostics);
    assert_eq!(outcome.code, 1);
    assert_eq!(
        refused[0]["path"],
        "spec.strategy.canary.steps[1].setHeaderRoute.match"
    );
    assert_eq!(refused[0]["line"], 39, "the `match:` line");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("cluster \"east\" (agent) lacks header routes with 2 conditions (at most 1)"),
        "{refused:#?}"
    );
    assert_eq!(
        refused[1]["path"],
        "spec.strategy.canary.steps[2].setMirrorRoute.match[0]"
    );
    assert!(
        refused[1]["message"]
            .as_str()
            .unwrap()
            .contains("mirror routes on method or path")
    );
    // One header, a header mirror: clean of the rule.
    let fits = fleet
        .replace(
            "              - {headerName: x-tier, headerValue: {exact: gold}}\n",
            "",
        )
        .replace(
            "              - path: {prefix: /api}",
            "              - headers: {x-shadow: {exact: \"1\"}}",
        );
    let (_dir, path) = temp_file("fleet.yaml", fits.as_bytes());
    let outcome = lint(&[path.to_str().unwrap()]);
    assert!(
        !outcome
            .diagnostics
            .iter()
            .any(|d| d["rule"] == "backend/capability"),
        "{:#?}",
        outcome.diagnostics
    );
}

/// On a Kubernetes cluster, a Rollout routed through a router Flotilla does not drive there
/// (Istio, SMI, NGINX, another plugin…) is an error naming the router, never a silent fallback
/// to replica ratios; Gateway API routes are driven, and their configuration is checked by
/// field (a TCPRoute is named); the same Rollout on an HTTPRoute lints clean of the rule.
#[test]
fn a_router_kubernetes_does_not_drive_is_refused_by_name() {
    let fleet = |routing: &str| {
        format!(
            r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {{name: shop}}
spec:
  clusters:
    - {{name: east, endpoint: {{kubernetes: {{kubeconfig: /nonexistent/kubeconfig, namespace: default}}}}}}
---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {{name: app}}
spec:
  fleet: shop
  rollout: app
  waves:
    list:
      - {{cluster: east, wave: 1}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: app}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
      containers: [{{name: app, image: "app:1.0"}}]
  strategy:
    canary:
      canaryService: app-canary
      stableService: app-stable
      trafficRouting:
{routing}
      steps:
        - setWeight: 10
        - pause: {{}}
"#
        )
    };
    let refused = |routing: &str| -> Vec<Value> {
        let (_dir, path) = temp_file("fleet.yaml", fleet(routing).as_bytes());
        let outcome = lint(&[path.to_str().unwrap()]);
        errors(&outcome)
            .into_iter()
            .filter(|d| d["rule"] == "backend/capability")
            .cloned()
            .collect()
    };
    for (routing, path, said) in [
        (
            "        alb: {ingress: app, servicePort: 80}",
            "spec.strategy.canary.trafficRouting.alb",
            "lacks traffic provider alb",
        ),
        (
            "        smi: {}",
            "spec.strategy.canary.trafficRouting.smi",
            "lacks traffic provider smi",
        ),
        (
            "        plugins:\n          argoproj-labs/contour: {httpProxy: app}",
            "spec.strategy.canary.trafficRouting.plugins[argoproj-labs/contour]",
            "lacks traffic provider plugins/argoproj-labs/contour",
        ),
        (
            "        plugins:\n          argoproj-labs/gatewayAPI: {tcpRoute: app}",
            "spec.strategy.canary.trafficRouting.plugins[argoproj-labs/gatewayAPI].tcpRoute",
            "tcpRoute is not driven",
        ),
    ] {
        let found = refused(routing);
        assert_eq!(found.len(), 1, "{routing}: {found:#?}");
        assert_eq!(found[0]["path"], path, "{found:#?}");
        let message = found[0]["message"].as_str().unwrap();
        assert!(
            message.contains("cluster \"east\" (kubernetes)") && message.contains(said),
            "{message}"
        );
    }
    assert!(
        refused("        plugins:\n          argoproj-labs/gatewayAPI: {httpRoute: app}")
            .is_empty()
    );
    assert!(refused("        istio:\n          virtualService: {name: app}").is_empty());
}
