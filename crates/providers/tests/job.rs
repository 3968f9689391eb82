//! The job provider running real commands: exit codes, output, env, the deadline, and the
//! process group killed on every way out (deadline, exit, dropping the measurement).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{poll_until, request};
use flotilla_core::analysis::{MeasureRequest, Measurer, Outcome};
use flotilla_core::spec::analysis::AnalysisPhase;
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::{Value, json};

/// A job whose one container runs `command`, with optional env and deadline.
fn job(command: Value, env: Value, deadline: Option<i64>) -> MeasureRequest {
    let mut spec = json!({
        "backoffLimit": 0,
        "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "check", "image": "busybox", "command": command, "env": env}]
        }}
    });
    if let Some(seconds) = deadline {
        spec["activeDeadlineSeconds"] = json!(seconds);
    }
    request(json!({"job": {"spec": spec}}))
}

fn decided(outcome: Outcome) -> (AnalysisPhase, String, String) {
    match outcome {
        Outcome::Decided {
            phase,
            value,
            message,
            ..
        } => (phase, value, message),
        other => panic!("expected a Decided outcome, got {other:?}"),
    }
}

/// Whether `pid` is still running. An exited process that nobody reaps (orphans whose new parent
/// does not wait for them, as on this machine's init) is a zombie: it counts as gone.
fn running(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => false,
        _ => match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                !(state.starts_with('Z') || state.starts_with('X'))
            }
            Err(_) => false,
        },
    }
}

/// The pid a command wrote to `file`, once it has written it.
async fn pid_in(file: &Path) -> i32 {
    poll_until(Duration::from_secs(10), "the pid file", || async {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
    })
    .await
}

async fn wait_until_gone(pid: i32) {
    poll_until(Duration::from_secs(5), "the process to be gone", || async {
        (!running(pid)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn exit_zero_is_successful() {
    let providers = common::providers();
    let (phase, value, _) = decided(
        providers
            .measure(&job(json!(["sh", "-c", "exit 0"]), json!([]), None))
            .await,
    );
    assert_eq!(phase, AnalysisPhase::Successful);
    assert_eq!(value, "0");
}

#[tokio::test]
async fn a_non_zero_exit_fails_with_the_code_and_the_output() {
    let providers = common::providers();
    let (phase, value, message) = decided(
        providers
            .measure(&job(
                json!(["sh", "-c", "echo boom; echo bang >&2; exit 3"]),
                json!([]),
                None,
            ))
            .await,
    );
    assert_eq!(phase, AnalysisPhase::Failed);
    assert_eq!(value, "3");
    assert!(
        message.contains("boom") && message.contains("bang"),
        "{message}"
    );
}

#[tokio::test]
async fn only_the_last_four_kib_of_output_are_kept() {
    let providers = common::providers();
    let script = "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done";
    let (phase, _, message) = decided(
        providers
            .measure(&job(json!(["sh", "-c", script]), json!([]), None))
            .await,
    );
    assert_eq!(phase, AnalysisPhase::Successful);
    assert!(message.len() <= 4096, "{}", message.len());
    assert!(message.ends_with("line-1999"), "{message}");
    assert!(!message.contains("line-10\n"), "{message}");
}

#[tokio::test]
async fn container_env_reaches_the_process_and_expands_in_args() {
    let providers = common::providers();
    let (phase, _, message) = decided(
        providers
            .measure(&job(
                json!([
                    "sh",
                    "-c",
                    "echo \"env=$GREETING arg=$(GREETING) home=${HOME:+set}\""
                ]),
                json!([{"name": "GREETING", "value": "hello-from-spec"}]),
                None,
            ))
            .await,
    );
    assert_eq!(phase, AnalysisPhase::Successful);
    // The container's env is added to the inherited environment, not instead of it.
    assert_eq!(
        message, "env=hello-from-spec arg=hello-from-spec home=set",
        "{message}"
    );
}

#[tokio::test]
async fn the_deadline_fails_the_job_quickly_and_kills_the_whole_group() {
    let providers = common::providers();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    // The sleep runs as a grandchild, so only killing the group reaches it.
    let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let started = Instant::now();
    let (phase, value, message) = decided(
        providers
            .measure(&job(json!(["sh", "-c", script]), json!([]), Some(1)))
            .await,
    );
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(phase, AnalysisPhase::Failed);
    assert_eq!(value, "DeadlineExceeded");
    assert!(
        message.starts_with("DeadlineExceeded: Job was active longer than specified deadline"),
        "{message}"
    );
    wait_until_gone(pid_in(&pidfile).await).await;
}

#[tokio::test]
async fn processes_left_behind_by_a_finished_job_are_killed() {
    let providers = common::providers();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    let script = format!("sleep 30 & echo $! > {}; echo done", pidfile.display());
    let started = Instant::now();
    let (phase, _, message) = decided(
        providers
            .measure(&job(json!(["sh", "-c", script]), json!([]), None))
            .await,
    );
    assert_eq!(phase, AnalysisPhase::Successful);
    assert_eq!(message, "done");
    assert!(started.elapsed() < Duration::from_secs(10));
    wait_until_gone(pid_in(&pidfile).await).await;
}

#[tokio::test]
async fn dropping_the_measurement_kills_the_process_group() {
    let providers = common::providers();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleep.pid");
    let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let request = job(json!(["sh", "-c", script]), json!([]), None);
    let mut measurement = Box::pin(providers.measure(&request));
    let pid = tokio::select! {
        outcome = &mut measurement => panic!("the job ended early: {outcome:?}"),
        pid = pid_in(&pidfile) => pid,
    };
    assert!(running(pid), "the sleep should be running before the drop");
    drop(measurement);
    wait_until_gone(pid).await;
}

#[tokio::test]
async fn jobs_flotilla_cannot_run_locally_are_errors() {
    let providers = common::providers();
    let no_command = request(json!({"job": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "curlimages/curl", "args": ["http://x"]}]
    }}}}}));
    match providers.measure(&no_command).await {
        Outcome::Error(message) => assert!(
            message.contains("job container has no command")
                && message.contains("does not pull images"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let secret_env = job(
        json!(["true"]),
        json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        None,
    );
    match providers.measure(&secret_env).await {
        Outcome::Error(message) => assert!(message.contains("TOKEN"), "{message}"),
        other => panic!("{other:?}"),
    }
    let missing = job(json!(["/nonexistent/flotilla-check"]), json!([]), None);
    match providers.measure(&missing).await {
        Outcome::Error(message) => {
            assert!(message.contains("/nonexistent/flotilla-check"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
