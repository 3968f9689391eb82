//! What the control loop shares with the API and the notifier: the store, the fleets' latest
//! views, the decisions as they are committed, the wake-ups, and the metrics.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{Notify, broadcast};

use super::durable::Store;
use super::record::{AuditEntry, FleetSummary, FleetView, RolloutView};

/// The phase of a fleet that is not running: its desired state is invalid, with no valid one to
/// keep running.
pub const INVALID: &str = "Invalid";

/// One attempt at committing a durable change: (fleet, revision, the clusters it pins, where it
/// went or why not).
pub type GitResult = (
    String,
    flotilla_core::fleet::DurableChange,
    Result<String, String>,
);

/// Counters and histograms for `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<MetricsInner>,
}

#[derive(Debug, Default)]
struct MetricsInner {
    reconcile_buckets: [u64; 8],
    reconcile_count: u64,
    reconcile_sum: f64,
    decisions: BTreeMap<String, u64>,
    runs: BTreeMap<(String, String), u64>,
    weights: BTreeMap<(String, String), (i32, i32)>,
    notifications: BTreeMap<(String, bool), u64>,
}

const RECONCILE_BOUNDS: [f64; 7] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];

impl Metrics {
    pub(crate) fn reconciled(&self, seconds: f64, audit: &[AuditEntry], views: &[FleetView]) {
        let mut m = self.inner.lock().expect("metrics lock");
        let slot = RECONCILE_BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(RECONCILE_BOUNDS.len());
        m.reconcile_buckets[slot] += 1;
        m.reconcile_count += 1;
        m.reconcile_sum += seconds;
        for entry in audit {
            *m.decisions.entry(entry.kind.to_string()).or_default() += 1;
        }
        m.runs.clear();
        for view in views {
            for cluster in view.waves.iter().flat_map(|w| w.clusters.iter()) {
                for run in &cluster.analysis {
                    *m.runs
                        .entry((view.name.clone(), run.phase.clone()))
                        .or_default() += 1;
                }
                if let Some(w) = cluster.weights {
                    m.weights
                        .insert((view.name.clone(), cluster.name.clone()), w);
                }
            }
        }
    }

    pub(crate) fn notification(&self, sink: &str, delivered: bool) {
        let mut m = self.inner.lock().expect("metrics lock");
        *m.notifications
            .entry((sink.to_owned(), delivered))
            .or_default() += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let m = self.inner.lock().expect("metrics lock");
        let mut out = String::new();
        out.push_str("# HELP flotilla_reconcile_duration_seconds Time to run one tick of every fleet.\n# TYPE flotilla_reconcile_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (i, bound) in RECONCILE_BOUNDS.iter().enumerate() {
            cumulative += m.reconcile_buckets[i];
            out.push_str(&format!(
                "flotilla_reconcile_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}\n"
            ));
        }
        out.push_str(&format!(
            "flotilla_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {}\nflotilla_reconcile_duration_seconds_sum {}\nflotilla_reconcile_duration_seconds_count {}\n",
            m.reconcile_count, m.reconcile_sum, m.reconcile_count
        ));
        out.push_str("# HELP flotilla_decisions_total Decisions taken, by kind.\n# TYPE flotilla_decisions_total counter\n");
        for (kind, n) in &m.decisions {
            out.push_str(&format!(
                "flotilla_decisions_total{{kind=\"{kind}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP flotilla_analysis_runs Analysis runs, by fleet and phase.\n# TYPE flotilla_analysis_runs gauge\n");
        for ((fleet, phase), n) in &m.runs {
            out.push_str(&format!(
                "flotilla_analysis_runs{{fleet=\"{fleet}\",phase=\"{phase}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP flotilla_weight Traffic weight in effect, by fleet, cluster and subset.\n# TYPE flotilla_weight gauge\n");
        for ((fleet, cluster), (canary, stable)) in &m.weights {
            out.push_str(&format!(
                "flotilla_weight{{fleet=\"{fleet}\",cluster=\"{cluster}\",subset=\"canary\"}} {canary}\nflotilla_weight{{fleet=\"{fleet}\",cluster=\"{cluster}\",subset=\"stable\"}} {stable}\n"
            ));
        }
        out.push_str("# HELP flotilla_notifications_total Webhook notifications, by sink and result.\n# TYPE flotilla_notifications_total counter\n");
        for ((sink, delivered), n) in &m.notifications {
            let result = if *delivered { "delivered" } else { "failed" };
            out.push_str(&format!(
                "flotilla_notifications_total{{sink=\"{sink}\",result=\"{result}\"}} {n}\n"
            ));
        }
        out
    }
}

/// A fleet as last published by the control loop: its summary, its view, and each cluster's
/// rollout.
pub type Published = (FleetSummary, FleetView, BTreeMap<String, RolloutView>);

/// What the API reads and writes, shared with the control loop.
pub struct Shared {
    /// The store.
    pub store: Arc<Store>,
    /// The fleets' latest views.
    pub views: RwLock<BTreeMap<String, Published>>,
    /// Decisions as they are committed.
    pub events: broadcast::Sender<AuditEntry>,
    /// The bearer token mutating calls need.
    pub token: String,
    /// Whether reads need the token too (`readsNeedToken`).
    pub reads_need_token: bool,
    /// Whether a request must name a loopback host (`localhost`, `127.0.0.1`, `[::1]`): reads
    /// open on a loopback listener, which a web page could otherwise read through a name that
    /// resolves to 127.0.0.1 (DNS rebinding).
    pub loopback_hosts_only: bool,
    /// Wakes the control loop (a command arrived).
    pub wake: Notify,
    /// Whether `flotilla sync` asked for the source to be read now.
    pub sync: AtomicBool,
    /// Decisions made outside a tick (Git commits), committed with the next one.
    pub pending_audit: Mutex<Vec<AuditEntry>>,
    /// Finished attempts at committing a durable change: (fleet, revision, where it went or
    /// why it failed), taken up by the next tick.
    pub git_results: Mutex<Vec<GitResult>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Fleets whose desired state is invalid and that have no last valid one to run, with why.
    pub unrunnable: RwLock<BTreeMap<String, Vec<String>>>,
    /// The dashboard's live pages (None: the dashboard is not served).
    pub live: Option<super::dashboard::live::Live>,
    /// The dashboard's plot histories.
    pub plots: Mutex<super::plots::Plots>,
}
