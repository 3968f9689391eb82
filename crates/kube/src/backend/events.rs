//! The Events Flotilla writes on a Rollout, where `kubectl describe rollout` and Argo CD show
//! them: the decisions Argo's controller announces, with its reasons and messages (Argo's
//! `utils/conditions`, `rollout/sync.go`, `rollout/canary.go`, `rollout/analysis.go`), read off
//! the difference between the status before and after a write, plus the fleet's own notices
//! (a command issued in the cluster and refused). Pure, but for nothing: the backend posts them.

use std::collections::BTreeMap;

use flotilla_core::backend::ClusterNotice;
use flotilla_core::rollout::RevisionNumber;
use flotilla_core::time::Millis;
use serde_json::{Value, json};

use super::status::rfc3339;

/// The component Events are reported by.
pub const COMPONENT: &str = "flotilla";

fn normal(reason: &str, message: String) -> ClusterNotice {
    ClusterNotice {
        warning: false,
        reason: reason.to_owned(),
        message,
    }
}

/// The status after a merge patch of `wanted` on `before` (RFC 7386: `null` removes a field).
fn merged(before: &Value, wanted: &Value) -> Value {
    match wanted {
        Value::Object(fields) => {
            let mut out = before.as_object().cloned().unwrap_or_default();
            for (key, value) in fields {
                if value.is_null() {
                    out.remove(key);
                } else {
                    let next = merged(out.get(key).unwrap_or(&Value::Null), value);
                    out.insert(key.clone(), next);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// Argo's `CanaryStepString`: how a step is named in `RolloutStepCompleted`.
fn step_string(step: &Value) -> String {
    if let Some(weight) = step.get("setWeight") {
        return format!("setWeight: {weight}");
    }
    if let Some(pause) = step.get("pause") {
        return match &pause["duration"] {
            Value::String(d) => format!("pause: {d}"),
            Value::Number(n) => format!("pause: {n}"),
            _ => "pause".to_owned(),
        };
    }
    if step.get("experiment").is_some() {
        return "experiment".to_owned();
    }
    if step.get("analysis").is_some() {
        return "analysis".to_owned();
    }
    if let Some(scale) = step.get("setCanaryScale") {
        if let Some(weight) = scale.get("weight") {
            return format!("setCanaryScale{{weight: {weight}}}");
        }
        if scale["matchTrafficWeight"] == true {
            return "setCanaryScale{matchTrafficWeight: true}".to_owned();
        }
        if let Some(replicas) = scale.get("replicas") {
            return format!("setCanaryScale{{replicas: {replicas}}}");
        }
    }
    if let Some(plugin) = step.get("plugin") {
        return format!("plugin: {}", plugin["name"].as_str().unwrap_or_default());
    }
    if let Some(route) = step.get("setHeaderRoute") {
        return format!(
            "setHeaderRoute: {}",
            route["name"].as_str().unwrap_or_default()
        );
    }
    if let Some(route) = step.get("setMirrorRoute") {
        return format!(
            "setMirrorRoute: {}",
            route["name"].as_str().unwrap_or_default()
        );
    }
    "invalid".to_owned()
}

fn pauses(status: &Value) -> &[Value] {
    status["pauseConditions"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// The Events a status write announces: the status read `before`, the patch `wanted` written
/// over it, the Rollout as read (its steps), the revision of each pod-template hash, and the
/// phase of each AnalysisRun written, by name (a run the status stops naming, its step passed,
/// is announced in the phase it ended in, as Argo reads it from the AnalysisRun).
pub fn of_status(
    rollout: &Value,
    before: &Value,
    wanted: &Value,
    hashes: &BTreeMap<RevisionNumber, String>,
    runs: &BTreeMap<String, String>,
) -> Vec<ClusterNotice> {
    let after = merged(before, wanted);
    let revision_of = |hash: &Value| {
        hash.as_str()
            .and_then(|h| hashes.iter().find(|(_, v)| v.as_str() == h))
            .map_or(0, |(n, _)| *n)
    };
    let mut out = Vec::new();
    // Steps completed, on the same revision.
    let steps = rollout["spec"]["strategy"]["canary"]["steps"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if let (Some(from), Some(to)) = (
        before["currentStepIndex"].as_u64(),
        after["currentStepIndex"].as_u64(),
    ) && before["currentPodHash"] == after["currentPodHash"]
        && !steps.is_empty()
    {
        for index in from..to.min(steps.len() as u64) {
            out.push(normal(
                "RolloutStepCompleted",
                format!(
                    "Rollout step {}/{} completed ({})",
                    index + 1,
                    steps.len(),
                    step_string(&steps[index as usize])
                ),
            ));
        }
    }
    // Analysis runs whose phase changed.
    for (path, kind) in [
        (
            ["blueGreen", "postPromotionAnalysisRunStatus"],
            "PostPromotion",
        ),
        (
            ["blueGreen", "prePromotionAnalysisRunStatus"],
            "PrePromotion",
        ),
        (["canary", "currentStepAnalysisRunStatus"], "Step"),
        (
            ["canary", "currentBackgroundAnalysisRunStatus"],
            "Background",
        ),
    ] {
        let (was, now) = (&before[path[0]][path[1]], &after[path[0]][path[1]]);
        let mut announce = |name: &Value, phase: &str, previous: &Value| {
            out.push(ClusterNotice {
                warning: phase == "Failed" || phase == "Error",
                reason: format!("AnalysisRun{phase}"),
                message: format!(
                    "{kind} Analysis Run '{}' Status New: '{phase}' Previous: '{}'",
                    name.as_str().unwrap_or_default(),
                    previous.as_str().unwrap_or("NoPreviousStatus")
                ),
            });
        };
        // The run named before, no longer named: the phase it ended in.
        if was["name"].is_string()
            && now["name"] != was["name"]
            && let Some(phase) = was["name"].as_str().and_then(|n| runs.get(n))
            && was["status"] != phase.as_str()
        {
            announce(&was["name"], phase, &was["status"]);
        }
        let Some(phase) = now["status"].as_str().filter(|p| !p.is_empty()) else {
            continue;
        };
        if was["name"] != now["name"] || was["status"] != now["status"] {
            let previous = if was["name"] == now["name"] {
                &was["status"]
            } else {
                &Value::Null
            };
            announce(&now["name"], phase, previous);
        }
    }
    // Paused, resumed.
    let (was_paused, paused) = (pauses(before), pauses(&after));
    if was_paused.is_empty() && !paused.is_empty() {
        out.push(normal(
            "RolloutPaused",
            format!(
                "Rollout is paused ({})",
                paused[0]["reason"].as_str().unwrap_or_default()
            ),
        ));
    } else if !was_paused.is_empty() && paused.is_empty() && after["abort"] != true {
        out.push(normal("RolloutResumed", "Rollout is resumed".to_owned()));
    }
    // Aborted: the message of the Progressing condition the status carries.
    if after["abort"] == true && before["abort"] != true {
        let message = after["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Progressing" && c["reason"] == "RolloutAborted")
            .and_then(|c| c["message"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "Rollout aborted update to revision {}",
                    revision_of(&after["currentPodHash"])
                )
            });
        out.push(ClusterNotice {
            warning: true,
            reason: "RolloutAborted".to_owned(),
            message,
        });
    }
    // Completed: a new stable, the one the update was to.
    let stable = &after["stableRS"];
    if stable.is_string() && *stable != before["stableRS"] && *stable == after["currentPodHash"] {
        let reason = if before["stableRS"].is_null() {
            "Initial deploy".to_owned()
        } else if before["promoteFull"] == true {
            "Full promotion requested".to_owned()
        } else if !steps.is_empty() {
            format!("Completed all {} canary steps", steps.len())
        } else if rollout["spec"]["strategy"]["blueGreen"].is_object() {
            "Completed blue-green update".to_owned()
        } else {
            "Completed".to_owned()
        };
        out.push(normal(
            "RolloutCompleted",
            format!(
                "Rollout completed update to revision {} ({}): {reason}",
                revision_of(stable),
                stable.as_str().unwrap_or_default()
            ),
        ));
    }
    out
}

/// `NewReplicaSetCreated`, as Argo announces a ReplicaSet it made.
pub fn created(name: &str, revision: RevisionNumber) -> ClusterNotice {
    normal(
        "NewReplicaSetCreated",
        format!("Created ReplicaSet {name} (revision {revision})"),
    )
}

/// `ScalingReplicaSet`, as Argo announces a ReplicaSet it scaled.
pub fn scaled(name: &str, revision: RevisionNumber, from: i32, to: i32) -> ClusterNotice {
    normal(
        "ScalingReplicaSet",
        format!(
            "Scaled {} ReplicaSet {name} (revision {revision}) from {from} to {to}",
            if to > from { "up" } else { "down" }
        ),
    )
}

/// The `v1` Event object of `notice` on the Rollout as read, at `now`; `sequence` tells apart
/// Events of the same millisecond (client-go names them `<object>.<unix nanos in hex>`).
pub fn event(rollout: &Value, notice: &ClusterNotice, now: Millis, sequence: u64) -> Value {
    let metadata = &rollout["metadata"];
    let nanos = (now.max(0) as u64)
        .saturating_mul(1_000_000)
        .saturating_add(sequence % 1_000_000);
    let time = rfc3339(now);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{nanos:x}", metadata["name"].as_str().unwrap_or_default()),
            "namespace": metadata["namespace"],
        },
        "involvedObject": {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"],
        },
        "reason": notice.reason,
        "message": notice.message,
        "type": if notice.warning { "Warning" } else { "Normal" },
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout() -> Value {
        json!({
            "metadata": {"name": "payments", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"strategy": {"canary": {"steps": [
                {"setWeight": 34}, {"pause": {"duration": "1s"}}, {"analysis": {"templates": []}},
                {"setWeight": 67}, {"pause": {}}
            ]}}},
        })
    }

    fn hashes() -> BTreeMap<RevisionNumber, String> {
        BTreeMap::from([(1, "aaa".to_owned()), (2, "bbb".to_owned())])
    }

    fn said(notices: &[ClusterNotice]) -> Vec<String> {
        notices
            .iter()
            .map(|n| {
                format!(
                    "{}{}: {}",
                    if n.warning { "!" } else { "" },
                    n.reason,
                    n.message
                )
            })
            .collect()
    }

    #[test]
    fn each_step_passed_is_announced_with_argos_step_string() {
        let before = json!({"currentPodHash": "bbb", "stableRS": "aaa", "currentStepIndex": 0});
        let wanted = json!({"currentPodHash": "bbb", "stableRS": "aaa", "currentStepIndex": 2});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &wanted,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "RolloutStepCompleted: Rollout step 1/5 completed (setWeight: 34)",
                "RolloutStepCompleted: Rollout step 2/5 completed (pause: 1s)"
            ]
        );
        // A new revision starting at step 0 passes no step of the old one.
        let before = json!({"currentPodHash": "aaa", "stableRS": "aaa", "currentStepIndex": 5});
        let wanted = json!({"currentPodHash": "bbb", "currentStepIndex": 0});
        assert!(of_status(&rollout(), &before, &wanted, &hashes(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_pause_a_resume_an_abort_and_a_completion_are_announced() {
        let before = json!({"currentPodHash": "bbb", "stableRS": "aaa", "currentStepIndex": 4});
        let paused = json!({"pauseConditions": [{"reason": "CanaryPauseStep", "startTime": "x"}]});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &paused,
                &hashes(),
                &BTreeMap::new()
            )),
            ["RolloutPaused: Rollout is paused (CanaryPauseStep)"]
        );
        let before = merged(&before, &paused);
        let resumed = json!({"pauseConditions": null, "currentStepIndex": 5});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &resumed,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "RolloutStepCompleted: Rollout step 5/5 completed (pause)",
                "RolloutResumed: Rollout is resumed"
            ]
        );
        let aborted = json!({"abort": true, "pauseConditions": null, "conditions": [
            {"type": "Progressing", "reason": "RolloutAborted", "message": "Rollout aborted update to revision 2: metric \"error-rate\" assessed Failed"}
        ]});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &aborted,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "!RolloutAborted: Rollout aborted update to revision 2: metric \"error-rate\" assessed Failed"
            ]
        );
        let done = json!({"stableRS": "bbb", "currentStepIndex": 5});
        let before = json!({"currentPodHash": "bbb", "stableRS": "aaa", "currentStepIndex": 5});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &done,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "RolloutCompleted: Rollout completed update to revision 2 (bbb): Completed all 5 canary steps"
            ]
        );
        // Written again unchanged: nothing new to say.
        let before = merged(&before, &done);
        assert!(of_status(&rollout(), &before, &done, &hashes(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn an_analysis_run_changing_phase_is_announced_a_failure_as_a_warning() {
        let before = json!({"currentPodHash": "bbb", "canary": {}});
        let running = json!({"canary": {"currentStepAnalysisRunStatus": {"name": "payments-bbb-2-2", "status": "Running"}}});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &running,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "AnalysisRunRunning: Step Analysis Run 'payments-bbb-2-2' Status New: 'Running' Previous: 'NoPreviousStatus'"
            ]
        );
        let before = merged(&before, &running);
        let failed = json!({"canary": {"currentStepAnalysisRunStatus": {"name": "payments-bbb-2-2", "status": "Failed"}}});
        assert_eq!(
            said(&of_status(
                &rollout(),
                &before,
                &failed,
                &hashes(),
                &BTreeMap::new()
            )),
            [
                "!AnalysisRunFailed: Step Analysis Run 'payments-bbb-2-2' Status New: 'Failed' Previous: 'Running'"
            ]
        );
        // The step passed: the status stops naming its run, which ended Successful.
        let before = merged(&before, &failed);
        let passed = json!({"canary": {"currentStepAnalysisRunStatus": null}});
        let runs = BTreeMap::from([("payments-bbb-2-2".to_owned(), "Successful".to_owned())]);
        assert_eq!(
            said(&of_status(&rollout(), &before, &passed, &hashes(), &runs)),
            [
                "AnalysisRunSuccessful: Step Analysis Run 'payments-bbb-2-2' Status New: 'Successful' Previous: 'Failed'"
            ]
        );
        // Said once: the status no longer names it, nothing more.
        let before = merged(&before, &passed);
        assert!(of_status(&rollout(), &before, &passed, &hashes(), &runs).is_empty());
    }

    #[test]
    fn the_event_names_the_rollout_and_is_reported_by_flotilla() {
        let notice = scaled("payments-bbb", 2, 0, 1);
        assert_eq!(
            notice.message,
            "Scaled up ReplicaSet payments-bbb (revision 2) from 0 to 1"
        );
        let event = event(&rollout(), &notice, 1_700_000_000_000, 3);
        assert_eq!(event["metadata"]["name"], "payments.17979cfe362a0003");
        assert_eq!(event["involvedObject"]["uid"], "u-1");
        assert_eq!(event["involvedObject"]["kind"], "Rollout");
        assert_eq!(event["type"], "Normal");
        assert_eq!(event["source"]["component"], "flotilla");
        assert_eq!(event["firstTimestamp"], "2023-11-14T22:13:20Z");
    }
}
