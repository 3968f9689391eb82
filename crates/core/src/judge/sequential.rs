//! Sequential detection of a higher canary error rate: Wald's sequential probability ratio test on
//! the errors of canary and baseline, conditioned on where each error happened, so the unknown
//! baseline rate cancels out. It stops as soon as the evidence crosses a boundary, holds its
//! false-alarm rate at α (default 0.01) however often it is looked at, records no measurement
//! below a minimum sample size, and is inconclusive only when the run ends with too few samples.
//!
//! Model: in a window with `n_c` canary and `n_b` baseline requests, errors are Poisson with rates
//! `p_c` and `p_b`; given that an error happened, it is a canary error with probability
//! `θ = ρ·n_c / (ρ·n_c + n_b)` where `ρ = p_c / p_b`. H0: ρ = 1, H1: ρ = `ratio` (default 2).
//! Each window adds `k_c·ln(θ₁/θ₀) + k_b·ln((1−θ₁)/(1−θ₀))` to the log-likelihood ratio; the test
//! fails the canary at `ln((1−β)/α)` and passes it at `ln(β/(1−α))`.

use serde::{Deserialize, Serialize};

use super::classify::number;
pub use crate::spec::judge::SequentialConfig;

/// Bad settings or counts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SequentialError {
    /// α or β outside (0, 1), or α + β ≥ 1.
    #[error("alpha and beta must lie in (0, 1) with alpha + beta < 1, got {alpha} and {beta}")]
    Rates {
        /// α.
        alpha: f64,
        /// β.
        beta: f64,
    },
    /// The ratio to detect is not above 1.
    #[error("the error-rate ratio to detect must be greater than 1, got {0}")]
    Ratio(f64),
    /// A window reports more errors than requests.
    #[error("{errors} errors out of {requests} requests")]
    Counts {
        /// Errors.
        errors: u64,
        /// Requests.
        requests: u64,
    },
}

/// One window's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorCounts {
    /// Canary requests.
    pub canary_requests: u64,
    /// Canary errors.
    pub canary_errors: u64,
    /// Baseline requests.
    pub baseline_requests: u64,
    /// Baseline errors.
    pub baseline_errors: u64,
}

/// What the test says after a window, or at the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Fewer canary requests than the minimum: record no measurement yet.
    NoMeasurement,
    /// The evidence lies between the boundaries: keep observing.
    Continue,
    /// The canary's error rate is higher (upper boundary crossed): abort.
    Fail,
    /// The canary's error rate is not higher (lower boundary crossed, or the run ended with
    /// enough samples and no evidence beyond the upper boundary).
    Pass,
    /// The run ended below the minimum sample size.
    Inconclusive,
}

/// A decision with the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The decision.
    pub decision: Decision,
    /// The log-likelihood ratio of H1 (ratio) against H0 (equal rates).
    pub log_likelihood_ratio: f64,
    /// Counts so far.
    pub totals: ErrorCounts,
    /// In words, with the numbers.
    pub message: String,
}

/// The running test; serializable so that it survives a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRateTest {
    config: SequentialConfig,
    totals: ErrorCounts,
    log_likelihood_ratio: f64,
    decided: Option<Decision>,
}

impl ErrorRateTest {
    /// A test with no observations.
    pub fn new(config: SequentialConfig) -> Result<ErrorRateTest, SequentialError> {
        let SequentialConfig { alpha, beta, .. } = config;
        if !(alpha > 0.0 && beta > 0.0 && alpha + beta < 1.0) {
            return Err(SequentialError::Rates { alpha, beta });
        }
        if !(config.ratio > 1.0 && config.ratio.is_finite()) {
            return Err(SequentialError::Ratio(config.ratio));
        }
        Ok(ErrorRateTest {
            config,
            totals: ErrorCounts::default(),
            log_likelihood_ratio: 0.0,
            decided: None,
        })
    }

    /// The boundary that fails the canary: ln((1−β)/α).
    pub fn upper_boundary(&self) -> f64 {
        ((1.0 - self.config.beta) / self.config.alpha).ln()
    }

    /// The boundary that passes the canary: ln(β/(1−α)).
    pub fn lower_boundary(&self) -> f64 {
        (self.config.beta / (1.0 - self.config.alpha)).ln()
    }

    /// Adds a window and decides. Once the test has failed or passed the canary, it stays so.
    pub fn observe(&mut self, window: ErrorCounts) -> Result<Verdict, SequentialError> {
        for (errors, requests) in [
            (window.canary_errors, window.canary_requests),
            (window.baseline_errors, window.baseline_requests),
        ] {
            if errors > requests {
                return Err(SequentialError::Counts { errors, requests });
            }
        }
        if self.decided.is_some() {
            return Ok(self.verdict());
        }
        let t = &mut self.totals;
        t.canary_requests += window.canary_requests;
        t.canary_errors += window.canary_errors;
        t.baseline_requests += window.baseline_requests;
        t.baseline_errors += window.baseline_errors;
        if window.canary_requests > 0 && window.baseline_requests > 0 {
            let (nc, nb) = (
                window.canary_requests as f64,
                window.baseline_requests as f64,
            );
            let rho = self.config.ratio;
            let theta0 = nc / (nc + nb);
            let theta1 = rho * nc / (rho * nc + nb);
            self.log_likelihood_ratio += window.canary_errors as f64 * (theta1 / theta0).ln()
                + window.baseline_errors as f64 * ((1.0 - theta1) / (1.0 - theta0)).ln();
        }
        if self.totals.canary_requests >= self.config.min_requests {
            if self.log_likelihood_ratio >= self.upper_boundary() {
                self.decided = Some(Decision::Fail);
            } else if self.log_likelihood_ratio <= self.lower_boundary() {
                self.decided = Some(Decision::Pass);
            }
        }
        Ok(self.verdict())
    }

    /// The decision when the run's count or deadline is reached: the boundary decision if one
    /// was made; otherwise `Inconclusive` ("insufficient samples") below the minimum sample size,
    /// and `Pass` (no significant evidence of a higher rate) above it.
    pub fn conclude(&self) -> Verdict {
        if self.decided.is_some() {
            return self.verdict();
        }
        let n = self.totals.canary_requests;
        if n < self.config.min_requests {
            self.with(
                Decision::Inconclusive,
                format!(
                    "insufficient samples: n={n} canary requests, the minimum is {}",
                    self.config.min_requests
                ),
            )
        } else {
            self.with(
                Decision::Pass,
                format!(
                    "no significant evidence of a higher canary error rate by the end: {}",
                    self.evidence()
                ),
            )
        }
    }

    /// The current state, decided or not.
    pub fn verdict(&self) -> Verdict {
        let n = self.totals.canary_requests;
        match self.decided {
            Some(Decision::Fail) => self.with(
                Decision::Fail,
                format!(
                    "canary error rate higher: {} reached the upper boundary {}",
                    self.evidence(),
                    number(self.upper_boundary())
                ),
            ),
            Some(decision) => self.with(
                decision,
                format!(
                    "canary error rate not higher: {} reached the lower boundary {}",
                    self.evidence(),
                    number(self.lower_boundary())
                ),
            ),
            None if n < self.config.min_requests => self.with(
                Decision::NoMeasurement,
                format!(
                    "waiting for samples: n={n} of {} canary requests",
                    self.config.min_requests
                ),
            ),
            None => self.with(Decision::Continue, self.evidence()),
        }
    }

    fn evidence(&self) -> String {
        let t = &self.totals;
        let rate = |e: u64, n: u64| {
            if n == 0 {
                "-".to_owned()
            } else {
                format!("{}%", number(100.0 * e as f64 / n as f64))
            }
        };
        format!(
            "log-likelihood ratio {} (ratio {} against 1, α {}, β {}) after canary {}/{} ({}), baseline {}/{} ({})",
            number(self.log_likelihood_ratio),
            number(self.config.ratio),
            number(self.config.alpha),
            number(self.config.beta),
            t.canary_errors,
            t.canary_requests,
            rate(t.canary_errors, t.canary_requests),
            t.baseline_errors,
            t.baseline_requests,
            rate(t.baseline_errors, t.baseline_requests),
        )
    }

    fn with(&self, decision: Decision, message: String) -> Verdict {
        Verdict {
            decision,
            log_likelihood_ratio: self.log_likelihood_ratio,
            totals: self.totals,
            message,
        }
    }
}

/// Wald's approximate expected sample number, under H1, of the one-sample SPRT of a Bernoulli
/// rate `p1` against `p0` with error rates `alpha` and `beta`: the yardstick for the two-sample
/// test above.
pub fn wald_expected_samples(p0: f64, p1: f64, alpha: f64, beta: f64) -> f64 {
    let upper = ((1.0 - beta) / alpha).ln();
    let lower = (beta / (1.0 - alpha)).ln();
    let drift = p1 * (p1 / p0).ln() + (1.0 - p1) * ((1.0 - p1) / (1.0 - p0)).ln();
    ((1.0 - beta) * upper + beta * lower) / drift
}

#[cfg(test)]
#[path = "sequential_tests.rs"]
mod tests;
