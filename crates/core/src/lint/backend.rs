//! The rule that a Rollout needs nothing its clusters' backends lack: for each FleetRollout, each
//! capability its Rollout needs (a traffic provider, header routes with several conditions, mirror
//! routes on a method) that a target cluster's backend does not have, located at the Rollout's
//! field. Runs only when the caller says what each cluster's backend can do.

use super::{Index, Sink};
use crate::backend::missing;
use crate::spec::fleet::Cluster;

/// What a cluster's backend can do (None: unknown, nothing is checked).
pub type CapabilitiesOf = fn(&Cluster) -> Option<crate::backend::Capabilities>;

pub(super) fn check(index: &Index<'_>, sink: &mut Sink, capabilities_of: CapabilitiesOf) {
    for (_, fleet_rollout) in &index.fleet_rollouts {
        let spec = &fleet_rollout.spec;
        let (Some((_, fleet)), Some((loaded, rollout))) = (
            index.fleets.get(spec.fleet.as_str()),
            index.rollouts.get(spec.rollout.as_str()),
        ) else {
            continue;
        };
        let targets: std::collections::BTreeSet<String> = fleet_rollout
            .waves(&fleet.spec.clusters)
            .into_values()
            .flatten()
            .collect();
        for cluster in fleet
            .spec
            .clusters
            .iter()
            .filter(|c| targets.contains(&c.name))
        {
            let Some(capabilities) = capabilities_of(cluster) else {
                continue;
            };
            for lack in missing(rollout, &capabilities) {
                sink.error(
                    loaded,
                    "backend/capability",
                    lack.path.clone(),
                    format!(
                        "cluster {:?} ({}) lacks {}: FleetRollout {:?} cannot run this Rollout there",
                        cluster.name,
                        capabilities.backend,
                        lack.capability,
                        fleet_rollout.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            }
        }
    }
}
