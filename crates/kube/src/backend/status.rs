//! The Rollout `status` Flotilla writes, as Argo Rollouts' controller writes it (the fields
//! `kubectl argo rollouts get`, its `promote`/`abort` and Argo CD's health check read): phase and
//! message, `currentPodHash`, `stableRS`, `currentStepIndex`, pause conditions, abort, replica
//! counters, `observedGeneration` as a string, canary weights, blue-green selectors and conditions
//! with Argo's reasons. A pure function of the Rollout as read, the engine's progress and the
//! ReplicaSets' counts; the backend sends it as a merge patch on `/status`.

use std::collections::BTreeMap;

use flotilla_core::backend::ClusterDesired;
use flotilla_core::rollout::{AnalysisSlot, Phase, ReplicaCounts, RevisionNumber, RunKey};
use flotilla_core::time::Millis;
use serde_json::{Map, Value, json};

/// What the status is computed from.
pub struct StatusInput<'a> {
    /// The Rollout as read from the cluster (spec, metadata, current status).
    pub rollout: &'a Value,
    /// The desired state the engine decided.
    pub desired: &'a ClusterDesired,
    /// Argo's pod-template hash of each desired revision.
    pub hashes: &'a BTreeMap<RevisionNumber, String>,
    /// Each of the Rollout's ReplicaSets' counts, by hash.
    pub counts: &'a BTreeMap<String, ReplicaCounts>,
    /// Now, for the conditions that change.
    pub now: Millis,
    /// Since when the fleet holds the cluster behind its spec (`rolloutSource: cluster`, its
    /// wave not started): the status says so with a `FleetWave` pause condition.
    pub held: Option<Millis>,
}

/// Milliseconds since the epoch as Kubernetes writes a `metav1.Time` (RFC 3339, seconds, UTC).
pub fn rfc3339(millis: Millis) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(millis)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// The phase as Argo spells it.
fn phase(phase: Phase) -> &'static str {
    match phase {
        Phase::Progressing => "Progressing",
        Phase::Paused => "Paused",
        Phase::Healthy => "Healthy",
        Phase::Degraded => "Degraded",
    }
}

/// `metav1.FormatLabelSelector` of a selector's `matchLabels` (sorted `k=v` joined by commas).
fn selector_string(selector: &Value) -> String {
    let mut pairs: Vec<String> = selector["matchLabels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs.join(",")
}

/// The status Flotilla owns, whole (a merge patch sets each field; `null` removes one).
pub fn status(input: &StatusInput<'_>) -> Value {
    let StatusInput {
        rollout,
        desired,
        hashes,
        counts,
        now,
        held,
    } = input;
    let progress = &desired.progress;
    let hash = |revision: Option<RevisionNumber>| revision.and_then(|r| hashes.get(&r)).cloned();
    let current = hash(desired.current);
    let serving = hash(desired.serving);
    let spec = &rollout["spec"];
    let name = rollout["metadata"]["name"].as_str().unwrap_or_default();
    let spec_replicas = spec["replicas"].as_i64().unwrap_or(1) as i32;
    let total = counts
        .values()
        .fold(ReplicaCounts::default(), |a, c| ReplicaCounts {
            replicas: a.replicas + c.replicas,
            ready: a.ready + c.ready,
            available: a.available + c.available,
        });
    let updated = current
        .as_ref()
        .and_then(|h| counts.get(h))
        .copied()
        .unwrap_or_default();
    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        json!(
            rollout["metadata"]["generation"]
                .as_i64()
                .unwrap_or(0)
                .to_string()
        ),
    );
    status.insert("phase".into(), json!(phase(progress.phase)));
    status.insert("message".into(), json!(progress.message));
    status.insert("currentPodHash".into(), json!(current));
    status.insert("stableRS".into(), json!(serving));
    status.insert("replicas".into(), json!(total.replicas));
    status.insert("HPAReplicas".into(), json!(total.replicas));
    status.insert("updatedReplicas".into(), json!(updated.replicas));
    status.insert("readyReplicas".into(), json!(total.ready));
    status.insert("availableReplicas".into(), json!(total.available));
    status.insert("selector".into(), json!(selector_string(&spec["selector"])));
    let canary = &spec["strategy"]["canary"];
    if canary.is_object() {
        let steps = canary["steps"].as_array().map_or(0, Vec::len);
        if steps > 0 {
            status.insert("currentStepIndex".into(), json!(progress.step_index));
        }
        if desired.weights.is_none() {
            status.insert("canary".into(), json!({"weights": null}));
        }
        if let Some(weights) = desired.weights {
            status.insert(
                "canary".into(),
                json!({"weights": {
                    "canary": {
                        "weight": weights.canary,
                        "podTemplateHash": current,
                        "serviceName": canary["canaryService"],
                    },
                    "stable": {
                        "weight": weights.stable,
                        "podTemplateHash": serving,
                        "serviceName": canary["stableService"],
                    },
                }}),
            );
        }
    }
    if spec["strategy"]["blueGreen"].is_object() {
        let preview = hash(desired.preview).or_else(|| serving.clone());
        status.insert(
            "blueGreen".into(),
            json!({"activeSelector": serving, "previewSelector": preview}),
        );
    }
    let mut pauses: Vec<Value> = progress
        .pause_conditions
        .iter()
        .map(|p| json!({"reason": format!("{:?}", p.reason), "startTime": rfc3339(p.start_time)}))
        .collect();
    if let Some(since) = held {
        pauses.push(json!({"reason": "FleetWave", "startTime": rfc3339(*since)}));
        status.insert("phase".into(), json!("Paused"));
        status.insert(
            "message".into(),
            json!("FleetWave: the fleet holds this cluster on its stable revision until its wave starts"),
        );
    }
    let paused = !pauses.is_empty();
    status.insert(
        "pauseConditions".into(),
        if pauses.is_empty() {
            Value::Null
        } else {
            Value::Array(pauses)
        },
    );
    // Argo sets it whenever the controller itself paused (a pause step, an inconclusive run).
    status.insert(
        "controllerPause".into(),
        json!(progress.controller_pause || paused),
    );
    status.insert("abort".into(), json!(progress.abort));
    status.insert(
        "abortedAt".into(),
        progress
            .aborted_at
            .map_or(Value::Null, |t| json!(rfc3339(t))),
    );
    status.insert("promoteFull".into(), json!(progress.promote_full));
    let revision = desired.current.unwrap_or_default();
    let healthy = progress.phase == Phase::Healthy && held.is_none();
    let completed = current.is_some() && current == serving && healthy;
    let mut wanted = vec![
        if total.available >= spec_replicas {
            (
                "Available",
                true,
                "AvailableReason",
                "Rollout has minimum availability".to_owned(),
            )
        } else {
            (
                "Available",
                false,
                "AvailableReason",
                "Rollout does not have minimum availability".to_owned(),
            )
        },
        if progress.abort {
            let mut message = format!("Rollout aborted update to revision {revision}");
            if !progress.abort_cause.is_empty() {
                message = format!("{message}: {}", progress.abort_cause);
            }
            ("Progressing", false, "RolloutAborted", message)
        } else if progress.deadline_exceeded {
            (
                "Progressing",
                false,
                "ProgressDeadlineExceeded",
                format!("Rollout {name:?} has timed out progressing."),
            )
        } else if !progress.pause_conditions.is_empty() {
            (
                "Progressing",
                true,
                "RolloutPaused",
                "Rollout is paused".to_owned(),
            )
        } else if completed {
            (
                "Progressing",
                true,
                "NewReplicaSetAvailable",
                format!(
                    "ReplicaSet {:?} has successfully progressed.",
                    format!("{name}-{}", current.clone().unwrap_or_default())
                ),
            )
        } else {
            (
                "Progressing",
                true,
                "ReplicaSetUpdated",
                format!(
                    "ReplicaSet {:?} is progressing.",
                    format!("{name}-{}", current.clone().unwrap_or_default())
                ),
            )
        },
        if completed {
            (
                "Completed",
                true,
                "RolloutCompleted",
                format!(
                    "Rollout completed update to revision {revision} ({}): Rollout is healthy",
                    current.clone().unwrap_or_default()
                ),
            )
        } else {
            (
                "Completed",
                false,
                "RolloutNotCompleted",
                format!(
                    "Rollout not completed, started update to revision {revision} ({})",
                    current.clone().unwrap_or_default()
                ),
            )
        },
        if progress.phase == Phase::Healthy {
            (
                "Healthy",
                true,
                "RolloutHealthy",
                "Rollout is healthy".to_owned(),
            )
        } else {
            (
                "Healthy",
                false,
                "RolloutHealthy",
                "Rollout is not healthy".to_owned(),
            )
        },
    ];
    if paused || progress.controller_pause {
        wanted.push((
            "Paused",
            true,
            "RolloutPaused",
            "Rollout is paused".to_owned(),
        ));
    }
    let previous = rollout["status"]["conditions"].as_array();
    let conditions: Vec<Value> = wanted
        .into_iter()
        .map(|(kind, ok, reason, message)| {
            condition(previous, kind, ok, reason, &message, &rfc3339(*now))
        })
        .collect();
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// The AnalysisRuns of the current step and of the background analysis, named in the status
/// as Argo names them (`canary.currentStepAnalysisRunStatus`,
/// `canary.currentBackgroundAnalysisRunStatus`; blue-green's pre- and post-promotion ones):
/// what `kubectl argo rollouts promote` reads to tell an inconclusive step.
pub fn add_run_statuses(
    status: &mut Value,
    rollout: &Value,
    desired: &ClusterDesired,
    names: &[(RunKey, String)],
) {
    let current = desired.current.unwrap_or_default();
    let of = |slot: AnalysisSlot| {
        desired
            .runs
            .iter()
            .filter(|r| r.key.revision == current && r.key.slot == slot)
            .max_by_key(|r| r.key.attempt)
            .and_then(|r| {
                let name = names.iter().find(|(k, _)| *k == r.key)?.1.clone();
                Some(json!({"name": name, "status": r.run.phase, "message": r.run.message}))
            })
    };
    // Each field of the Rollout's strategy, `null` when no such run is current (a merge patch
    // then removes the previous step's).
    let mut set = |group: &str, field: &str, value: Option<Value>| {
        if !rollout["spec"]["strategy"][group].is_object() {
            return;
        }
        if !status[group].is_object() {
            status[group] = json!({});
        }
        status[group][field] = value.unwrap_or(Value::Null);
    };
    let step = desired
        .progress
        .step_index
        .and_then(|step| of(AnalysisSlot::Step(step)));
    set("canary", "currentStepAnalysisRunStatus", step);
    set(
        "canary",
        "currentBackgroundAnalysisRunStatus",
        of(AnalysisSlot::Background),
    );
    set(
        "blueGreen",
        "prePromotionAnalysisRunStatus",
        of(AnalysisSlot::PrePromotion),
    );
    set(
        "blueGreen",
        "postPromotionAnalysisRunStatus",
        of(AnalysisSlot::PostPromotion),
    );
}

/// A condition, keeping the times of the previous one of its type where nothing changed: the
/// transition time while the status holds, the update time while the reason and message do
/// too (so that an unchanged status writes the same bytes and triggers no one).
fn condition(
    previous: Option<&Vec<Value>>,
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let before = previous.and_then(|all| all.iter().find(|c| c["type"] == kind));
    let same_status = before.is_some_and(|c| c["status"] == status);
    let same_all =
        same_status && before.is_some_and(|c| c["reason"] == reason && c["message"] == message);
    let time = |field: &str, keep: bool| match before {
        Some(c) if keep && c[field].is_string() => c[field].clone(),
        _ => json!(now),
    };
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": time("lastTransitionTime", same_status),
        "lastUpdateTime": time("lastUpdateTime", same_all),
    })
}

/// Whether the status as read already holds every field of `wanted` (so no patch is needed):
/// as a merge patch reads it, a `null` (or `false`) holds where the field is absent, and an
/// object holds when each of its fields does.
pub fn holds(current: &Value, wanted: &Value) -> bool {
    holds_in(Some(current), wanted)
}

fn holds_in(current: Option<&Value>, wanted: &Value) -> bool {
    match wanted {
        Value::Null => current.is_none_or(Value::is_null),
        Value::Bool(false) => current.is_none_or(|c| *c == Value::Bool(false)),
        Value::Object(fields) => {
            let current = current.and_then(Value::as_object);
            fields
                .iter()
                .all(|(key, value)| holds_in(current.and_then(|c| c.get(key)), value))
        }
        other => current == Some(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::backend::DesiredRevision;
    use flotilla_core::rollout::{PauseCondition, PauseReason};

    fn rollout() -> Value {
        json!({
            "metadata": {"name": "payments", "generation": 3},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"tier": "web", "app": "payments"}},
                "strategy": {"canary": {"steps": [{"setWeight": 25}, {"pause": {}}]}},
            },
        })
    }

    fn desired() -> ClusterDesired {
        let mut desired = ClusterDesired {
            current: Some(2),
            serving: Some(1),
            ..Default::default()
        };
        desired.revisions.insert(1, DesiredRevision::default());
        desired.revisions.insert(2, DesiredRevision::default());
        desired.progress.step_index = Some(1);
        desired.progress.phase = Phase::Paused;
        desired.progress.pause_conditions = vec![PauseCondition {
            reason: PauseReason::CanaryPauseStep,
            start_time: 1_700_000_000_000,
        }];
        desired
    }

    #[test]
    fn a_paused_canary_reads_as_argo_writes_it() {
        let hashes = BTreeMap::from([(1, "aaa".to_owned()), (2, "bbb".to_owned())]);
        let counts = BTreeMap::from([
            (
                "aaa".to_owned(),
                ReplicaCounts {
                    replicas: 3,
                    ready: 3,
                    available: 3,
                },
            ),
            (
                "bbb".to_owned(),
                ReplicaCounts {
                    replicas: 1,
                    ready: 1,
                    available: 0,
                },
            ),
        ]);
        let rollout = rollout();
        let desired = desired();
        let status = status(&StatusInput {
            rollout: &rollout,
            desired: &desired,
            hashes: &hashes,
            counts: &counts,
            now: 1_700_000_001_000,
            held: None,
        });
        assert_eq!(status["observedGeneration"], "3");
        assert_eq!(status["phase"], "Paused");
        assert_eq!(status["currentPodHash"], "bbb");
        assert_eq!(status["stableRS"], "aaa");
        assert_eq!(status["currentStepIndex"], 1);
        assert_eq!(status["replicas"], 4);
        assert_eq!(status["updatedReplicas"], 1);
        assert_eq!(status["availableReplicas"], 3);
        assert_eq!(status["selector"], "app=payments,tier=web");
        assert_eq!(
            status["pauseConditions"],
            json!([{"reason": "CanaryPauseStep", "startTime": "2023-11-14T22:13:20Z"}])
        );
        let progressing = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap();
        assert_eq!(progressing["reason"], "RolloutPaused");
        assert_eq!(progressing["lastUpdateTime"], "2023-11-14T22:13:21Z");
        // The same status again keeps the conditions' times: nothing to write.
        let mut again = rollout.clone();
        again["status"] = status.clone();
        let second = super::status(&StatusInput {
            rollout: &again,
            desired: &desired,
            hashes: &hashes,
            counts: &counts,
            now: 1_700_000_099_000,
            held: None,
        });
        assert!(holds(&again["status"], &second));
    }

    #[test]
    fn a_cluster_held_by_its_wave_is_paused_with_a_fleet_wave_condition() {
        let hashes = BTreeMap::from([(1, "aaa".to_owned())]);
        let desired = ClusterDesired {
            current: Some(1),
            serving: Some(1),
            progress: flotilla_core::backend::DesiredProgress {
                phase: Phase::Healthy,
                ..Default::default()
            },
            ..Default::default()
        };
        let rollout = rollout();
        let status = status(&StatusInput {
            rollout: &rollout,
            desired: &desired,
            hashes: &hashes,
            counts: &BTreeMap::new(),
            now: 0,
            held: Some(1_700_000_000_000),
        });
        assert_eq!(status["phase"], "Paused");
        assert_eq!(status["pauseConditions"][0]["reason"], "FleetWave");
        assert_eq!(status["controllerPause"], true);
        assert_eq!(status["stableRS"], "aaa");
        let completed = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Completed")
            .unwrap();
        assert_eq!(completed["status"], "False");
    }

    #[test]
    fn an_aborted_update_is_degraded_with_argos_reason() {
        let hashes = BTreeMap::from([(1, "aaa".to_owned()), (2, "bbb".to_owned())]);
        let mut desired = desired();
        desired.progress.abort = true;
        desired.progress.abort_cause = "metric error-rate failed".into();
        desired.progress.phase = Phase::Degraded;
        desired.progress.pause_conditions.clear();
        desired.progress.aborted_at = Some(1_700_000_000_000);
        let rollout = rollout();
        let status = status(&StatusInput {
            rollout: &rollout,
            desired: &desired,
            hashes: &hashes,
            counts: &BTreeMap::new(),
            now: 0,
            held: None,
        });
        assert_eq!(status["abort"], true);
        assert_eq!(status["phase"], "Degraded");
        assert_eq!(status["pauseConditions"], Value::Null);
        let progressing = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap();
        assert_eq!(progressing["status"], "False");
        assert_eq!(progressing["reason"], "RolloutAborted");
        assert_eq!(
            progressing["message"],
            "Rollout aborted update to revision 2: metric error-rate failed"
        );
    }
}
