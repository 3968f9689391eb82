//! One subset's supervisor: reconciles its replicas to what the subset should run (a new
//! version surges: the old replicas serve until as many new ones are ready; the surplus goes
//! least useful first), takes replicas out of routing before they are stopped, and publishes
//! the ready endpoints to the router.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_agent_backend::wire::{Phase, ReplicaStatus};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::replica::ReplicaRunner;
use super::spawner::Spawner;
use crate::config::WorkloadTemplate;
use crate::router::Router;

/// What a subset should run.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The version (`{{version}}`).
    pub version: String,
    /// How many replicas.
    pub replicas: u32,
    /// How to run one (required when `replicas > 0`).
    pub template: Option<WorkloadTemplate>,
}

/// One subset's supervisor: reconciles replicas to the desired state and publishes the ready
/// endpoints.
pub(super) struct Supervisor {
    subset: String,
    router: Arc<Router>,
    spawner: Arc<Spawner>,
    next_id: Arc<Mutex<u64>>,
    replicas: Vec<Replica>,
    notify: Arc<Notify>,
    state: Arc<Mutex<Vec<ReplicaStatus>>>,
    routed: Arc<Mutex<Vec<SocketAddr>>>,
}

struct Replica {
    id: u64,
    version: String,
    template: WorkloadTemplate,
    shared: Arc<Mutex<ReplicaStatus>>,
    stop: watch::Sender<bool>,
    stopping: bool,
    task: JoinHandle<()>,
}

impl Replica {
    fn phase(&self) -> Phase {
        self.shared.lock().expect("replica lock").phase
    }

    fn ready_addr(&self) -> Option<SocketAddr> {
        let s = self.shared.lock().expect("replica lock");
        (s.phase == Phase::Ready && !self.stopping)
            .then(|| s.port.map(|p| SocketAddr::from(([127, 0, 0, 1], p))))
            .flatten()
    }
}

impl Supervisor {
    /// The supervisor of `subset`, with no replica yet; `state` and `routed` are where it
    /// publishes its replicas and the endpoints it put in routing.
    pub(super) fn new(
        subset: String,
        router: Arc<Router>,
        spawner: Arc<Spawner>,
        next_id: Arc<Mutex<u64>>,
        state: Arc<Mutex<Vec<ReplicaStatus>>>,
        routed: Arc<Mutex<Vec<SocketAddr>>>,
    ) -> Supervisor {
        Supervisor {
            subset,
            router,
            spawner,
            next_id,
            replicas: Vec::new(),
            notify: Arc::new(Notify::new()),
            state,
            routed,
        }
    }

    /// Reconciles until `shutdown` turns true (or `desired`'s sender goes), then stops every
    /// replica and waits for them.
    pub(super) async fn run(
        mut self,
        mut desired: watch::Receiver<Desired>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            if *shutdown.borrow() {
                break;
            }
            let want = desired.borrow().clone();
            self.reconcile(&want);
            tokio::select! {
                changed = desired.changed() => if changed.is_err() { break },
                _ = shutdown.changed() => {},
                () = self.notify.notified() => {},
                _ = tick.tick() => {},
            }
        }
        // Shut down: out of routing, then stop everything and wait.
        for replica in &mut self.replicas {
            replica.stopping = true;
        }
        self.publish();
        for replica in &self.replicas {
            let _ = replica.stop.send(true);
        }
        for replica in self.replicas.drain(..) {
            let _ = replica.task.await;
        }
        self.publish();
    }

    fn reconcile(&mut self, want: &Desired) {
        self.replicas.retain(|r| !r.task.is_finished());
        let is_current =
            |r: &Replica| r.version == want.version && Some(&r.template) == want.template.as_ref();
        let current: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| !self.replicas[i].stopping && is_current(&self.replicas[i]))
            .collect();
        let wanted = want.replicas as usize;
        if current.len() < wanted
            && let Some(template) = &want.template
        {
            for _ in current.len()..wanted {
                self.start(&want.version, template.clone());
            }
        } else if current.len() > wanted {
            // Stop the surplus, the least useful first: not ready, then the newest.
            let mut surplus = current.clone();
            surplus.sort_by_key(|&i| {
                (
                    self.replicas[i].phase() == Phase::Ready,
                    std::cmp::Reverse(self.replicas[i].id),
                )
            });
            for &i in surplus.iter().take(current.len() - wanted) {
                self.replicas[i].stopping = true;
            }
        }
        let current_ready = self
            .replicas
            .iter()
            .filter(|r| !r.stopping && is_current(r) && r.phase() == Phase::Ready)
            .count();
        let replaced = current_ready >= wanted;
        for replica in &mut self.replicas {
            if !replica.stopping
                && !is_current(replica)
                && (replaced || replica.phase() != Phase::Ready)
            {
                replica.stopping = true;
            }
        }
        // Out of routing first, then the stop signal (the replica waits its drain delay).
        self.publish();
        for replica in &self.replicas {
            if replica.stopping {
                let _ = replica.stop.send(true);
            }
        }
    }

    fn publish(&self) {
        let ready: Vec<SocketAddr> = self
            .replicas
            .iter()
            .filter_map(Replica::ready_addr)
            .collect();
        let mut routed = self.routed.lock().expect("routed lock");
        if *routed != ready {
            self.router.set_endpoints(&self.subset, ready.clone());
            *routed = ready;
        }
        let mut state = self.state.lock().expect("state lock");
        *state = self
            .replicas
            .iter()
            .map(|r| {
                let mut s = r.shared.lock().expect("replica lock").clone();
                if r.stopping {
                    s.phase = Phase::Stopping;
                }
                s
            })
            .collect();
    }

    fn start(&mut self, version: &str, template: WorkloadTemplate) {
        let id = {
            let mut next = self.next_id.lock().expect("id lock");
            *next += 1;
            *next
        };
        let shared = Arc::new(Mutex::new(ReplicaStatus {
            id,
            version: version.to_owned(),
            phase: Phase::Starting,
            port: None,
            pid: None,
            restarts: 0,
            last_exit: None,
        }));
        let (stop, stop_rx) = watch::channel(false);
        let runner = ReplicaRunner {
            version: version.to_owned(),
            template: template.clone(),
            shared: shared.clone(),
            notify: self.notify.clone(),
            spawner: self.spawner.clone(),
        };
        let task = tokio::spawn(runner.run(stop_rx));
        self.replicas.push(Replica {
            id,
            version: version.to_owned(),
            template,
            shared,
            stop,
            stopping: false,
            task,
        });
    }
}
