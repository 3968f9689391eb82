//! `spec.restartAt` (`kubectl argo rollouts restart`), done as Argo's controller does it
//! (`rollout/restart.go`): once the time has come and `status.restartedAt` is not that time,
//! the Rollout's Pods created before it are evicted, as many at a time as `maxUnavailable`
//! allows (at least one) while the rest stay available, until none is left; then the status
//! says `restartedAt`. Pure here: which Pods to evict now; the backend lists and evicts them.

use flotilla_core::time::Millis;
use serde_json::Value;

/// A time as Kubernetes writes it (RFC 3339), in milliseconds since the epoch.
pub fn parse_time(text: &str) -> Option<Millis> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// The restart the Rollout asks for and has not had, once its time has come: `spec.restartAt`
/// as written, and as milliseconds.
pub fn due(rollout: &Value, now: Millis) -> Option<(String, Millis)> {
    let text = rollout["spec"]["restartAt"].as_str()?;
    let at = parse_time(text)?;
    let done = rollout["status"]["restartedAt"]
        .as_str()
        .and_then(parse_time)
        .is_some_and(|done| done == at);
    (!done && now > at).then(|| (text.to_owned(), at))
}

/// A count or a percentage of `total` (`1`, `"25%"`), rounded down as Kubernetes rounds
/// `maxUnavailable` (up with `ceil`, as `maxSurge`).
fn int_or_percent(value: &Value, total: i64, ceil: bool) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let percent: i64 = value.as_str()?.strip_suffix('%')?.trim().parse().ok()?;
    Some(if ceil {
        (total * percent + 99) / 100
    } else {
        total * percent / 100
    })
}

/// Argo's `MaxUnavailable`: a canary's `maxUnavailable` (default 25%, down) resolved with its
/// `maxSurge` (default 25%, up; both zero makes it one), a blue-green's (default 0); at most
/// the replicas.
pub fn max_unavailable(rollout: &Value) -> i64 {
    let spec = &rollout["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    if replicas == 0 {
        return 0;
    }
    let canary = &spec["strategy"]["canary"];
    let unavailable = if canary.is_object() {
        let quarter = Value::from("25%");
        let field = |name: &str| {
            if canary[name].is_null() {
                &quarter
            } else {
                &canary[name]
            }
        };
        let surge = int_or_percent(field("maxSurge"), replicas, true).unwrap_or(0);
        let unavailable = int_or_percent(field("maxUnavailable"), replicas, false).unwrap_or(0);
        if surge == 0 && unavailable == 0 {
            1
        } else {
            unavailable
        }
    } else {
        int_or_percent(
            &spec["strategy"]["blueGreen"]["maxUnavailable"],
            replicas,
            false,
        )
        .unwrap_or(0)
    };
    unavailable.min(replicas)
}

/// One of the Rollout's Pods, as the restart weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Its name.
    pub name: String,
    /// When it was created.
    pub created: Millis,
    /// Ready for `minReadySeconds` and not being deleted.
    pub available: bool,
    /// Being deleted already.
    pub deleting: bool,
}

/// What to do now: the Pods to evict, and how many Pods created before `restart_at` remain
/// (zero: the restart is done). `replicas` is the Rollout's, `total` its ReplicaSets' sum.
pub fn plan(
    pods: &[PodFacts],
    restart_at: Millis,
    replicas: i64,
    total: i64,
    max_unavailable: i64,
) -> (Vec<String>, usize) {
    let available = pods.iter().filter(|p| p.available).count() as i64;
    let concurrent = max_unavailable.max(1);
    let mut can = available - (replicas.max(total) - concurrent);
    let mut evict = Vec::new();
    let mut old = 0;
    for pod in pods {
        if pod.created >= restart_at {
            continue;
        }
        old += 1;
        if can <= 0 || pod.deleting {
            continue;
        }
        evict.push(pod.name.clone());
        can -= 1;
    }
    (evict, old)
}

/// The facts of a Pod object as read, at `now` with the Rollout's `minReadySeconds`.
pub fn facts(pod: &Value, min_ready_seconds: i64, now: Millis) -> PodFacts {
    let metadata = &pod["metadata"];
    let deleting = metadata["deletionTimestamp"].is_string();
    let ready_since = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .map(|c| {
            c["lastTransitionTime"]
                .as_str()
                .and_then(parse_time)
                .unwrap_or(Millis::MIN)
        });
    PodFacts {
        name: metadata["name"].as_str().unwrap_or_default().to_owned(),
        created: metadata["creationTimestamp"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(Millis::MIN),
        available: !deleting
            && ready_since
                .is_some_and(|since| since.saturating_add(min_ready_seconds * 1000) <= now),
        deleting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: Millis = 1_700_000_000_000;

    fn pod(name: &str, created: Millis, available: bool) -> PodFacts {
        PodFacts {
            name: name.to_owned(),
            created,
            available,
            deleting: false,
        }
    }

    #[test]
    fn a_restart_is_due_once_its_time_has_come_until_the_status_says_it_was_done() {
        let rollout = |restarted: Option<&str>| json!({"spec": {"restartAt": "2023-11-14T22:13:20Z"}, "status": {"restartedAt": restarted}});
        assert_eq!(due(&rollout(None), T - 1), None);
        assert_eq!(
            due(&rollout(None), T + 1),
            Some(("2023-11-14T22:13:20Z".to_owned(), T))
        );
        assert_eq!(
            due(&rollout(Some("2023-11-14T22:13:20Z")), T + 1),
            None,
            "done"
        );
        assert!(due(&rollout(Some("2023-11-14T22:00:00Z")), T + 1).is_some());
        assert_eq!(due(&json!({"spec": {}}), T), None);
    }

    #[test]
    fn max_unavailable_is_argos() {
        let canary =
            |strategy: Value| json!({"spec": {"replicas": 4, "strategy": {"canary": strategy}}});
        // 25% of 4 down: 1.
        assert_eq!(max_unavailable(&canary(json!({}))), 1);
        // 3 replicas: 25% down is 0, but maxSurge 25% up is 1, so 0 stands.
        let three = json!({"spec": {"replicas": 3, "strategy": {"canary": {}}}});
        assert_eq!(max_unavailable(&three), 0);
        assert_eq!(
            max_unavailable(&canary(json!({"maxUnavailable": 0, "maxSurge": 0}))),
            1
        );
        assert_eq!(
            max_unavailable(&canary(json!({"maxUnavailable": "50%"}))),
            2
        );
        assert_eq!(max_unavailable(&canary(json!({"maxUnavailable": 9}))), 4);
        let blue_green = json!({"spec": {"replicas": 4, "strategy": {"blueGreen": {}}}});
        assert_eq!(max_unavailable(&blue_green), 0);
    }

    #[test]
    fn old_pods_are_evicted_one_at_a_time_while_the_rest_stay_available() {
        let pods = [
            pod("a", T - 10, true),
            pod("b", T - 10, true),
            pod("c", T - 10, true),
        ];
        // 3 of 3 available, one may go: the first.
        assert_eq!(plan(&pods, T, 3, 3, 0), (vec!["a".to_owned()], 3));
        // a went and its replacement is not available yet: none may go.
        let pods = [
            pod("b", T - 10, true),
            pod("c", T - 10, true),
            pod("d", T + 5, false),
        ];
        assert_eq!(plan(&pods, T, 3, 3, 0), (vec![], 2));
        // Two may go at a time.
        let pods = [
            pod("b", T - 10, true),
            pod("c", T - 10, true),
            pod("d", T + 5, true),
            pod("e", T + 5, true),
        ];
        assert_eq!(
            plan(&pods, T, 4, 4, 2),
            (vec!["b".to_owned(), "c".to_owned()], 2)
        );
        // Every Pod younger than the restart: done.
        assert_eq!(plan(&pods[2..], T, 2, 2, 0), (vec![], 0));
    }

    #[test]
    fn a_pod_is_available_once_ready_for_min_ready_seconds() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2023-11-14T22:13:20Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T22:13:30Z"}]},
        });
        assert!(facts(&pod, 0, T + 10_000).available);
        assert!(!facts(&pod, 5, T + 10_000).available);
        assert!(facts(&pod, 5, T + 15_000).available);
        assert_eq!(facts(&pod, 0, T).created, T);
    }
}
