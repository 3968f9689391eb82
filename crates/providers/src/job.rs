//! Argo's `job` provider, run locally: the first container's `command` + `args` becomes a process
//! on this machine, in its own process group, with the container's literal `env` added to the
//! inherited environment. Exit 0 is Successful, anything else Failed; `activeDeadlineSeconds`
//! bounds the run as it bounds a Kubernetes Job.
//!
//! No image is pulled: a container without `command` is refused. Like Kubernetes, `$(VAR)` in
//! `command`, `args` and env values expands to the container's env vars (`$$` is a literal `$`),
//! and when the main process ends whatever it left running in its group is killed, as a pod's
//! container is torn down. Dropping the measurement kills the whole group.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use flotilla_core::analysis::Outcome;
use flotilla_core::spec::analysis::{AnalysisPhase, JobMetric};
use k8s_openapi::api::core::v1::Container;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::Command;

/// How much of the job's output is kept as the measurement's message.
const OUTPUT_TAIL_BYTES: usize = 4096;
/// How long to wait for the output pipe to close once the group is killed (a process that left
/// the group with `setsid` may hold it open forever).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// Kubernetes' message for a Job past its `activeDeadlineSeconds`.
const DEADLINE_MESSAGE: &str = "DeadlineExceeded: Job was active longer than specified deadline";

/// Runs one job measurement.
pub(crate) async fn measure(metric: &JobMetric) -> Outcome {
    let plan = match Plan::from_metric(metric) {
        Ok(plan) => plan,
        Err(message) => return Outcome::Error(message),
    };
    match run(&plan).await {
        Ok(outcome) => outcome,
        Err(message) => Outcome::Error(message),
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    working_dir: Option<String>,
    deadline: Option<Duration>,
}

impl Plan {
    fn from_metric(metric: &JobMetric) -> Result<Plan, String> {
        let deadline = match metric.spec.active_deadline_seconds {
            None => None,
            Some(secs) if secs > 0 => Some(Duration::from_secs(secs as u64)),
            Some(secs) => {
                return Err(format!(
                    "job spec.activeDeadlineSeconds must be greater than zero, not {secs}"
                ));
            }
        };
        let container = metric
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|pod| pod.containers.first())
            .ok_or("job spec.template.spec.containers is empty: there is nothing to run")?;
        let mut plan = Plan::from_container(container)?;
        plan.deadline = deadline;
        Ok(plan)
    }

    fn from_container(container: &Container) -> Result<Plan, String> {
        if container.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err(format!(
                "job container {:?} uses envFrom, which Flotilla cannot resolve: it runs the \
                 command locally; list the variables under env with literal values",
                container.name
            ));
        }
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container.env.iter().flatten() {
            if var.value_from.is_some() {
                return Err(format!(
                    "job container env {:?} uses valueFrom, which Flotilla cannot resolve: it \
                     runs the command locally; give it a value (for example from an argument)",
                    var.name
                ));
            }
            let value = expand(var.value.as_deref().unwrap_or(""), |name| {
                lookup(&env, name)
            });
            env.push((var.name.clone(), value));
        }
        let command = container.command.as_ref().filter(|c| !c.is_empty()).ok_or(
            "job container has no command: Flotilla runs the command locally and does not \
                 pull images",
        )?;
        let argv: Vec<String> = command
            .iter()
            .chain(container.args.iter().flatten())
            .map(|arg| expand(arg, |name| lookup(&env, name)))
            .collect();
        Ok(Plan {
            argv,
            env,
            working_dir: container.working_dir.clone().filter(|d| !d.is_empty()),
            deadline: None,
        })
    }
}

/// The last definition of `name` among the container's env vars.
fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Kubernetes' `$(VAR)` expansion: a known variable is replaced, an unknown one is kept as
/// written, `$$` is a literal `$`.
fn expand<'a>(input: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match lookup(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The job's process group, killed with SIGKILL when dropped while armed.
struct ProcessGroup {
    pgid: Pid,
    armed: bool,
}

impl ProcessGroup {
    fn kill(&self) {
        // ESRCH (nobody left) is the expected answer once everything has exited.
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// The last bytes of the job's output.
#[derive(Debug, Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > 2 * OUTPUT_TAIL_BYTES {
            let cut = self.0.len() - OUTPUT_TAIL_BYTES;
            self.0.drain(..cut);
        }
    }

    fn text(&self) -> String {
        let mut start = self.0.len().saturating_sub(OUTPUT_TAIL_BYTES);
        // Do not start inside a UTF-8 sequence (continuation bytes are 0b10xxxxxx).
        while start < self.0.len() && start > 0 && (self.0[start] & 0xC0) == 0x80 {
            start += 1;
        }
        String::from_utf8_lossy(&self.0[start..])
            .trim_end()
            .to_owned()
    }
}

/// How the main process ended.
enum Ending {
    Exited(ExitStatus),
    DeadlineExceeded,
}

async fn run(plan: &Plan) -> Result<Outcome, String> {
    let program = &plan.argv[0];
    let (reader, writer) =
        std::io::pipe().map_err(|e| format!("cannot create the job's output pipe: {e}"))?;
    let writer_for_stderr = writer
        .try_clone()
        .map_err(|e| format!("cannot create the job's output pipe: {e}"))?;
    let mut command = Command::new(program);
    command
        .args(&plan.argv[1..])
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_for_stderr)
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = &plan.working_dir {
        command.current_dir(dir);
    }
    let spawned = command.spawn();
    // The command holds our copies of the pipe's write end; the pipe closes only once they go.
    drop(command);
    let mut child = spawned.map_err(|e| format!("cannot start job command {program:?}: {e}"))?;
    // The group is created before anything else can fail, so an early return still kills it.
    let mut group = child.id().map(|pid| ProcessGroup {
        pgid: Pid::from_raw(pid as i32),
        armed: true,
    });
    let mut output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(|e| format!("cannot read the job's output: {e}"))?;

    let mut tail = Tail::default();
    let mut buffer = vec![0u8; 8192];
    let mut output_open = true;
    let deadline = async {
        match plan.deadline {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let ending = loop {
        tokio::select! {
            status = child.wait() => {
                break Ending::Exited(
                    status.map_err(|e| format!("cannot wait for job command {program:?}: {e}"))?,
                );
            }
            read = output.read(&mut buffer), if output_open => match read {
                Ok(0) | Err(_) => output_open = false,
                Ok(n) => tail.push(&buffer[..n]),
            },
            () = &mut deadline => break Ending::DeadlineExceeded,
        }
    };
    // Kill what is left in the group (everything, past the deadline; stragglers otherwise, as a
    // pod's container is torn down when its main process ends), then reap the main process.
    if let Some(group) = &group {
        group.kill();
    }
    if matches!(ending, Ending::DeadlineExceeded) {
        let _ = child.wait().await;
    }
    if let Some(group) = &mut group {
        group.armed = false;
    }
    if output_open {
        let _ = tokio::time::timeout(DRAIN_LIMIT, async {
            while let Ok(n) = output.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                tail.push(&buffer[..n]);
            }
        })
        .await;
    }
    let text = tail.text();
    let metadata = BTreeMap::new();
    Ok(match ending {
        Ending::DeadlineExceeded => Outcome::Decided {
            phase: AnalysisPhase::Failed,
            value: "DeadlineExceeded".into(),
            message: if text.is_empty() {
                DEADLINE_MESSAGE.to_owned()
            } else {
                format!("{DEADLINE_MESSAGE}\n{text}")
            },
            metadata,
        },
        Ending::Exited(status) => {
            // A process killed by a signal reports 128 + the signal, as shells and kubelet do.
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(-1);
            Outcome::Decided {
                phase: if code == 0 {
                    AnalysisPhase::Successful
                } else {
                    AnalysisPhase::Failed
                },
                value: code.to_string(),
                message: text,
                metadata,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn variables_expand_as_kubernetes_expands_them() {
        let env = vec![("A".to_owned(), "1".to_owned())];
        let f = |input: &str| expand(input, |n| lookup(&env, n));
        assert_eq!(f("$(A)-$(B)"), "1-$(B)");
        assert_eq!(f("$$(A) $$ $x $"), "$(A) $ $x $");
        assert_eq!(f("$(A"), "$(A");
        assert_eq!(f("plain"), "plain");
    }

    #[test]
    fn the_first_containers_command_args_and_env_make_the_plan() {
        let plan = Plan::from_container(&container(serde_json::json!({
            "name": "c",
            "image": "busybox",
            "command": ["sh", "-c"],
            "args": ["echo $(GREETING) $(HOME_DIR)"],
            "env": [
                {"name": "WHO", "value": "world"},
                {"name": "GREETING", "value": "hello $(WHO)"},
                {"name": "EMPTY"}
            ],
            "workingDir": "/tmp"
        })))
        .unwrap();
        assert_eq!(plan.argv, ["sh", "-c", "echo hello world $(HOME_DIR)"]);
        assert_eq!(plan.env[2], ("EMPTY".to_owned(), String::new()));
        assert_eq!(plan.working_dir.as_deref(), Some("/tmp"));
    }

    #[test]
    fn images_and_secret_references_are_refused() {
        let err = Plan::from_container(&container(
            serde_json::json!({"name": "c", "image": "busybox", "args": ["x"]}),
        ))
        .unwrap_err();
        assert!(err.contains("does not pull images"), "{err}");
        let err = Plan::from_container(&container(serde_json::json!({
            "name": "c", "command": ["true"],
            "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        })))
        .unwrap_err();
        assert!(err.contains("TOKEN") && err.contains("valueFrom"), "{err}");
        let err = Plan::from_container(&container(serde_json::json!({
            "name": "c", "command": ["true"], "envFrom": [{"secretRef": {"name": "s"}}]
        })))
        .unwrap_err();
        assert!(err.contains("envFrom"), "{err}");
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_on_a_character_boundary() {
        let mut tail = Tail::default();
        for _ in 0..5000 {
            tail.push("é".as_bytes());
        }
        tail.push(b"end\n");
        let text = tail.text();
        assert!(
            text.ends_with("end") && !text.contains('\u{FFFD}'),
            "{text}"
        );
        assert!(text.len() <= OUTPUT_TAIL_BYTES);
    }
}
