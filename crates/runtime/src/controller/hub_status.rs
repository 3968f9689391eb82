//! What a hub shows of each fleet: a bounded summary on its FleetRollout's `status` (at most
//! 64 KiB at any fleet size: counts by status overall and per wave, at most 50 clusters that
//! failed or wait, conditions) and an aggregate status in Argo's shape on the hub's Rollout
//! (`phase`, `message`, `observedGeneration`: what Argo CD's health check of a Rollout reads).
//! Both are pure functions of the fleet's view; the writer sends them only when they changed
//! (no per-tick timestamps in them), retrying a failed write.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::record::{ClusterView, FleetView};
use super::source::Source;

/// At most this many clusters are named in a summary.
pub const NAMED_CLUSTERS: usize = 50;
/// At most this many waves are counted one by one in a summary.
pub const COUNTED_WAVES: usize = 100;
/// At most this many bytes of any one text in a summary.
const TEXT_BYTES: usize = 300;
/// At most this many of the desired state's errors in a summary.
const ERRORS: usize = 10;

/// What is written for one fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct HubStatus {
    /// The FleetRollout.
    pub fleet: String,
    /// Its Rollout in the hub.
    pub rollout: String,
    /// The FleetRollout's `status`.
    pub fleet_status: Value,
    /// The hub Rollout's `status`.
    pub rollout_status: Value,
}

fn cut(text: &str) -> String {
    if text.len() <= TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// How much a cluster needs a reader's attention: failed first, then those that cannot be
/// driven, then those held or paused, then those in flight (waiting on a step or a verdict);
/// None for a cluster that needs none.
fn attention(cluster: &ClusterView) -> Option<u8> {
    match cluster.status.as_str() {
        "RolledBack" => Some(0),
        _ if cluster.condition.is_some() || !cluster.reachable => Some(1),
        "Held" | "Paused" | "Pinned" | "Skipped" => Some(2),
        "Progressing" => Some(3),
        _ => None,
    }
}

fn counts<'a>(clusters: impl Iterator<Item = &'a ClusterView>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in clusters {
        *out.entry(c.status.clone()).or_default() += 1;
    }
    out
}

/// The FleetRollout's `status`: a summary whose size does not grow with the fleet.
pub fn fleet_status(view: &FleetView, generation: Option<i64>) -> Value {
    let all = || view.waves.iter().flat_map(|w| w.clusters.iter());
    let mut named: Vec<(u8, usize, &ClusterView)> = view
        .waves
        .iter()
        .flat_map(|w| w.clusters.iter().map(move |c| (w.index, c)))
        .filter_map(|(wave, c)| attention(c).map(|a| (a, wave, c)))
        .collect();
    named.sort_by(|a, b| (a.0, a.1, &a.2.name).cmp(&(b.0, b.1, &b.2.name)));
    let omitted = named.len().saturating_sub(NAMED_CLUSTERS);
    let clusters: Vec<Value> = named
        .iter()
        .take(NAMED_CLUSTERS)
        .map(|(_, wave, c)| {
            let mut entry = json!({
                "name": c.name,
                "wave": wave,
                "status": c.status,
                "reason": cut(&c.reason),
            });
            if let Some(step) = &c.step {
                entry["step"] = json!(step);
            }
            if let Some(condition) = &c.condition {
                entry["condition"] = json!(cut(condition));
            } else if !c.reachable {
                entry["condition"] = json!("Unreachable");
            }
            if let Some(failure) = &c.failure {
                entry["failure"] = json!({
                    "metric": cut(&failure.metric),
                    "value": cut(&failure.value),
                    "message": cut(&failure.message),
                });
            }
            entry
        })
        .collect();
    let waves: Vec<Value> = view
        .waves
        .iter()
        .take(COUNTED_WAVES)
        .map(|w| {
            json!({
                "wave": w.index,
                "clusters": w.clusters.len(),
                "counts": counts(w.clusters.iter()),
                "startedAt": w.started_at,
                "completedAt": w.completed_at,
            })
        })
        .collect();
    let invalid = !view.errors.is_empty();
    let mut conditions = vec![json!({
        "type": "Progressing",
        "status": if view.phase == "Progressing" || view.phase == "Paused" { "True" } else { "False" },
        "reason": view.phase,
        "message": cut(&view.message),
    })];
    conditions.push(json!({
        "type": "Invalid",
        "status": if invalid { "True" } else { "False" },
        "reason": if invalid { "DesiredStateInvalid" } else { "DesiredStateValid" },
        "message": if invalid {
            "the latest desired state is invalid; the fleet keeps running its last valid one"
        } else {
            ""
        },
    }));
    json!({
        "phase": view.phase,
        "message": cut(&view.message),
        "revision": view.revision,
        "image": cut(&view.image),
        "previousImage": cut(&view.previous_image),
        "wave": format!("{}/{}", view.wave, view.waves.len()),
        "paused": view.paused,
        "observedGeneration": generation,
        "clusters": {
            "total": all().count(),
            "counts": counts(all()),
            "named": clusters,
            "omitted": omitted,
        },
        "waves": waves,
        "wavesOmitted": view.waves.len().saturating_sub(COUNTED_WAVES),
        "errors": view.errors.iter().take(ERRORS).map(|e| cut(e)).collect::<Vec<_>>(),
        "conditions": conditions,
    })
}

/// The hub Rollout's `status` in Argo's shape: the fleet's phase as a Rollout's (`Completed`
/// is `Healthy`; `Halted` and `Aborted` are `Degraded`), a message with the counts, and the
/// Rollout's generation as observed (a string, as Argo writes it).
pub fn rollout_status(view: &FleetView, generation: Option<i64>) -> Value {
    let phase = match view.phase.as_str() {
        "Completed" => "Healthy",
        "Progressing" => "Progressing",
        "Paused" => "Paused",
        "Halted" | "Aborted" => "Degraded",
        _ => "Degraded",
    };
    let counts = counts(view.waves.iter().flat_map(|w| w.clusters.iter()));
    let said: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let message = format!(
        "fleet {}: {} (wave {}/{}; {})",
        view.name,
        if view.message.is_empty() {
            view.phase.as_str()
        } else {
            view.message.as_str()
        },
        view.wave,
        view.waves.len(),
        said.join(", ")
    );
    let mut status = json!({
        "phase": phase,
        "message": cut(&message),
    });
    if let Some(generation) = generation {
        status["observedGeneration"] = json!(generation.to_string());
    }
    status
}

/// Writes each fleet's statuses to the hub when they change; a failed write is tried again
/// (every 2 s) until it lands or the status changes again.
pub async fn run(source: Arc<Source>, mut statuses: tokio::sync::watch::Receiver<Vec<HubStatus>>) {
    let mut written: HashMap<(String, &'static str), Value> = HashMap::new();
    loop {
        let current = statuses.borrow_and_update().clone();
        let Some(hub) = source.hub() else {
            return;
        };
        let mut failed = false;
        for status in &current {
            for (which, value) in [
                ("fleet", &status.fleet_status),
                ("rollout", &status.rollout_status),
            ] {
                let key = (status.fleet.clone(), which);
                if written.get(&key) == Some(value) {
                    continue;
                }
                let result = if which == "fleet" {
                    hub.write_fleet_status(&status.fleet, value).await
                } else {
                    hub.write_rollout_status(&status.rollout, value).await
                };
                match result {
                    Ok(()) => {
                        written.insert(key, value.clone());
                    }
                    Err(e) => {
                        failed = true;
                        tracing::warn!(fleet = %status.fleet, error = %e, "a status write to the hub failed; tried again");
                    }
                }
            }
        }
        if failed {
            let _ = tokio::time::timeout(Duration::from_secs(2), statuses.changed()).await;
        } else if statuses.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::record::{FailureView, WaveView};

    fn cluster(name: String, status: &str) -> ClusterView {
        ClusterView {
            name,
            status: status.into(),
            reason: "x".repeat(2000),
            reachable: true,
            rollout_phase: "Progressing".into(),
            rollout_message: String::new(),
            step: Some("2/5".into()),
            weights: Some((20, 80)),
            desired_weight: Some(20),
            stable_version: Some("1.0".into()),
            current_version: Some("2.0".into()),
            failure: (status == "RolledBack").then(|| FailureView {
                metric: "error-rate".into(),
                value: "0.4".into(),
                message: "y".repeat(5000),
            }),
            started_at: Some(1),
            decided_at: None,
            analysis: Vec::new(),
            drift: None,
            condition: None,
        }
    }

    fn view(clusters: usize, waves: usize) -> FleetView {
        let statuses = [
            "Validated",
            "Progressing",
            "RolledBack",
            "Held",
            "NotStarted",
        ];
        FleetView {
            name: "payments".into(),
            revision: "abc".into(),
            image: "payments:2.0".into(),
            previous_image: "payments:1.0".into(),
            phase: "Halted".into(),
            message: "cluster-0007 rolled back".into(),
            wave: 2,
            paused: false,
            git: None,
            waves: (0..waves)
                .map(|w| WaveView {
                    index: w + 1,
                    started_at: Some(10),
                    completed_at: None,
                    clusters: (0..clusters / waves)
                        .map(|i| {
                            cluster(
                                format!("cluster-{w:03}-{i:05}"),
                                statuses[(i + w) % statuses.len()],
                            )
                        })
                        .collect(),
                    lockstep: false,
                    barrier: None,
                })
                .collect(),
            errors: vec!["e".repeat(10_000); 40],
        }
    }

    #[test]
    fn the_summary_stays_under_64_kib_at_any_fleet_size() {
        for (clusters, waves) in [(3, 3), (1_000, 10), (10_000, 20), (10_000, 500)] {
            let status = fleet_status(&view(clusters, waves), Some(3));
            let bytes = serde_json::to_vec(&status).unwrap().len();
            assert!(
                bytes < 64 * 1024,
                "{clusters} clusters, {waves} waves: {bytes} bytes"
            );
            assert_eq!(status["clusters"]["total"], clusters / waves * waves);
            let named = status["clusters"]["named"].as_array().unwrap();
            assert!(named.len() <= NAMED_CLUSTERS);
        }
    }

    #[test]
    fn the_failed_clusters_come_first_with_their_failure() {
        let status = fleet_status(&view(1_000, 10), None);
        let named = status["clusters"]["named"].as_array().unwrap();
        assert_eq!(named.len(), NAMED_CLUSTERS);
        assert!(
            named.iter().all(|c| c["status"] == "RolledBack"),
            "{named:#?}"
        );
        assert_eq!(named[0]["failure"]["metric"], "error-rate");
        assert_eq!(status["clusters"]["counts"]["RolledBack"], 200);
        assert_eq!(
            status["clusters"]["omitted"],
            200 + 200 + 200 - NAMED_CLUSTERS
        );
        assert_eq!(status["wave"], "2/10");
    }

    #[test]
    fn the_rollout_status_reads_as_argos() {
        let mut v = view(3, 3);
        assert_eq!(rollout_status(&v, Some(4))["phase"], "Degraded");
        assert_eq!(rollout_status(&v, Some(4))["observedGeneration"], "4");
        v.phase = "Completed".into();
        assert_eq!(rollout_status(&v, None)["phase"], "Healthy");
        v.phase = "Paused".into();
        assert_eq!(rollout_status(&v, None)["phase"], "Paused");
        let message = rollout_status(&v, None)["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.starts_with("fleet payments: "), "{message}");
    }

    #[test]
    fn the_same_view_is_the_same_status() {
        let v = view(100, 4);
        assert_eq!(fleet_status(&v, Some(1)), fleet_status(&v.clone(), Some(1)));
    }
}
