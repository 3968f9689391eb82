//! One replica's life: its process started on a free loopback port, probed for readiness,
//! restarted with exponential backoff when it exits, and stopped when told (out of routing, the
//! drain delay, SIGTERM to its process group, SIGKILL after the grace period).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_agent_backend::wire::{Phase, ReplicaStatus};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{Notify, watch};

use super::spawner::Spawner;
use crate::config::WorkloadTemplate;

/// Runs one replica: start, probe, restart on exit, stop when told.
pub(super) struct ReplicaRunner {
    /// The version it runs.
    pub(super) version: String,
    /// How it runs.
    pub(super) template: WorkloadTemplate,
    /// Its state, as the supervisor reads it.
    pub(super) shared: Arc<Mutex<ReplicaStatus>>,
    /// Told on every change of its state.
    pub(super) notify: Arc<Notify>,
    /// Starts its processes.
    pub(super) spawner: Arc<Spawner>,
}

enum Ended {
    Exited(String),
    Stopped,
}

impl ReplicaRunner {
    fn update(&self, change: impl FnOnce(&mut ReplicaStatus)) {
        change(&mut self.shared.lock().expect("replica lock"));
        self.notify.notify_one();
    }

    /// Runs the replica until `stop` turns true.
    pub(super) async fn run(self, mut stop: watch::Receiver<bool>) {
        let backoff = self.template.restart_backoff;
        let mut delay = Duration::from_millis(backoff.initial_ms);
        loop {
            if *stop.borrow() {
                return;
            }
            let started = Instant::now();
            let (ended, was_ready_for) = self.run_once(&mut stop).await;
            match ended {
                Ended::Stopped => return,
                Ended::Exited(how) => {
                    self.update(|s| {
                        s.phase = Phase::Crashed;
                        s.pid = None;
                        s.last_exit = Some(how);
                    });
                }
            }
            if was_ready_for >= Duration::from_secs(10)
                || started.elapsed() >= Duration::from_secs(60)
            {
                delay = Duration::from_millis(backoff.initial_ms);
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.changed() => return,
            }
            delay = (delay * 2).min(Duration::from_millis(backoff.max_ms));
            self.update(|s| s.restarts += 1);
        }
    }

    /// Starts the process and follows it until it exits or is stopped. Returns how it ended
    /// and how long it had been ready.
    async fn run_once(&self, stop: &mut watch::Receiver<bool>) -> (Ended, Duration) {
        let port = match free_port() {
            Ok(port) => port,
            Err(e) => return (Ended::Exited(format!("no free port: {e}")), Duration::ZERO),
        };
        let argv = self.template.argv(&self.version, port);
        let env = self.template.env_for(&self.version, port);
        let mut child = match self.spawner.spawn(argv.clone(), env).await {
            Ok(child) => child,
            Err(e) => {
                return (
                    Ended::Exited(format!("cannot start {:?}: {e}", argv[0])),
                    Duration::ZERO,
                );
            }
        };
        let pid = child.id();
        let group = pid.map(|pid| GroupGuard(Pid::from_raw(pid as i32)));
        self.update(|s| {
            s.phase = Phase::Starting;
            s.port = Some(port);
            s.pid = pid;
        });
        let readiness = &self.template.readiness;
        let url = format!("http://127.0.0.1:{port}{}", readiness.path);
        let period = Duration::from_millis(readiness.period_ms);
        let timeout = Duration::from_millis(readiness.timeout_ms);
        let mut failures = 0u32;
        let mut ready_since: Option<Instant> = None;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            tokio::select! {
                status = child.wait() => {
                    break Ended::Exited(match status {
                        Ok(status) => describe_exit(status),
                        Err(e) => format!("cannot wait for the process: {e}"),
                    });
                }
                _ = stop.changed() => break Ended::Stopped,
                _ = tick.tick() => {
                    let ok = probe(&url, timeout).await;
                    if ok {
                        failures = 0;
                        if ready_since.is_none() {
                            ready_since = Some(Instant::now());
                            self.update(|s| s.phase = Phase::Ready);
                        }
                    } else {
                        failures += 1;
                        if ready_since.is_some() && failures >= readiness.failure_threshold {
                            ready_since = None;
                            self.update(|s| s.phase = Phase::NotReady);
                        }
                    }
                }
            }
        };
        let ready_for = ready_since.map(|t| t.elapsed()).unwrap_or_default();
        match ended {
            Ended::Stopped => {
                self.update(|s| s.phase = Phase::Stopping);
                tokio::time::sleep(Duration::from_millis(self.template.drain_delay_ms)).await;
                if let Some(group) = &group {
                    group.signal(Signal::SIGTERM);
                }
                let exited = tokio::time::timeout(self.template.grace(), child.wait()).await;
                if exited.is_err() {
                    if let Some(group) = &group {
                        group.signal(Signal::SIGKILL);
                    }
                    let _ = child.wait().await;
                }
                // Whatever the main process left in its group goes too.
                drop(group);
                self.update(|s| {
                    s.pid = None;
                    s.last_exit = Some("stopped".into());
                });
                (Ended::Stopped, ready_for)
            }
            Ended::Exited(how) => {
                drop(group);
                (Ended::Exited(how), ready_for)
            }
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => "exited".into(),
    }
}

/// Kills a replica's process group (SIGKILL) when dropped.
struct GroupGuard(Pid);

impl GroupGuard {
    fn signal(&self, signal: Signal) {
        // ESRCH once everything has exited is expected.
        let _ = killpg(self.0, signal);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// A free loopback port (free when asked; a replica that loses the race crashes and restarts
/// on another).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn probe_client() -> &'static Client<HttpConnector, Empty<Bytes>> {
    static CLIENT: OnceLock<Client<HttpConnector, Empty<Bytes>>> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(HttpConnector::new())
    })
}

async fn probe(url: &str, timeout: Duration) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match tokio::time::timeout(timeout, probe_client().get(uri)).await {
        Ok(Ok(response)) => {
            let s = response.status();
            s.is_success() || s.is_redirection()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(1 << 8)),
            "exited with code 1"
        );
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "killed by SIGKILL");
    }
}
