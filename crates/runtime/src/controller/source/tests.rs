//! The source's tests: files and Git, overlays, pins and reverts, per-fleet isolation.

use std::collections::BTreeMap;

use super::durable::{replace_image, revert_files};
use super::*;
use std::path::Path;

use crate::controller::config::SourceConfig;

fn sh(dir: &Path, args: &[&str]) -> String {
    flotilla_git::cli::git(
        dir,
        args,
        &flotilla_git::Identity::new("Dev", "dev@example.test"),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The errors of a polled desired state that was refused (nothing of it may be desired).
fn refused(polled: Option<Result<(DesiredSet, String), ServeError>>) -> String {
    let (set, _) = polled.expect("the branch moved").expect("Git was read");
    assert!(set.desired.is_empty(), "{:?}", set.desired.len());
    set.errors().join("\n")
}

fn manifests() -> String {
    let controls: Vec<String> = (0..4)
        .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
        .collect();
    crate::demo::manifests(&controls, 1.0)
}

/// Two fleets in two files: the second's FleetRollout is broken, a template the first names
/// is gone, then a secret is missing: each refusal concerns only its fleet.
#[test]
fn one_fleets_broken_input_never_holds_another_back() {
    let load = |files: &[(&str, String)]| {
        let mut manifests = Vec::new();
        let mut diagnostics = Vec::new();
        for (name, text) in files {
            let load = manifest::load_bytes(name, text.as_bytes());
            manifests.extend(load.manifests);
            diagnostics.extend(load.diagnostics);
        }
        desired_from(&manifests, diagnostics, &[], "test")
    };
    let payments = manifests();
    // The second fleet: its own FleetRollout and Rollout, on the same Fleet and templates.
    let second = |text: &str| {
        text.split("---\n")
            .filter(|doc| doc.contains("kind: FleetRollout") || doc.contains("kind: Rollout"))
            .map(|doc| {
                doc.replace("name: payment-api", "name: ledger")
                    .replace("rollout: payment-api", "rollout: ledger")
            })
            .collect::<Vec<_>>()
            .join("---\n")
    };
    let ledger = second(&payments);
    assert!(ledger.contains("kind: FleetRollout"), "{ledger}");
    let clean = load(&[
        ("payments.yaml", payments.clone()),
        ("ledger.yaml", ledger.clone()),
    ]);
    assert!(clean.is_clean(), "{:?}", clean.errors());
    assert_eq!(clean.desired.len(), 2);
    // A typo in the second fleet's FleetRollout: the first is untouched.
    let broken = ledger.replacen("bakeTime:", "bakeTme:", 1);
    assert_ne!(broken, ledger);
    let set = load(&[("payments.yaml", payments.clone()), ("ledger.yaml", broken)]);
    let names: Vec<_> = set
        .desired
        .iter()
        .map(|d| d.fleet_rollout.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["payment-api"], "{:?}", set.errors());
    let errors = &set.invalid["ledger"];
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("ledger.yaml:") && e.contains("bakeTme")),
        "{errors:?}"
    );
    // A document too broken to tell what it was: the clean fleets still run.
    let set = load(&[
        ("payments.yaml", payments.clone()),
        ("ledger.yaml", ledger.clone()),
        ("junk.yaml", "kind: [unclosed\n".into()),
    ]);
    assert_eq!(set.desired.len(), 2, "{:?}", set.errors());
    assert!(
        set.unattributed.iter().any(|e| e.starts_with("junk.yaml:")),
        "{:?}",
        set.unattributed
    );
    // The second fleet names a template nobody has: an error for it alone.
    let missing = ledger.replacen("templateName: ", "templateName: gone-", 1);
    let set = load(&[
        ("payments.yaml", payments.clone()),
        ("ledger.yaml", missing),
    ]);
    assert_eq!(set.desired.len(), 1, "{:?}", set.errors());
    assert!(
        set.invalid["ledger"]
            .iter()
            .any(|e| e.contains("ref/template-not-found") && e.contains("error")),
        "{:?}",
        set.invalid
    );
}

#[test]
fn a_missing_secret_refuses_only_the_fleet_whose_analysis_reads_it() {
    let text = manifests();
    let load = manifest::load_bytes("m.yaml", text.as_bytes());
    let mut set = desired_from(&load.manifests, load.diagnostics, &[], "test");
    assert_eq!(set.desired.len(), 1);
    // Add a secret argument to every template the fleet runs.
    for t in &mut set.desired[0].templates {
        t.spec.args.push(
            serde_json::from_value(serde_json::json!({
                "name": "api-token",
                "valueFrom": {"secretKeyRef": {"name": "flotilla-test-absent", "key": "token"}}
            }))
            .unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let secrets = crate::secrets::Secrets {
        dir: Some(dir.path().to_path_buf()),
    };
    let mut missing = set.clone();
    read_secrets(&mut missing, &secrets);
    assert!(missing.desired.is_empty());
    let errors = &missing.invalid["payment-api"];
    assert!(
        errors[0].contains("secretKeyRef")
            && errors[0].contains("FLOTILLA_SECRET_FLOTILLA_TEST_ABSENT_TOKEN"),
        "{errors:?}"
    );
    std::fs::create_dir_all(dir.path().join("flotilla-test-absent")).unwrap();
    std::fs::write(dir.path().join("flotilla-test-absent/token"), "hunter2\n").unwrap();
    read_secrets(&mut set, &secrets);
    assert_eq!(set.desired.len(), 1, "{:?}", set.errors());
    assert_eq!(
        set.desired[0].secrets[&("flotilla-test-absent".to_owned(), "token".to_owned())],
        "hunter2"
    );
}

#[test]
fn a_revert_changes_exactly_the_rollouts_image() {
    let released = manifests().replace(
        "image: \"payment-api:1.8.3\"}]",
        "image: \"payment-api:1.9.0\"}]  # was payment-api:1.9.0-rc1",
    );
    let text = format!(
        "{released}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: notes}}\ndata: {{image: payment-api:1.9.0, debug: payment-api:1.9.0-debug}}\n"
    );
    let mut files = BTreeMap::from([(
        "fleets/payments/all.yaml".to_owned(),
        text.clone().into_bytes(),
    )]);
    assert!(revert_files(
        &mut files,
        "fleets/payments",
        "payment-api",
        "payment-api:1.9.0",
        "payment-api:1.8.3"
    ));
    let reverted = String::from_utf8(files.remove("fleets/payments/all.yaml").unwrap()).unwrap();
    let expected = text.replace(
        "image: \"payment-api:1.9.0\"}]",
        "image: \"payment-api:1.8.3\"}]",
    );
    assert_eq!(reverted, expected);
    assert!(reverted.contains("# was payment-api:1.9.0-rc1"));
    assert!(reverted.contains("data: {image: payment-api:1.9.0, debug: payment-api:1.9.0-debug}"));
    assert_eq!(
        replace_image(
            "x: \"reg/app:1\", y: app:1, z: app:10, w: app:1@sha",
            "app:1",
            "app:0"
        ),
        "x: \"reg/app:1\", y: app:0, z: app:10, w: app:1@sha"
    );
}

/// A bare remote with the demo fleet under fleets/payments/ (plus `extra` files), and a
/// developer's clone of it.
fn repository(root: &Path, extra: &[(&str, &str)]) -> (std::path::PathBuf, std::path::PathBuf) {
    let work = root.join("work");
    std::fs::create_dir_all(work.join("fleets/payments/clusters")).unwrap();
    std::fs::write(work.join("fleets/payments/manifests.yaml"), manifests()).unwrap();
    for (path, text) in extra {
        std::fs::write(work.join(path), text).unwrap();
    }
    sh(&work, &["init", "-q", "-b", "main"]);
    sh(&work, &["add", "."]);
    sh(&work, &["commit", "-q", "-m", "payments fleet"]);
    sh(root, &["init", "-q", "--bare", "-b", "main", "fleet.git"]);
    sh(&work, &["push", "-q", "../fleet.git", "main"]);
    sh(&work, &["remote", "add", "origin", "../fleet.git"]);
    (root.join("fleet.git"), work)
}

fn open(root: &Path, bare: &Path, propose_only: bool) -> Source {
    Source::open(&SourceConfig::Git {
        git: GitConfig {
            url: bare.display().to_string(),
            branch: "main".into(),
            path: "fleets/payments".into(),
            interval: None,
            propose_only,
            identity: None,
            correct_drift: false,
        },
        interval_ms: 1000,
        cache: root.join("cache"),
    })
    .unwrap()
}

fn pin_change(revision: &str) -> GitChange {
    GitChange {
        rollout: "payment-api".into(),
        revision: revision.into(),
        edit: Edit::Pin {
            clusters: vec![("prod-us-east".into(), "payment-api:1.8.3".into())],
        },
        body: "flotilla: pin prod-us-east of payment-api to payment-api:1.8.3".into(),
        trailers: "Flotilla-Cluster: prod-us-east\nFlotilla-Metric: latency-p95=[0.31]\n".into(),
        proposal_branch: format!("flotilla/pin-payment-api-{revision}"),
        decision: flotilla_core::fleet::DurableChange {
            revision: revision.into(),
            edit: flotilla_core::fleet::DurableEdit::Pin,
            bad_image: "payment-api:1.9.0".into(),
            good_image: "payment-api:1.8.3".into(),
            failed: Vec::new(),
            validated: Vec::new(),
        },
    }
}

#[test]
fn overlays_are_read_per_cluster_and_bad_ones_name_file_line_and_field() {
    let root = tempfile::tempdir().unwrap();
    let good = "rollout: payment-api\nimage: payment-api:1.8.2\nenv: {DB_POOL: \"32\"}\n";
    let (bare, work) = repository(
        root.path(),
        &[("fleets/payments/clusters/prod-ap-south.yaml", good)],
    );
    let source = open(root.path(), &bare, false);
    let desired = source.load().unwrap().0.desired;
    let overlay = &desired[0].overlays["prod-ap-south"];
    assert_eq!(overlay.image.as_deref(), Some("payment-api:1.8.2"));
    assert_eq!(overlay.env["DB_POOL"], "32");
    // A misspelt field: refused with file, line and field; nothing applied.
    let path = work.join("fleets/payments/clusters/prod-ap-south.yaml");
    std::fs::write(
        &path,
        "rollout: payment-api\nenv: {DB_POOL: \"32\"}\nimgae: x\n",
    )
    .unwrap();
    sh(&work, &["commit", "-q", "-am", "typo"]);
    sh(&work, &["push", "-q", "origin", "main"]);
    let error = refused(source.poll());
    assert!(
        error.contains("fleets/payments/clusters/prod-ap-south.yaml@")
            && error.contains(":3:")
            && error.contains("imgae"),
        "{error}"
    );
    // A cluster no Fleet has, and a value of the wrong type.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(
        work.join("fleets/payments/clusters/prod-mars.yaml"),
        "rollout: payment-api\nimage: payment-api:1.8.2\n",
    )
    .unwrap();
    std::fs::write(
        work.join("fleets/payments/clusters/prod-us-east.yaml"),
        "rollout: payment-api\nargs: [\"--x\"]\nenv: {A: [1]}\n",
    )
    .unwrap();
    sh(&work, &["add", "-A"]);
    sh(&work, &["commit", "-q", "-m", "more"]);
    sh(&work, &["push", "-q", "origin", "main"]);
    let error = refused(source.poll());
    assert!(
        error.contains("prod-mars.yaml@") && error.contains("cluster \"prod-mars\""),
        "{error}"
    );
    assert!(
        error.contains("prod-us-east.yaml@") && error.contains(":3:") && error.contains("env.A"),
        "{error}"
    );
    // Two overlays for one cluster, and a JSON overlay: refused by name.
    std::fs::remove_file(work.join("fleets/payments/clusters/prod-mars.yaml")).unwrap();
    std::fs::write(
        work.join("fleets/payments/clusters/prod-us-east.yaml"),
        "rollout: payment-api\nargs: [\"--x\"]\n",
    )
    .unwrap();
    std::fs::write(
        work.join("fleets/payments/clusters/prod-us-east.yml"),
        "rollout: payment-api\nenv: {A: \"1\"}\n",
    )
    .unwrap();
    std::fs::write(
        work.join("fleets/payments/clusters/prod-eu-west.json"),
        "{\"rollout\": \"payment-api\"}\n",
    )
    .unwrap();
    sh(&work, &["add", "-A"]);
    sh(&work, &["commit", "-q", "-m", "two and json"]);
    sh(&work, &["push", "-q", "origin", "main"]);
    let error = refused(source.poll());
    assert!(
        error.contains("a second overlay of Rollout \"payment-api\" for cluster \"prod-us-east\""),
        "{error}"
    );
    assert!(
        error.contains("prod-eu-west.json@") && error.contains("overlays are YAML"),
        "{error}"
    );
    // A pin the controller left for a cluster since removed from the Fleet is inert.
    sh(
        &work,
        &["rm", "-q", "fleets/payments/clusters/prod-us-east.yml"],
    );
    sh(
        &work,
        &["rm", "-q", "fleets/payments/clusters/prod-eu-west.json"],
    );
    std::fs::write(
        work.join("fleets/payments/clusters/prod-mars.yaml"),
        "rollout: payment-api\npin: {rejects: \"abc\", image: \"payment-api:1.8.3\"}\n",
    )
    .unwrap();
    sh(&work, &["add", "-A"]);
    sh(&work, &["commit", "-q", "-m", "mars decommissioned"]);
    sh(&work, &["push", "-q", "origin", "main"]);
    let desired = source.poll().unwrap().unwrap().0.desired;
    assert_eq!(
        desired[0].overlays["prod-us-east"].args.as_deref(),
        Some(&["--x".to_owned()][..])
    );
}

/// Two FleetRollouts of one directory share prod-us-east: the first keeps its overlay at
/// `clusters/prod-us-east.yaml`, the second's pin goes to `clusters/checkout-api/…`.
#[test]
fn a_cluster_shared_by_two_rollouts_gets_each_ones_pin_apart() {
    let root = tempfile::tempdir().unwrap();
    let checkout: String = manifests()
        .split("\n---\n")
        .filter(|d| d.contains("kind: FleetRollout") || d.contains("kind: Rollout"))
        .map(|d| d.replace("payment-api", "checkout-api"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    let (bare, work) = repository(
        root.path(),
        &[
            ("fleets/payments/checkout.yaml", checkout.as_str()),
            (
                "fleets/payments/clusters/prod-us-east.yaml",
                "rollout: payment-api\nenv: {DB_REGION: us-east-1}\n",
            ),
        ],
    );
    let source = open(root.path(), &bare, false);
    let mut change = pin_change("abc123");
    change.rollout = "checkout-api".into();
    source.commit_change(&change).unwrap().unwrap();
    let text = sh(
        &bare,
        &[
            "show",
            "main:fleets/payments/clusters/checkout-api/prod-us-east.yaml",
        ],
    );
    assert!(
        text.starts_with("rollout: checkout-api\n") && text.contains("abc123"),
        "{text}"
    );
    let desired = source.load().unwrap().0.desired;
    let of = |rollout: &str| {
        desired
            .iter()
            .find(|d| d.fleet_rollout.spec.rollout == rollout)
            .unwrap()
            .overlays["prod-us-east"]
            .clone()
    };
    assert_eq!(
        of("checkout-api").pinned_image("abc123"),
        Some("payment-api:1.8.3")
    );
    assert_eq!(of("payment-api").env["DB_REGION"], "us-east-1");
    assert_eq!(of("payment-api").pin, None);
    // A file under another Rollout's directory is refused by name.
    let mut bad = pin_change("def456");
    bad.rollout = "checkout-api".into();
    let mut files = BTreeMap::from([(
        "fleets/payments/clusters/checkout-api/prod-us-east.yaml".to_owned(),
        b"rollout: payment-api\n".to_vec(),
    )]);
    let error = edit_files(&mut files, "fleets/payments", &bad).unwrap_err();
    assert!(error.contains("not \"checkout-api\""), "{error}");
    sh(&work, &["pull", "-q", "--no-rebase", "origin", "main"]);
    std::fs::write(
        work.join("fleets/payments/clusters/checkout-api/prod-eu-west.yaml"),
        "rollout: payment-api\n",
    )
    .unwrap();
    sh(&work, &["add", "-A"]);
    sh(&work, &["commit", "-q", "-m", "misplaced"]);
    sh(&work, &["push", "-q", "origin", "main"]);
    let error = refused(source.poll());
    assert!(
        error.contains("checkout-api/prod-eu-west.yaml@")
            && error.contains("is under clusters/checkout-api/"),
        "{error}"
    );
}

#[test]
fn a_pin_goes_into_the_clusters_existing_yml_overlay() {
    let root = tempfile::tempdir().unwrap();
    let (bare, _work) = repository(
        root.path(),
        &[(
            "fleets/payments/clusters/prod-us-east.yml",
            "rollout: payment-api\nenv: {DB_REGION: us-east-1}\n",
        )],
    );
    let source = open(root.path(), &bare, false);
    source
        .commit_change(&pin_change("abc123"))
        .unwrap()
        .unwrap();
    let text = sh(
        &bare,
        &["show", "main:fleets/payments/clusters/prod-us-east.yml"],
    );
    assert!(
        text.contains("DB_REGION") && text.contains("abc123"),
        "{text}"
    );
    let listed = sh(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!listed.contains("prod-us-east.yaml"), "{listed}");
    let desired = source.load().unwrap().0.desired;
    let overlay = &desired[0].overlays["prod-us-east"];
    assert_eq!(overlay.pinned_image("abc123"), Some("payment-api:1.8.3"));
    assert_eq!(overlay.env["DB_REGION"], "us-east-1");
}

#[test]
fn a_pin_follows_a_human_commit_landing_between_fetch_and_push_and_keeps_it() {
    let root = tempfile::tempdir().unwrap();
    let human = "rollout: payment-api\nenv: {DB_POOL: \"16\"}\n";
    let (bare, work) = repository(
        root.path(),
        &[("fleets/payments/clusters/prod-us-east.yaml", human)],
    );
    let source = open(root.path(), &bare, false);
    let Source::Git(git) = &source else {
        unreachable!()
    };
    let change = pin_change("abc123");
    let mut calls = 0;
    let checkout = git.checkout.lock().unwrap();
    checkout
        .push_change("main", &git.identity, "pin", |files| {
            calls += 1;
            if calls == 1 {
                // A teammate edits the same overlay after our fetch.
                std::fs::write(
                    work.join("fleets/payments/clusters/prod-us-east.yaml"),
                    "rollout: payment-api\nenv: {DB_POOL: \"24\"}\n# tuned by hand\n",
                )
                .unwrap();
                sh(&work, &["commit", "-q", "-am", "a teammate's tuning"]);
                sh(&work, &["push", "-q", "origin", "main"]);
            }
            edit_files(files, "fleets/payments", &change)
        })
        .unwrap();
    drop(checkout);
    assert_eq!(calls, 2, "the pin was applied again on the new head");
    assert_eq!(
        sh(&bare, &["log", "-1", "--format=%s", "main~1"]),
        "a teammate's tuning"
    );
    let text = sh(
        &bare,
        &["show", "main:fleets/payments/clusters/prod-us-east.yaml"],
    );
    assert_eq!(
        text,
        "rollout: payment-api\nenv: {DB_POOL: \"24\"}\n# tuned by hand\npin: {rejects: \"abc123\", image: \"payment-api:1.8.3\"}"
    );
    let desired = source.load().unwrap().0.desired;
    let overlay = &desired[0].overlays["prod-us-east"];
    assert_eq!(overlay.env["DB_POOL"], "24");
    assert_eq!(overlay.pinned_image("abc123"), Some("payment-api:1.8.3"));
    assert_eq!(overlay.pinned_image("fixed"), None);
    // Pinning again replaces the pin, never duplicates it.
    source
        .commit_change(&pin_change("def456"))
        .unwrap()
        .unwrap();
    let text = sh(
        &bare,
        &["show", "main:fleets/payments/clusters/prod-us-east.yaml"],
    );
    assert_eq!(text.matches("pin:").count(), 1, "{text}");
    assert!(text.contains("def456"), "{text}");
}

#[test]
fn propose_only_writes_the_pin_to_a_branch_and_an_unreachable_remote_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let (bare, _work) = repository(root.path(), &[]);
    let source = open(root.path(), &bare, true);
    let main = sh(&bare, &["rev-parse", "main"]);
    let (commit, branch) = source
        .commit_change(&pin_change("abc123"))
        .unwrap()
        .unwrap();
    assert_eq!(branch, "flotilla/pin-payment-api-abc123");
    assert_eq!(sh(&bare, &["rev-parse", "main"]), main, "main untouched");
    assert_eq!(sh(&bare, &["rev-parse", &branch]), commit);
    let message = sh(&bare, &["log", "-1", "--format=%B", &branch]);
    assert!(
        message.contains("Committed by the Flotilla controller flotilla-controller")
            && message.ends_with("Flotilla-Metric: latency-p95=[0.31]"),
        "{message}"
    );
    assert!(
        sh(
            &bare,
            &[
                "show",
                &format!("{branch}:fleets/payments/clusters/prod-us-east.yaml")
            ]
        )
        .starts_with("rollout: payment-api\npin: ")
    );
    // The remote goes away: a clear error, nothing pushed; back again: pushed.
    let away = root.path().join("away.git");
    std::fs::rename(&bare, &away).unwrap();
    let error = source
        .commit_change(&pin_change("def456"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("fleet.git"), "{error}");
    std::fs::rename(&away, &bare).unwrap();
    assert!(
        source
            .commit_change(&pin_change("def456"))
            .unwrap()
            .is_some()
    );
}
