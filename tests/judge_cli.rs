//! End-to-end tests of `flotilla judge --input FILE` through the real binary: both document
//! shapes, Kayenta's facts, bad input with the file and field path, and exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Where the input of the test `tag` goes.
fn input_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("flotilla-judge-{tag}-{}.json", std::process::id()))
}

/// Runs `flotilla judge --input` on `text` written to a file; returns the exit code, the JSON
/// answer (null if none) and stderr.
fn judge(tag: &str, text: &str) -> (i32, Value, String) {
    let path = input_path(tag);
    std::fs::write(&path, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["judge", "--input"])
        .arg(&path)
        .output()
        .expect("run flotilla");
    std::fs::remove_file(&path).unwrap();
    decode(output)
}

fn decode(output: Output) -> (i32, Value, String) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    (
        output.status.code().unwrap(),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_single_comparison_matches_kayentas_interval_and_estimate() {
    let (code, answer, stderr) = judge(
        "single",
        r#"{"canary": [10, 20, 30, 40], "baseline": [1, 2, 3, 4], "confidence": 0.95, "tolerance": 0.1}"#,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(answer["classification"], "High");
    assert_eq!(answer["critical"], false);
    let ci = answer["ci"].as_array().unwrap();
    assert!((ci[0].as_f64().unwrap() - 6.0).abs() < 1e-6, "{answer:#}");
    assert!((ci[1].as_f64().unwrap() - 39.0).abs() < 1e-6, "{answer:#}");
    assert!((answer["estimate"].as_f64().unwrap() - 22.5).abs() < 1e-6);
    assert!((answer["effectSize"].as_f64().unwrap() - 10.0).abs() < 1e-9);
    assert_eq!(
        (
            answer["canaryCount"].as_u64(),
            answer["baselineCount"].as_u64()
        ),
        (Some(4), Some(4))
    );
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .starts_with("canary higher")
    );
}

#[test]
fn a_critical_metric_with_default_limits_is_high_and_critical() {
    let (code, answer, stderr) = judge(
        "critical",
        r#"{"canary": [20, 22, 21, 25, 30], "baseline": [1, 2.2, 1.1, 2.5, 3.0], "critical": true}"#,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        (
            answer["classification"].as_str(),
            answer["critical"].as_bool()
        ),
        (Some("High"), Some(true))
    );
}

#[test]
fn a_scored_set_with_one_pass_and_one_high_scores_fifty() {
    let (code, answer, stderr) = judge(
        "set",
        r#"{"metrics": [
              {"name": "latency", "groups": ["perf"], "canary": [20, 22, 21, 25, 30],
               "baseline": [1, 2.2, 1.1, 2.5, 3.0]},
              {"name": "errors", "groups": ["perf"], "canary": [0, "NaN", 1, null, 0],
               "baseline": [1, 0, 0, 1, 0]},
              {"name": "cpu", "groups": ["perf"], "classification": "High", "muted": true}],
            "thresholds": {"pass": 75, "marginal": 50}}"#,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(answer["score"], 50.0);
    assert_eq!(answer["verdict"], "Marginal");
    assert_eq!(answer["metrics"][0]["name"], "latency");
    assert_eq!(answer["metrics"][0]["classification"], "High");
    assert_eq!(answer["metrics"][1]["classification"], "Pass");
    assert_eq!(answer["metrics"][1]["canaryCount"], 3);
    assert_eq!(answer["metrics"][2]["classification"], "High");
}

#[test]
fn bad_series_get_defined_classifications() {
    for (text, classification) in [
        (r#"{"canary": [], "baseline": [1, 2, 3]}"#, "NoData"),
        (
            r#"{"canary": ["NaN", null], "baseline": [1, 2, 3]}"#,
            "NoData",
        ),
        (
            r#"{"canary": [], "baseline": [1], "mustHaveData": true}"#,
            "NoDataFail",
        ),
        (r#"{"canary": [3, 1, 2], "baseline": [1, 2, 3]}"#, "Pass"),
        (r#"{"canary": [4], "baseline": [2]}"#, "NoData"),
        (r#"{"canary": [5, 5, 5], "baseline": [5, 5]}"#, "Pass"),
    ] {
        let (code, answer, stderr) = judge("defined", text);
        assert_eq!(code, 0, "{text}: {stderr}");
        assert_eq!(
            answer["classification"], classification,
            "{text}: {answer:#}"
        );
        assert!(answer["reason"].is_string(), "{answer:#}");
    }
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_field() {
    for (tag, text, message) in [
        (
            "value",
            r#"{"canary": [1, "fast"], "baseline": [1]}"#,
            "canary[1]: invalid value: string \"fast\"",
        ),
        (
            "missing",
            r#"{"canary": [1]}"#,
            "baseline: missing field `baseline`",
        ),
        (
            "nested",
            r#"{"metrics": [{"name": "m", "canary": [1], "baseline": [true]}], "thresholds": {"pass": 1, "marginal": 0}}"#,
            "metrics[0].baseline[0]: invalid type: boolean `true`",
        ),
        (
            "range",
            r#"{"canary": [1], "baseline": [1], "confidence": 2}"#,
            "confidence: a confidence level is between 0 and 1",
        ),
        ("syntax", "{\"canary\": [1,", "not valid JSON"),
    ] {
        let (code, answer, stderr) = judge(tag, text);
        assert_eq!(code, 2, "{text}: {answer:#}");
        assert!(answer.is_null());
        let expected = format!("flotilla judge: {}: {message}", input_path(tag).display());
        assert!(
            stderr.starts_with(&expected),
            "{stderr}\nexpected {expected}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["judge", "--input", "/nonexistent/flotilla-judge.json"])
        .output()
        .unwrap();
    let (code, _, stderr) = decode(output);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("flotilla judge: /nonexistent/flotilla-judge.json: "),
        "{stderr}"
    );
}

#[test]
fn standard_input_is_read_with_a_dash() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["judge", "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"canary": [1, 2, 3, 4, 5], "baseline": [5, 4, 3, 2, 1]}"#)
        .unwrap();
    let (code, answer, stderr) = decode(child.wait_with_output().unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(answer["classification"], "Pass");
}
