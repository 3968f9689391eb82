//! End-to-end tests of `flotilla analysis run | replay | backtest` through the real binary:
//! exit codes, output, bad input, and live runs against a real local HTTP server and real
//! local processes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .output()
        .expect("run flotilla")
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("flotilla-analysis-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TEMPLATE: &str = r#"
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate}
spec:
  args:
    - name: min
    - name: address
      value: http://127.0.0.1:1
  dryRun: [{metricName: shadow}]
  metrics:
    - name: success-rate
      interval: 30s
      count: 3
      failureLimit: 1
      successCondition: len(result) > 0 && result[0] >= {{args.min}}
      failureCondition: len(result) > 0 && result[0] < 0.5
      provider:
        web: {url: "{{args.address}}/rate", jsonPath: "{$.rate}"}
    - name: shadow
      successCondition: result > 100
      provider:
        web: {url: "{{args.address}}/rate", jsonPath: "{$.rate}"}
"#;

fn replay(dir: &TempDir, measurements: &str, extra: &[&str]) -> (i32, Value) {
    let template = dir.write("template.yaml", TEMPLATE);
    let file = dir.write("measurements.json", measurements);
    let mut args = vec![
        "analysis",
        "replay",
        "--template",
        &template,
        "--measurements",
        &file,
        "--arg",
        "min=0.95",
    ];
    args.extend_from_slice(extra);
    let output = flotilla(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (output.status.code().unwrap(), value)
}

#[test]
fn replay_reports_argo_verdicts_with_their_exit_codes() {
    let dir = TempDir::new("replay");
    let (code, report) = replay(
        &dir,
        r#"{"measurements": {"success-rate": [[0.99], [0.97], [0.98]], "shadow": [1]}}"#,
        &[],
    );
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["phase"], "Successful");
    assert_eq!(report["metrics"][0]["measurements"][0]["value"], "[0.99]");
    assert_eq!(
        report["dryRunSummary"]["failed"], 1,
        "the dry-run metric failed apart: {report:#}"
    );

    let (code, report) = replay(
        &dir,
        r#"{"measurements": {"success-rate": [[0.4], [0.3]], "shadow": [1]}}"#,
        &[],
    );
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        report["message"],
        "Metric \"success-rate\" assessed Failed due to failed (2) > failureLimit (1)"
    );

    let (code, report) = replay(
        &dir,
        r#"{"measurements": {"success-rate": [[0.7]], "shadow": [1]}}"#,
        &[],
    );
    assert_eq!(code, 2, "neither condition holds: Inconclusive: {report:#}");
    assert_eq!(report["phase"], "Inconclusive");

    let errors = r#"{"measurements": {"success-rate": [{"error": "down"}, {"error": "down"}, {"error": "down"}, {"error": "down"}, {"error": "down"}], "shadow": [1]}}"#;
    let (code, report) = replay(&dir, errors, &[]);
    assert_eq!(code, 3, "{report:#}");
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains("consecutiveErrors (5) > consecutiveErrorLimit (4)")
    );

    // Results run out before the count: still running; terminating ends it Successful.
    let (code, report) = replay(
        &dir,
        r#"{"measurements": {"success-rate": [[0.99]], "shadow": [1]}}"#,
        &[],
    );
    assert_eq!((code, report["phase"].as_str()), (2, Some("Running")));
    let (code, report) = replay(
        &dir,
        r#"{"measurements": {"success-rate": [[0.99]], "shadow": [1]}, "terminate": true}"#,
        &[],
    );
    assert_eq!((code, report["phase"].as_str()), (0, Some("Successful")));
    assert_eq!(report["message"], "Run Terminated");
}

#[test]
fn bad_input_exits_4_with_one_clear_error_and_runs_nothing() {
    let dir = TempDir::new("bad");
    let template = dir.write("template.yaml", TEMPLATE);
    let good = dir.write("m.json", r#"{"measurements": {}}"#);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--measurements".into(), good.clone()],
            "args.min was not resolved",
        ),
        (
            vec![
                "--measurements".into(),
                dir.write("a.json", "{not json"),
                "--arg".into(),
                "min=1".into(),
            ],
            "invalid JSON",
        ),
        (
            vec![
                "--measurements".into(),
                dir.write("b.json", r#"{"measurements": {"typo": [1]}}"#),
                "--arg".into(),
                "min=1".into(),
            ],
            "unknown metric \"typo\"",
        ),
        (
            vec![
                "--measurements".into(),
                dir.write("c.json", r#"{"measurements": [1]}"#),
                "--arg".into(),
                "min=1".into(),
            ],
            "\"measurements\" must be an object",
        ),
        (
            vec![
                "--measurements".into(),
                dir.write("d.json", r#"{"measurements": {}, "extra": 1}"#),
                "--arg".into(),
                "min=1".into(),
            ],
            "unknown field \"extra\"",
        ),
    ];
    for (extra, needle) in cases {
        let mut args: Vec<String> = vec![
            "analysis".into(),
            "replay".into(),
            "--template".into(),
            template.clone(),
        ];
        args.extend(extra);
        let output = flotilla(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{needle}: {stderr}");
        assert!(stderr.contains(needle), "{needle}: {stderr}");
        assert!(output.stdout.is_empty(), "nothing half-run");
    }
    let wavefront = dir.write(
        "wf.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nmetadata: {name: wf}\nspec:\n  metrics:\n    - name: m\n      provider:\n        wavefront: {query: 'ts(x)'}\n",
    );
    let output = flotilla(&["analysis", "run", "--template", &wavefront, "--once"]);
    assert_eq!(output.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("wavefront provider, which Flotilla cannot execute")
    );
    // Argo's own Datadog rule (queries need apiVersion v2): refused before anything is sent.
    let datadog = dir.write(
        "dd.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nmetadata: {name: dd}\nspec:\n  metrics:\n    - name: m\n      provider:\n        datadog: {queries: {a: 'avg:x{*}'}}\n",
    );
    let output = flotilla(&["analysis", "run", "--template", &datadog, "--once"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("provider.datadog: API version v1 only supports the query field"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing half-run");
    let broken = dir.write("broken.yaml", "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nmetadata: {name: b}\nspec:\n  metrics:\n    - name: m\n      count: 3\n      provider: {web: {url: 'http://127.0.0.1:1'}}\n");
    let output = flotilla(&["analysis", "run", "--template", &broken, "--once"]);
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("broken.yaml:6:7") && stderr.contains("spec.metrics[0].interval"),
        "{stderr}"
    );
}

/// A real HTTP server on loopback answering every request with one JSON body.
fn serve(body: &'static str) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (address, handle)
}

#[test]
fn run_once_measures_a_live_web_metric() {
    let dir = TempDir::new("once");
    let template = dir.write("template.yaml", TEMPLATE);
    let (address, _server) = serve(r#"{"rate": [0.97]}"#);
    let address_arg = format!("address={address}");
    let output = flotilla(&[
        "analysis",
        "run",
        "--template",
        &template,
        "--arg",
        "min=0.95",
        "--arg",
        &address_arg,
        "--once",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("success-rate  [0.97]  Successful"),
        "{stdout}"
    );
    assert!(stdout.contains("verdict: Successful"), "{stdout}");

    let output = flotilla(&[
        "analysis",
        "run",
        "--template",
        &template,
        "--arg",
        "min=0.99",
        "--arg",
        &address_arg,
        "--once",
        "--output",
        "json",
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "0.97 is neither >= 0.99 nor < 0.5: Inconclusive"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["metrics"][0]["phase"], "Inconclusive");
}

#[test]
fn run_executes_job_metrics_as_local_processes() {
    let dir = TempDir::new("job");
    let job = |name: &str, script: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nmetadata: {{name: {name}}}\nspec:\n  metrics:\n    - name: smoke\n      provider:\n        job:\n          spec:\n            template:\n              spec:\n                restartPolicy: Never\n                containers:\n                  - name: smoke\n                    image: busybox\n                    command: [sh, -c, {script:?}]\n"
        )
    };
    let pass = dir.write("pass.yaml", &job("pass", "echo all good"));
    let output = flotilla(&["analysis", "run", "--template", &pass]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // Seed 004's lab: an analysis step whose Job exits 1.
    let fail = dir.write("fail.yaml", &job("fail", "echo checkout is broken; exit 1"));
    let output = flotilla(&["analysis", "run", "--template", &fail]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("checkout is broken"),
        "the job's output is the measurement message: {stdout}"
    );
}

#[test]
fn backtest_evaluates_each_step_of_a_window() {
    let dir = TempDir::new("backtest");
    let template = dir.write("template.yaml", TEMPLATE);
    let (address, _server) = serve(r#"{"rate": [0.40]}"#);
    let address_arg = format!("address={address}");
    let output = flotilla(&[
        "analysis",
        "backtest",
        "--template",
        &template,
        "--arg",
        "min=0.95",
        "--arg",
        &address_arg,
        "--start",
        "now-2m",
        "--end",
        "now",
        "--step",
        "1m",
        "--output",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{report:#} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 6, "3 instants × 2 metrics: {report:#}");
    assert!(
        points
            .iter()
            .filter(|p| p["metric"] == "success-rate")
            .all(|p| p["phase"] == "Failed")
    );
}

/// Seed 004's Datadog template, as the article prints it.
const SEED_DATADOG: &str = r#"
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: { name: datadog-error-rate, namespace: shop }
spec:
  args: [{ name: service-name }]
  metrics:
    - name: error-rate
      interval: 1m
      count: 5
      successCondition: result < 0.05            # <5% errors
      failureLimit: 1
      provider:
        datadog:
          apiVersion: v2
          interval: 5m
          query: |
            sum:trace.http.request.errors{service:{{args.service-name}}}.as_count()
            /
            sum:trace.http.request.hits{service:{{args.service-name}}}.as_count()
"#;

/// A protocol fixture for Datadog's `POST /api/v2/query/scalar` (not Datadog): it answers
/// `value` to a request carrying the keys `A`/`B`, 403 otherwise, and hands each request's
/// head and body to the test.
fn datadog_fixture(value: f64) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let (sent, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buffer = [0u8; 8192];
            // Read the head, then the body by its content-length.
            loop {
                let n = stream.read(&mut buffer).unwrap_or(0);
                request.extend_from_slice(&buffer[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let lower = text.to_ascii_lowercase();
            let authorised = lower.contains("dd-api-key: a\r\n")
                && lower.contains("dd-application-key: b\r\n")
                && text.starts_with("POST /api/v2/query/scalar ");
            let _ = sent.send(text);
            let (status, body) = if authorised {
                (
                    "200 OK",
                    format!(
                        r#"{{"data":{{"type":"scalar_response","attributes":{{"columns":[{{"name":"query","type":"number","values":[{value}]}}]}}}}}}"#
                    ),
                )
            } else {
                ("403 Forbidden", r#"{"errors":["Forbidden"]}"#.to_owned())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (address, received)
}

#[test]
fn the_seed_004_datadog_template_lints_and_runs_against_a_datadog_fixture() {
    let dir = TempDir::new("seed-datadog");
    let template = dir.write("datadog.yaml", SEED_DATADOG);
    let lint = flotilla(&["lint", &template]);
    let lint_out =
        String::from_utf8_lossy(&lint.stdout).to_string() + &String::from_utf8_lossy(&lint.stderr);
    assert_eq!(lint.status.code(), Some(0), "{lint_out}");
    assert!(lint_out.contains("provider/credentials"), "{lint_out}");

    for (value, phase) in [(0.012, "Successful"), (0.21, "Failed")] {
        let (address, requests) = datadog_fixture(value);
        let secrets = dir.0.join(format!("secrets-{phase}"));
        std::fs::create_dir_all(secrets.join("datadog")).unwrap();
        std::fs::write(secrets.join("datadog/api-key"), "A\n").unwrap();
        std::fs::write(secrets.join("datadog/app-key"), "B\n").unwrap();
        std::fs::write(secrets.join("datadog/address"), &address).unwrap();
        let output = flotilla(&[
            "analysis",
            "run",
            "--template",
            &template,
            "--arg",
            "service-name=checkout",
            "--secrets-dir",
            secrets.to_str().unwrap(),
            "--once",
            "--output",
            "json",
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        let measured = &report["metrics"][0]["measurements"][0];
        assert_eq!(
            measured["phase"],
            phase,
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(measured["value"], value.to_string(), "{stdout}");
        let request = requests.recv().unwrap();
        assert!(
            request.contains(r#""query":"sum:trace.http.request.errors{service:checkout}.as_count()\n/\nsum:trace.http.request.hits{service:checkout}.as_count()\n""#),
            "{request}"
        );
        assert!(request.contains(r#""aggregator":"last""#), "{request}");
    }
}
