//! A cluster that does not run what was decided for it: repaired (its desired state given
//! again, the cluster held until it matches) during a rollout; outside one, drift from what Git
//! says, reported once it lasts and corrected when configured to.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flotilla_core::analysis::Millis;
use flotilla_core::backend::{ClusterObserved, image_version};
use flotilla_core::fleet::{ClusterStatus, FleetPhase};
use flotilla_core::rollout::RolloutState;

use super::{FleetController, TickOutput};
use crate::controller::record::{AuditEntry, AuditKind};

/// How long a cluster must run a version Git does not say before it is reported as drift
/// (a promotion's observations lag its actions by a tick or two).
const DRIFT_AFTER: Duration = Duration::from_secs(3);
/// How often a drifted cluster is corrected again while it stays drifted.
const DRIFT_RETRY: Duration = Duration::from_secs(10);

/// A cluster running a version Git does not say.
#[derive(Debug, Clone)]
pub(super) struct Drift {
    pub(super) version: String,
    pub(super) expected: String,
    since: Instant,
    pub(super) reported: bool,
    corrected_at: Option<Instant>,
}

/// How a cluster's observation differs from what its engine decided, if it does: the stable
/// subset's version, the canary's weight, the canary revision's replicas. Old revisions kept for
/// their scale-down delay are not compared (the agent's surge already replaced them).
fn divergence(
    engine: &RolloutState,
    images: &BTreeMap<String, String>,
    observed: &ClusterObserved,
) -> Option<String> {
    let stable_version = observed.serving.as_deref();
    let version = |revision| {
        engine
            .revision(revision)
            .and_then(|r| images.get(&r.hash))
            .map(|image| image_version(image))
    };
    let stable = engine.stable?;
    let want = version(stable)?;
    if stable_version != Some(want.as_str()) {
        return Some(format!(
            "its stable subset runs {}, not {want}",
            stable_version.unwrap_or("nothing")
        ));
    }
    if let (Some(want), Some(weights)) = (engine.desired_weight, observed.weights)
        && weights.canary != want
    {
        return Some(format!(
            "its canary weight is {}, not {want}",
            weights.canary
        ));
    }
    if let Some(current) = engine.current
        && current != stable
        && version(current).is_some_and(|v| v != want)
    {
        let desired = engine.desired_replicas.get(&current).copied().unwrap_or(0);
        let running = observed
            .revisions
            .get(&current)
            .map_or(0, |r| r.requested_replicas());
        if (desired > 0 && running < desired) || (desired == 0 && running > 0) {
            return Some(format!(
                "its canary ({}) has {running} replicas, not {desired}",
                version(current).unwrap_or_default()
            ));
        }
    }
    None
}

impl FleetController {
    /// Compares each cluster's fresh observation, taken after every action sent to it was
    /// carried out, with what its engine last decided; a difference is repaired by re-applying
    /// the decision (every action idempotent) and recorded, and the cluster is held until an
    /// observation matches again.
    pub(super) fn repair(
        &mut self,
        fresh: &BTreeMap<String, (Instant, ClusterObserved)>,
        now: Millis,
        out: &mut TickOutput,
    ) {
        let mut repairs = Vec::new();
        for (name, (at, observed)) in fresh {
            let Some(handle) = self.clusters.get(name) else {
                continue;
            };
            if self.record.adopting.contains(name) || !handle.quiet.settled_before(*at) {
                continue;
            }
            let Some(cluster) = self.machine.state().clusters.get(name) else {
                continue;
            };
            match divergence(&cluster.rollout, &self.images, observed) {
                Some(why) => repairs.push((name.clone(), why)),
                None => {
                    if self.repairing.remove(name) {
                        tracing::info!(fleet = %self.record.name, cluster = %name, "repaired");
                    }
                }
            }
        }
        for (name, why) in repairs {
            let state = self.machine.state();
            let status = state.clusters[&name].status;
            let message = format!(
                "{name} ({status:?}): {why}; re-applying what was decided (held until it matches)"
            );
            tracing::warn!(fleet = %self.record.name, cluster = %name, "{message}");
            out.audit.push(AuditEntry::new(
                now,
                &self.record.name,
                &state.revision,
                AuditKind::Repair,
                Some(&name),
                message,
            ));
            self.repairing.insert(name.clone());
            self.reassert_cluster(&name);
        }
    }

    /// Drift: outside a rollout, a cluster (not Held) whose stable subset runs a version other
    /// than the one its spec (Git's, its overlay's or its pin's) says. Reported once it lasts
    /// [`DRIFT_AFTER`]; corrected (its last intent re-asserted) when configured to. A Held
    /// cluster is never touched, and a correction only ever asserts the cluster's own spec, which
    /// for a rolled-back, held or pinned cluster is never the rejected revision.
    pub(super) fn check_drift(
        &mut self,
        stable: &BTreeMap<String, String>,
        now: Millis,
        out: &mut TickOutput,
    ) {
        let state = self.machine.state();
        let settled = matches!(
            state.phase,
            FleetPhase::Completed | FleetPhase::Halted | FleetPhase::Aborted
        );
        let mut seen = Vec::new();
        for (name, cluster) in &state.clusters {
            let eligible = settled
                && matches!(
                    cluster.status,
                    ClusterStatus::Validated
                        | ClusterStatus::RolledBack
                        | ClusterStatus::Pinned
                        | ClusterStatus::NotStarted
                );
            let expected = cluster
                .rollout
                .stable
                .and_then(|s| cluster.rollout.revision(s))
                .and_then(|r| self.version_of(&r.hash));
            match (eligible, expected, stable.get(name)) {
                (true, Some(expected), Some(running)) if *running != expected => {
                    seen.push((name.clone(), running.clone(), expected.clone()));
                }
                _ => {}
            }
        }
        let fleet = self.record.name.clone();
        let revision = state.revision.clone();
        let entry = |cluster: &str, message: String| {
            AuditEntry::new(
                now,
                &fleet,
                &revision,
                AuditKind::Drift,
                Some(cluster),
                message,
            )
        };
        let drifting: Vec<String> = seen.iter().map(|(n, _, _)| n.clone()).collect();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.drift)
            .into_iter()
            .partition(|(n, _)| !drifting.contains(n));
        self.drift = kept.into_iter().collect();
        for (name, gone) in gone {
            if gone.reported {
                out.audit.push(entry(
                    &name,
                    format!("{name}: runs {} again, as Git says", gone.expected),
                ));
            }
        }
        let mut correct = Vec::new();
        for (name, running, expected) in seen {
            let drift = self.drift.entry(name.clone()).or_insert_with(|| Drift {
                version: running.clone(),
                expected: expected.clone(),
                since: Instant::now(),
                reported: false,
                corrected_at: None,
            });
            if drift.version != running || drift.expected != expected {
                *drift = Drift {
                    version: running.clone(),
                    expected: expected.clone(),
                    since: Instant::now(),
                    reported: false,
                    corrected_at: None,
                };
            }
            if drift.since.elapsed() < DRIFT_AFTER {
                continue;
            }
            if !drift.reported {
                drift.reported = true;
                let what = if self.correct_drift {
                    "correcting it"
                } else {
                    "reported only (set git.correctDrift: true to correct it)"
                };
                let message = format!("{name}: drift: runs {running}, Git says {expected}; {what}");
                tracing::warn!(fleet = %fleet, cluster = %name, "{message}");
                out.audit.push(entry(&name, message));
            }
            if self.correct_drift
                && drift
                    .corrected_at
                    .is_none_or(|at| at.elapsed() >= DRIFT_RETRY)
            {
                drift.corrected_at = Some(Instant::now());
                correct.push(name);
            }
        }
        for name in correct {
            self.reassert_cluster(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::backend::ObservedRevision;
    use flotilla_core::rollout::{ReplicaCounts, Revision};

    /// A canary of 2 (hash `b`, 2.0) over a stable 1 (hash `a`, 1.0), asked for 2 replicas.
    fn engine() -> (RolloutState, BTreeMap<String, String>) {
        let state = RolloutState {
            revisions: vec![
                Revision {
                    number: 1,
                    hash: "a".into(),
                },
                Revision {
                    number: 2,
                    hash: "b".into(),
                },
            ],
            stable: Some(1),
            current: Some(2),
            desired_replicas: [(1, 2), (2, 2)].into_iter().collect(),
            ..Default::default()
        };
        let images = [("a", "app:1.0"), ("b", "app:2.0")]
            .into_iter()
            .map(|(h, i)| (h.to_owned(), i.to_owned()))
            .collect();
        (state, images)
    }

    fn observed(canary_exists: i32, requested: Option<i32>) -> ClusterObserved {
        let revision = |identity: &str, replicas: i32, requested: Option<i32>| ObservedRevision {
            identity: identity.into(),
            counts: ReplicaCounts {
                replicas,
                ready: replicas,
                available: replicas,
            },
            requested,
        };
        ClusterObserved {
            revisions: [
                (1, revision("a", 2, Some(2))),
                (2, revision("b", canary_exists, requested)),
            ]
            .into_iter()
            .collect(),
            serving: Some("1.0".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_canary_asked_for_its_replicas_is_not_repaired_while_its_pods_are_made() {
        let (engine, images) = engine();
        // Kubernetes: the ReplicaSet says 2, its Pods are still being scheduled.
        assert_eq!(divergence(&engine, &images, &observed(0, Some(2))), None);
        // The ReplicaSet was scaled back by someone: repaired.
        assert_eq!(
            divergence(&engine, &images, &observed(2, Some(1))).as_deref(),
            Some("its canary (2.0) has 1 replicas, not 2")
        );
        // A backend that makes them as asked (the agent): the count that exists.
        assert_eq!(
            divergence(&engine, &images, &observed(0, None)).as_deref(),
            Some("its canary (2.0) has 0 replicas, not 2")
        );
        assert_eq!(divergence(&engine, &images, &observed(2, None)), None);
    }
}
