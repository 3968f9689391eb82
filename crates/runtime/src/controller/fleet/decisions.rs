//! The fleet machine's decisions in the daemon's words: each [`FleetEvent`] one typed audit
//! entry, and the notifications it warrants (with its id as their idempotency key).

use flotilla_core::fleet::{Decision, Failure, FleetEvent, FleetPhase, FleetSpecs};

use super::images::first_image;
use crate::controller::record::{AuditEntry, AuditKind, Notification, OperatorCommand};

pub(super) fn describe_command(command: &OperatorCommand) -> String {
    match command {
        OperatorCommand::Promote { wave, full } => format!(
            "promote{}{}",
            wave.map(|w| format!(" --wave {w}")).unwrap_or_default(),
            if *full { " --full" } else { "" }
        ),
        OperatorCommand::Abort { cluster } => format!(
            "abort{}",
            cluster
                .as_ref()
                .map(|c| format!(" --cluster {c}"))
                .unwrap_or_default()
        ),
        OperatorCommand::Undo { to_revision } => format!(
            "undo{}",
            to_revision
                .map(|r| format!(" --to-revision {r}"))
                .unwrap_or_default()
        ),
        OperatorCommand::SetImage { container, image } => {
            format!("set image {}={image}", container.as_deref().unwrap_or("*"))
        }
        other => other.verb().to_owned(),
    }
}

/// The audit entry of one of the fleet machine's decisions.
pub(super) fn audit_entry(fleet: &str, event: &FleetEvent) -> AuditEntry {
    let mut entry = AuditEntry::new(
        event.at,
        fleet,
        &event.revision,
        audit_kind(&event.decision),
        event.cluster.as_deref(),
        event.message.clone(),
    );
    entry.evidence = event.evidence.clone();
    entry.decision = Some(event.id.clone());
    entry
}

/// The audit kind of each of the fleet machine's decisions (exhaustive: a new decision must be
/// given one).
pub(crate) fn audit_kind(decision: &Decision) -> AuditKind {
    match decision {
        Decision::Adopted => AuditKind::Adopt,
        Decision::ClusterStarted | Decision::StepReached { .. } => AuditKind::Advance,
        Decision::WeightSet { .. } => AuditKind::Weight,
        Decision::RolloutEvent { .. } => AuditKind::Event,
        Decision::Paused { .. } => AuditKind::Pause,
        Decision::Resumed => AuditKind::Resume,
        Decision::Validated { .. } => AuditKind::Validate,
        Decision::Failed { .. }
        | Decision::AbortedWithoutRejection { .. }
        | Decision::RolledBack => AuditKind::Rollback,
        Decision::Held => AuditKind::Hold,
        Decision::Skipped => AuditKind::Skip,
        Decision::Reset => AuditKind::Reset,
        Decision::Pinned => AuditKind::Pin,
        Decision::WaveStarted { .. } | Decision::WaveCompleted { .. } => AuditKind::Wave,
        Decision::BakeStarted { .. } | Decision::BakeEnded { .. } => AuditKind::Bake,
        Decision::BarrierPassed { .. } => AuditKind::Barrier,
        Decision::WaveAnalysis { .. } => AuditKind::Analysis,
        Decision::Superseded { .. } | Decision::Settled | Decision::Phase { .. } => {
            AuditKind::Fleet
        }
        Decision::Calibrated { .. } => AuditKind::Calibrate,
        Decision::DurableChange { .. } => AuditKind::Gitops,
        Decision::CommandAccepted { .. } | Decision::CommandRefused { .. } => AuditKind::Command,
    }
}

/// The notifications of one of the fleet machine's decisions (none for most), each with the
/// decision's id and its event as the idempotency key.
pub(super) fn notifications_of(
    fleet: &str,
    specs: &FleetSpecs,
    event: &FleetEvent,
) -> Vec<Notification> {
    let notification = |kind: &str, message: String, failure: Option<&Failure>| Notification {
        event: kind.into(),
        id: format!("{}/{kind}", event.id),
        fleet: fleet.to_owned(),
        revision: event.revision.clone(),
        cluster: event.cluster.clone(),
        metric: failure.map(|f| f.metric.clone()),
        value: failure.map(|f| f.value.clone()),
        message,
        time: event.at,
    };
    let name = event.cluster.as_deref().unwrap_or_default();
    // The cluster's reason, as its event says it after the cluster's name.
    let reason = event
        .message
        .strip_prefix(&format!("{name}: "))
        .unwrap_or(&event.message);
    let rolled_back = |failure: Option<&Failure>, with_metric: bool| {
        let why = match failure {
            Some(f) => format!("metric {} = {} ({})", f.metric, f.value, f.message),
            None => reason.to_owned(),
        };
        let message = format!(
            "{fleet}: cluster {name} rolled back from {}: {why}",
            first_image(&specs.next)
        );
        let mut out = vec![notification("rollout-aborted", message.clone(), failure)];
        if with_metric && failure.is_some() {
            out.push(notification("analysis-failed", message, failure));
        }
        out
    };
    match &event.decision {
        Decision::Paused {
            needs_human: true, ..
        } => vec![notification(
            "cluster-paused",
            format!("{fleet}: cluster {name} paused: {reason}"),
            None,
        )],
        Decision::Failed { failure, .. } | Decision::AbortedWithoutRejection { failure } => {
            rolled_back(failure.as_ref(), true)
        }
        Decision::RolledBack => rolled_back(None, false),
        Decision::WaveCompleted { .. } => {
            vec![notification("wave-completed", event.message.clone(), None)]
        }
        Decision::BarrierPassed { .. } => {
            vec![notification("barrier-passed", event.message.clone(), None)]
        }
        Decision::Phase {
            phase,
            failure,
            failed_cluster,
            ..
        } => {
            let kind = match phase {
                FleetPhase::Completed => "fleet-completed",
                FleetPhase::Halted => "fleet-halted",
                FleetPhase::Aborted => "fleet-aborted",
                _ => return Vec::new(),
            };
            let mut n = notification(kind, event.message.clone(), failure.as_ref());
            n.cluster = failed_cluster.clone();
            vec![n]
        }
        _ => Vec::new(),
    }
}
