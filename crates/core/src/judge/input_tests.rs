//! The `flotilla judge` documents: both shapes, defaults, NaN spellings and bad input.

use super::*;

fn single(text: &str) -> Judgement {
    match judge_json(text).unwrap() {
        Answer::Single(j) => j,
        other => panic!("{other:?}"),
    }
}

fn set(text: &str) -> ScoredAnswer {
    match judge_json(text).unwrap() {
        Answer::Scored(s) => s,
        other => panic!("{other:?}"),
    }
}

fn error(text: &str) -> String {
    judge_json(text).unwrap_err().to_string()
}

#[test]
fn a_single_comparison_with_kayenta_test_settings() {
    let j = single(
        r#"{"canary": [10, 20, 30, 40], "baseline": [1, 2, 3, 4],
            "confidence": 0.95, "tolerance": 0.1}"#,
    );
    assert_eq!(j.classification, Classification::High);
    let [low, high] = j.ci.unwrap();
    assert!(
        (low - 6.0).abs() < 1e-6 && (high - 39.0).abs() < 1e-6,
        "{j:?}"
    );
    assert!((j.estimate.unwrap() - 22.5).abs() < 1e-6);
    assert_eq!((j.canary_count, j.baseline_count), (Some(4), Some(4)));
    let json = serde_json::to_value(&j).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "baselineCount",
            "canaryCount",
            "ci",
            "classification",
            "critical",
            "effectSize",
            "estimate",
            "reason"
        ]
    );
}

#[test]
fn every_setting_is_read() {
    let j = single(
        r#"{"canary": [20, 22, 21, 25, 30], "baseline": [1, 2.2, 1.1, 2.5, 3.0],
            "direction": "increase", "confidence": 0.95, "tolerance": 0.1,
            "effectSize": {"measure": "meanRatio", "allowedIncrease": 5.0, "allowedDecrease": 1.0,
                           "criticalIncrease": 13.0, "criticalDecrease": 1.0},
            "critical": true, "mustHaveData": true, "nanStrategy": "replace",
            "outliers": {"strategy": "remove", "factor": 1.5}, "seed": 3}"#,
    );
    assert_eq!(
        (j.classification, j.critical),
        (Classification::High, false)
    );
    let j = single(
        r#"{"canary": [20, 22, 21, 25, 30], "baseline": [1, 2.2, 1.1, 2.5, 3.0],
            "direction": "decrease"}"#,
    );
    assert_eq!(j.classification, Classification::Pass);
    let j = single(
        r#"{"canary": [20, 22, 21, 25, 30], "baseline": [1, 2.2, 1.1, 2.5, 3.0],
            "effectSize": {"measure": "cles"}}"#,
    );
    assert_eq!(j.effect_size, Some(1.0));
}

#[test]
fn nan_is_written_as_a_string_or_null() {
    let j = single(r#"{"canary": [10, "NaN", 11, null, 12], "baseline": [1, 2, 3]}"#);
    assert_eq!(j.canary_count, Some(3));
    let j = single(r#"{"canary": ["NaN", null], "baseline": [1, 2, 3]}"#);
    assert_eq!(j.classification, Classification::NoData);
    let j = single(r#"{"canary": ["NaN", null], "baseline": [1, 2, 3], "nanStrategy": "replace"}"#);
    // Replaced by zeros, which are lower than the baseline.
    assert_eq!(
        (j.classification, j.canary_count),
        (Classification::Low, Some(2))
    );
}

#[test]
fn bad_series_are_defined_classifications() {
    let j = single(r#"{"canary": [], "baseline": [1, 2]}"#);
    assert_eq!(j.classification, Classification::NoData);
    let j = single(r#"{"canary": [], "baseline": [], "mustHaveData": true}"#);
    assert_eq!(j.classification, Classification::NoDataFail);
    let j = single(r#"{"canary": [4, 5, 6], "baseline": [6, 5, 4]}"#);
    assert_eq!(j.classification, Classification::Pass);
    assert!(j.reason.unwrap().contains("identical"));
    let j = single(r#"{"canary": [7], "baseline": [7]}"#);
    assert_eq!(j.classification, Classification::Pass);
    let j = single(r#"{"canary": [7], "baseline": [1]}"#);
    assert_eq!(j.classification, Classification::NoData);
    let j = single(r#"{"canary": [1e308, -1e308], "baseline": [-1e308, 1e308, 0]}"#);
    assert!(serde_json::to_string(&j).is_ok());
}

#[test]
fn bad_input_names_the_field() {
    assert_eq!(
        error(r#"{"canary": [1, "x", 3], "baseline": [1]}"#),
        "canary[1]: invalid value: string \"x\", expected a number, \"NaN\" or null"
    );
    assert_eq!(
        error(r#"{"canary": [1, true], "baseline": [1]}"#),
        "canary[1]: invalid type: boolean `true`, expected a number, \"NaN\" or null"
    );
    assert_eq!(
        error(r#"{"canary": [1]}"#),
        "baseline: missing field `baseline`"
    );
    assert!(
        error(r#"{"canary": [1], "baseline": [1], "confidence": 1.5}"#)
            .starts_with("confidence: a confidence level is between 0 and 1")
    );
    assert!(
        error(r#"{"canary": [1], "baseline": [1], "tolerance": -1}"#).starts_with("tolerance: ")
    );
    assert!(
        error(r#"{"canary": [1], "baseline": [1], "direction": "up"}"#)
            .starts_with("direction: unknown variant `up`")
    );
    assert!(
        error(r#"{"canary": [1], "baseline": [1], "outliers": {"factor": 0}}"#)
            .starts_with("outliers.factor: ")
    );
    assert!(
        error(r#"{"canary": [1], "baseline": [1], "colour": 1}"#)
            .contains("unknown field `colour`")
    );
    assert!(error(r#"{"canary": [1], "baseline": [1], "name": "x"}"#).starts_with("name: "));
    assert!(error("[1, 2]").starts_with("(document): "));
    assert!(error("{").starts_with("not valid JSON"));
    assert!(error(r#"{"canary": [1], "baseline": [NaN]}"#).starts_with("not valid JSON"));
}

const SET: &str = r#"{
  "metrics": [
    {"name": "latency", "groups": ["perf"], "canary": [20, 22, 21, 25, 30],
     "baseline": [1, 2.2, 1.1, 2.5, 3.0], "confidence": 0.95, "tolerance": 0.1},
    {"name": "cpu", "groups": ["perf"], "canary": [1, 2, 3, 4, 5], "baseline": [5, 4, 3, 2, 1]},
    {"name": "muted", "groups": ["perf"], "muted": true, "classification": "High", "critical": true}
  ],
  "thresholds": {"pass": 75, "marginal": 50}
}"#;

#[test]
fn a_scored_set_with_one_pass_and_one_high_scores_fifty() {
    let answer = set(SET);
    assert_eq!((answer.score, answer.verdict), (50.0, Verdict::Marginal));
    let names: Vec<&str> = answer.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["latency", "cpu", "muted"]);
    assert_eq!(
        answer.metrics[0].judgement.classification,
        Classification::High
    );
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["metrics"][0]["name"], "latency");
    assert_eq!(json["metrics"][0]["classification"], "High");
    assert_eq!(json["metrics"][2]["canaryCount"], serde_json::Value::Null);
    assert_eq!(json["verdict"], "Marginal");
}

#[test]
fn a_critical_failure_zeroes_a_scored_set() {
    let answer = set(&SET.replace(
        r#""tolerance": 0.1}"#,
        r#""tolerance": 0.1, "critical": true}"#,
    ));
    assert_eq!((answer.score, answer.verdict), (0.0, Verdict::Fail));
    assert!(answer.metrics[0].judgement.critical);
}

#[test]
fn precomputed_classifications_are_scored_with_weights() {
    let answer = set(r#"{"metrics": [
              {"name": "a", "groups": ["g1"], "classification": "Pass"},
              {"name": "b", "groups": ["g1"], "classification": "High"},
              {"name": "c", "groups": ["g2"], "classification": "High"}],
            "groupWeights": {"g1": 50, "g2": 50},
            "thresholds": {"pass": 95, "marginal": 75}}"#);
    assert_eq!((answer.score, answer.verdict), (25.0, Verdict::Fail));
    let answer = set(
        r#"{"metrics": [{"name": "a", "classification": "NoData", "critical": true},
                        {"name": "b", "classification": "Pass"}],
            "thresholds": {"pass": 95, "marginal": 75}}"#,
    );
    assert_eq!(answer.score, 0.0);
}

#[test]
fn bad_scored_sets_name_the_field() {
    assert_eq!(
        error(r#"{"metrics": [{"name": "a", "classification": "Pass"}]}"#),
        "thresholds: missing field `thresholds`"
    );
    let t = r#""thresholds": {"pass": 75, "marginal": 50}"#;
    assert!(
        error(&format!(
            r#"{{"metrics": [{{"name": "a", "canary": [1]}}], {t}}}"#
        ))
        .starts_with("metrics[0].baseline: missing field `baseline`")
    );
    assert!(
        error(&format!(
            r#"{{"metrics": [{{"canary": [1], "baseline": [1]}}], {t}}}"#
        ))
        .starts_with("metrics[0].name: ")
    );
    assert!(
        error(&format!(
            r#"{{"metrics": [{{"name": "a", "classification": "Pass", "canary": [1]}}], {t}}}"#
        ))
        .starts_with("metrics[0].canary: give either")
    );
    assert!(
        error(&format!(
            r#"{{"metrics": [{{"name": "a", "classification": "Meh"}}], {t}}}"#
        ))
        .starts_with("metrics[0].classification: unknown variant `Meh`")
    );
    assert!(error(&format!(
        r#"{{"metrics": [{{"name": "a", "classification": "Pass"}}, {{"name": "a", "classification": "Pass"}}], {t}}}"#
    ))
    .starts_with("metrics[1].name: duplicate"));
    assert!(
        error(&format!(
            r#"{{"metrics": [{{"name": "a", "canary": [1, "x"], "baseline": [1]}}], {t}}}"#
        ))
        .starts_with("metrics[0].canary[1]: ")
    );
    assert!(
        error(r#"{"metrics": [], "thresholds": {"pass": 50, "marginal": 75}}"#)
            .starts_with("thresholds.marginal: ")
    );
    assert!(error(
        r#"{"metrics": [], "groupWeights": {"g": -5}, "thresholds": {"pass": 75, "marginal": 50}}"#
    )
    .starts_with("groupWeights.g: "));
}

#[test]
fn oversized_input_is_refused() {
    let text = " ".repeat(MAX_INPUT_BYTES + 1);
    assert_eq!(
        judge_json(&text),
        Err(InputError::TooLarge(MAX_INPUT_BYTES + 1))
    );
}
