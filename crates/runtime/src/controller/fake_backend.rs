//! A fake cluster backend for the runtime's unit tests only (end-to-end tests drive real
//! agents): it converges to each accepted desired state after a configurable delay, and can be
//! told to answer conflicts, to be unreachable, to refuse writes as forbidden, and to send
//! operator commands, as a lagging Kubernetes cluster with other writers would. It proves the
//! seam: it plugs into the fleet controller through [`super::backends::Backends::with`] alone.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_core::analysis::{MeasureRequest, Outcome};
use flotilla_core::backend::{
    BackendError, BoxFuture, Capabilities, ClusterBackend, ClusterCommand, ClusterDesired,
    ClusterObserved, ObservedRevision, capabilities::TrafficProviders, image_version,
};
use flotilla_core::rollout::{ReplicaCounts, Weights};

/// What the fake does, and what it was asked.
#[derive(Debug, Default)]
pub struct FakeState {
    /// How long an accepted desired state takes to show in observations.
    pub delay: Duration,
    /// The next this-many ensures answer Conflict.
    pub conflicts: u32,
    /// Ensures and observations fail as unreachable.
    pub unreachable: bool,
    /// Ensures are refused as forbidden: (verb, resource).
    pub forbidden: Option<(String, String)>,
    /// Commands the cluster sends at the next poll.
    pub commands: Vec<ClusterCommand>,
    /// Every ensure call, and whether it was accepted.
    pub ensures: Vec<(Instant, bool, ClusterDesired)>,
    /// The version running before any desired state, and its replicas.
    pub initial: Option<(String, u32)>,
    /// The Rollout the cluster holds, reported by every observation (as a Kubernetes cluster
    /// whose spec Argo CD owns reports it: `rolloutSource: cluster`).
    pub held: Option<serde_json::Value>,
}

impl FakeState {
    /// The latest accepted desired state old enough to show, if any.
    fn effective(&self, now: Instant) -> Option<&ClusterDesired> {
        self.ensures
            .iter()
            .rev()
            .find(|(at, accepted, _)| *accepted && now.duration_since(*at) >= self.delay)
            .map(|(_, _, desired)| desired)
    }

    /// When the first accepted desired state with `canary` weight was accepted.
    pub fn accepted_weight_at(&self, canary: i32) -> Option<Instant> {
        self.ensures
            .iter()
            .find(|(_, accepted, d)| *accepted && d.weights.is_some_and(|w| w.canary == canary))
            .map(|(at, _, _)| *at)
    }
}

/// The fake backend.
#[derive(Debug, Default)]
pub struct FakeBackend {
    /// Its state, for the test to steer and inspect.
    pub state: Mutex<FakeState>,
}

impl FakeBackend {
    /// A cluster running `version` with `replicas`, whose changes show after `delay`.
    pub fn new(version: &str, replicas: u32, delay: Duration) -> FakeBackend {
        FakeBackend {
            state: Mutex::new(FakeState {
                delay,
                initial: Some((version.to_owned(), replicas)),
                ..FakeState::default()
            }),
        }
    }

    fn answer(&self, desired: &ClusterDesired) -> Result<(), BackendError> {
        let mut state = self.state.lock().expect("fake lock");
        let refusal = if state.unreachable {
            Some(BackendError::Unreachable {
                message: "connection refused".into(),
            })
        } else if let Some((verb, resource)) = state.forbidden.clone() {
            Some(BackendError::Forbidden {
                verb,
                resource,
                message: "the service account lacks the permission".into(),
            })
        } else if state.conflicts > 0 {
            state.conflicts -= 1;
            Some(BackendError::Conflict {
                message:
                    "the object has been modified; please apply your changes to the latest version"
                        .into(),
            })
        } else {
            None
        };
        state
            .ensures
            .push((Instant::now(), refusal.is_none(), desired.clone()));
        refusal.map_or(Ok(()), Err)
    }

    fn read(&self, desired: &ClusterDesired) -> Result<ClusterObserved, BackendError> {
        let state = self.state.lock().expect("fake lock");
        if state.unreachable {
            return Err(BackendError::Unreachable {
                message: "connection refused".into(),
            });
        }
        // What runs: version → replicas, and the weights.
        let mut running: BTreeMap<String, i32> = BTreeMap::new();
        let (mut serving, mut weights) = (
            None,
            Weights {
                canary: 0,
                stable: 100,
            },
        );
        match state.effective(Instant::now()) {
            Some(effective) => {
                if let Some(revision) = effective.serving.and_then(|s| effective.revisions.get(&s))
                {
                    let version = image_version(&revision.image);
                    serving = Some(version.clone());
                    *running.entry(version).or_default() += revision.replicas.unwrap_or(0);
                }
                if let Some(revision) = effective.canary().and_then(|c| effective.revisions.get(&c))
                {
                    *running.entry(image_version(&revision.image)).or_default() +=
                        revision.replicas.unwrap_or(0);
                }
                if let Some(w) = effective.weights {
                    weights = w;
                }
            }
            None => {
                if let Some((version, replicas)) = &state.initial {
                    serving = Some(version.clone());
                    running.insert(version.clone(), *replicas as i32);
                }
            }
        }
        let revisions = desired
            .revisions
            .iter()
            .map(|(number, revision)| {
                let version = image_version(&revision.image);
                let n = running.get(&version).copied().unwrap_or(0);
                (
                    *number,
                    ObservedRevision {
                        identity: version,
                        counts: ReplicaCounts {
                            replicas: n,
                            ready: n,
                            available: n,
                        },
                        requested: None,
                    },
                )
            })
            .collect();
        Ok(ClusterObserved {
            revisions,
            weights: Some(weights),
            serving,
            rollout: state.held.clone(),
            spec_replicas: None,
            secrets: Default::default(),
        })
    }
}

impl ClusterBackend for FakeBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backend: "fake".into(),
            traffic: TrafficProviders::Any,
            header_route_matches: 1,
            mirroring: false,
            mirror_headers: 0,
            mirror_method_path: false,
            mirror_alternatives: 1,
            mirror_providers: Vec::new(),
            templates: false,
        }
    }

    fn ensure<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { self.answer(desired) })
    }

    fn observe<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<ClusterObserved, BackendError>> {
        Box::pin(async move { self.read(desired) })
    }

    fn commands(&self) -> BoxFuture<'_, Result<Vec<ClusterCommand>, BackendError>> {
        Box::pin(async move {
            Ok(std::mem::take(
                &mut self.state.lock().expect("fake lock").commands,
            ))
        })
    }

    fn measure_builtin<'a>(&'a self, _request: &'a MeasureRequest) -> BoxFuture<'a, Outcome> {
        Box::pin(async { Outcome::Error("the fake backend keeps no traffic statistics".into()) })
    }
}
