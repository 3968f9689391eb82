//! The plot history the dashboard draws: per (fleet, cluster), the canary weight over time and
//! every analysis metric's measurements, with the condition's thresholds and the judge's last
//! explanation. Runs keep only their last measurements; this history keeps up to
//! [`MAX_POINTS`] per series, thinning old successful points first so that every failed,
//! inconclusive and error point stays visible. Persisted in the store's `plots` table.

use std::collections::BTreeMap;

use flotilla_core::analysis::condition::Threshold;
use flotilla_core::time::Millis;
use serde::{Deserialize, Serialize};

/// The most points one series keeps.
pub const MAX_POINTS: usize = 2000;

/// How often a fleet's changed plot histories are written to the store, at most (a history is
/// a view: a crash loses at most this much of it, never a decision).
pub const FLUSH_EVERY: Millis = 15_000;

/// What a point's measurement said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mark {
    /// Successful (or, for the weight, a plain sample).
    #[serde(rename = "s")]
    Successful,
    /// Failed.
    #[serde(rename = "f")]
    Failed,
    /// Inconclusive.
    #[serde(rename = "i")]
    Inconclusive,
    /// Error (no value).
    #[serde(rename = "e")]
    Error,
}

impl Mark {
    /// A measurement's phase as a mark (None: still running).
    pub fn of(phase: flotilla_core::spec::analysis::AnalysisPhase) -> Option<Mark> {
        use flotilla_core::spec::analysis::AnalysisPhase as P;
        match phase {
            P::Successful => Some(Mark::Successful),
            P::Failed => Some(Mark::Failed),
            P::Inconclusive => Some(Mark::Inconclusive),
            P::Error => Some(Mark::Error),
            _ => None,
        }
    }
}

/// One point: when, the value (none: no number, e.g. an error), what it said. 16 bytes: the
/// value is kept as an `f32` (a plot's precision), NaN for none; stored as `[at, value|null,
/// mark]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "(Millis, Option<f32>, Mark)",
    into = "(Millis, Option<f32>, Mark)"
)]
pub struct Point {
    at: Millis,
    value: f32,
    mark: Mark,
}

impl Point {
    /// A point.
    pub fn new(at: Millis, value: Option<f64>, mark: Mark) -> Point {
        Point {
            at,
            value: value.map_or(f32::NAN, |v| v as f32),
            mark,
        }
    }

    /// When.
    pub fn at(&self) -> Millis {
        self.at
    }

    /// The value, if it had one.
    pub fn value(&self) -> Option<f32> {
        (!self.value.is_nan()).then_some(self.value)
    }

    /// What it said.
    pub fn mark(&self) -> Mark {
        self.mark
    }
}

impl From<(Millis, Option<f32>, Mark)> for Point {
    fn from((at, value, mark): (Millis, Option<f32>, Mark)) -> Point {
        Point {
            at,
            value: value.unwrap_or(f32::NAN),
            mark,
        }
    }
}

impl From<Point> for (Millis, Option<f32>, Mark) {
    fn from(p: Point) -> (Millis, Option<f32>, Mark) {
        (p.at, p.value(), p.mark)
    }
}

/// One metric's series.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MetricSeries {
    /// The points, oldest first.
    pub points: Vec<Point>,
    /// The condition's fixed thresholds: (failure?, threshold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<(bool, Threshold)>,
    /// The judge's explanation of the last measurement (statistic, boundaries, reference
    /// window), for `compare`, `sequential` and `baseline:` metrics.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub explanation: BTreeMap<String, String>,
    /// The latest measurement start recorded per run (points are recorded once).
    #[serde(default)]
    pub seen: BTreeMap<String, Millis>,
}

/// One cluster's plots.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ClusterPlots {
    /// The canary weight over time (a point per change).
    pub weight: Vec<Point>,
    /// Each metric's series, by metric name.
    pub metrics: BTreeMap<String, MetricSeries>,
}

/// One retained measurement as the fleet controller hands it over: (started, finished, value,
/// mark, metadata).
pub type Sampled<'a> = (Millis, Millis, &'a str, Mark, &'a BTreeMap<String, String>);

/// One measured metric of a cluster, as the fleet controller hands it over.
pub struct MetricSample<'a> {
    /// The run it belongs to (`step-2-rev3`).
    pub run: &'a str,
    /// The metric's name.
    pub metric: &'a str,
    /// Its retained measurements.
    pub measurements: Vec<Sampled<'a>>,
    /// The calibrated reference, when the metric has one.
    pub calibration: &'a BTreeMap<String, String>,
}

/// Every cluster's plots, by (fleet, cluster).
#[derive(Debug, Default)]
pub struct Plots {
    clusters: BTreeMap<(String, String), ClusterPlots>,
    dirty: std::collections::BTreeSet<(String, String)>,
    flushed: BTreeMap<String, Millis>,
}

/// The store key of a cluster's plots.
pub fn key(fleet: &str, cluster: &str) -> String {
    format!("{fleet}\u{0}{cluster}")
}

impl Plots {
    /// Plots restored from the store's `(key, JSON)` pairs; unreadable entries are skipped
    /// (a plot history is a view, never a decision's input).
    pub fn restore(entries: Vec<(String, Vec<u8>)>) -> Plots {
        let mut plots = Plots::default();
        for (key, bytes) in entries {
            let Some((fleet, cluster)) = key.split_once('\u{0}') else {
                continue;
            };
            match serde_json::from_slice::<ClusterPlots>(&bytes) {
                Ok(p) => {
                    plots
                        .clusters
                        .insert((fleet.to_owned(), cluster.to_owned()), p);
                }
                Err(e) => tracing::warn!(fleet, cluster, "a stored plot history is skipped: {e}"),
            }
        }
        plots
    }

    /// A cluster's plots.
    pub fn get(&self, fleet: &str, cluster: &str) -> Option<&ClusterPlots> {
        self.clusters.get(&(fleet.to_owned(), cluster.to_owned()))
    }

    /// Records a cluster's weight at `now` (a point when it changed) and its metrics'
    /// measurements not recorded yet. `thresholds` is asked once per new series.
    pub fn observe(
        &mut self,
        fleet: &str,
        cluster: &str,
        now: Millis,
        weight: Option<i32>,
        samples: &[MetricSample<'_>],
        mut thresholds: impl FnMut(&str, &str) -> Vec<(bool, Threshold)>,
    ) {
        let id = (fleet.to_owned(), cluster.to_owned());
        let plots = self.clusters.entry(id.clone()).or_default();
        let mut changed = false;
        if let Some(w) = weight {
            let last = plots.weight.last().and_then(|p| p.value());
            if last != Some(w as f32) {
                plots
                    .weight
                    .push(Point::new(now, Some(f64::from(w)), Mark::Successful));
                downsample(&mut plots.weight, MAX_POINTS);
                changed = true;
            }
        }
        for sample in samples {
            let series = match plots.metrics.get_mut(sample.metric) {
                Some(series) => series,
                None => plots
                    .metrics
                    .entry(sample.metric.to_owned())
                    .or_insert_with(|| MetricSeries {
                        thresholds: thresholds(sample.run, sample.metric),
                        ..MetricSeries::default()
                    }),
            };
            let seen = series.seen.get(sample.run).copied();
            let mut latest = seen;
            for (started, finished, value, mark, metadata) in &sample.measurements {
                if seen.is_some_and(|s| *started <= s) {
                    continue;
                }
                series
                    .points
                    .push(Point::new(*finished, first_number(value), *mark));
                latest = Some(latest.map_or(*started, |l: Millis| l.max(*started)));
                let judged = metadata.contains_key("judge")
                    || metadata.keys().any(|k| k.starts_with("baseline."))
                    || !sample.calibration.is_empty();
                if judged {
                    series.explanation = metadata
                        .iter()
                        .chain(sample.calibration.iter())
                        .filter(|(k, _)| k.as_str() != "endpoint" && k.as_str() != "query")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                }
                changed = true;
            }
            if latest != seen
                && let Some(l) = latest
            {
                series.seen.insert(sample.run.to_owned(), l);
                series.points.sort_by_key(|p| p.at);
                downsample(&mut series.points, MAX_POINTS);
            }
        }
        if changed {
            self.dirty.insert(id);
        }
    }

    /// A fleet's plots changed since they were last taken, as store `(key, JSON)` pairs; at
    /// most once per [`FLUSH_EVERY`] per fleet (a history is rewritten whole, and a running
    /// canary changes it every tick), nothing in between.
    pub fn take_dirty(&mut self, fleet: &str, now: Millis) -> Vec<(String, Vec<u8>)> {
        if self
            .flushed
            .get(fleet)
            .is_some_and(|at| now - at < FLUSH_EVERY)
        {
            return Vec::new();
        }
        let keys: Vec<(String, String)> = self
            .dirty
            .iter()
            .filter(|(f, _)| f == fleet)
            .cloned()
            .collect();
        if keys.is_empty() {
            return Vec::new();
        }
        self.flushed.insert(fleet.to_owned(), now);
        keys.into_iter()
            .filter_map(|id| {
                self.dirty.remove(&id);
                let plots = self.clusters.get(&id)?;
                // Plain data with string keys: serializing cannot fail.
                let bytes = serde_json::to_vec(plots).expect("plots serialize");
                Some((key(&id.0, &id.1), bytes))
            })
            .collect()
    }

    /// How many points are held in all.
    pub fn points(&self) -> usize {
        self.clusters
            .values()
            .map(|c| c.weight.len() + c.metrics.values().map(|m| m.points.len()).sum::<usize>())
            .sum()
    }
}

/// The number a measurement's value plots as: the value, or the first of a list
/// (`"[0.97,0.5]"`); None when it has none.
pub fn first_number(value: &str) -> Option<f64> {
    let text = value.trim();
    let text = text
        .strip_prefix('[')
        .map(|t| t.split(',').next().unwrap_or("").trim_end_matches(']'))
        .unwrap_or(text);
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Thins `points` (oldest first) to at most `max`: every second successful point of the older
/// half goes first, so failed, inconclusive and error points stay; only a series of nothing
/// but those loses its oldest ones.
pub fn downsample(points: &mut Vec<Point>, max: usize) {
    while points.len() > max {
        let before = points.len();
        let half = points.len() / 2;
        let mut keep_next = true;
        let mut i = 0;
        points.retain(|p| {
            let old = i < half;
            i += 1;
            if !old || p.mark != Mark::Successful {
                return true;
            }
            keep_next = !keep_next;
            !keep_next
        });
        if points.len() == before {
            let excess = points.len() - max;
            points.drain(..excess);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: usize, failed_every: usize) -> Vec<Point> {
        (0..n)
            .map(|i| {
                let mark = if failed_every > 0 && i % failed_every == 0 {
                    Mark::Failed
                } else {
                    Mark::Successful
                };
                Point::new(i as Millis, Some(i as f64), mark)
            })
            .collect()
    }

    #[test]
    fn downsampling_bounds_a_series_and_keeps_every_unsuccessful_point() {
        let mut points = series(10_000, 97);
        let failed = points.iter().filter(|p| p.mark() == Mark::Failed).count();
        downsample(&mut points, MAX_POINTS);
        assert!(points.len() <= MAX_POINTS, "{}", points.len());
        assert!(points.len() > MAX_POINTS / 2, "{}", points.len());
        assert_eq!(
            points.iter().filter(|p| p.mark() == Mark::Failed).count(),
            failed
        );
        assert!(points.windows(2).all(|w| w[0].at() < w[1].at()));
        // The newest half is whole.
        assert_eq!(points.last().unwrap().at(), 9_999);
    }

    #[test]
    fn a_series_of_failures_only_loses_its_oldest() {
        let mut points = series(2_500, 1);
        downsample(&mut points, MAX_POINTS);
        assert_eq!(points.len(), MAX_POINTS);
        assert_eq!(points[0].at(), 500);
    }

    #[test]
    fn measurements_are_recorded_once_and_the_weight_on_change() {
        let mut plots = Plots::default();
        let none = BTreeMap::new();
        let judged: BTreeMap<String, String> = [
            ("judge".to_owned(), "mann-whitney".to_owned()),
            ("pValue".to_owned(), "0.01".to_owned()),
            ("endpoint".to_owned(), "http://x".to_owned()),
        ]
        .into();
        let sample = |n: i64| MetricSample {
            run: "step-1-rev2",
            metric: "latency",
            measurements: (0..n)
                .map(|i| (i * 10, i * 10 + 5, "[0.3]", Mark::Failed, &judged))
                .collect(),
            calibration: &none,
        };
        let mut asked = 0;
        for (now, n) in [(0, 1), (10, 2), (20, 2)] {
            plots.observe("f", "c", now, Some(20), &[sample(n)], |_, _| {
                asked += 1;
                Vec::new()
            });
        }
        plots.observe("f", "c", 30, Some(40), &[], |_, _| Vec::new());
        let c = plots.get("f", "c").unwrap();
        assert_eq!(asked, 1);
        assert_eq!(c.metrics["latency"].points.len(), 2);
        assert_eq!(
            c.metrics["latency"].points[1],
            Point::new(15, Some(0.3), Mark::Failed)
        );
        assert_eq!(c.weight.len(), 2);
        assert_eq!(
            c.metrics["latency"].explanation.keys().collect::<Vec<_>>(),
            ["judge", "pValue"]
        );
        let dirty = plots.take_dirty("f", 30);
        assert_eq!(dirty.len(), 1);
        assert!(plots.take_dirty("f", 30).is_empty());
        // Written again at most once per FLUSH_EVERY.
        plots.observe("f", "c", 40, Some(60), &[], |_, _| Vec::new());
        assert!(plots.take_dirty("f", 40).is_empty());
        assert!(plots.take_dirty("other", 40).is_empty());
        assert_eq!(plots.take_dirty("f", 30 + FLUSH_EVERY).len(), 1);
        let restored = Plots::restore(dirty);
        assert_eq!(
            restored.get("f", "c").unwrap().metrics,
            plots.get("f", "c").unwrap().metrics
        );
    }

    #[test]
    fn values_plot_as_their_first_number() {
        assert_eq!(first_number("0.97"), Some(0.97));
        assert_eq!(first_number("[0.3,0.5]"), Some(0.3));
        assert_eq!(first_number("[]"), None);
        assert_eq!(first_number("NaN"), None);
        assert_eq!(first_number(""), None);
    }
}
