//! Traffic statistics per subset: requests by status class and a latency histogram
//! (hdrhistogram) in 10-second buckets kept for a little over two hours, readable for any window
//! inside that; and cumulative counters for the Prometheus exposition on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use flotilla_agent_backend::wire::{BUCKET_SECONDS, Latency, QuantileValue, Window};
use hdrhistogram::Histogram;

/// How many buckets are kept: 750 × 10 s = 2 h 5 min.
pub const RETAINED_BUCKETS: u64 = 750;
/// The upper bounds (seconds) of the exposed request-duration histogram.
pub const DURATION_BOUNDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Latencies are recorded in microseconds between 1 µs and this.
const MAX_MICROS: u64 = 600_000_000;

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 2).expect("valid histogram bounds")
}

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// The statistics of every subset of one agent.
#[derive(Debug, Default)]
pub struct Stats {
    /// Read per request, written only when a subset is added: a snapshot, not a lock.
    subsets: ArcSwap<BTreeMap<String, Arc<SubsetStats>>>,
    /// Serializes additions.
    adding: Mutex<()>,
}

impl Stats {
    /// Statistics for these subsets.
    pub fn new<'a>(subsets: impl IntoIterator<Item = &'a str>) -> Stats {
        let stats = Stats::default();
        for name in subsets {
            stats.ensure(name);
        }
        stats
    }

    /// The statistics of a subset, created when missing.
    pub fn ensure(&self, subset: &str) -> Arc<SubsetStats> {
        if let Some(s) = self.get(subset) {
            return s;
        }
        let _adding = self.adding.lock().expect("stats lock");
        if let Some(s) = self.get(subset) {
            return s;
        }
        let mut map = self.subsets.load().as_ref().clone();
        let stats = Arc::new(SubsetStats::default());
        map.insert(subset.to_owned(), stats.clone());
        self.subsets.store(Arc::new(map));
        stats
    }

    /// Records one answered request of `subset` (nothing when the subset is unknown).
    pub fn record(&self, subset: &str, status: u16, latency: Duration, now: SystemTime) {
        if let Some(stats) = self.subsets.load().get(subset) {
            stats.record(status, latency, now);
        }
    }

    /// The statistics of a subset.
    pub fn get(&self, subset: &str) -> Option<Arc<SubsetStats>> {
        self.subsets.load().get(subset).cloned()
    }

    /// The Prometheus text exposition of every subset's counters.
    pub fn render_prometheus(&self, cluster: &str, out: &mut String) {
        let subsets: Vec<(String, Arc<SubsetStats>)> = self
            .subsets
            .load()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let cluster = escape_label(cluster);
        out.push_str(
            "# HELP http_requests_total Requests answered by the router, by subset and status code.\n\
             # TYPE http_requests_total counter\n",
        );
        let snapshots: Vec<(String, Totals)> = subsets
            .iter()
            .map(|(name, s)| (escape_label(name), s.totals()))
            .collect();
        for (name, totals) in &snapshots {
            for (code, count) in &totals.by_code {
                let _ = writeln!(
                    out,
                    "http_requests_total{{cluster=\"{cluster}\",subset=\"{name}\",code=\"{code}\"}} {count}"
                );
            }
        }
        out.push_str(
            "# HELP http_request_duration_seconds Time from receiving a request to sending its response head.\n\
             # TYPE http_request_duration_seconds histogram\n",
        );
        for (name, totals) in &snapshots {
            let mut cumulative = 0;
            for (bound, count) in DURATION_BOUNDS.iter().zip(&totals.duration_buckets) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "http_request_duration_seconds_bucket{{cluster=\"{cluster}\",subset=\"{name}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "http_request_duration_seconds_bucket{{cluster=\"{cluster}\",subset=\"{name}\",le=\"+Inf\"}} {}\n\
                 http_request_duration_seconds_sum{{cluster=\"{cluster}\",subset=\"{name}\"}} {}\n\
                 http_request_duration_seconds_count{{cluster=\"{cluster}\",subset=\"{name}\"}} {}",
                totals.count, totals.sum_seconds, totals.count
            );
        }
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One subset's statistics.
#[derive(Debug, Default)]
pub struct SubsetStats {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ring: Vec<Option<Bucket>>,
    totals: Totals,
}

/// The cumulative counters since the agent started.
#[derive(Debug, Default, Clone)]
struct Totals {
    by_code: BTreeMap<u16, u64>,
    duration_buckets: [u64; DURATION_BOUNDS.len()],
    sum_seconds: f64,
    count: u64,
}

#[derive(Debug)]
struct Bucket {
    /// Unix seconds / BUCKET_SECONDS.
    index: u64,
    by_class: [u64; 5],
    latency_micros: Histogram<u64>,
}

impl SubsetStats {
    /// Records one answered request.
    pub fn record(&self, status: u16, latency: Duration, now: SystemTime) {
        let index = unix_seconds(now) / BUCKET_SECONDS;
        let micros = (latency.as_micros() as u64).clamp(1, MAX_MICROS);
        let seconds = latency.as_secs_f64();
        let mut inner = self.inner.lock().expect("stats lock");
        if inner.ring.is_empty() {
            inner.ring = (0..RETAINED_BUCKETS).map(|_| None).collect();
        }
        let slot = &mut inner.ring[(index % RETAINED_BUCKETS) as usize];
        match slot {
            Some(bucket) if bucket.index == index => {}
            Some(bucket) => {
                // Reuse the old bucket's histogram allocation.
                bucket.index = index;
                bucket.by_class = [0; 5];
                bucket.latency_micros.reset();
            }
            None => {
                *slot = Some(Bucket {
                    index,
                    by_class: [0; 5],
                    latency_micros: new_histogram(),
                })
            }
        }
        let bucket = slot.as_mut().expect("bucket just set");
        if let Some(class) = status_class(status) {
            bucket.by_class[class] += 1;
        }
        let _ = bucket.latency_micros.record(micros);
        let totals = &mut inner.totals;
        *totals.by_code.entry(status).or_default() += 1;
        if let Some(i) = DURATION_BOUNDS.iter().position(|b| seconds <= *b) {
            totals.duration_buckets[i] += 1;
        }
        totals.sum_seconds += seconds;
        totals.count += 1;
    }

    fn totals(&self) -> Totals {
        self.inner.lock().expect("stats lock").totals.clone()
    }

    /// The statistics of the buckets that start in `[start, end)` (Unix seconds, rounded down to
    /// bucket boundaries).
    pub fn window(&self, subset: &str, start: u64, end: u64, quantile: Option<f64>) -> Window {
        let first = start / BUCKET_SECONDS;
        let last = end.div_ceil(BUCKET_SECONDS);
        let mut by_class = [0u64; 5];
        let mut histogram = new_histogram();
        {
            let inner = self.inner.lock().expect("stats lock");
            for bucket in inner.ring.iter().flatten() {
                if bucket.index >= first && bucket.index < last {
                    for (sum, n) in by_class.iter_mut().zip(bucket.by_class) {
                        *sum += n;
                    }
                    let _ = histogram.add(&bucket.latency_micros);
                }
            }
        }
        let requests: u64 = by_class.iter().sum();
        let seconds = end.saturating_sub(start).max(1) as f64;
        let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        Window {
            subset: subset.to_owned(),
            start,
            end,
            requests,
            by_class: ["1xx", "2xx", "3xx", "4xx", "5xx"]
                .iter()
                .zip(by_class)
                .map(|(k, v)| ((*k).to_owned(), v))
                .collect(),
            errors: by_class[4],
            error_rate: (requests > 0).then(|| by_class[4] as f64 / requests as f64),
            request_rate: requests as f64 / seconds,
            latency_ms: (requests > 0).then(|| Latency {
                p50: ms(0.5),
                p90: ms(0.9),
                p95: ms(0.95),
                p99: ms(0.99),
                max: histogram.max() as f64 / 1000.0,
                mean: histogram.mean() / 1000.0,
            }),
            quantile: quantile.map(|q| QuantileValue {
                q,
                ms: (requests > 0).then(|| ms(q)),
            }),
        }
    }
}

/// 0 for 1xx … 4 for 5xx.
fn status_class(status: u16) -> Option<usize> {
    match status {
        100..=599 => Some(usize::from(status / 100 - 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn windows_read_the_buckets_they_cover() {
        let s = SubsetStats::default();
        let base = 1_800_000_000;
        // A reference window an hour ago: 100 requests at 10 ms, 10% errors.
        for i in 0..100 {
            let status = if i % 10 == 0 { 500 } else { 200 };
            s.record(status, Duration::from_millis(10), at(base + i % 60));
        }
        // Now: 50 requests at 100 ms, no errors.
        for i in 0..50 {
            s.record(200, Duration::from_millis(100), at(base + 3600 + i % 60));
        }
        let old = s.window("canary", base, base + 60, Some(0.95));
        assert_eq!(old.requests, 100);
        assert_eq!(old.errors, 10);
        assert!((old.error_rate.unwrap() - 0.1).abs() < 1e-9);
        let p95 = old.quantile.unwrap().ms.unwrap();
        assert!((9.0..=11.0).contains(&p95), "{p95}");
        let now = s.window("canary", base + 3600, base + 3660, None);
        assert_eq!(now.requests, 50);
        assert_eq!(now.error_rate, Some(0.0));
        assert!(now.latency_ms.unwrap().p50 >= 99.0);
        assert!((now.request_rate - 50.0 / 60.0).abs() < 1e-9);
        let empty = s.window("canary", base + 100, base + 200, Some(0.5));
        assert_eq!(empty.requests, 0);
        assert_eq!(empty.error_rate, None);
        assert_eq!(empty.quantile.unwrap().ms, None);
    }

    #[test]
    fn the_ring_keeps_two_hours_and_forgets_older_buckets() {
        let s = SubsetStats::default();
        let base = 1_800_000_000;
        s.record(200, Duration::from_millis(1), at(base));
        let two_hours = base + 2 * 3600;
        s.record(200, Duration::from_millis(1), at(two_hours));
        assert_eq!(s.window("x", base, base + 10, None).requests, 1);
        // A write that lands in the same slot evicts the old bucket.
        s.record(
            200,
            Duration::from_millis(1),
            at(base + RETAINED_BUCKETS * BUCKET_SECONDS),
        );
        assert_eq!(s.window("x", base, base + 10, None).requests, 0);
    }

    #[test]
    fn prometheus_exposition_has_counters_and_a_histogram() {
        let stats = Stats::new(["stable", "canary"]);
        let canary = stats.get("canary").unwrap();
        canary.record(200, Duration::from_millis(3), SystemTime::now());
        canary.record(503, Duration::from_millis(30), SystemTime::now());
        let mut text = String::new();
        stats.render_prometheus("eu-west", &mut text);
        assert!(
            text.contains(
                "http_requests_total{cluster=\"eu-west\",subset=\"canary\",code=\"503\"} 1"
            )
        );
        assert!(text.contains(
            "http_request_duration_seconds_bucket{cluster=\"eu-west\",subset=\"canary\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "http_request_duration_seconds_bucket{cluster=\"eu-west\",subset=\"canary\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains(
            "http_request_duration_seconds_count{cluster=\"eu-west\",subset=\"stable\"} 0"
        ));
    }
}
