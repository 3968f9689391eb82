//! The Fleet's clusters changing under a running fleet (a spoke Secret added to or removed from a
//! hub, a cluster added to or removed from the Fleet's manifest): the machine re-planned with the
//! core's `replan`, a cluster that joined given its backend and adopted from what it runs (as
//! at a first start), one whose entry changed given a new backend, and one that left dropped,
//! with `ClusterRemovedMidRollout`, its status and last known weights in the audit log when it
//! left in flight.

use flotilla_core::analysis::Millis;
use flotilla_core::fleet::{ClusterStatus, FleetPlan};

use super::cluster::ClusterHandle;
use super::{Desired, FleetController, FleetError, Wiring};
use crate::controller::record::AuditEntry;

impl FleetController {
    /// Whether `desired`'s Fleet is not the one this fleet runs with (its clusters, their
    /// labels or endpoints). Asked before [`FleetController::sync`] takes `desired`.
    pub fn fleet_changed(&self, desired: &Desired) -> bool {
        self.record
            .desired
            .as_ref()
            .is_none_or(|d| d.fleet != desired.fleet)
    }

    /// What re-planning the fleet over `desired`'s clusters from `before` (the Fleet it ran
    /// with) takes, made before anything changes: refused when a joining cluster's backend
    /// cannot be made or cannot drive the Rollout. [`FleetController::apply_replan`] carries it
    /// out.
    pub fn prepare_replan(
        &self,
        before: &flotilla_core::spec::fleet::Fleet,
        desired: &Desired,
        wiring: &Wiring,
    ) -> Result<Replan, FleetError> {
        let mut plan =
            FleetPlan::resolve(&desired.fleet, &desired.fleet_rollout, &desired.templates)
                .map_err(|e| FleetError(e.0))?;
        plan.secrets = desired.secrets.clone();
        let target = crate::controller::backends::Target {
            rollout: desired.fleet_rollout.spec.rollout.clone(),
            rollout_source: desired.fleet_rollout.spec.rollout_source,
        };
        // The backends of the clusters that joined or whose entry changed.
        let mut made = Vec::new();
        for cluster in &desired.fleet.spec.clusters {
            if !plan.clusters.contains_key(&cluster.name) {
                continue;
            }
            let same = before.spec.clusters.iter().any(|c| c == cluster);
            if same && self.clusters.contains_key(&cluster.name) {
                continue;
            }
            let backend = super::connect(wiring, cluster, &target, &desired.rollout)?;
            let in_cluster = crate::controller::backends::spec_in_cluster(cluster, &target);
            made.push((cluster.name.clone(), backend, in_cluster));
        }
        Ok(Replan {
            plan,
            made,
            tick: wiring.tick,
        })
    }

    /// Re-plans the fleet as [`FleetController::prepare_replan`] made ready: what a restart
    /// would do, without one. Cannot fail.
    pub fn apply_replan(&mut self, replan: Replan, now: Millis) -> Vec<AuditEntry> {
        let Replan {
            mut plan,
            made,
            tick,
        } = replan;
        plan.cluster_secrets = self.machine.plan().cluster_secrets.clone();
        plan.cluster_secrets
            .retain(|name, _| plan.clusters.contains_key(name));
        let mut audit = Vec::new();
        let left: Vec<String> = self
            .clusters
            .keys()
            .filter(|name| !plan.clusters.contains_key(*name))
            .cloned()
            .collect();
        for name in &left {
            let status = self
                .machine
                .state()
                .clusters
                .get(name)
                .map(|c| c.status)
                .unwrap_or_default();
            let weights = self.observed.get(name).and_then(|(_, w)| *w);
            let in_flight = matches!(status, ClusterStatus::Progressing | ClusterStatus::Paused);
            let weights = weights.map_or_else(
                || "no weight read".to_owned(),
                |(canary, stable)| format!("last weights canary {canary}, stable {stable}"),
            );
            let message = if in_flight {
                format!(
                    "ClusterRemovedMidRollout: cluster {name} left the fleet while {status:?} ({weights}); it is no longer driven"
                )
            } else {
                format!("cluster {name} left the fleet ({status:?}, {weights})")
            };
            tracing::warn!(fleet = %self.record.name, "{message}");
            audit.push(self.sync_entry(now, message));
            self.clusters.remove(name);
            self.observed.remove(name);
            self.refused.remove(name);
            self.repairing.remove(name);
            self.drift.remove(name);
            self.held_specs.remove(name);
            self.spec_sources.remove(name);
            self.record.adopting.remove(name);
        }
        for (name, backend, in_cluster) in made {
            let joined = !self.clusters.contains_key(&name);
            if in_cluster {
                self.spec_sources.insert(name.clone());
            } else {
                self.spec_sources.remove(&name);
            }
            self.observed.remove(&name);
            self.refused.remove(&name);
            self.clusters.insert(
                name.clone(),
                ClusterHandle::spawn(name.clone(), backend, tick),
            );
            if joined {
                self.record.adopting.insert(name.clone());
                audit.push(self.sync_entry(
                    now,
                    format!(
                        "cluster {name} joined the fleet: adopted from what it runs; its wave takes it through the fleet's revision"
                    ),
                ));
            } else {
                audit.push(self.sync_entry(
                    now,
                    format!("cluster {name}: its Fleet entry changed; reached anew"),
                ));
            }
        }
        self.machine.replan(plan);
        self.record.state = self.machine.state().clone();
        audit
    }
}

/// A re-plan made ready by [`FleetController::prepare_replan`]: the plan over the new Fleet and
/// the backends of the clusters that joined or whose entry changed (name, backend, whether its
/// Rollout spec is owned in the cluster).
pub struct Replan {
    plan: FleetPlan,
    made: Vec<(
        String,
        std::sync::Arc<dyn flotilla_core::backend::ClusterBackend>,
        bool,
    )>,
    /// The clusters' reconcile interval.
    tick: std::time::Duration,
}
