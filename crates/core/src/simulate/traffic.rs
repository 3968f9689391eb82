//! Synthetic traffic: per time bucket, how many requests a subset served, how many failed, and
//! the log-normal fitted to their latencies — four numbers per bucket, whatever the rate. A
//! bucket's request count is Poisson around the expected count; its errors are exactly
//! Binomial(count, rate) with a per-bucket overdispersed rate; its latency is the log-normal
//! fitted to `count` latencies drawn from the population log-normal (the fit's location and scale
//! are as noisy as `count` makes them: a single request is a point mass at its one latency).

use std::collections::VecDeque;

use rand_distr::{Binomial, ChiSquared, Distribution, Poisson};

use super::VersionProfile;
use crate::rng::Rng;
use crate::spec::analysis::BuiltinStatistic;
use crate::time::Millis;

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

/// The CDF at `ln_t` of the log-normal of location `mu` and scale `sigma` (as a function of
/// ln t); scale 0 is a point mass at e^mu, whose CDF is a step (right-continuous: 1 at e^mu).
fn log_normal_cdf(ln_t: f64, mu: f64, sigma: f64) -> f64 {
    if sigma > 0.0 {
        normal_cdf((ln_t - mu) / sigma)
    } else if ln_t >= mu {
        1.0
    } else {
        0.0
    }
}

/// z for the 95th percentile.
const Z95: f64 = 1.644_853_626_951_472_2;

/// One bucket of one subset's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bucket {
    /// Requests served (a whole number).
    pub requests: f32,
    /// Requests that failed.
    pub errors: f32,
    /// Location (ln seconds) of the log-normal fitted to the requests' latencies.
    pub mu: f32,
    /// Its scale (0 for a single request: a point mass at e^mu).
    pub sigma: f32,
}

impl Bucket {
    /// A bucket expecting `requests` requests (empty when no finite positive count is expected,
    /// or when none comes),
    /// behaving per `profile`, with relative `noise`:
    ///
    /// - the count is n ~ Poisson(`requests`);
    /// - the bucket's true error rate is `error_rate * (1 + noise * N(0,1))`, clamped to [0, 1]
    ///   (overdispersion), and the errors are exactly Binomial(n, that rate);
    /// - the population latency is log-normal with mu = ln p50 + 0.5 * noise * N(0,1) and
    ///   sigma = (ln p95 - ln p50) / z95, and the bucket keeps the log-normal fitted to its n
    ///   latencies: mu_hat ~ N(mu, sigma² / n) and sigma_hat = sigma * sqrt(χ²(n-1) / (n-1))
    ///   (sigma_hat = 0 for n = 1: the point mass at its one latency, e^mu_hat).
    pub fn generate(requests: f64, profile: &VersionProfile, noise: f64, rng: &mut Rng) -> Bucket {
        if !requests.is_finite() || requests <= 0.0 {
            return Bucket::default();
        }
        let n = Poisson::new(requests).map_or(requests.round(), |p| p.sample(rng));
        if n < 1.0 {
            return Bucket::default();
        }
        let rate = (profile.error_rate * (1.0 + noise * rng.normal())).clamp(0.0, 1.0);
        let errors = Binomial::new(n as u64, rate).map_or(0, |b| b.sample(rng));
        let p50 = profile.latency.p50.max(1e-6);
        let p95 = profile.latency.p95.max(p50 * 1.0001);
        let mu = p50.ln() + noise * rng.normal() * 0.5;
        let sigma = (p95.ln() - p50.ln()) / Z95;
        let mu_hat = mu + sigma / n.sqrt() * rng.normal();
        let sigma_hat = if n >= 2.0 {
            let chi2: f64 = ChiSquared::new(n - 1.0).map_or(n - 1.0, |c| c.sample(rng));
            sigma * (chi2 / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Bucket {
            requests: n as f32,
            errors: errors as f32,
            mu: mu_hat as f32,
            sigma: sigma_hat as f32,
        }
    }

    /// Fraction of this bucket's requests slower than `seconds`.
    fn slower_than(&self, seconds: f64) -> f64 {
        1.0 - log_normal_cdf(seconds.ln(), f64::from(self.mu), f64::from(self.sigma))
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
                            * log_normal_cdf(ln_t, f64::from(b.mu), f64::from(b.sigma))
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
    fn the_normal_cdf_is_accurate_at_the_95th_percentile() {
        assert!((normal_cdf(Z95) - 0.95).abs() < 1e-6);
    }

    #[test]
    fn windows_read_back_the_profile() {
        let profile = VersionProfile::new(0.01, LatencyProfile { p50: 0.1, p95: 0.3 });
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
        // The count is Poisson now: the rate is the window's requests over its span, and 30,000
        // requests are expected (sd 173).
        let requests = read_all(
            [&series],
            BuiltinStatistic::Requests,
            0.95,
            false,
            0,
            300_000,
            1,
        )
        .unwrap();
        let request_rate = read_all(
            [&series],
            BuiltinStatistic::RequestRate,
            0.95,
            false,
            0,
            300_000,
            1,
        )
        .unwrap();
        assert!(
            (request_rate - requests / 300.0).abs() < 1e-9,
            "{request_rate}"
        );
        assert!((request_rate - 100.0).abs() < 3.0, "{request_rate}");
    }

    fn profile(error_rate: f64) -> VersionProfile {
        VersionProfile::new(error_rate, LatencyProfile { p50: 0.1, p95: 0.3 })
    }

    /// The population sigma of [`profile`]'s latency.
    fn sigma() -> f64 {
        (0.3_f64.ln() - 0.1_f64.ln()) / Z95
    }

    /// Mean and (sample) variance.
    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var)
    }

    #[test]
    fn low_traffic_error_counts_are_exactly_binomial() {
        use statrs::distribution::{Binomial as StatrsBinomial, DiscreteCDF};
        const SEEDS: u64 = 1_000;
        const BUCKETS: usize = 180; // 30 minutes of 10 s buckets
        const P: f64 = 0.005;
        let profile = profile(P);
        for rate in [0.25, 2.5, 25.0] {
            let mut outside = 0;
            let mut with_errors = 0;
            let (mut excess, mut variance) = (0.0, 0.0);
            for seed in 0..SEEDS {
                let mut rng = Rng::new(seed);
                let (mut n, mut errors) = (0u64, 0u64);
                for _ in 0..BUCKETS {
                    let b = Bucket::generate(rate * 10.0, &profile, 0.0, &mut rng);
                    assert_eq!(b.requests.fract(), 0.0);
                    assert_eq!(b.errors.fract(), 0.0);
                    assert!(b.errors <= b.requests);
                    n += b.requests as u64;
                    errors += b.errors as u64;
                }
                // The central 99.9% interval [lo, hi] of Binomial(n, P): P(X < lo) < 0.0005 and
                // P(X > hi) <= 0.0005, so a seed falls outside with probability at most 0.001.
                let binomial = StatrsBinomial::new(P, n).unwrap();
                let lo = binomial.inverse_cdf(0.0005);
                let hi = binomial.inverse_cdf(0.9995);
                assert!(binomial.cdf(lo) >= 0.0005);
                assert!(lo == 0 || binomial.cdf(lo - 1) < 0.0005);
                assert!(binomial.sf(hi) <= 0.0005 + 1e-12);
                assert!(hi == 0 || binomial.sf(hi - 1) > 0.0005);
                if errors < lo || errors > hi {
                    outside += 1;
                }
                with_errors += u64::from(errors > 0);
                excess += errors as f64 - n as f64 * P;
                variance += n as f64 * P * (1.0 - P);
            }
            eprintln!(
                "{rate} req/s: {outside} of {SEEDS} seeds outside the 99.9% interval, mean \
                 errors - n·p = {:.3}, {with_errors} seeds with an error",
                excess / SEEDS as f64
            );
            assert!(
                outside <= 3,
                "{rate} req/s: {outside} of {SEEDS} seeds outside"
            );
            // The mean error count is n·P, within four standard errors.
            let mean_excess = excess / SEEDS as f64;
            let standard_error = (variance / SEEDS as f64).sqrt() / (SEEDS as f64).sqrt();
            assert!(
                mean_excess.abs() < 4.0 * standard_error,
                "{rate} req/s: mean errors exceed n·p by {mean_excess} (se {standard_error})"
            );
            if rate == 0.25 {
                // 450 requests expected: errors ~ Poisson(2.25), so P(at least one) = 1 - e^-2.25.
                let fraction = with_errors as f64 / SEEDS as f64;
                let expected = 1.0 - (-2.25_f64).exp();
                assert!(
                    (fraction - expected).abs() < 0.04,
                    "{fraction} of seeds with an error, expected {expected}"
                );
            }
        }
    }

    #[test]
    fn request_counts_are_poisson() {
        let profile = profile(0.01);
        let mut rng = Rng::new(11);
        let counts: Vec<f64> = (0..20_000)
            .map(|_| f64::from(Bucket::generate(2.5 * 10.0, &profile, 0.05, &mut rng).requests))
            .collect();
        assert!(counts.iter().all(|c| c.fract() == 0.0 && *c >= 0.0));
        let (mean, var) = mean_var(&counts);
        // sd of the mean 0.035, of the variance about 0.25.
        assert!((mean - 25.0).abs() < 0.2, "mean {mean}");
        assert!((var - 25.0).abs() < 1.5, "variance {var}");
        // Nothing expected, nothing served (and no randomness drawn).
        let before = rng.clone().next_u64();
        assert_eq!(
            Bucket::generate(0.0, &profile, 0.05, &mut rng),
            Bucket::default()
        );
        assert_eq!(
            Bucket::generate(-1.0, &profile, 0.05, &mut rng),
            Bucket::default()
        );
        assert_eq!(rng.next_u64(), before);
    }

    #[test]
    fn latency_noise_shrinks_with_the_request_count() {
        let profile = profile(0.0);
        let sigma = sigma();
        let mu = 0.1_f64.ln();
        let mut rng = Rng::new(5);
        let sample = |expected: f64, rng: &mut Rng| -> Vec<Bucket> {
            (0..4_000)
                .map(|_| Bucket::generate(expected, &profile, 0.0, rng))
                .filter(|b| b.requests > 0.0)
                .collect()
        };
        let few = sample(2.0, &mut rng);
        let many = sample(2000.0, &mut rng);
        let medians = |buckets: &[Bucket]| -> Vec<f64> {
            buckets.iter().map(|b| f64::from(b.mu).exp()).collect()
        };
        let (_, var_few) = mean_var(&medians(&few));
        let (_, var_many) = mean_var(&medians(&many));
        assert!(
            var_few.sqrt() > 10.0 * var_many.sqrt(),
            "sd of a bucket's median: {} at n≈2, {} at n≈2000",
            var_few.sqrt(),
            var_many.sqrt()
        );
        // Whatever n: (mu_hat - mu)·sqrt(n)/sigma ~ N(0, 1), and sigma_hat² is unbiased.
        for buckets in [&few, &many] {
            let z: Vec<f64> = buckets
                .iter()
                .map(|b| (f64::from(b.mu) - mu) * f64::from(b.requests).sqrt() / sigma)
                .collect();
            let (mean, var) = mean_var(&z);
            assert!(mean.abs() < 0.07 && (var - 1.0).abs() < 0.1, "{mean} {var}");
            let ratios: Vec<f64> = buckets
                .iter()
                .filter(|b| b.requests >= 2.0)
                .map(|b| (f64::from(b.sigma) / sigma).powi(2))
                .collect();
            let (mean, _) = mean_var(&ratios);
            assert!((mean - 1.0).abs() < 0.1, "E[sigma_hat²]/sigma² = {mean}");
        }
        for b in &few {
            assert_eq!(b.sigma == 0.0, b.requests == 1.0, "{b:?}");
        }
    }

    #[test]
    fn a_single_request_is_a_point_mass() {
        let profile = profile(0.0);
        let mut rng = Rng::new(9);
        let bucket = std::iter::repeat_with(|| Bucket::generate(1.0, &profile, 0.05, &mut rng))
            .find(|b| b.requests == 1.0)
            .unwrap();
        assert_eq!(bucket.sigma, 0.0);
        let latency = f64::from(bucket.mu).exp();
        let mut series = Series::new(1);
        series.push(0, Bucket::default(), bucket);
        for quantile in [0.01, 0.5, 0.95, 0.999] {
            let read = read_all(
                [&series],
                BuiltinStatistic::Latency,
                quantile,
                true,
                0,
                10_000,
                1,
            )
            .unwrap();
            assert!(
                (read / latency - 1.0).abs() < 1e-9,
                "q{quantile}: {read} vs {latency}"
            );
        }
        // Slower than anything below its latency, than nothing above it.
        assert_eq!(bucket.bad_requests(Some(latency * 0.999)), 1.0);
        assert_eq!(bucket.bad_requests(Some(latency * 1.001)), 0.0);
    }

    #[test]
    fn a_seed_gives_the_same_buckets() {
        let run = |seed: u64| -> Vec<u32> {
            let mut rng = Rng::new(seed);
            let (a, b) = (profile(0.01), profile(0.3));
            [0.0, 0.5, 1.0, 3.0, 25.0, 250.0, 1e4, 1e6]
                .into_iter()
                .flat_map(|expected| {
                    [
                        Bucket::generate(expected, &a, 0.05, &mut rng),
                        Bucket::generate(expected, &b, 0.5, &mut rng),
                    ]
                })
                .flat_map(|b| [b.requests, b.errors, b.mu, b.sigma].map(f32::to_bits))
                .collect()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
