//! The objects a Rollout owns, as Argo Rollouts' controller writes them: the ReplicaSet of a
//! revision (`<rollout>-<hash>`, its labels, annotations, selector and owner reference) and the
//! selector patch of a Service. Pure functions over JSON; the backend sends them.

use std::collections::BTreeMap;

use flotilla_core::backend::DesiredRun;
use flotilla_core::rollout::AnalysisSlot;
use flotilla_core::time::Millis;
use serde_json::{Map, Value, json};

use super::status::rfc3339;

/// The label (and selector key) that ties Pods, ReplicaSets and Services to a revision.
pub const HASH_LABEL: &str = "rollouts-pod-template-hash";
/// The label that says which controller instance owns a Rollout (Argo's `--instance-id`).
pub const INSTANCE_LABEL: &str = "argo-rollouts.argoproj.io/controller-instance-id";
/// Flotilla's instance id: an Argo controller without `--instance-id` ignores Rollouts with it.
pub const INSTANCE: &str = "flotilla";
/// A ReplicaSet's revision number.
pub const REVISION_ANNOTATION: &str = "rollout.argoproj.io/revision";
/// The Rollout's replicas when the ReplicaSet was written.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "rollout.argoproj.io/desired-replicas";
/// On a Service whose selector the Rollout manages: the Rollout's name.
pub const MANAGED_BY_ANNOTATION: &str = "argo-rollouts.argoproj.io/managed-by-rollouts";
/// Flotilla's field manager for every write.
pub const FIELD_MANAGER: &str = "flotilla";

/// The name of a revision's ReplicaSet.
pub fn replica_set_name(rollout: &str, hash: &str) -> String {
    format!("{rollout}-{hash}")
}

/// The owner reference of every object a Rollout owns.
pub fn owner_reference(rollout: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "name": rollout,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The ReplicaSet of one revision of `rollout` (the Rollout object as read from the cluster):
/// named `<rollout>-<hash>`, its template `template` with the hash label, its selector the
/// Rollout's with the hash label, owned by the Rollout, `replicas` replicas.
pub fn replica_set(
    rollout: &Value,
    template: &Value,
    hash: &str,
    revision: u32,
    replicas: i32,
) -> Value {
    let name = rollout["metadata"]["name"].as_str().unwrap_or_default();
    let uid = rollout["metadata"]["uid"].as_str().unwrap_or_default();
    let mut template = template.clone();
    let labels = with_hash_label(&template["metadata"]["labels"], hash);
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    template["metadata"]["labels"] = labels.clone();
    let mut selector = rollout["spec"]["selector"].clone();
    if !selector.is_object() {
        selector = json!({});
    }
    selector["matchLabels"] = with_hash_label(&selector["matchLabels"], hash);
    let desired = rollout["spec"]["replicas"].as_i64().unwrap_or(1);
    let mut spec = json!({
        "replicas": replicas,
        "selector": selector,
        "template": template,
    });
    if let Some(min_ready) = rollout["spec"]["minReadySeconds"].as_i64() {
        spec["minReadySeconds"] = json!(min_ready);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": replica_set_name(name, hash),
            "namespace": rollout["metadata"]["namespace"],
            "labels": labels,
            "annotations": {
                REVISION_ANNOTATION: revision.to_string(),
                DESIRED_REPLICAS_ANNOTATION: desired.to_string(),
            },
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": spec,
    })
}

/// `labels` (an object or null) with the hash label set.
fn with_hash_label(labels: &Value, hash: &str) -> Value {
    let mut out = labels.as_object().cloned().unwrap_or_else(Map::new);
    out.insert(HASH_LABEL.into(), Value::String(hash.into()));
    Value::Object(out)
}

/// The label selector of a Rollout's ReplicaSets: its `spec.selector.matchLabels` and the
/// hash label's existence (`app=payments,rollouts-pod-template-hash`).
pub fn replica_set_selector(rollout: &Value) -> String {
    let mut terms: Vec<String> = rollout["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter(|(k, _)| k.as_str() != HASH_LABEL)
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    terms.sort();
    terms.push(HASH_LABEL.to_owned());
    terms.join(",")
}

/// The merge patch that points a Service at revision `hash`, or None when `service` (as read)
/// already does and carries the managed-by annotation.
pub fn service_patch(service: &Value, rollout: &str, hash: &str) -> Option<Value> {
    let selected = service["spec"]["selector"][HASH_LABEL].as_str();
    let managed = service["metadata"]["annotations"][MANAGED_BY_ANNOTATION].as_str();
    if selected == Some(hash) && managed == Some(rollout) {
        return None;
    }
    Some(json!({
        "metadata": {"annotations": {MANAGED_BY_ANNOTATION: rollout}},
        "spec": {"selector": {HASH_LABEL: hash}},
    }))
}

/// The Rollout manifest Flotilla applies (`rolloutSource: flotilla`): `manifest` with the
/// instance-id label, only the fields Flotilla means to own (apiVersion, kind, metadata name,
/// namespace, labels and annotations, spec), and without `spec.replicas` when `keep_replicas`
/// (an HPA owns the count).
pub fn applied_rollout(manifest: &Value, namespace: &str, keep_replicas: bool) -> Value {
    let mut metadata = json!({
        "name": manifest["metadata"]["name"],
        "namespace": namespace,
    });
    let mut labels = manifest["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(INSTANCE_LABEL.into(), Value::String(INSTANCE.into()));
    metadata["labels"] = Value::Object(labels);
    if let Some(annotations) = manifest["metadata"]["annotations"].as_object()
        && !annotations.is_empty()
    {
        metadata["annotations"] = Value::Object(annotations.clone());
    }
    let mut spec = manifest["spec"].clone();
    if keep_replicas && let Some(spec) = spec.as_object_mut() {
        spec.remove("replicas");
    }
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": metadata,
        "spec": spec,
    })
}

/// The AnalysisRun object of one of the Rollout's runs, as Argo names, labels and fills it:
/// `<rollout>-<hash>-<revision>[-<step>|-pre|-post]` (`.<attempt>` after a retry), the hash,
/// `rollout-type` and `step-index` labels, the instance label, the revision annotation, owned by
/// the Rollout; its spec (metrics, arguments, `terminate`) and its status (phase, message,
/// each metric's counts and measurements, the run summary). Returns its name and the object.
pub fn analysis_run(rollout: &Value, run: &DesiredRun, hash: &str) -> (String, Value) {
    let name = rollout["metadata"]["name"].as_str().unwrap_or_default();
    let uid = rollout["metadata"]["uid"].as_str().unwrap_or_default();
    let key = run.key;
    let mut labels = json!({HASH_LABEL: hash, INSTANCE_LABEL: INSTANCE});
    let (suffix, kind) = match key.slot {
        AnalysisSlot::Step(i) => {
            labels["step-index"] = json!(i.to_string());
            (format!("-{i}"), "Step")
        }
        AnalysisSlot::Background => (String::new(), "Background"),
        AnalysisSlot::PrePromotion => ("-pre".to_owned(), "PrePromotion"),
        AnalysisSlot::PostPromotion => ("-post".to_owned(), "PostPromotion"),
        AnalysisSlot::Wave(w) => (format!("-wave-{w}"), "Wave"),
    };
    labels["rollout-type"] = json!(kind);
    let mut run_name = format!("{name}-{hash}-{}{suffix}", key.revision);
    if key.attempt > 0 {
        run_name.push_str(&format!(".{}", key.attempt));
    }
    let state = &run.run;
    let time = |t: Option<Millis>| t.map_or(Value::Null, |t| json!(rfc3339(t)));
    let metrics: Vec<Value> = state
        .metrics
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "phase": m.phase,
                "message": m.message,
                "count": m.count,
                "successful": m.successful,
                "failed": m.failed,
                "inconclusive": m.inconclusive,
                "error": m.error,
                "consecutiveError": m.consecutive_error,
                "measurements": m.measurements.iter().map(|x| {
                    let mut measurement = json!({
                        "phase": x.phase,
                        "value": x.value,
                        "message": x.message,
                        "startedAt": rfc3339(x.started_at),
                        "finishedAt": time(x.finished_at),
                    });
                    // Where `kubectl argo rollouts get` finds a job metric's Job (only these
                    // keys: other providers' metadata may hold a query with a secret in it).
                    let job: BTreeMap<&str, &str> = ["job-name", "job-namespace"]
                        .into_iter()
                        .filter_map(|k| Some((k, x.metadata.get(k)?.as_str())))
                        .collect();
                    if !job.is_empty() {
                        measurement["metadata"] = json!(job);
                    }
                    measurement
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut spec = run.spec.clone();
    spec["terminate"] = json!(state.terminate);
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisRun",
        "metadata": {
            "name": run_name,
            "namespace": rollout["metadata"]["namespace"],
            "labels": labels,
            "annotations": {REVISION_ANNOTATION: key.revision.to_string()},
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": spec,
        "status": {
            "phase": state.phase,
            "message": state.message,
            "startedAt": rfc3339(state.started_at),
            "metricResults": metrics,
            "runSummary": {
                "count": state.run_summary.count,
                "successful": state.run_summary.successful,
                "failed": state.run_summary.failed,
                "inconclusive": state.run_summary.inconclusive,
                "error": state.run_summary.error,
            },
        },
    });
    (run_name, object)
}

/// The name of the Job a `job` metric's measurement at `at` makes: `<rollout>-<metric>-<at>`
/// (milliseconds in base 36), lower case, characters a name may not hold as `-`, at most 63.
pub fn job_name(rollout: &str, metric: &str, at: Millis) -> String {
    let mut stamp = String::new();
    let mut n = at.max(0) as u64;
    loop {
        let digit = (n % 36) as u32;
        stamp.insert(0, char::from_digit(digit, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_alphanumeric() { c } else { '-' }
            })
            .collect()
    };
    let prefix = format!("{}-{}", clean(rollout), clean(metric));
    let room = 63 - stamp.len() - 1;
    let prefix: String = prefix.chars().take(room).collect();
    format!("{}-{stamp}", prefix.trim_end_matches('-'))
}

/// The Job of a `job` metric: the metric's labels and annotations plus the instance label and
/// `flotilla.dev/rollout`, `flotilla.dev/metric`, in `namespace`, with the metric's spec.
pub fn job(
    name: &str,
    namespace: &str,
    rollout: &str,
    metric: &str,
    job: &flotilla_core::spec::analysis::JobMetric,
) -> Value {
    let meta = job.metadata.as_ref();
    let mut labels = meta
        .map(|m| serde_json::to_value(&m.labels).unwrap_or_default())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    labels[INSTANCE_LABEL] = json!(INSTANCE);
    labels["flotilla.dev/rollout"] = json!(rollout);
    let mut annotations = meta
        .map(|m| serde_json::to_value(&m.annotations).unwrap_or_default())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    annotations["flotilla.dev/metric"] = json!(metric);
    // Argo's Jobs go with their AnalysisRun (owner reference); these are made per measurement,
    // so the Job controller removes them a day after they finish unless the spec says when.
    let mut spec = serde_json::to_value(&job.spec).unwrap_or_default();
    if spec["ttlSecondsAfterFinished"].is_null() {
        spec["ttlSecondsAfterFinished"] = json!(JOB_TTL_SECONDS);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// How long a finished `job` metric's Job is kept when its spec does not say.
pub const JOB_TTL_SECONDS: i64 = 86_400;

/// The AnalysisRuns to delete among `runs` (the Rollout's, as read), as Argo's
/// `FilterAnalysisRunsToDelete` picks them: newest first, the current ones (`keep`) and those
/// still running are left alone, runs without the hash label or of a hash no ReplicaSet has
/// (`hashes`) go, and of the rest only the newest `successful` Successful and `unsuccessful`
/// Failed, Error or Inconclusive ones stay (the Rollout's `spec.analysis.successfulRunHistoryLimit`
/// and `unsuccessfulRunHistoryLimit`, 5 each by default).
pub fn runs_to_delete(
    runs: &[Value],
    keep: &std::collections::BTreeSet<String>,
    hashes: &std::collections::BTreeSet<String>,
    successful: usize,
    unsuccessful: usize,
) -> Vec<String> {
    let mut runs: Vec<&Value> = runs
        .iter()
        .filter(|r| {
            let name = r["metadata"]["name"].as_str().unwrap_or_default();
            !keep.contains(name) && r["metadata"]["deletionTimestamp"].is_null()
        })
        .collect();
    // Newest first (RFC 3339 in UTC sorts as text); the name breaks ties.
    runs.sort_by(|a, b| {
        let key = |r: &Value| {
            (
                r["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                r["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        };
        key(b).cmp(&key(a))
    });
    let (mut ok, mut bad) = (0, 0);
    let mut out = Vec::new();
    for run in runs {
        let name = run["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let hash = run["metadata"]["labels"][HASH_LABEL].as_str();
        if hash.is_none_or(|h| !hashes.contains(h)) {
            out.push(name);
            continue;
        }
        let (count, limit) = match run["status"]["phase"].as_str() {
            Some("Successful") => (&mut ok, successful),
            Some("Failed" | "Error" | "Inconclusive") => (&mut bad, unsuccessful),
            _ => continue,
        };
        if *count < limit {
            *count += 1;
        } else {
            out.push(name);
        }
    }
    out
}

/// The Rollout as the cluster holds it, reduced to what its owner (Argo CD, Flux) decides:
/// `apiVersion`, `kind`, `metadata` (name, namespace, labels, annotations but the last applied
/// configuration) and `spec` (`rolloutSource: cluster`).
pub fn held_rollout(rollout: &Value) -> Value {
    let metadata = &rollout["metadata"];
    let mut reduced = json!({"name": metadata["name"], "namespace": metadata["namespace"]});
    if let Some(labels) = metadata["labels"].as_object() {
        reduced["labels"] = Value::Object(labels.clone());
    }
    if let Some(annotations) = metadata["annotations"].as_object() {
        let mut annotations = annotations.clone();
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        if !annotations.is_empty() {
            reduced["annotations"] = Value::Object(annotations);
        }
    }
    json!({
        "apiVersion": rollout["apiVersion"],
        "kind": rollout["kind"],
        "metadata": reduced,
        "spec": rollout["spec"],
    })
}

/// The manager and field of a server-side apply conflict, from the API server's message
/// (`Apply failed with 1 conflict: conflict with "argocd-controller" using argoproj.io/v1alpha1:
/// .spec.template.spec.containers[name="app"].image`).
pub fn apply_conflict(message: &str) -> (String, String) {
    let manager = message
        .split_once("conflict with \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(manager, _)| manager.to_owned())
        .unwrap_or_else(|| "another field manager".to_owned());
    let field = message
        .rsplit_once(": .")
        .map(|(_, field)| field.lines().next().unwrap_or(field).trim().to_owned())
        .unwrap_or_else(|| "spec".to_owned());
    (manager, field)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_job_is_named_for_its_rollout_metric_and_time_within_63_characters() {
        assert_eq!(
            job_name("payments", "smoke_test", 35),
            "payments-smoke-test-z"
        );
        let long = job_name(&"r".repeat(50), &"m".repeat(50), 1_700_000_000_000);
        assert_eq!(long.len(), 63, "{long}");
        assert!(long.ends_with(&format!("-{}", "loyw3v28")), "{long}");
    }

    #[test]
    fn old_analysis_runs_go_as_argo_keeps_them() {
        let run = |name: &str, created: &str, hash: Option<&str>, phase: &str| {
            json!({
                "metadata": {"name": name, "creationTimestamp": created, "labels": {HASH_LABEL: hash}},
                "status": {"phase": phase},
            })
        };
        let runs = [
            run("r1", "2026-01-01T00:00:01Z", Some("a"), "Successful"),
            run("r2", "2026-01-01T00:00:02Z", Some("a"), "Successful"),
            run("r3", "2026-01-01T00:00:03Z", Some("b"), "Successful"),
            run("f1", "2026-01-01T00:00:04Z", Some("b"), "Failed"),
            run("f2", "2026-01-01T00:00:05Z", Some("b"), "Error"),
            run("run", "2026-01-01T00:00:06Z", Some("b"), "Running"),
            run("gone", "2026-01-01T00:00:07Z", Some("z"), "Successful"),
            run("bare", "2026-01-01T00:00:08Z", None, "Successful"),
            run("now", "2026-01-01T00:00:09Z", Some("b"), "Successful"),
        ];
        let keep = std::collections::BTreeSet::from(["now".to_owned()]);
        let hashes = std::collections::BTreeSet::from(["a".to_owned(), "b".to_owned()]);
        // Two of each kind kept: r3, r2 and f2, f1; r1 goes; no ReplicaSet for z, no hash label.
        assert_eq!(
            runs_to_delete(&runs, &keep, &hashes, 2, 2),
            ["bare", "gone", "r1"]
        );
        // One unsuccessful kept: f1 goes too.
        assert_eq!(
            runs_to_delete(&runs, &keep, &hashes, 5, 1),
            ["bare", "gone", "f1"]
        );
    }

    use super::*;

    fn rollout() -> Value {
        json!({
            "metadata": {"name": "payments", "namespace": "shop", "uid": "u-1"},
            "spec": {
                "replicas": 4,
                "minReadySeconds": 5,
                "selector": {"matchLabels": {"app": "payments"}},
            },
        })
    }

    #[test]
    fn a_replica_set_is_named_labelled_selected_and_owned_as_argo_writes_it() {
        let template =
            json!({"metadata": {"labels": {"app": "payments"}}, "spec": {"containers": []}});
        let rs = replica_set(&rollout(), &template, "5d8f7c", 3, 1);
        assert_eq!(rs["metadata"]["name"], "payments-5d8f7c");
        assert_eq!(rs["metadata"]["namespace"], "shop");
        assert_eq!(rs["metadata"]["labels"][HASH_LABEL], "5d8f7c");
        assert_eq!(rs["metadata"]["labels"]["app"], "payments");
        assert_eq!(rs["metadata"]["annotations"][REVISION_ANNOTATION], "3");
        assert_eq!(
            rs["metadata"]["annotations"][DESIRED_REPLICAS_ANNOTATION],
            "4"
        );
        assert_eq!(rs["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(rs["spec"]["replicas"], 1);
        assert_eq!(rs["spec"]["minReadySeconds"], 5);
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"app": "payments", HASH_LABEL: "5d8f7c"})
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
            "5d8f7c"
        );
    }

    #[test]
    fn replica_sets_are_listed_by_the_rollouts_selector_and_the_hash_label() {
        assert_eq!(
            replica_set_selector(&rollout()),
            "app=payments,rollouts-pod-template-hash"
        );
        assert_eq!(replica_set_selector(&json!({})), HASH_LABEL);
    }

    #[test]
    fn a_service_is_patched_only_when_it_selects_another_revision() {
        let current = json!({
            "metadata": {"annotations": {MANAGED_BY_ANNOTATION: "payments"}},
            "spec": {"selector": {"app": "payments", HASH_LABEL: "aaa"}},
        });
        assert_eq!(service_patch(&current, "payments", "aaa"), None);
        let patch = service_patch(&current, "payments", "bbb").unwrap();
        assert_eq!(patch["spec"]["selector"][HASH_LABEL], "bbb");
        let unmanaged = json!({"spec": {"selector": {"app": "payments"}}});
        assert!(service_patch(&unmanaged, "payments", "aaa").is_some());
    }

    #[test]
    fn the_applied_rollout_carries_the_instance_label_and_leaves_replicas_to_an_hpa() {
        let manifest = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "payments", "labels": {"team": "pay"}, "uid": "x"},
            "spec": {"replicas": 3, "template": {}},
            "status": {"phase": "Healthy"},
        });
        let applied = applied_rollout(&manifest, "shop", false);
        assert_eq!(applied["metadata"]["labels"][INSTANCE_LABEL], INSTANCE);
        assert_eq!(applied["metadata"]["labels"]["team"], "pay");
        assert_eq!(applied["metadata"]["namespace"], "shop");
        assert!(applied.get("status").is_none());
        assert!(applied["metadata"].get("uid").is_none());
        assert_eq!(applied["spec"]["replicas"], 3);
        assert!(
            applied_rollout(&manifest, "shop", true)["spec"]
                .get("replicas")
                .is_none()
        );
    }

    #[test]
    fn an_apply_conflict_names_the_manager_and_the_field() {
        let message = "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using argoproj.io/v1alpha1: .spec.template.spec.containers[name=\"app\"].image";
        assert_eq!(
            apply_conflict(message),
            (
                "kubectl-edit".to_owned(),
                "spec.template.spec.containers[name=\"app\"].image".to_owned()
            )
        );
    }
}
