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
    /// Earlier revisions' specs, oldest first, once per pod template.
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
