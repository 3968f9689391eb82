//! Tests against real repositories made with the `git` command (a bare remote and a second
//! clone that competes for the branch), over local paths and a `git daemon` on loopback.

use std::path::Path;
use std::process::Command;

use super::*;

fn sh(dir: &Path, args: &[&str]) -> String {
    crate::cli::git(dir, args, &crate::Identity::new("Dev", "dev@example.test"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A bare remote with one commit holding `fleets/payments/rollout.yaml`.
fn remote(root: &Path) -> std::path::PathBuf {
    let bare = root.join("remote.git");
    std::fs::create_dir_all(&bare).unwrap();
    sh(&bare, &["init", "--bare", "-q", "-b", "main"]);
    let seed = root.join("seed");
    std::fs::create_dir_all(seed.join("fleets/payments")).unwrap();
    sh(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(
        seed.join("fleets/payments/rollout.yaml"),
        "image: app:1.8.3\n",
    )
    .unwrap();
    std::fs::write(seed.join("README"), "not a manifest\n").unwrap();
    sh(&seed, &["add", "."]);
    sh(&seed, &["commit", "-q", "-m", "first"]);
    sh(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
    bare
}

fn identity() -> Identity {
    Identity {
        name: "flotilla-controller".into(),
        email: "flotilla@localhost".into(),
    }
}

fn set_image(files: &mut BTreeMap<String, Vec<u8>>, image: &str) -> Result<bool, String> {
    let path = "fleets/payments/rollout.yaml";
    let text = String::from_utf8(files.get(path).cloned().ok_or("no rollout file")?)
        .map_err(|e| e.to_string())?;
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("image:") {
                format!("image: {image}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let changed = edited != text;
    files.insert(path.into(), edited.into_bytes());
    Ok(changed)
}

#[test]
fn reads_the_manifests_under_a_directory_at_the_head() {
    let root = tempfile::tempdir().unwrap();
    let bare = remote(root.path());
    let checkout =
        Checkout::open(bare.to_str().unwrap(), "main", &root.path().join("cache")).unwrap();
    let head = checkout.head().unwrap();
    let files = checkout.files(&head, "fleets/payments").unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files["fleets/payments/rollout.yaml"], b"image: app:1.8.3\n");
    assert_eq!(checkout.files(&head, "").unwrap().len(), 2);
    // Reopening the cache works and sees the same head.
    let again = Checkout::open(bare.to_str().unwrap(), "main", &root.path().join("cache")).unwrap();
    assert_eq!(again.head().unwrap(), head);
}

#[test]
fn a_change_is_committed_with_its_message_and_pushed_as_a_fast_forward() {
    let root = tempfile::tempdir().unwrap();
    let bare = remote(root.path());
    let checkout =
        Checkout::open(bare.to_str().unwrap(), "main", &root.path().join("cache")).unwrap();
    let before = checkout.head().unwrap();
    let message = "Roll back payment-api to app:1.8.2\n\nFlotilla-Cluster: prod-us-east\nFlotilla-Metric: latency-p95=0.41\n";
    let pushed = checkout
        .push_change("main", &identity(), message, |f| set_image(f, "app:1.8.2"))
        .unwrap();
    let Pushed::Commit { id, attempts } = pushed else {
        panic!("nothing pushed")
    };
    assert_eq!(attempts, 1);
    assert_eq!(sh(&bare, &["rev-parse", "main"]), id);
    assert_eq!(
        sh(&bare, &["rev-parse", "main~1"]),
        before,
        "a fast-forward of the old head"
    );
    assert_eq!(
        sh(&bare, &["show", "main:fleets/payments/rollout.yaml"]),
        "image: app:1.8.2"
    );
    assert_eq!(
        sh(&bare, &["log", "-1", "--format=%an <%ae>", "main"]),
        "flotilla-controller <flotilla@localhost>"
    );
    let log = checkout.log(1).unwrap();
    assert_eq!(
        trailers(&log[0].message),
        vec![
            ("Flotilla-Cluster".to_owned(), "prod-us-east".to_owned()),
            ("Flotilla-Metric".to_owned(), "latency-p95=0.41".to_owned())
        ]
    );
    // The same change again: nothing to commit.
    let again = checkout
        .push_change("main", &identity(), message, |f| set_image(f, "app:1.8.2"))
        .unwrap();
    assert_eq!(again, Pushed::NothingToDo);
}

#[test]
fn a_moving_branch_gets_the_edit_reapplied_on_its_new_head_never_forced() {
    let root = tempfile::tempdir().unwrap();
    let bare = remote(root.path());
    let other = root.path().join("other");
    sh(
        root.path(),
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let checkout =
        Checkout::open(bare.to_str().unwrap(), "main", &root.path().join("cache")).unwrap();
    let mut calls = 0;
    let pushed = checkout
        .push_change("main", &identity(), "roll back", |files| {
            calls += 1;
            if calls == 1 {
                // Someone else pushes between our fetch and our push.
                std::fs::write(other.join("fleets/payments/extra.yaml"), "kind: Other\n").unwrap();
                sh(&other, &["add", "."]);
                sh(&other, &["commit", "-q", "-m", "a teammate's change"]);
                sh(&other, &["push", "-q", "origin", "main"]);
            }
            set_image(files, "app:1.8.2")
        })
        .unwrap();
    assert!(
        matches!(pushed, Pushed::Commit { attempts: 2, .. }),
        "{pushed:?}"
    );
    assert_eq!(calls, 2, "the edit ran again on the new head");
    // Both changes are there: ours on top of the teammate's.
    assert_eq!(
        sh(&bare, &["log", "-1", "--format=%s", "main~1"]),
        "a teammate's change"
    );
    assert_eq!(
        sh(&bare, &["show", "main:fleets/payments/extra.yaml"]),
        "kind: Other"
    );
    assert_eq!(
        sh(&bare, &["show", "main:fleets/payments/rollout.yaml"]),
        "image: app:1.8.2"
    );
}

#[test]
fn a_proposal_goes_to_its_own_branch_and_leaves_the_main_branch_alone() {
    let root = tempfile::tempdir().unwrap();
    let bare = remote(root.path());
    let checkout =
        Checkout::open(bare.to_str().unwrap(), "main", &root.path().join("cache")).unwrap();
    let main_before = sh(&bare, &["rev-parse", "main"]);
    let pushed = checkout
        .push_change("flotilla/rollback-1", &identity(), "propose", |f| {
            set_image(f, "app:1.8.2")
        })
        .unwrap();
    assert!(matches!(pushed, Pushed::Commit { .. }));
    assert_eq!(sh(&bare, &["rev-parse", "main"]), main_before);
    assert_eq!(
        sh(
            &bare,
            &["show", "flotilla/rollback-1:fleets/payments/rollout.yaml"]
        ),
        "image: app:1.8.2"
    );
}

/// `git daemon` on loopback serves the `git://` transport, fetch and push.
#[test]
fn the_git_protocol_works_against_a_git_daemon_on_loopback() {
    let root = tempfile::tempdir().unwrap();
    let bare = remote(root.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // `git daemon` would run `git-daemon` as a child that outlives a kill: run it directly.
    let exec_path = sh(root.path(), &["--exec-path"]);
    let daemon = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args([
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", root.path().display()),
            root.path().to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("git daemon starts");
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let daemon = Stop(daemon);
    let url = format!("git://127.0.0.1:{port}/remote.git");
    let mut checkout = None;
    for _ in 0..50 {
        match Checkout::open(&url, "main", &root.path().join("cache")) {
            Ok(c) => {
                checkout = Some(c);
                break;
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
    let checkout = checkout.expect("the daemon answers");
    let pushed = checkout
        .push_change("main", &identity(), "over git://", |f| {
            set_image(f, "app:2.0.0")
        })
        .unwrap();
    assert!(matches!(pushed, Pushed::Commit { .. }));
    assert_eq!(
        sh(&bare, &["show", "main:fleets/payments/rollout.yaml"]),
        "image: app:2.0.0"
    );
    drop(daemon);
}

#[test]
fn an_unreachable_remote_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let error = Checkout::open(
        "git://127.0.0.1:1/nothing.git",
        "main",
        &root.path().join("c"),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("git fetch of git://127.0.0.1:1/nothing.git"),
        "{error}"
    );
}
