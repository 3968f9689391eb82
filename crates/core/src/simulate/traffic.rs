//! Synthetic traffic: per time bucket, how many requests a subset served, how many failed, and
//! the (log-normal) latency distribution they had — four numbers per bucket, whatever the rate.

use std::collections::VecDeque;

use super::VersionProfile;
use crate::analysis::Millis;
use crate::spec::analysis::BuiltinStatistic;

/// A small deterministic generator (SplitMix64): the simulation's only source of randomness,
/// seeded per cluster, so a seed always gives the same run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The standard normal CDF (Abramowitz–Stegun 7.1.26 erf, |error| < 1.5e-7).
fn normal_cdf(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    0.5 * (1.0 + if z >= 0.0 { erf } else { -erf })
}

/// z for the 95th percentile.
const Z95: f64 = 1.644_853_626_951_472_2;

/// One bucket of one subset's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bucket {
    /// Requests served.
    pub requests: f32,
    /// Requests that failed.
    pub errors: f32,
    /// Log-normal location of the latency (ln seconds).
    pub mu: f32,
    /// Log-normal scale.
    pub sigma: f32,
}

impl Bucket {
    /// A bucket of `requests` requests behaving per `profile`, with relative `noise`.
    pub fn generate(requests: f64, profile: &VersionProfile, noise: f64, rng: &mut Rng) -> Bucket {
        if requests <= 0.0 {
            return Bucket::default();
        }
        let rate = (profile.error_rate * (1.0 + noise * rng.normal())).clamp(0.0, 1.0);
        // Binomial error count, by its normal approximation.
        let mean = requests * rate;
        let errors = (mean + (mean * (1.0 - rate)).sqrt() * rng.normal())
            .round()
            .clamp(0.0, requests);
        let p50 = profile.latency.p50.max(1e-6);
        let p95 = profile.latency.p95.max(p50 * 1.0001);
        let mu = p50.ln() + noise * rng.normal() * 0.5;
        let sigma = (p95.ln() - p50.ln()) / Z95;
        Bucket {
            requests: requests as f32,
            errors: errors as f32,
            mu: mu as f32,
            sigma: sigma as f32,
        }
    }

    /// Fraction of this bucket's requests slower than `seconds`.
    fn slower_than(&self, seconds: f64) -> f64 {
        1.0 - normal_cdf((seconds.ln() - f64::from(self.mu)) / f64::from(self.sigma).max(1e-9))
    }

    /// Requests that failed or missed the objective.
    pub fn bad_requests(&self, objective: Option<f64>) -> f64 {
        let errors = f64::from(self.errors);
        let slow = objective.map_or(0.0, |o| {
            (f64::from(self.requests) - errors) * self.slower_than(o)
        });
        errors + slow
    }
}

/// A ring of recent buckets of both subsets.
#[derive(Debug, Clone)]
pub struct Series {
    keep: usize,
    buckets: VecDeque<(Millis, Bucket, Bucket)>,
}

impl Series {
    /// A ring keeping `keep` buckets.
    pub fn new(keep: usize) -> Series {
        Series {
            keep: keep.max(1),
            buckets: VecDeque::with_capacity(keep.max(1)),
        }
    }

    /// Appends a bucket starting at `at`: (stable, canary).
    pub fn push(&mut self, at: Millis, stable: Bucket, canary: Bucket) {
        if self.buckets.len() == self.keep {
            self.buckets.pop_front();
        }
        self.buckets.push_back((at, stable, canary));
    }
}

/// A statistic over the buckets of several series (a wave's clusters) that started in
/// `[from, to)`, as if their traffic were one: error rate and latency over all their requests,
/// request rate and counts summed. None with fewer than `min_requests` requests in all (counts:
/// 0 with no requests at all).
pub fn read_all<'a>(
    series: impl IntoIterator<Item = &'a Series>,
    statistic: BuiltinStatistic,
    quantile: f64,
    canary: bool,
    from: Millis,
    to: Millis,
    min_requests: u64,
) -> Option<f64> {
    let window: Vec<&Bucket> = series
        .into_iter()
        .flat_map(|s| s.buckets.iter())
        .filter(|(at, _, _)| *at >= from && *at < to)
        .map(|(_, s, c)| if canary { c } else { s })
        .filter(|b| b.requests > 0.0)
        .collect();
    statistic_of(&window, statistic, quantile, to - from, min_requests)
}

/// [`read_all`] as a series: one point per `step` over `[from, to)` (the last step may be
/// shorter), NaN where a step served no request. None with fewer than `min_requests` requests
/// over the whole span.
#[allow(clippy::too_many_arguments)]
pub fn read_series<'a>(
    series: impl IntoIterator<Item = &'a Series> + Clone,
    statistic: BuiltinStatistic,
    quantile: f64,
    canary: bool,
    from: Millis,
    to: Millis,
    step: Millis,
    min_requests: u64,
) -> Option<Vec<f64>> {
    let total = read_all(
        series.clone(),
        BuiltinStatistic::Requests,
        quantile,
        canary,
        from,
        to,
        0,
    )?;
    if total < min_requests as f64 || (total <= 0.0 && min_requests > 0) {
        return None;
    }
    let counts = matches!(
        statistic,
        BuiltinStatistic::Requests | BuiltinStatistic::Errors
    );
    let mut points = Vec::new();
    let mut start = from;
    while start < to {
        let end = (start + step.max(1)).min(to);
        let point = read_all(
            series.clone(),
            statistic,
            quantile,
            canary,
            start,
            end,
            u64::from(!counts),
        );
        points.push(point.unwrap_or(f64::NAN));
        start = end;
    }
    Some(points)
}

fn statistic_of(
    window: &[&Bucket],
    statistic: BuiltinStatistic,
    quantile: f64,
    span: Millis,
    min_requests: u64,
) -> Option<f64> {
    let requests: f64 = window.iter().map(|b| f64::from(b.requests)).sum();
    let errors = || window.iter().map(|b| f64::from(b.errors)).sum::<f64>();
    match statistic {
        BuiltinStatistic::Requests if requests >= min_requests as f64 => return Some(requests),
        BuiltinStatistic::Errors if requests >= min_requests as f64 => return Some(errors()),
        _ => {}
    }
    if requests < min_requests as f64 || requests <= 0.0 {
        return None;
    }
    match statistic {
        BuiltinStatistic::ErrorRate => Some(errors() / requests),
        BuiltinStatistic::RequestRate => Some(requests / (span.max(1) as f64 / 1000.0)),
        BuiltinStatistic::Requests => Some(requests),
        BuiltinStatistic::Errors => Some(errors()),
        BuiltinStatistic::Latency => {
            // The quantile of the mixture of the buckets' log-normals, by bisection on ln t.
            let cdf = |ln_t: f64| {
                window
                    .iter()
                    .map(|b| {
                        f64::from(b.requests)
                            * normal_cdf((ln_t - f64::from(b.mu)) / f64::from(b.sigma).max(1e-9))
                    })
                    .sum::<f64>()
                    / requests
            };
            let (mut lo, mut hi) = (-20.0_f64, 10.0_f64);
            for _ in 0..60 {
                let mid = 0.5 * (lo + hi);
                if cdf(mid) < quantile {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            Some((0.5 * (lo + hi)).exp())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::LatencyProfile;

    #[test]
    fn the_generator_is_deterministic_and_roughly_normal() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut rng = Rng::new(1);
        let samples: Vec<f64> = (0..20_000).map(|_| rng.normal()).collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / samples.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        assert!((normal_cdf(Z95) - 0.95).abs() < 1e-6);
    }

    #[test]
    fn windows_read_back_the_profile() {
        let profile = VersionProfile {
            error_rate: 0.01,
            latency: LatencyProfile { p50: 0.1, p95: 0.3 },
        };
        let mut rng = Rng::new(3);
        let mut series = Series::new(100);
        for i in 0..30 {
            series.push(
                i * 10_000,
                Bucket::generate(1000.0, &profile, 0.0, &mut rng),
                Bucket::default(),
            );
        }
        let rate = read_all(
            [&series],
            BuiltinStatistic::ErrorRate,
            0.95,
            false,
            0,
            300_000,
            50,
        )
        .unwrap();
        assert!((rate - 0.01).abs() < 0.002, "{rate}");
        let p95 = read_all(
            [&series],
            BuiltinStatistic::Latency,
            0.95,
            false,
            0,
            300_000,
            50,
        )
        .unwrap();
        assert!((p95 - 0.3).abs() < 0.01, "{p95}");
        let p50 = read_all(
            [&series],
            BuiltinStatistic::Latency,
            0.5,
            false,
            0,
            300_000,
            50,
        )
        .unwrap();
        assert!((p50 - 0.1).abs() < 0.005, "{p50}");
        assert_eq!(
            read_all(
                [&series],
                BuiltinStatistic::ErrorRate,
                0.95,
                true,
                0,
                300_000,
                50
            ),
            None,
            "no canary traffic: no value"
        );
        assert!(
            (read_all(
                [&series],
                BuiltinStatistic::RequestRate,
                0.95,
                false,
                0,
                300_000,
                1
            )
            .unwrap()
                - 100.0)
                .abs()
                < 1e-6
        );
    }
}
