//! Operator commands issued in the cluster, read from the Rollout as `kubectl argo rollouts` and
//! Argo CD's actions leave it: their merge patches on `status` (`abort: true`, `abort: false`,
//! `promoteFull: true`, `pauseConditions: null`, `currentStepIndex` moved on) compared with the
//! status Flotilla last wrote, so that Flotilla's own writes are never taken for an operator's.

use flotilla_core::backend::{ClusterCommand, ClusterVerb};
use serde_json::Value;

/// The commands the Rollout `now` (as read) says were issued since Flotilla wrote `written`
/// (the status it last wrote; None: it has written none, and nothing can be told apart).
pub fn issued(now: &Value, written: Option<&Value>) -> Vec<ClusterCommand> {
    let Some(written) = written else {
        return Vec::new();
    };
    let status = &now["status"];
    let version = now["metadata"]["resourceVersion"].as_str().unwrap_or("0");
    let origin = origin(now);
    let command = |verb: ClusterVerb, what: &str| ClusterCommand {
        id: format!("{version}/{what}"),
        origin: origin.clone(),
        verb,
    };
    let flag = |value: &Value, field: &str| value[field].as_bool().unwrap_or(false);
    let mut out = Vec::new();
    if flag(status, "abort") && !flag(written, "abort") {
        out.push(command(ClusterVerb::Abort, "abort"));
        return out;
    }
    if status["abort"] == Value::Bool(false) && flag(written, "abort") {
        out.push(command(ClusterVerb::Retry, "retry"));
        return out;
    }
    if flag(status, "promoteFull") && !flag(written, "promoteFull") {
        out.push(command(ClusterVerb::Promote { full: true }, "promote-full"));
        return out;
    }
    let paused = |value: &Value| {
        value["pauseConditions"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    };
    let step = |value: &Value| value["currentStepIndex"].as_i64();
    let skipped = matches!((step(status), step(written)), (Some(now), Some(then)) if now > then);
    if (paused(written) && !paused(status)) || skipped {
        out.push(command(ClusterVerb::Promote { full: false }, "promote"));
    }
    out
}

/// The commands `now` says were issued whichever of `candidates` Flotilla last wrote (its last
/// write, or the two a write of unknown outcome leaves: the status before it and the one it
/// sent): only what reads as a command against every candidate is one, so a write that landed
/// unseen is never taken for an operator's. None without a candidate.
pub fn issued_among(now: &Value, candidates: &[Value]) -> Vec<ClusterCommand> {
    let Some((first, rest)) = candidates.split_first() else {
        return Vec::new();
    };
    issued(now, Some(first))
        .into_iter()
        .filter(|command| {
            rest.iter().all(|other| {
                issued(now, Some(other))
                    .iter()
                    .any(|c| c.verb == command.verb)
            })
        })
        .collect()
}

/// The annotation on the Rollout where Flotilla keeps what [`issued`] compares of its status
/// writes, written before each write that changes it: `{"prev": …, "next": …}`, the status before
/// and the one being written. A restarted controller takes both as its own, so it still tells
/// them from an operator's patch made while it was down, whether or not the write landed.
pub const LAST_STATUS_ANNOTATION: &str = "flotilla.dev/last-status";

/// The fields of a status that operator commands patch (what [`issued`] compares).
pub fn remembered(status: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for field in [
        "abort",
        "promoteFull",
        "pauseConditions",
        "currentStepIndex",
    ] {
        out.insert(field.to_owned(), status[field].clone());
    }
    Value::Object(out)
}

/// The status writes a Rollout remembers (its [`LAST_STATUS_ANNOTATION`]): the one before and
/// the one written; empty without the annotation.
pub fn recalled(rollout: &Value) -> Vec<Value> {
    let Some(kept) = rollout["metadata"]["annotations"][LAST_STATUS_ANNOTATION]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
    else {
        return Vec::new();
    };
    if kept.get("next").is_some() {
        [&kept["prev"], &kept["next"]]
            .into_iter()
            .filter(|v| v.is_object())
            .cloned()
            .collect()
    } else {
        vec![kept]
    }
}

/// The annotation's value before writing `next` over `prev` (each a status).
pub fn remembering(prev: &Value, next: &Value) -> String {
    serde_json::json!({"prev": remembered(prev), "next": remembered(next)}).to_string()
}

/// Who patched the status last, from `managedFields` (the latest entry on the `status`
/// subresource that is not Flotilla's), as `kubectl-argo-rollouts (status)`.
/// The pause or resume `spec.paused` asks for, against whether the engine's update is paused by
/// an operator (`engine_paused`): `kubectl argo rollouts pause` sets it, its `promote` clears
/// it. Level-triggered, one id per spec generation: a pause given while the cluster is not in
/// flight is refused once (it is not given again until the spec changes).
pub fn spec_pause(rollout: &Value, engine_paused: bool) -> Option<ClusterCommand> {
    let paused = rollout["spec"]["paused"].as_bool().unwrap_or(false);
    if paused == engine_paused {
        return None;
    }
    let generation = rollout["metadata"]["generation"].as_i64().unwrap_or(0);
    let (verb, what) = if paused {
        (ClusterVerb::Pause, "pause")
    } else {
        (ClusterVerb::Resume, "resume")
    };
    let manager = latest_manager(rollout, |f| f["fieldsV1"]["f:spec"]["f:paused"].is_object());
    Some(ClusterCommand {
        id: format!("generation-{generation}/{what}"),
        origin: format!("{} (Rollout spec.paused)", manager.unwrap_or("an operator")),
        verb,
    })
}

fn origin(rollout: &Value) -> String {
    let manager = latest_manager(rollout, |f| {
        f["subresource"] == "status" || f["fieldsV1"]["f:status"].is_object()
    });
    format!("{} (Rollout status)", manager.unwrap_or("an operator"))
}

/// The field manager other than Flotilla that last wrote an entry of `managedFields` that
/// `wrote` selects.
fn latest_manager(rollout: &Value, wrote: impl Fn(&Value) -> bool) -> Option<&str> {
    rollout["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .filter(|f| wrote(f))
        .filter(|f| f["manager"] != super::objects::FIELD_MANAGER)
        .max_by(|a, b| {
            a["time"]
                .as_str()
                .unwrap_or_default()
                .cmp(b["time"].as_str().unwrap_or_default())
        })
        .and_then(|f| f["manager"].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spec_paused_is_a_pause_until_the_engine_is_paused_and_cleared_a_resume() {
        let rollout = |paused: Option<bool>| {
            json!({
                "metadata": {"generation": 7, "managedFields": [
                    {"manager": "argocd-controller", "fieldsV1": {"f:spec": {"f:template": {}}}, "time": "2026-01-01T00:00:01Z"},
                    {"manager": "kubectl-argo-rollouts", "fieldsV1": {"f:spec": {"f:paused": {}}}, "time": "2026-01-01T00:00:05Z"},
                ]},
                "spec": {"paused": paused},
            })
        };
        let pause = spec_pause(&rollout(Some(true)), false).unwrap();
        assert_eq!(pause.verb, ClusterVerb::Pause);
        assert_eq!(pause.id, "generation-7/pause");
        assert_eq!(pause.origin, "kubectl-argo-rollouts (Rollout spec.paused)");
        assert_eq!(spec_pause(&rollout(Some(true)), true), None);
        assert_eq!(spec_pause(&rollout(Some(false)), false), None);
        assert_eq!(spec_pause(&rollout(None), false), None);
        let resume = spec_pause(&rollout(Some(false)), true).unwrap();
        assert_eq!(resume.verb, ClusterVerb::Resume);
        assert_eq!(
            spec_pause(&rollout(None), true).unwrap().verb,
            ClusterVerb::Resume
        );
    }

    fn read(status: Value) -> Value {
        json!({
            "metadata": {"resourceVersion": "42", "managedFields": [
                {"manager": "flotilla", "subresource": "status", "time": "2026-01-01T00:00:09Z"},
                {"manager": "kubectl-argo-rollouts", "subresource": "status", "time": "2026-01-01T00:00:05Z"},
            ]},
            "status": status,
        })
    }

    #[test]
    fn a_remembered_write_is_recalled_from_the_annotation() {
        let written = json!({"abort": true, "phase": "Degraded", "currentStepIndex": 2});
        let kept = remembered(&written);
        assert_eq!(
            kept,
            json!({"abort": true, "promoteFull": null, "pauseConditions": null, "currentStepIndex": 2})
        );
        let before = json!({"abort": false, "currentStepIndex": 2});
        let rollout = json!({"metadata": {"annotations": {LAST_STATUS_ANNOTATION: remembering(&before, &written)}}});
        let recalled = recalled(&rollout);
        assert_eq!(recalled, vec![remembered(&before), kept.clone()]);
        // Whether the write landed or not, it is not a command: neither the status before it
        // (abort false) nor the one written (abort true) reads as one.
        assert!(
            issued_among(
                &read(json!({"abort": true, "currentStepIndex": 2})),
                &recalled
            )
            .is_empty()
        );
        assert!(
            issued_among(
                &read(json!({"abort": false, "currentStepIndex": 2})),
                &recalled
            )
            .is_empty()
        );
        // A step skipped while Flotilla was down reads as a promote against both.
        let stepped = json!({"abort": false, "currentStepIndex": 3});
        let next = json!({"abort": false, "currentStepIndex": 2, "pauseConditions": [{}]});
        let both = vec![remembered(&before), remembered(&next)];
        let promoted = issued_among(&read(stepped), &both);
        assert_eq!(promoted[0].verb, ClusterVerb::Promote { full: false });
        // The annotation of an earlier release (one status) is read too.
        let old = json!({"metadata": {"annotations": {LAST_STATUS_ANNOTATION: kept.to_string()}}});
        let retried = issued_among(&read(json!({"abort": false})), &super::recalled(&old));
        assert_eq!(retried[0].verb, ClusterVerb::Retry);
    }

    #[test]
    fn the_plugins_patches_become_commands_and_flotillas_own_writes_do_not() {
        let written = json!({"abort": false, "pauseConditions": [{"reason": "CanaryPauseStep"}], "currentStepIndex": 1});
        assert!(issued(&read(written.clone()), Some(&written)).is_empty());
        assert!(issued(&read(json!({"abort": true})), None).is_empty());
        let abort = issued(
            &read(json!({"abort": true, "currentStepIndex": 1})),
            Some(&written),
        );
        assert_eq!(abort.len(), 1);
        assert_eq!(abort[0].verb, ClusterVerb::Abort);
        assert_eq!(abort[0].id, "42/abort");
        assert_eq!(abort[0].origin, "kubectl-argo-rollouts (Rollout status)");
        let promote = issued(
            &read(json!({"pauseConditions": null, "currentStepIndex": 1})),
            Some(&written),
        );
        assert_eq!(promote[0].verb, ClusterVerb::Promote { full: false });
        let skip = issued(
            &read(json!({"currentStepIndex": 2, "pauseConditions": [{}]})),
            Some(&written),
        );
        assert_eq!(skip[0].verb, ClusterVerb::Promote { full: false });
        let full = issued(
            &read(json!({"promoteFull": true, "pauseConditions": [{}], "currentStepIndex": 1})),
            Some(&written),
        );
        assert_eq!(full[0].verb, ClusterVerb::Promote { full: true });
        let aborted = json!({"abort": true});
        let retry = issued(&read(json!({"abort": false})), Some(&aborted));
        assert_eq!(retry[0].verb, ClusterVerb::Retry);
    }
}
