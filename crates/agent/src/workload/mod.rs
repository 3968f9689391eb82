//! Process workloads: each subset runs N replicas of its revision as local processes.
//!
//! A replica gets its own free loopback port, runs the command template in its own process
//! group, and joins routing once its HTTP readiness probe passes. A replica that exits is taken
//! out of routing at once and restarted with exponential backoff. Scaling down or replacing a
//! version takes a replica out of routing first, waits the drain delay, then sends SIGTERM to its
//! group and SIGKILL after the grace period. A new version surges: the old replicas keep serving
//! until as many new ones are ready.
//!
//! Children die with the agent: they are started through `setpriv --pdeathsig KILL` from one
//! long-lived spawner thread (the parent-death signal follows the thread that forked), their
//! groups are killed when their handles drop, and a clean shutdown stops them gracefully.
//!
//! [`Workloads`] holds every subset; each subset run as processes has a supervisor (one task)
//! that reconciles its replicas, each replica a runner (one task) that starts, probes and stops
//! its process, every process started by the spawner thread.

mod replica;
mod spawner;
mod supervisor;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use flotilla_agent_backend::wire::{Phase, ReplicaStatus, SubsetStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::check_version;
use crate::router::Router;
use spawner::Spawner;
use supervisor::Supervisor;

pub use supervisor::Desired;

/// Why a workload change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The subset does not exist.
    #[error("unknown subset {subset:?}; the subsets are {known}")]
    UnknownSubset {
        /// What was asked.
        subset: String,
        /// The subsets there are.
        known: String,
    },
    /// The subset routes to fixed endpoints.
    #[error("subset {0:?} routes to fixed endpoints; it has no processes to scale")]
    FixedEndpoints(String),
    /// The subset has no workload template.
    #[error("subset {0:?} has no workload template (set workload in the agent configuration)")]
    NoTemplate(String),
    /// Replicas without a version.
    #[error("a version is required to run replicas")]
    NoVersion,
    /// A version outside the allowed characters or length.
    #[error("{0}")]
    InvalidVersion(String),
}

/// The workloads of every subset.
pub struct Workloads {
    router: Arc<Router>,
    spawner: Arc<Spawner>,
    subsets: Mutex<BTreeMap<String, SubsetHandle>>,
    next_id: Arc<Mutex<u64>>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads").finish_non_exhaustive()
    }
}

enum SubsetHandle {
    Fixed(Vec<SocketAddr>),
    Processes {
        desired: watch::Sender<Desired>,
        shutdown: watch::Sender<bool>,
        state: Arc<Mutex<Vec<ReplicaStatus>>>,
        routed: Arc<Mutex<Vec<SocketAddr>>>,
        task: JoinHandle<()>,
    },
}

impl Workloads {
    /// Workloads that publish ready endpoints to `router`. Must be called inside a tokio
    /// runtime.
    pub fn new(router: Arc<Router>) -> Workloads {
        Workloads {
            router,
            spawner: Arc::new(Spawner::start()),
            subsets: Mutex::new(BTreeMap::new()),
            next_id: Arc::new(Mutex::new(0)),
        }
    }

    /// Makes a subset route to fixed endpoints (stopping its processes, if it had any).
    pub fn set_fixed(&self, subset: &str, endpoints: Vec<SocketAddr>) {
        let mut subsets = self.subsets.lock().expect("workloads lock");
        if let Some(SubsetHandle::Processes {
            desired, shutdown, ..
        }) = subsets.get(subset)
        {
            desired.send_modify(|d| d.replicas = 0);
            let _ = shutdown.send(true);
        }
        self.router.set_endpoints(subset, endpoints.clone());
        subsets.insert(subset.to_owned(), SubsetHandle::Fixed(endpoints));
    }

    /// Sets what a subset runs, starting its supervisor when it has none.
    pub fn set_desired(&self, subset: &str, want: Desired) -> Result<(), WorkloadError> {
        if !self.router.has_subset(subset) {
            return Err(WorkloadError::UnknownSubset {
                subset: subset.to_owned(),
                known: self.router.subsets().join(", "),
            });
        }
        if want.replicas > 0 {
            if want.template.is_none() {
                return Err(WorkloadError::NoTemplate(subset.to_owned()));
            }
            if want.version.trim().is_empty() {
                return Err(WorkloadError::NoVersion);
            }
        }
        // It becomes a replica's command line: nothing a process cannot take.
        if !want.version.is_empty() {
            check_version(&want.version).map_err(WorkloadError::InvalidVersion)?;
        }
        let mut subsets = self.subsets.lock().expect("workloads lock");
        match subsets.get(subset) {
            Some(SubsetHandle::Processes { desired, .. }) => {
                desired.send_replace(want);
            }
            _ => {
                let (desired, desired_rx) = watch::channel(want);
                let (shutdown, shutdown_rx) = watch::channel(false);
                let state = Arc::new(Mutex::new(Vec::new()));
                let routed = Arc::new(Mutex::new(Vec::new()));
                let supervisor = Supervisor::new(
                    subset.to_owned(),
                    self.router.clone(),
                    self.spawner.clone(),
                    self.next_id.clone(),
                    state.clone(),
                    routed.clone(),
                );
                let task = tokio::spawn(supervisor.run(desired_rx, shutdown_rx));
                subsets.insert(
                    subset.to_owned(),
                    SubsetHandle::Processes {
                        desired,
                        shutdown,
                        state,
                        routed,
                        task,
                    },
                );
            }
        }
        Ok(())
    }

    /// Scales a subset to `replicas` of `version`, keeping its template.
    pub fn scale(&self, subset: &str, version: &str, replicas: u32) -> Result<(), WorkloadError> {
        let template = {
            let subsets = self.subsets.lock().expect("workloads lock");
            match subsets.get(subset) {
                Some(SubsetHandle::Fixed(_)) => {
                    return Err(WorkloadError::FixedEndpoints(subset.to_owned()));
                }
                Some(SubsetHandle::Processes { desired, .. }) => desired.borrow().template.clone(),
                None => None,
            }
        };
        self.set_desired(
            subset,
            Desired {
                version: version.to_owned(),
                replicas,
                template,
            },
        )
    }

    /// The desired state of a subset run as processes.
    pub fn desired(&self, subset: &str) -> Option<Desired> {
        match self.subsets.lock().expect("workloads lock").get(subset) {
            Some(SubsetHandle::Processes { desired, .. }) => Some(desired.borrow().clone()),
            _ => None,
        }
    }

    /// The state of a subset.
    pub fn status(&self, subset: &str) -> Result<SubsetStatus, WorkloadError> {
        if !self.router.has_subset(subset) {
            return Err(WorkloadError::UnknownSubset {
                subset: subset.to_owned(),
                known: self.router.subsets().join(", "),
            });
        }
        let subsets = self.subsets.lock().expect("workloads lock");
        let endpoints: Vec<String> = self
            .router
            .ready_endpoints(subset)
            .iter()
            .map(ToString::to_string)
            .collect();
        Ok(match subsets.get(subset) {
            Some(SubsetHandle::Fixed(fixed)) => SubsetStatus {
                subset: subset.to_owned(),
                version: String::new(),
                desired_replicas: fixed.len() as u32,
                ready_replicas: endpoints.len() as u32,
                available_replicas: endpoints.len() as u32,
                updated_replicas: fixed.len() as u32,
                endpoints,
                fixed_endpoints: true,
                replicas: Vec::new(),
            },
            Some(SubsetHandle::Processes { desired, state, .. }) => {
                let desired = desired.borrow().clone();
                let replicas = state.lock().expect("state lock").clone();
                let current =
                    |r: &&ReplicaStatus| r.version == desired.version && r.phase != Phase::Stopping;
                SubsetStatus {
                    subset: subset.to_owned(),
                    version: desired.version.clone(),
                    desired_replicas: desired.replicas,
                    ready_replicas: endpoints.len() as u32,
                    available_replicas: replicas
                        .iter()
                        .filter(current)
                        .filter(|r| r.phase == Phase::Ready)
                        .count() as u32,
                    updated_replicas: replicas.iter().filter(current).count() as u32,
                    endpoints,
                    fixed_endpoints: false,
                    replicas,
                }
            }
            None => SubsetStatus {
                subset: subset.to_owned(),
                version: String::new(),
                desired_replicas: 0,
                ready_replicas: 0,
                available_replicas: 0,
                updated_replicas: 0,
                endpoints,
                fixed_endpoints: false,
                replicas: Vec::new(),
            },
        })
    }

    /// Stops every replica gracefully and waits until all are gone.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut subsets = self.subsets.lock().expect("workloads lock");
            std::mem::take(&mut *subsets)
                .into_values()
                .filter_map(|h| match h {
                    SubsetHandle::Processes {
                        shutdown,
                        task,
                        routed,
                        ..
                    } => {
                        let _ = shutdown.send(true);
                        drop(routed);
                        Some(task)
                    }
                    SubsetHandle::Fixed(_) => None,
                })
                .collect()
        };
        for task in tasks {
            let _ = task.await;
        }
    }
}
