//! Scoring a set of classified metrics as Kayenta's WeightedSumScorer and
//! ThresholdScoreClassifier do: muted metrics dropped, a failing critical metric zeroing the
//! score, half or more `NoData` zeroing it, per-group pass percentages, weights, and the
//! pass/marginal thresholds.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Classification;
use super::classify::number;

/// A share of metrics at or above which `NoData` fails the whole set (percent).
pub const NO_DATA_THRESHOLD: f64 = 50.0;

/// One metric as the scorer sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredMetric {
    /// Its name (for the reason).
    pub name: String,
    /// Its classification.
    pub classification: Classification,
    /// Whether it failed as a critical metric.
    pub critical: bool,
    /// Muted metrics are reported but not scored.
    pub muted: bool,
    /// The groups it counts in (every one of them).
    pub groups: Vec<String>,
}

/// The score thresholds: at or above `pass` passes, at or above `marginal` is marginal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Least passing score.
    pub pass: f64,
    /// Least marginal score.
    pub marginal: f64,
}

/// The verdict on a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// score ≥ pass.
    Pass,
    /// marginal ≤ score < pass.
    Marginal,
    /// score < marginal.
    Fail,
}

/// The score of a set of metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Scorecard {
    /// 0–100, rounded to two decimals.
    pub score: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// Each group's score (0–100; a group with nothing countable shows 0 but counts as 100).
    pub groups: BTreeMap<String, f64>,
    /// Why the score was zeroed, if it was.
    pub reason: Option<String>,
}

/// Scores `metrics` with percent `weights` per group (groups without a weight share what the
/// configured ones leave of 100) and classifies the score against `thresholds`.
pub fn score(
    metrics: &[ScoredMetric],
    weights: &BTreeMap<String, f64>,
    thresholds: Thresholds,
) -> Scorecard {
    let scored: Vec<&ScoredMetric> = metrics.iter().filter(|m| !m.muted).collect();
    let mut members: BTreeMap<&str, Vec<Classification>> = BTreeMap::new();
    for metric in &scored {
        for group in &metric.groups {
            members
                .entry(group.as_str())
                .or_default()
                .push(metric.classification);
        }
    }
    // Group score: passing share of the countable metrics (NoData and Error do not count).
    let groups: BTreeMap<String, Option<f64>> = members
        .iter()
        .map(|(group, labels)| {
            let count = |c: Classification| labels.iter().filter(|l| **l == c).count() as f64;
            let pass = count(Classification::Pass);
            let total = pass
                + count(Classification::High)
                + count(Classification::Low)
                + count(Classification::NoDataFail);
            let score = (total > 0.0).then(|| 100.0 * pass / total);
            ((*group).to_owned(), score)
        })
        .collect();
    let reported = groups
        .iter()
        .map(|(g, s)| (g.clone(), s.unwrap_or(0.0)))
        .collect();

    let critical_failure = scored
        .iter()
        .find(|m| m.critical && m.classification != Classification::Pass);
    let no_data = scored
        .iter()
        .filter(|m| m.classification == Classification::NoData)
        .count();
    let (score, reason) = if let Some(failure) = critical_failure {
        (
            0.0,
            Some(format!(
                "critical metric {} was classified {}",
                failure.name, failure.classification
            )),
        )
    } else if !scored.is_empty()
        && 100.0 * no_data as f64 / scored.len() as f64 >= NO_DATA_THRESHOLD
    {
        (
            0.0,
            Some(format!(
                "{no_data} of {} metrics returned NoData (at least {}%)",
                scored.len(),
                number(NO_DATA_THRESHOLD)
            )),
        )
    } else {
        // Every configured weight counts, even one for a group no metric is in (as Kayenta).
        let configured: f64 = weights.values().sum();
        let unweighted = groups.keys().filter(|g| !weights.contains_key(*g)).count();
        let shared = if unweighted > 0 {
            (100.0 - configured) / unweighted as f64
        } else {
            0.0
        };
        let sum: f64 = groups
            .iter()
            .map(|(g, s)| s.unwrap_or(100.0) * weights.get(g).copied().unwrap_or(shared) / 100.0)
            .sum();
        ((sum * 100.0).round() / 100.0, None)
    };
    let verdict = if score >= thresholds.pass {
        Verdict::Pass
    } else if score >= thresholds.marginal {
        Verdict::Marginal
    } else {
        Verdict::Fail
    };
    Scorecard {
        score,
        verdict,
        groups: reported,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Classification::*;

    fn metric(group: &str, classification: Classification) -> ScoredMetric {
        ScoredMetric {
            name: format!("{group}-{classification}"),
            classification,
            critical: false,
            muted: false,
            groups: vec![group.to_owned()],
        }
    }

    fn critical(mut m: ScoredMetric) -> ScoredMetric {
        m.critical = true;
        m
    }

    const THRESHOLDS: Thresholds = Thresholds {
        pass: 95.0,
        marginal: 75.0,
    };

    fn score_of(metrics: &[ScoredMetric], weights: &[(&str, f64)]) -> f64 {
        let weights = weights.iter().map(|(g, w)| (g.to_string(), *w)).collect();
        score(metrics, &weights, THRESHOLDS).score
    }

    #[test]
    fn kayenta_scorer_suite() {
        let g1 = |c| metric("g1", c);
        let g2 = |c| metric("g2", c);
        assert_eq!(score_of(&[g1(Pass), g1(High)], &[]), 50.0);
        assert_eq!(score_of(&[g1(Pass), g1(High), g1(Low)], &[]), 33.33);
        assert_eq!(
            score_of(
                &[g1(Pass), g1(Pass), g2(High)],
                &[("g1", 75.0), ("g2", 25.0)]
            ),
            75.0
        );
        assert_eq!(
            score_of(
                &[g1(Pass), g1(High), g2(High)],
                &[("g1", 50.0), ("g2", 50.0)]
            ),
            25.0
        );
        assert_eq!(
            score_of(
                &[g1(Pass), g1(NoData), g2(High)],
                &[("g1", 50.0), ("g2", 50.0)]
            ),
            50.0
        );
        assert_eq!(
            score_of(
                &[g1(High), g1(Low), g1(Pass), g2(High)],
                &[("g1", 15.0), ("g2", 85.0)]
            ),
            5.0
        );
        assert_eq!(score_of(&[g1(Pass), critical(g1(High))], &[]), 0.0);
        assert_eq!(score_of(&[g1(Low), critical(g1(Pass))], &[]), 50.0);
        assert_eq!(score_of(&[g1(Pass), critical(g1(NoData))], &[]), 0.0);
        assert_eq!(score_of(&[g1(NoData)], &[]), 0.0);
        assert_eq!(score_of(&[g1(Pass), g1(Pass), g2(NoData)], &[]), 100.0);
    }

    #[test]
    fn verdicts_and_reasons() {
        let metrics = [metric("g", Pass), metric("g", High)];
        let card = score(
            &metrics,
            &BTreeMap::new(),
            Thresholds {
                pass: 75.0,
                marginal: 50.0,
            },
        );
        assert_eq!((card.score, card.verdict), (50.0, Verdict::Marginal));
        assert_eq!(card.groups["g"], 50.0);
        let card = score(&metrics[..1], &BTreeMap::new(), THRESHOLDS);
        assert_eq!(card.verdict, Verdict::Pass);
        let card = score(&metrics[1..], &BTreeMap::new(), THRESHOLDS);
        assert_eq!(card.verdict, Verdict::Fail);
        let card = score(
            &[metric("g", Pass), critical(metric("g", Low))],
            &BTreeMap::new(),
            THRESHOLDS,
        );
        assert_eq!(
            card.reason.as_deref(),
            Some("critical metric g-Low was classified Low")
        );
    }

    #[test]
    fn muted_metrics_are_not_scored() {
        let mut muted = critical(metric("g", High));
        muted.muted = true;
        assert_eq!(score_of(&[metric("g", Pass), muted], &[]), 100.0);
    }

    #[test]
    fn missing_required_data_counts_as_a_failure_and_errors_do_not_count() {
        assert_eq!(
            score_of(&[metric("g", Pass), metric("g", NoDataFail)], &[]),
            50.0
        );
        assert_eq!(
            score_of(&[metric("g", Pass), metric("g", Error)], &[]),
            100.0
        );
    }

    #[test]
    fn a_metric_counts_in_each_of_its_groups_and_unweighted_groups_share_the_rest() {
        let mut both = metric("a", High);
        both.groups.push("b".to_owned());
        // a: {High} = 0, b: {High, Pass} = 50, c: {Pass} = 100; a weighs 50, b and c 25 each.
        let metrics = [both, metric("b", Pass), metric("c", Pass)];
        assert_eq!(score_of(&metrics, &[("a", 50.0)]), 37.5);
        assert_eq!(score_of(&metrics, &[]), 50.0);
    }
}
