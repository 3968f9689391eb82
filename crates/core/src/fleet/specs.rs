//! The specs a fleet has run: the revision in flight, the one it replaces, and the history that
//! `undo` returns to and baselines name.

use serde::{Deserialize, Serialize};

use super::tick::Revisions;
use crate::rollout;
use crate::spec::rollout::Rollout;

/// The specs a fleet has run: the fleet revision's Rollout, the one it replaces, and earlier
/// ones (what `undo` returns to, what baselines name). The daemon persists them; the simulator
/// keeps them in memory; both change them only through `FleetMachine::change_spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSpecs {
    /// The Rollout clusters ran before this fleet revision.
    pub previous: Rollout,
    /// The Rollout of this fleet revision (the desired state).
    pub next: Rollout,
    /// Earlier revisions' specs, oldest first, once per pod template: as many as the Rollout's
    /// `revisionHistoryLimit` (default 10, the old ReplicaSets Argo keeps), and any a cluster
    /// still runs as its baseline ([`super::FleetMachine::keep_spec`]).
    pub history: Vec<Rollout>,
}

impl FleetSpecs {
    /// A fleet whose clusters run `spec` (nothing to roll out).
    pub fn new(spec: Rollout) -> FleetSpecs {
        FleetSpecs {
            previous: spec.clone(),
            next: spec,
            history: Vec::new(),
        }
    }

    /// The revisions the machine runs.
    pub fn revisions(&self) -> Revisions<'_> {
        Revisions {
            previous: &self.previous,
            next: &self.next,
        }
    }

    /// What `undo` returns to: revision `n` (1-based, oldest first, the previous spec last), or
    /// the previous spec.
    pub fn undo_target(&self, n: Option<usize>) -> Option<Rollout> {
        match n {
            None => Some(self.previous.clone()),
            Some(n) => self
                .history
                .iter()
                .chain([&self.previous])
                .nth(n.checked_sub(1)?)
                .cloned(),
        }
    }

    /// Trims the history to its newest `limit` specs, keeping older ones `in_use` says yes to
    /// (by pod-template hash): a spec a cluster still runs as its baseline.
    pub fn trim(&mut self, limit: usize, in_use: impl Fn(&str) -> bool) {
        let mut over = self.history.len().saturating_sub(limit);
        self.history.retain(|spec| {
            if over == 0 {
                return true;
            }
            over -= 1;
            in_use(&rollout::template_hash(spec))
        });
    }

    /// Adds a spec to the history, once per pod template.
    pub fn keep(&mut self, spec: Rollout) {
        let hash = rollout::template_hash(&spec);
        if !self
            .history
            .iter()
            .any(|h| rollout::template_hash(h) == hash)
        {
            self.history.push(spec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(image: &str) -> Rollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "app"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn trimming_drops_the_oldest_but_keeps_those_in_use() {
        let mut specs = FleetSpecs::new(spec("app:9"));
        for v in 1..=5 {
            specs.keep(spec(&format!("app:{v}")));
        }
        specs.keep(spec("app:3"));
        assert_eq!(specs.history.len(), 5, "once per pod template");
        let in_use = rollout::template_hash(&spec("app:1"));
        specs.trim(2, |hash| hash == in_use);
        let images: Vec<&str> = specs
            .history
            .iter()
            .map(|s| s.first_image().unwrap())
            .collect();
        assert_eq!(images, ["app:1", "app:4", "app:5"]);
        specs.trim(0, |_| false);
        assert!(specs.history.is_empty());
    }
}
