//! Per-cluster overlays in the machine: the overlaid specs of the revision in flight, the pins
//! that hold a cluster to an image, and the spec each cluster runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{FleetMachine, Overlaid, shared};
use crate::fleet::event::Decision;
use crate::fleet::overlay::ClusterOverlay;
use crate::fleet::state::{ClusterStatus, FleetPhase};
use crate::fleet::tick::Revisions;
use crate::spec::rollout::Rollout;
use crate::time::Millis;

impl FleetMachine {
    /// Sets the per-cluster overlays (clusters not in the plan are ignored). A cluster whose
    /// overlay holds it to an image (its own `image`, or a pin of the current revision) is
    /// `Pinned` from the next tick and runs that image; args and env apply to both the previous
    /// and the new spec of the cluster.
    pub fn set_overlays(&mut self, overlays: BTreeMap<String, ClusterOverlay>) {
        if overlays != self.overlays {
            self.overlays = overlays;
            self.overlaid_for = None;
        }
    }

    /// The overlays in effect.
    pub fn overlays(&self) -> &BTreeMap<String, ClusterOverlay> {
        &self.overlays
    }

    /// Derives the overlaid clusters' specs for these revisions (once per revision pair).
    pub(super) fn prepare_overlays(&mut self, revisions: &Revisions<'_>) {
        if self
            .overlaid_for
            .as_ref()
            .is_some_and(|(p, n)| *p == self.hashes.0 && *n == self.hashes.1)
        {
            return;
        }
        self.overlaid.clear();
        for (name, overlay) in &self.overlays {
            if !self.state.clusters.contains_key(name) {
                continue;
            }
            let previous = shared(overlay.apply(revisions.previous, None));
            let next = shared(overlay.apply(revisions.next, None));
            // A pinned cluster stays on what it ran before the revision its pin rejects: the
            // previous spec (with the pin's image), never the rejected spec with an old image,
            // which would carry the rest of the rejected change (env, args, resources) along.
            let pinned = overlay
                .pinned_image(&self.state.revision)
                .map(|image| shared(overlay.apply(revisions.previous, Some(image))));
            for (hash, spec) in [Some(&previous), Some(&next), pinned.as_ref()]
                .into_iter()
                .flatten()
            {
                self.known
                    .insert(hash.to_string(), (hash.clone(), spec.clone()));
            }
            self.overlaid.insert(
                name.clone(),
                Overlaid {
                    previous,
                    next,
                    pinned,
                },
            );
        }
        self.overlaid_for = Some((self.hashes.0.clone(), self.hashes.1.clone()));
    }

    /// Clusters held to an image become `Pinned` (unless mid-update); a lifted pin returns a
    /// cluster to the fleet (`Held` while the fleet is halted or aborted).
    pub(super) fn apply_pins(&mut self, now: Millis) {
        let halted = matches!(self.state.phase, FleetPhase::Halted | FleetPhase::Aborted);
        for (name, cluster) in self.state.clusters.iter_mut() {
            let pinned = self.overlaid.get(name).and_then(|o| o.pinned.as_ref());
            match (pinned, cluster.status) {
                (Some(_), ClusterStatus::NotStarted | ClusterStatus::Held) => {
                    let overlay = &self.overlays[name];
                    cluster.status = ClusterStatus::Pinned;
                    cluster.on_new_spec = false;
                    cluster.decided_at = Some(now);
                    cluster.reason = match (&overlay.image, &overlay.pin) {
                        (Some(image), _) => format!("pinned to {image} by its overlay"),
                        (None, Some(pin)) => format!(
                            "pinned to {} by the controller: revision {} is rejected here",
                            pin.image, pin.rejects
                        ),
                        (None, None) => "pinned".into(),
                    };
                    self.events.push(
                        Some(now),
                        Some(name),
                        Decision::Pinned,
                        format!("{name}: {}", cluster.reason),
                    );
                }
                (None, ClusterStatus::Pinned) => {
                    cluster.decided_at = None;
                    if halted {
                        cluster.status = ClusterStatus::Held;
                        cluster.reason =
                            "held: its pin was lifted while the fleet is halted".into();
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Held,
                            format!("{name}: {}", cluster.reason),
                        );
                    } else {
                        cluster.status = ClusterStatus::NotStarted;
                        cluster.reason = "its pin was lifted".into();
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Reset,
                            format!("{name}: its pin was lifted; waits for its wave"),
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The spec a cluster runs now (its overlay, pin or baseline applied).
    pub fn cluster_spec(&self, name: &str, revisions: &Revisions<'_>) -> Option<Rollout> {
        self.state.clusters.get(name)?;
        Some(self.spec_for(name, revisions).0.clone())
    }

    /// Every spec the machine may run on some cluster (baselines and overlaid specs), by
    /// pod-template hash.
    pub fn known_specs(&self) -> impl Iterator<Item = (&str, &Rollout)> {
        self.known
            .iter()
            .map(|(h, (_, spec))| (h.as_str(), &**spec))
    }

    /// The new revision's pod-template hash for a cluster (its overlay applied).
    pub(super) fn next_hash_of(&self, name: &str) -> Arc<str> {
        self.overlaid
            .get(name)
            .map_or_else(|| self.hashes.1.clone(), |o| o.next.0.clone())
    }

    /// The previous revision's pod-template hash for a cluster (its overlay applied).
    pub(super) fn previous_hash_of(&self, name: &str) -> Arc<str> {
        self.overlaid
            .get(name)
            .map_or_else(|| self.hashes.0.clone(), |o| o.previous.0.clone())
    }
}
