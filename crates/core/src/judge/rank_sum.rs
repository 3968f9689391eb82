//! The Mann-Whitney (Wilcoxon rank-sum) shift interval and Hodges–Lehmann estimate, computed the
//! way Kayenta (and R's `wilcox.test(conf.int = TRUE, correct = TRUE)` with the normal
//! approximation) does: the standardized statistic with tie and continuity corrections as a
//! function of the shift, and its roots found with [`zeroin`](super::zeroin::zeroin).

use statrs::distribution::{ContinuousCDF, Normal};

use super::JudgeError;
use super::zeroin::zeroin;

/// The answer of [`shift_interval`]: where the shift of the canary over the baseline lies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShiftInterval {
    /// Lower end of the confidence interval of the shift (canary − baseline).
    pub low: f64,
    /// Upper end of the confidence interval.
    pub high: f64,
    /// The Hodges–Lehmann estimate of the shift (the root of the centred statistic).
    pub estimate: f64,
}

/// The standardized rank-sum statistic of `canary − shift` against `baseline`, minus `quantile`:
/// `(S − ½·sign S)/σ − quantile`, with `S` the canary's rank sum less its expectation and `σ` the
/// tie-corrected standard deviation. Decreasing in `shift`. Errors when every observation is tied
/// (σ = 0).
pub fn standardized_statistic(
    shift: f64,
    quantile: f64,
    canary: &[f64],
    baseline: &[f64],
) -> Result<f64, JudgeError> {
    let m = canary.len() as f64;
    let n = baseline.len() as f64;
    // `+ 0.0` folds −0 into +0, so that the two compare as a tie.
    let mut pooled: Vec<(f64, bool)> = canary
        .iter()
        .map(|v| (v - shift + 0.0, true))
        .chain(baseline.iter().map(|v| (v + 0.0, false)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut canary_rank_sum = 0.0;
    let mut ties = 0.0;
    let mut start = 0;
    while start < pooled.len() {
        let mut end = start + 1;
        while end < pooled.len() && pooled[end].0 == pooled[start].0 {
            end += 1;
        }
        // Ranks start+1 ..= end share their average.
        let size = (end - start) as f64;
        let rank = (start + 1 + end) as f64 / 2.0;
        let canaries = pooled[start..end].iter().filter(|p| p.1).count() as f64;
        canary_rank_sum += rank * canaries;
        ties += size * size * size - size;
        start = end;
    }
    let centred = canary_rank_sum - m * (m + 1.0) / 2.0 - m * n / 2.0;
    let correction = if centred > 0.0 {
        0.5
    } else if centred < 0.0 {
        -0.5
    } else {
        0.0
    };
    let sigma = ((m * n / 12.0) * ((m + n + 1.0) - ties / ((m + n) * (m + n - 1.0)))).sqrt();
    if sigma == 0.0 || sigma.is_nan() {
        return Err(JudgeError::AllTied);
    }
    Ok((centred - correction) / sigma - quantile)
}

/// The shift interval at `confidence` (e.g. 0.95) and the shift estimate. Both series must be
/// non-empty and free of NaN. Interval ends without a sign change inside
/// `[min(canary) − max(baseline), max(canary) − min(baseline)]` are clamped to that range.
pub fn shift_interval(
    canary: &[f64],
    baseline: &[f64],
    confidence: f64,
) -> Result<ShiftInterval, JudgeError> {
    if canary.is_empty() || baseline.is_empty() {
        return Err(JudgeError::Empty);
    }
    let min = |s: &[f64]| s.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |s: &[f64]| s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lowest = min(canary) - max(baseline);
    let highest = max(canary) - min(baseline);
    let statistic =
        |quantile: f64| move |shift: f64| standardized_statistic(shift, quantile, canary, baseline);
    let root = |quantile: f64| -> Result<f64, JudgeError> {
        let f_low = statistic(quantile)(lowest)?;
        let f_high = statistic(quantile)(highest)?;
        if f_low <= 0.0 {
            Ok(lowest)
        } else if f_high >= 0.0 {
            Ok(highest)
        } else {
            zeroin(lowest, highest, f_low, f_high, statistic(quantile))
        }
    };
    // z_{α/2}, negative: the statistic equals −z at the interval's lower end.
    let z = Normal::standard().inverse_cdf((1.0 - confidence) / 2.0);
    let low = root(-z)?;
    let high = root(z)?;
    let f_low = statistic(0.0)(lowest)?;
    let f_high = statistic(0.0)(highest)?;
    let estimate = zeroin(lowest, highest, f_low, f_high, statistic(0.0))?;
    Ok(ShiftInterval {
        low,
        high,
        estimate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn kayenta_interval_and_estimate_for_a_clear_shift() {
        // Kayenta MannWhitneySuite: canary [10,20,30,40] vs baseline [1,2,3,4] at 0.95.
        let r = shift_interval(&[10.0, 20.0, 30.0, 40.0], &[1.0, 2.0, 3.0, 4.0], 0.95).unwrap();
        assert!(close(r.low, 6.0, 1e-6), "{r:?}");
        assert!(close(r.high, 39.0, 1e-6), "{r:?}");
        assert!(close(r.estimate, 22.5, 1e-6), "{r:?}");
    }

    #[test]
    fn the_normal_quantile_matches_kayentas() {
        let z = Normal::standard().inverse_cdf(0.02 / 2.0);
        assert!(close(z, -2.326348, 1e-6), "{z}");
        let z = Normal::standard().inverse_cdf(0.05 / 2.0);
        assert!(close(z, -1.9599639845400536, 1e-9), "{z}");
    }

    #[test]
    fn critical_metric_example_interval() {
        let r = shift_interval(
            &[20.0, 22.0, 21.0, 25.0, 30.0],
            &[1.0, 2.2, 1.1, 2.5, 3.0],
            0.95,
        )
        .unwrap();
        assert!(close(r.low, 17.8, 1e-3), "{r:?}");
        assert!(close(r.high, 27.8, 1e-3), "{r:?}");
        assert!(close(r.estimate, 20.0, 1e-3), "{r:?}");
    }

    #[test]
    fn the_statistic_is_centred_and_decreasing() {
        let (x, y) = ([3.0, 5.0, 7.0], [4.0, 6.0, 8.0]);
        let at = |shift| standardized_statistic(shift, 0.0, &x, &y).unwrap();
        assert!(at(-10.0) > at(0.0) && at(0.0) > at(10.0));
        // Mirrored samples have a zero statistic at the zero shift.
        let z = standardized_statistic(0.0, 0.0, &[1.0, 2.0], &[2.0, 1.0]).unwrap();
        assert_eq!(z, 0.0);
    }

    #[test]
    fn all_tied_observations_are_an_error() {
        assert_eq!(
            standardized_statistic(0.0, 0.0, &[1.0, 1.0], &[1.0]),
            Err(JudgeError::AllTied)
        );
        assert_eq!(shift_interval(&[], &[1.0], 0.95), Err(JudgeError::Empty));
    }

    #[test]
    fn a_larger_confidence_widens_the_interval() {
        let x = [5.1, 6.3, 5.8, 7.2, 6.6, 5.9];
        let y = [4.8, 5.2, 5.0, 5.6, 4.9, 5.3];
        let narrow = shift_interval(&x, &y, 0.80).unwrap();
        let wide = shift_interval(&x, &y, 0.98).unwrap();
        assert!(
            wide.low <= narrow.low && wide.high >= narrow.high,
            "{narrow:?} {wide:?}"
        );
        assert!(narrow.low <= narrow.estimate && narrow.estimate <= narrow.high);
    }
}
