//! The dashboard at 1,000 clusters: the daemon's memory for 1,000 clusters' full plot histories
//! (weight plus two metrics, 2,000 points each, restored as a restarted daemon restores them),
//! the server's cost of re-rendering the live fleet page, and the time headless Chromium
//! (Debian's `chromium` through `chromedriver`) takes to show the fleet view of 1,000 clusters
//! and one cluster's page with its full plots. Medians of several runs.
//! Run with `cargo bench --bench dashboard`; `DASHBOARD_BENCH_CLUSTERS` (default 1000) and
//! `DASHBOARD_BENCH_RUNS` (default 7) change the size and the number of runs.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use flotilla_core::analysis::condition::{Comparison, Threshold};
use flotilla_runtime::controller::dashboard::live::Live;
use flotilla_runtime::controller::durable::Store;
use flotilla_runtime::controller::plots::{
    self, ClusterPlots, MAX_POINTS, Mark, MetricSeries, Plots, Point,
};
use flotilla_runtime::controller::record::{ClusterView, FleetSummary, FleetView, WaveView};
use flotilla_runtime::controller::shared::{Metrics, Shared};
use flotilla_runtime::controller::store::OpenMode;

#[path = "../tests/common/browser.rs"]
mod browser;

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn cluster(i: usize, wave: usize, current: usize) -> ClusterView {
    let status = match wave.cmp(&current) {
        std::cmp::Ordering::Less => "Validated",
        std::cmp::Ordering::Equal if i.is_multiple_of(37) => "RolledBack",
        std::cmp::Ordering::Equal => "Progressing",
        std::cmp::Ordering::Greater => "NotStarted",
    };
    serde_json::from_value(serde_json::json!({
        "name": format!("cluster-{i:04}"), "status": status,
        "reason": if status == "Progressing" { "waiting: bake 2m of 5m" } else { "" },
        "reachable": true, "rolloutPhase": "Progressing", "rolloutMessage": "",
        "step": "2/4", "weights": [20, 80], "desiredWeight": 20,
        "stableVersion": "1.8.3", "currentVersion": "1.9.0", "failure": null,
        "startedAt": 0, "decidedAt": null, "analysis": []
    }))
    .unwrap()
}

fn fleet(n: usize) -> FleetView {
    // Waves: 1% canary, then 9%, then the rest; the second is current.
    let bounds = [0, n / 100, n / 10, n];
    FleetView {
        name: "payments".into(),
        revision: "2".into(),
        image: "payment-api:1.9.0".into(),
        previous_image: "payment-api:1.8.3".into(),
        phase: "Progressing".into(),
        message: String::new(),
        wave: 2,
        paused: false,
        git: None,
        waves: (0..3)
            .map(|w| WaveView {
                index: w + 1,
                started_at: Some(0),
                completed_at: None,
                clusters: (bounds[w]..bounds[w + 1])
                    .map(|i| cluster(i, w + 1, 2))
                    .collect(),
                lockstep: false,
                barrier: None,
            })
            .collect(),
        errors: Vec::new(),
    }
}

fn full_plots() -> ClusterPlots {
    let series = |base: f64, every: usize| -> Vec<Point> {
        (0..MAX_POINTS)
            .map(|i| {
                let failed = i.is_multiple_of(every);
                Point::new(
                    1_796_000_000_000 + i as i64 * 5_000,
                    Some(base * if failed { 2.0 } else { 1.0 } + (i % 13) as f64 * base / 100.0),
                    if failed {
                        Mark::Failed
                    } else {
                        Mark::Successful
                    },
                )
            })
            .collect()
    };
    let metric = |base: f64, threshold: f64| MetricSeries {
        points: series(base, 97),
        thresholds: vec![(
            true,
            Threshold {
                op: Comparison::Greater,
                value: threshold,
            },
        )],
        explanation: BTreeMap::new(),
        seen: BTreeMap::from([("background-rev2".into(), 1_796_010_000_000)]),
    };
    ClusterPlots {
        weight: series(20.0, usize::MAX),
        metrics: BTreeMap::from([
            ("error-rate".into(), metric(0.004, 0.01)),
            ("latency-p95".into(), metric(0.12, 0.2)),
        ]),
    }
}

fn main() {
    let n = size("DASHBOARD_BENCH_CLUSTERS", 1000);
    let runs = size("DASHBOARD_BENCH_RUNS", 7);
    let view = fleet(n);

    // The plot histories: what a restarted daemon holds after reading them back.
    let baseline = rss_kib();
    let one = serde_json::to_vec(&full_plots()).unwrap();
    let entries: Vec<(String, Vec<u8>)> = view
        .waves
        .iter()
        .flat_map(|w| &w.clusters)
        .map(|c| (plots::key("payments", &c.name), one.clone()))
        .collect();
    let stored: usize = entries.iter().map(|e| e.1.len()).sum();
    // The stored form is gone once read (as in the daemon): RSS against the baseline.
    let restored = Plots::restore(entries);
    let after = rss_kib();
    println!(
        "plot histories: {n} clusters x 3 series x {MAX_POINTS} points = {} points; daemon memory +{:.1} MiB (RSS; {} bytes a point); {:.1} MiB in the store",
        restored.points(),
        (after.saturating_sub(baseline)) as f64 / 1024.0,
        std::mem::size_of::<Point>(),
        stored as f64 / 1_048_576.0
    );

    // The server: re-rendering the live pages of a 1,000-cluster fleet after a change.
    let live = Live::new("/dashboard");
    let list = vec![FleetSummary {
        name: "payments".into(),
        revision: "2".into(),
        image: "payment-api:1.9.0".into(),
        phase: "Progressing".into(),
        wave: 2,
        waves: 3,
        message: String::new(),
        errors: Vec::new(),
    }];
    let mut times = Vec::new();
    let mut changing = view.clone();
    for i in 0..runs.max(3) * 3 {
        let count = changing.waves[1].clusters.len().max(1);
        changing.waves[1].clusters[i % count].reason = format!("waiting: bake {i}s of 5m");
        let t = Instant::now();
        live.update(&list, &[&changing]);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "server: re-rendering the fleet page of {n} clusters after a change: median {:.2} ms",
        median(times)
    );

    // Chromium.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let (store, _) = Store::open(&dir.path().join("s.redb"), OpenMode::Existing).unwrap();
        let rollouts: BTreeMap<_, _> = view
            .waves
            .iter()
            .flat_map(|w| &w.clusters)
            .take(1)
            .map(|c| {
                let r: flotilla_runtime::controller::record::RolloutView =
                    serde_json::from_value(serde_json::json!({
                        "cluster": c, "revisions": [], "pauseConditions": [], "abort": false,
                        "desiredReplicas": {}, "steps": ["{\"setWeight\":20}", "{\"pause\":{}}"]
                    }))
                    .unwrap();
                (c.name.clone(), r)
            })
            .collect();
        let first = rollouts.keys().next().cloned().unwrap();
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            views: RwLock::new(BTreeMap::from([(
                "payments".to_owned(),
                (list[0].clone(), view.clone(), rollouts),
            )])),
            events: tokio::sync::broadcast::channel(16).0,
            token: "t".into(),
            reads_need_token: false,
            loopback_hosts_only: true,
            wake: tokio::sync::Notify::new(),
            sync: AtomicBool::new(false),
            pending_audit: Mutex::new(Vec::new()),
            git_results: Mutex::new(Vec::new()),
            metrics: Arc::new(Metrics::default()),
            unrunnable: RwLock::new(BTreeMap::new()),
            live: Some(Live::new("/dashboard")),
            plots: Mutex::new(restored),
        });
        shared
            .live
            .as_ref()
            .unwrap()
            .update(&list, &[&view]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = flotilla_runtime::controller::api::router(shared.clone());
        tokio::spawn(flotilla_runtime::controller::listen::serve(listener, app));

        let browser = browser::start().await;
        let client = &browser.client;
        let shown = |url: String, ready: &'static str| {
            let client = client.clone();
            async move {
                let t = Instant::now();
                client.goto(&url).await.unwrap();
                loop {
                    let done = client.execute(ready, Vec::new()).await.unwrap();
                    if done.as_bool() == Some(true) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                t.elapsed().as_secs_f64() * 1e3
            }
        };
        let mut fleet_ms = Vec::new();
        let mut cluster_ms = Vec::new();
        for _ in 0..runs {
            fleet_ms.push(
                shown(
                    format!("http://{address}/dashboard/fleets/payments"),
                    // The live snapshot applied: every row is in the page.
                    "return document.body.dataset.seq !== undefined && document.querySelectorAll('tr[data-status]').length > 0",
                )
                .await,
            );
            cluster_ms.push(
                shown(
                    format!("http://{address}/dashboard/fleets/payments/clusters/{first}"),
                    "return document.readyState === 'complete' && document.querySelectorAll('circle.point').length > 0",
                )
                .await,
            );
        }
        client.goto(&format!("http://{address}/dashboard/fleets/payments")).await.unwrap();
        let rows = client
            .execute(
                "return new Promise(r => { const t = setInterval(() => { if (document.body.dataset.seq !== undefined) { clearInterval(t); r(document.querySelectorAll('tr[data-status]').length); } }, 5); })",
                Vec::new(),
            )
            .await
            .unwrap();
        println!(
            "chromium: the fleet view of {n} clusters ({rows} rows) shown, live snapshot applied: median {:.0} ms of {runs} (min {:.0}, max {:.0})",
            median(fleet_ms.clone()),
            fleet_ms.iter().cloned().fold(f64::INFINITY, f64::min),
            fleet_ms.iter().cloned().fold(0.0, f64::max)
        );
        println!(
            "chromium: one cluster's page with 3 plots of {MAX_POINTS} points shown: median {:.0} ms of {runs}",
            median(cluster_ms)
        );
        client.clone().close().await.unwrap();
    });
}
