//! What a notification is about, as Argo Rollouts' notification sees it: the Rollout (the fleet
//! revision's, with the manifest's latest metadata) as a JSON map whose `status` is what Argo
//! would have written for that cluster at that event, and Flotilla's extras.

use std::collections::BTreeMap;

use flotilla_core::fleet::{ClusterState, fleet_revision};
use flotilla_core::rollout::model::{Phase, RolloutState};
use serde_json::{Map, Value, json};

use crate::controller::record::{FleetRecord, Notification};

/// A notification's subject.
#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    /// The Rollout as a JSON map, with its `status` at the event.
    pub rollout: Value,
    /// The cluster's analysis ended in Error (Argo's `AnalysisRunError`), not Failed.
    pub errored: bool,
}

/// Milliseconds since the epoch as RFC 3339 in UTC, to the second (Kubernetes' `metav1.Time`).
pub fn rfc3339(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Progressing => "Progressing",
        Phase::Paused => "Paused",
        Phase::Healthy => "Healthy",
        Phase::Degraded => "Degraded",
    }
}

/// The status fields Argo writes, from a cluster's rollout engine.
fn engine_status(engine: &RolloutState) -> Map<String, Value> {
    let mut status = Map::new();
    status.insert("phase".into(), json!(phase_name(engine.phase)));
    status.insert("message".into(), json!(engine.message));
    if engine.abort {
        status.insert("abort".into(), json!(true));
    }
    if let Some(at) = engine.aborted_at {
        status.insert("abortedAt".into(), json!(rfc3339(at)));
    }
    if engine.paused {
        status.insert("paused".into(), json!(true));
    }
    if !engine.pause_conditions.is_empty() {
        let conditions: Vec<Value> = engine
            .pause_conditions
            .iter()
            .map(|c| json!({"reason": c.reason, "startTime": rfc3339(c.start_time)}))
            .collect();
        status.insert("pauseConditions".into(), Value::Array(conditions));
    }
    if engine.controller_pause {
        status.insert("controllerPause".into(), json!(true));
    }
    if let Some(step) = engine.step_index {
        status.insert("currentStepIndex".into(), json!(step));
    }
    let hash = |n: Option<flotilla_core::rollout::RevisionNumber>| {
        n.and_then(|n| engine.revisions.iter().find(|r| r.number == n))
            .map(|r| r.hash.clone())
    };
    if let Some(h) = hash(engine.current) {
        status.insert("currentPodHash".into(), json!(h));
    }
    if let Some(h) = hash(engine.stable) {
        status.insert("stableRS".into(), json!(h));
    }
    status
}

/// The status Argo would have written at the event: the cluster's engine, while it still is
/// where the event left it, else what the event says (the same on every delivery).
fn status_at(n: &Notification, cluster: Option<&ClusterState>) -> Value {
    let engine = cluster.map(|c| &c.rollout);
    let mut status = match n.event.as_str() {
        "rollout-aborted" | "analysis-failed" => match engine.filter(|e| e.abort) {
            Some(e) => engine_status(e),
            None => {
                let mut s = Map::new();
                s.insert(
                    "message".into(),
                    json!(format!(
                        "RolloutAborted: Rollout aborted update to revision {}: {}",
                        n.revision, n.message
                    )),
                );
                s
            }
        },
        "cluster-paused" => match engine.filter(|e| e.phase == Phase::Paused) {
            Some(e) => engine_status(e),
            None => {
                let mut s = Map::new();
                s.insert("phase".into(), json!("Paused"));
                s.insert("message".into(), json!(n.message));
                s.insert("controllerPause".into(), json!(true));
                s
            }
        },
        "fleet-completed" => {
            let mut s = Map::new();
            s.insert("phase".into(), json!("Healthy"));
            s.insert("message".into(), json!(""));
            s
        }
        _ => engine.map(engine_status).unwrap_or_default(),
    };
    if matches!(n.event.as_str(), "rollout-aborted" | "analysis-failed") {
        status.insert("abort".into(), json!(true));
        status.insert("phase".into(), json!("Degraded"));
    }
    Value::Object(status)
}

impl Subject {
    /// The subject of `n`, a notification of the fleet whose record is `record`.
    pub fn of(record: &FleetRecord, n: &Notification) -> Subject {
        let specs = &record.specs;
        let revision = [&specs.next, &specs.previous]
            .into_iter()
            .chain(specs.history.iter())
            .find(|r| fleet_revision(r) == n.revision)
            .unwrap_or(&specs.next);
        let mut rollout = serde_json::to_value(revision).unwrap_or_else(|_| json!({}));
        // Subscriptions live in the manifest's metadata, which can change without a revision.
        if let Some(desired) = &record.desired
            && let Ok(metadata) = serde_json::to_value(&desired.rollout.metadata)
        {
            rollout["metadata"] = metadata;
        }
        if !rollout["metadata"].is_object() {
            rollout["metadata"] = json!({});
        }
        if rollout["metadata"]["namespace"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            // Where `kubectl apply` puts a Rollout that names no namespace.
            rollout["metadata"]["namespace"] = json!("default");
        }
        let cluster = n
            .cluster
            .as_ref()
            .and_then(|c| record.state.clusters.get(c));
        let errored = n.event == "analysis-failed"
            && cluster.is_some_and(|c| {
                c.aborted_on_error
                    && c.failure
                        .as_ref()
                        .is_some_and(|f| Some(&f.metric) == n.metric.as_ref())
            });
        rollout["status"] = status_at(n, cluster);
        Subject { rollout, errored }
    }

    /// A subject without a fleet record: the notification's own status on an empty Rollout.
    pub fn bare(n: &Notification) -> Subject {
        Subject {
            rollout: json!({"metadata": {"namespace": "default"}, "status": status_at(n, None)}),
            errored: false,
        }
    }

    /// The Rollout's `metadata.<field>` map (labels, annotations).
    pub(super) fn metadata_map(&self, field: &str) -> BTreeMap<String, String> {
        self.rollout["metadata"][field]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The variables a `when` sees (notifications-engine's `rollout`, `secrets`; Flotilla's
    /// `flotilla`).
    pub(super) fn vars(
        &self,
        n: &Notification,
        trigger: &str,
        secrets: &BTreeMap<String, String>,
    ) -> Value {
        json!({
            "rollout": self.rollout,
            "secrets": secrets,
            "flotilla": {
                "event": n.event,
                "trigger": trigger,
                "id": n.id,
                "fleet": n.fleet,
                "revision": n.revision,
                "cluster": n.cluster.clone().unwrap_or_default(),
                "metric": n.metric.clone().unwrap_or_default(),
                "value": n.value.clone().unwrap_or_default(),
                "message": n.message,
                "time": rfc3339(n.time),
            },
        })
    }
}
