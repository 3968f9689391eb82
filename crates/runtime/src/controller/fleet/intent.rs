//! A fleet's intent as the source gives it: a new desired state (a Git commit, the supersede
//! rule, Git agreeing with a rollback), one refused as invalid, and the durable change Git
//! needs in return (a revert or pins), recorded once committed.

use flotilla_core::analysis::Millis;
use flotilla_core::fleet::{DurableChange, DurableEdit};
use flotilla_core::rollout::template_hash;
use flotilla_core::spec::rollout::Rollout;

use super::images::first_image;
use super::{Desired, FleetController};
use crate::controller::record::{AuditEntry, AuditKind, Notification};

impl FleetController {
    /// The source's latest desired state for this fleet has errors (`errors` non-empty): the
    /// fleet keeps running its last valid one, and says so in its status, the audit log and a
    /// notification; an empty list means it is valid again.
    pub fn set_invalid(&mut self, errors: Vec<String>, now: Millis) {
        if errors == self.invalid {
            return;
        }
        let message = if errors.is_empty() {
            "the desired state is valid again".to_owned()
        } else {
            format!(
                "the desired state was refused; the fleet keeps running its last valid one ({}):\n{}",
                first_image(&self.record.specs.next),
                errors.join("\n")
            )
        };
        if errors.is_empty() {
            tracing::info!(fleet = %self.record.name, "{message}");
        } else {
            tracing::error!(fleet = %self.record.name, "{message}");
        }
        self.invalid = errors;
        let revision = self.machine.state().revision.clone();
        let kind = if self.invalid.is_empty() {
            AuditKind::Sync
        } else {
            AuditKind::Invalid
        };
        self.pending.0.push(AuditEntry::new(
            now,
            &self.record.name,
            &revision,
            kind,
            None,
            message.clone(),
        ));
        if !self.invalid.is_empty() {
            self.pending.1.push(Notification {
                event: "desired-state-invalid".into(),
                id: format!("{}/{revision}/invalid/{now}", self.record.name),
                fleet: self.record.name.clone(),
                revision,
                cluster: None,
                metric: None,
                value: None,
                message: format!("{}: {message}", self.record.name),
                time: now,
            });
        }
    }

    /// A new desired Rollout: the supersede rule.
    pub(super) fn change_spec(&mut self, next: Rollout) {
        let hash = template_hash(&next);
        let image = first_image(&next);
        if self.machine.change_spec(&mut self.record.specs, next) {
            self.images.insert(hash, image);
        }
    }

    /// A new desired state from the source (a Git commit), taken whole or not at all: a Rollout
    /// some cluster's backend cannot drive, or a Fleet whose new clusters cannot be reached or
    /// cannot drive it, refuses the commit for this fleet. Nothing of it is applied (neither the
    /// new revision nor the Fleet is kept, so a restart starts from the last valid one) and the
    /// refusal stays shown until a commit is taken.
    pub fn take(
        &mut self,
        desired: &Desired,
        commit: &str,
        wiring: &super::Wiring,
        now: Millis,
    ) -> Vec<AuditEntry> {
        let short = &commit[..commit.len().min(12)];
        let mut errors = Vec::new();
        if let Some(why) = self.lacking(&desired.rollout) {
            errors.push(format!("commit {short}: {why}"));
        }
        // Clusters that joined or left (a hub's spoke Secrets, a Fleet's entries): the fleet
        // re-planned, not restarted.
        let before = self
            .record
            .desired
            .as_ref()
            .filter(|d| d.fleet != desired.fleet)
            .map(|d| d.fleet.clone());
        let replan = before.and_then(|before| {
            self.prepare_replan(&before, desired, wiring)
                .map_err(|e| {
                    errors.push(format!(
                        "commit {short}: the Fleet's new clusters cannot be driven: {e}"
                    ))
                })
                .ok()
        });
        self.set_invalid(errors, now);
        if !self.invalid.is_empty() {
            return Vec::new();
        }
        let mut audit = self.sync(desired, commit, now);
        if let Some(replan) = replan {
            audit.extend(self.apply_replan(replan, now));
        }
        audit
    }

    /// A new desired state from the source (a Git commit). A changed Rollout is a new fleet
    /// revision (the supersede rule), except when it is the previous spec while the fleet is
    /// halted or aborted with no cluster validated: Git then agrees with the rollback, and the
    /// fleet settles on it without rolling anything out (durable rejections are kept).
    fn sync(&mut self, desired: &Desired, commit: &str, now: Millis) -> Vec<AuditEntry> {
        self.record.desired = Some(Box::new(desired.clone()));
        let hash = template_hash(&desired.rollout);
        let short = &commit[..commit.len().min(12)];
        let mut audit = Vec::new();
        if &desired.overlays != self.machine.overlays() {
            self.machine.set_overlays(desired.overlays.clone());
            let described: Vec<String> = desired
                .overlays
                .iter()
                .map(|(cluster, o)| {
                    let mut parts = Vec::new();
                    if let Some(image) = &o.image {
                        parts.push(format!("image {image}"));
                    }
                    if o.args.is_some() {
                        parts.push("args".into());
                    }
                    if !o.env.is_empty() {
                        parts.push("env".into());
                    }
                    if let Some(pin) = &o.pin {
                        let state = if pin.rejects == self.machine.state().revision {
                            "active"
                        } else {
                            "lapsed"
                        };
                        parts.push(format!(
                            "pin {} rejecting {} ({state})",
                            pin.image, pin.rejects
                        ));
                    }
                    format!("{cluster}: {}", parts.join(", "))
                })
                .collect();
            audit.push(self.sync_entry(
                now,
                format!(
                    "commit {short}: overlays {}",
                    if described.is_empty() {
                        "none".to_owned()
                    } else {
                        described.join("; ")
                    }
                ),
            ));
        }
        if hash == self.record.source_hash {
            self.record.state = self.machine.state().clone();
            return audit;
        }
        if !self.spec_sources.is_empty() {
            // rolloutSource: cluster: the revision comes from the clusters' specs.
            self.record.source_hash = hash;
            self.record.state = self.machine.state().clone();
            audit.push(self.sync_entry(
                now,
                format!(
                    "commit {short}: the Rollout's spec is read from the clusters (rolloutSource: cluster); the manifests' copy ({}) starts no revision",
                    first_image(&desired.rollout)
                ),
            ));
            return audit;
        }
        self.record.source_hash = hash;
        let (old_revision, old_phase) = (
            self.machine.state().revision.clone(),
            self.machine.state().phase,
        );
        let message = if self
            .machine
            .settle(&mut self.record.specs, desired.rollout.clone())
        {
            format!(
                "commit {short}: Git agrees with the rollback ({}); nothing to roll out",
                first_image(&self.record.specs.next)
            )
        } else {
            self.change_spec(desired.rollout.clone());
            let mut message = format!(
                "commit {short}: new desired revision {}",
                first_image(&self.record.specs.next)
            );
            let revision = &self.machine.state().revision;
            if !old_revision.is_empty() && &old_revision != revision {
                message.push_str(&format!(
                    " (fleet revision {revision} supersedes {old_revision}, {})",
                    format!("{old_phase:?}").to_lowercase()
                ));
            }
            message
        };
        self.record.state = self.machine.state().clone();
        audit.push(self.sync_entry(now, message));
        audit
    }

    /// The durable change Git needs, once per fleet revision (until [`Self::committed`]): the
    /// core's decision ([`FleetMachine::durable_change`]) in Git's words.
    pub fn change_needed(&self) -> Option<crate::controller::source::GitChange> {
        use crate::controller::source::{Edit, GitChange};
        let change = self.machine.durable_change(
            &self.record.specs,
            self.record.reverted.as_deref(),
            &self.record.pinned,
        )?;
        let rollout = self
            .record
            .specs
            .next
            .metadata
            .name
            .clone()
            .unwrap_or_default();
        let state = self.machine.state();
        let mut trailers = String::new();
        for failed in &change.failed {
            trailers.push_str(&format!("Flotilla-Cluster: {}\n", failed.name));
        }
        for failed in &change.failed {
            if let Some(f) = &failed.failure {
                trailers.push_str(&format!("Flotilla-Metric: {}={}\n", f.metric, f.value));
            }
        }
        trailers.push_str(&format!("Flotilla-Revision: {}\n", change.revision));
        let (bad_image, good_image) = (&change.bad_image, &change.good_image);
        let fleet = &self.record.name;
        let revision = &change.revision;
        Some(match change.edit {
            DurableEdit::Revert => GitChange {
                rollout: rollout.clone(),
                revision: revision.clone(),
                edit: Edit::Revert {
                    bad_image: bad_image.clone(),
                    good_image: good_image.clone(),
                },
                body: format!(
                    "flotilla: roll {rollout} back to {good_image}\n\nFleet rollout {fleet} halted on revision {revision} ({bad_image}): {}\nNo cluster was validated on it, so the whole fleet returns to {good_image}.",
                    state.message
                ),
                trailers,
                proposal_branch: format!("flotilla/rollback-{fleet}-{revision}"),
                decision: change.clone(),
            },
            DurableEdit::Pin => {
                let clusters: Vec<(String, String)> = change
                    .failed
                    .iter()
                    .map(|f| (f.name.clone(), f.image.clone()))
                    .collect();
                let names: Vec<&str> = clusters.iter().map(|(c, _)| c.as_str()).collect();
                let images: std::collections::BTreeSet<&str> =
                    clusters.iter().map(|(_, i)| i.as_str()).collect();
                let reasons: Vec<&str> = change.failed.iter().map(|f| f.reason.as_str()).collect();
                GitChange {
                    rollout: rollout.clone(),
                    revision: revision.clone(),
                    edit: Edit::Pin {
                        clusters: clusters.clone(),
                    },
                    body: format!(
                        "flotilla: pin {} of {rollout} to {}\n\nFleet rollout {fleet} {} on revision {revision} ({bad_image}).\nFailed: {}.\nValidated and kept on {bad_image}: {}.\nThe pin rejects revision {revision} for the failed clusters only; it lapses when Git's desired revision changes (a fix-forward).",
                        names.join(", "),
                        images.into_iter().collect::<Vec<_>>().join(", "),
                        format!("{:?}", state.phase).to_lowercase(),
                        reasons.join("; "),
                        change.validated.join(", "),
                    ),
                    trailers,
                    proposal_branch: format!("flotilla/pin-{fleet}-{revision}"),
                    decision: change.clone(),
                }
            }
        })
    }

    /// The durable change `decision` reached Git (or Git already said it): never again for its
    /// revision, and the decision is recorded as the core made it.
    pub fn committed(&mut self, decision: &DurableChange, status: String) {
        self.machine.record_durable(decision);
        let revision = decision.revision.as_str();
        if self.record.reverted.as_deref() != Some(revision) {
            self.record.pinned.clear();
        }
        self.record.reverted = Some(revision.to_owned());
        if decision.edit == DurableEdit::Pin {
            self.record
                .pinned
                .extend(decision.failed.iter().map(|f| f.name.clone()));
        }
        self.record.git_status = Some(status);
    }

    /// The durable change could not be committed yet (it is retried).
    pub fn git_failed(&mut self, status: String) {
        self.record.git_status = Some(status);
    }

    /// An audit entry of the source's desired state.
    pub(super) fn sync_entry(&self, now: Millis, message: String) -> AuditEntry {
        AuditEntry::new(
            now,
            &self.record.name,
            &self.machine.state().revision,
            AuditKind::Sync,
            None,
            message,
        )
    }
}
