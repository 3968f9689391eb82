//! Fleet simulation at scale: 10 services rolled out at once across 10,000 clusters each
//! (100,000 cluster-rollouts), through a full rollout on virtual time. Reports wall time, peak
//! memory (VmHWM) and the cost of one decision tick of one 10,000-cluster fleet. The services
//! run twice: with each tick's decisions handed on and dropped, as the daemon hands them to its
//! audit log (what a controller holds), then keeping every decision in the report, as
//! `flotilla simulate` does; the peak is measured apart for each (VmHWM reset in between).
//! Run with `cargo bench --bench fleet`; for a smaller run while iterating, set
//! `FLEET_BENCH_CLUSTERS` and `FLEET_BENCH_SERVICES` (e.g. 2000 and 2; the waves keep their
//! shape: 10 canary clusters, then up to 990, then the rest); `FLEET_BENCH_KEEP=streamed` or
//! `all` runs the services only the one way (e.g. under heaptrack).

#[path = "common/scale.rs"]
mod scale;

use std::time::Instant;

use flotilla_core::simulate::{Inputs, Report, SimulationError, TickView, run_streamed, run_with};
use scale::Scale;

/// A size from the environment, or its default.
fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Service `service`'s fleet: 10 canary clusters, then up to 990, then the rest.
fn scenario(service: usize, clusters: usize) -> String {
    Scale {
        name: &format!("svc{service}"),
        clusters,
        waves_at: (10, 1_000),
        regress_every: None,
        failure_policy: None,
    }
    .manifests()
    .0
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// One tick of the solo run: ms, actions, decisions, and the decisions' kinds.
type SoloTick = (f64, usize, usize, String);

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        // `cargo test --benches` and `cargo bench -- --list` probe bench binaries: nothing to list.
        return;
    }
    let clusters = size("FLEET_BENCH_CLUSTERS", 10_000);
    let services = size("FLEET_BENCH_SERVICES", 10);
    let started = Instant::now();
    let inputs: Vec<Inputs> = (0..services)
        .map(|service| scale::inputs(&scenario(service, clusters)))
        .collect();
    let loaded = started.elapsed();
    eprintln!(
        "loaded {services} scenarios of {clusters} clusters in {loaded:?}; peak RSS so far {:.0} MiB",
        peak_rss_mib()
    );
    // One fleet alone, for the cost of a tick without contention; each tick with what it
    // decided, so that the slow ones can be told apart.
    let mut solo: Vec<SoloTick> = Vec::new();
    let mut last = Instant::now();
    let report = run_with(&inputs[0], 1, |view| {
        let now = Instant::now();
        let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
        for event in view.decisions {
            *kinds.entry(event.decision.name()).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}×{n}")).collect();
        solo.push((
            now.duration_since(last).as_secs_f64() * 1000.0,
            view.actions.len(),
            view.decisions.len(),
            kinds.join(" "),
        ));
        last = now;
    })
    .unwrap();
    let mut durations: Vec<f64> = solo.iter().map(|t| t.0).collect();
    durations.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let solo_pct = |p: f64| durations[((durations.len() - 1) as f64 * p) as usize];
    println!(
        "one {clusters}-cluster fleet alone: {} in {} ticks; tick (decide + synthetic traffic) p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        report.outcome,
        durations.len(),
        solo_pct(0.5),
        solo_pct(0.9),
        solo_pct(0.99),
        solo_pct(1.0)
    );
    let mut slowest: Vec<(usize, &SoloTick)> = solo.iter().enumerate().collect();
    slowest.sort_by(|a, b| b.1.0.partial_cmp(&a.1.0).unwrap());
    for (tick, (ms, actions, decisions, kinds)) in slowest.iter().take(6) {
        println!(
            "  slow tick {tick}: {ms:.1} ms, {actions} actions, {decisions} decisions ({kinds})"
        );
    }
    // Nothing of the solo run stays alive for the peaks below.
    drop(slowest);
    drop((report, solo, durations));
    // `FLEET_BENCH_KEEP`: `streamed` or `all` runs only that one (each alone under a profiler).
    let keep = std::env::var("FLEET_BENCH_KEEP").unwrap_or_default();
    for streamed in [true, false] {
        if keep.is_empty() || (keep == "streamed") == streamed {
            all_services(&inputs, clusters, services, streamed);
        }
    }
}

/// Resets the peak resident memory (VmHWM) to the current one (Linux's `clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// All services at once, one thread each (so that every fleet's state is alive together), each
/// tick timed; `streamed`: each tick's decisions dropped once shown (as the daemon's), else kept
/// in each report.
fn all_services(inputs: &[Inputs], clusters: usize, services: usize, streamed: bool) {
    type Run = fn(&Inputs, u64, &mut dyn FnMut(&TickView<'_>)) -> Result<Report, SimulationError>;
    let run: Run = if streamed {
        |inputs, seed, observe| run_streamed(inputs, seed, observe)
    } else {
        |inputs, seed, observe| run_with(inputs, seed, observe)
    };
    reset_peak();
    let run_started = Instant::now();
    let results: Vec<(String, Vec<f64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .iter()
            .map(|inputs| {
                scope.spawn(move || {
                    let mut ticks = Vec::new();
                    let mut last = Instant::now();
                    let report = run(inputs, 1, &mut |_| {
                        let now = Instant::now();
                        ticks.push(now.duration_since(last).as_secs_f64() * 1000.0);
                        last = now;
                    })
                    .unwrap();
                    (report.outcome, ticks)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = run_started.elapsed();
    let mut ticks: Vec<f64> = results
        .iter()
        .flat_map(|(_, t)| t.iter().copied())
        .collect();
    ticks.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| ticks[((ticks.len() - 1) as f64 * p) as usize];
    let outcomes: Vec<&str> = results.iter().map(|(o, _)| o.as_str()).collect();
    println!(
        "fleet simulation: {services} services x {clusters} clusters = {} cluster-rollouts, {}",
        services * clusters,
        if streamed {
            "each tick's decisions handed on and dropped (as the daemon's audit log takes them)"
        } else {
            "every decision kept in the report (as `flotilla simulate` keeps them)"
        }
    );
    println!("  outcomes: {outcomes:?}");
    println!(
        "  wall time (all services, 2 threads' worth of cores): {:.1} s",
        wall.as_secs_f64()
    );
    println!("  peak memory (VmHWM): {:.0} MiB", peak_rss_mib());
    println!(
        "  one tick of one {clusters}-cluster fleet (decide + synthetic traffic), ms: p50 {:.1}, p90 {:.1}, max {:.1} ({} ticks, measured while {services} fleets share the cores)",
        pct(0.5),
        pct(0.9),
        pct(1.0),
        ticks.len()
    );
}
