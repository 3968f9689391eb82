//! The durable change Git needs after a failure (a revert of the fleet, or pins of the failed
//! clusters), and its recording once committed.

use std::collections::BTreeSet;

use super::FleetMachine;
use crate::fleet::event::{Decision, DurableChange, DurableEdit, FailedCluster};
use crate::fleet::specs::FleetSpecs;
use crate::fleet::state::{ClusterState, ClusterStatus, FleetPhase};

impl FleetMachine {
    /// The durable change Git needs for the fleet revision in flight, if one:
    /// - the fleet halted and no cluster was validated on it: the whole fleet's image returns to
    ///   the previous one (a revert);
    /// - some clusters were validated and others failed (the fleet halted, or completed within
    ///   its failure budget): a pin of exactly the failed clusters, naming the revision.
    ///
    /// `committed` is the revision a change was committed for, and `pinned` the clusters pinned
    /// then: a revert is never made twice, and after a commit only clusters that failed since (a
    /// retry) still need a pin.
    pub fn durable_change(
        &self,
        specs: &FleetSpecs,
        committed: Option<&str>,
        pinned: &BTreeSet<String>,
    ) -> Option<DurableChange> {
        let state = &self.state;
        if !matches!(state.phase, FleetPhase::Halted | FleetPhase::Completed) {
            return None;
        }
        let already = committed == Some(state.revision.as_str());
        let validated: Vec<String> = state
            .clusters
            .iter()
            .filter(|(_, c)| c.status == ClusterStatus::Validated)
            .map(|(n, _)| n.clone())
            .collect();
        let failed: Vec<(&String, &ClusterState)> = state
            .clusters
            .iter()
            .filter(|(n, c)| {
                c.status == ClusterStatus::RolledBack
                    && state
                        .rejections
                        .contains(&((*n).clone(), state.revision.clone()))
                    && !(already && pinned.contains(*n))
            })
            .collect();
        if already && (validated.is_empty() || failed.is_empty()) {
            return None;
        }
        let bad_image = specs.next.first_image().unwrap_or_default().to_owned();
        let good_image = specs.previous.first_image().unwrap_or_default().to_owned();
        if bad_image == good_image || bad_image.is_empty() || good_image.is_empty() {
            return None;
        }
        let edit = if validated.is_empty() {
            if state.phase != FleetPhase::Halted {
                return None;
            }
            DurableEdit::Revert
        } else {
            if failed.is_empty() {
                return None;
            }
            DurableEdit::Pin
        };
        let revisions = specs.revisions();
        let failed = failed
            .into_iter()
            .map(|(name, c)| {
                // Each failed cluster stays on what it runs now: its previous (or baseline)
                // image.
                let mut image = self
                    .cluster_spec(name, &revisions)
                    .and_then(|s| s.first_image().map(str::to_owned))
                    .unwrap_or_default();
                if image.is_empty() || image == bad_image {
                    image = good_image.clone();
                }
                FailedCluster {
                    name: name.clone(),
                    image,
                    failure: c.failure.clone(),
                    reason: match &c.failure {
                        Some(f) => {
                            format!("{name}: metric {} = {} ({})", f.metric, f.value, f.message)
                        }
                        None => format!("{name}: {}", c.reason),
                    },
                }
            })
            .collect();
        Some(DurableChange {
            revision: state.revision.clone(),
            edit,
            bad_image,
            good_image,
            failed,
            validated,
        })
    }

    /// A durable change reached Git (the daemon committed it; the simulator takes it as
    /// committed): a [`Decision::DurableChange`].
    pub fn record_durable(&mut self, change: &DurableChange) {
        let names: Vec<&str> = change.failed.iter().map(|f| f.name.as_str()).collect();
        let message = match change.edit {
            DurableEdit::Revert => format!(
                "durable rollback: the fleet returns to {} in Git (revision {} rejected)",
                change.good_image, change.revision
            ),
            DurableEdit::Pin => format!(
                "durable rollback: {} pinned in Git (revision {} rejected there only)",
                names.join(", "),
                change.revision
            ),
        };
        self.events.push(
            None,
            None,
            Decision::DurableChange {
                change: change.clone(),
            },
            message,
        );
    }
}
