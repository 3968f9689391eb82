//! The CloudWatch provider against moto's AWS emulator (`moto_server`, PyPI `moto[server]`) on
//! loopback: a passing and a failing measurement (the failing one a backtest, its window ending
//! in the past), dimensions, units and string periods, an expression over a hidden query, a
//! metric with no data, and a request signed with a wrong secret key.
//!
//! The provider reads credentials, region and endpoint through the AWS SDK's standard chain,
//! which reads the process environment, so each set of cases runs in a child copy of this test
//! binary with an environment of its own (environment credentials in one, a profile in shared
//! config files in the other); nothing is set in this process. moto checks signatures after its
//! first three requests (`INITIAL_NO_AUTH_ACTION_COUNT`), which create the IAM user whose key
//! signs everything else.
//!
//! Needs `moto_server` and boto3 (`python3 -m pip install 'moto[server]==5.2.5'`); without
//! `moto_server` on PATH the test prints a `SKIPPED` line and passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::poll_until;
use flotilla_core::analysis::{Condition, MeasureRequest, Measurer, MetricResult, Outcome};
use serde_json::{Value, json};

/// This test's name: the children run exactly it.
const TEST: &str = "cloudwatch_against_moto";
/// Which cases a child runs (`valid` or `wrong`); unset in the parent.
const CASE: &str = "FLOTILLA_CLOUDWATCH_CASE";
/// The instant (ms since the epoch) the metric data was laid out around.
const AT: &str = "FLOTILLA_CLOUDWATCH_AT";
/// moto's address, for the children's assertions.
const MOTO: &str = "FLOTILLA_CLOUDWATCH_MOTO";
/// The wrong secret key the `wrong` child signs with, which no message may show.
const WRONG_SECRET: &str = "FLOTILLA_CLOUDWATCH_WRONG_SECRET";
const NAMESPACE: &str = "Flotilla/Test";

/// Creates the IAM user and key (moto's three unauthenticated requests), then puts the metric
/// data with that key: error ratios one a minute in the five minutes before `at`, a high one
/// seven minutes before it (outside the default window) and a spike 20 minutes before it; a
/// checkout latency in seconds beside the same in milliseconds and another service's. Prints
/// the key as JSON.
const SETUP: &str = r#"
import datetime, json, sys
import boto3
endpoint, at = sys.argv[1], int(sys.argv[2])
now = datetime.datetime.fromtimestamp(at / 1000, datetime.timezone.utc)
iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="flotilla")
iam.put_user_policy(UserName="flotilla", PolicyName="cloudwatch", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["cloudwatch:*", "monitoring:*"], "Resource": "*"}],
}))
key = iam.create_access_key(UserName="flotilla")["AccessKey"]
cw = boto3.client("cloudwatch", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
def put(name, points, unit="None", dimensions=()):
    cw.put_metric_data(Namespace="Flotilla/Test", MetricData=[{
        "MetricName": name, "Value": value, "Unit": unit,
        "Timestamp": now - datetime.timedelta(seconds=ago),
        "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions],
    } for ago, value in points])
put("ErrorRate", [(270, 0.01), (150, 0.02), (30, 0.03), (420, 0.07), (1200, 0.5)])
put("Latency", [(90, 0.25)], unit="Seconds", dimensions=[("Service", "checkout")])
put("Latency", [(90, 250.0)], unit="Milliseconds", dimensions=[("Service", "checkout")])
put("Latency", [(90, 9.0)], unit="Seconds", dimensions=[("Service", "search")])
print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudwatch_against_moto() {
    match std::env::var(CASE).as_deref() {
        Ok("valid") => return valid_credentials().await,
        Ok("wrong") => return wrong_secret().await,
        Ok(other) => panic!("unknown {CASE} {other:?}"),
        Err(_) => {}
    }
    let Some(moto_server) = on_path("moto_server") else {
        println!(
            "SKIPPED {TEST}: `moto_server` is not on PATH. Install it with: python3 -m pip \
             install 'moto[server]==5.2.5'"
        );
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let port = common::closed_port();
    let moto = format!("http://127.0.0.1:{port}");
    let mut server = Moto::start(&moto_server, port, dir.path());
    // moto listens once it serves (werkzeug binds when ready).
    poll_until(Duration::from_secs(30), "moto to listen", || {
        server.assert_running();
        async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        }
    })
    .await;
    let ready_after = started.elapsed();

    let at = common::now_ms();
    let setup = Command::new("python3")
        .args(["-c", SETUP, &moto, &at.to_string()])
        .output()
        .expect("cannot run python3");
    assert!(
        setup.status.success(),
        "the boto3 setup failed ({}):\n{}\nmoto's log:\n{}",
        setup.status,
        String::from_utf8_lossy(&setup.stderr),
        server.log()
    );
    let key: Value = serde_json::from_slice(&setup.stdout).unwrap();
    let (key_id, secret) = (key["id"].as_str().unwrap(), key["secret"].as_str().unwrap());
    let data_after = started.elapsed();

    let common_env = [
        (AT, at.to_string()),
        (MOTO, moto.clone()),
        // Never the link-local instance metadata service: loopback only.
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    // Environment credentials and endpoint; no shared config files.
    let missing = dir.path().join("missing");
    child(
        "valid",
        &server,
        common_env.iter().cloned().chain([
            ("AWS_ENDPOINT_URL", moto.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", key_id.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", secret.to_owned()),
            ("AWS_CONFIG_FILE", missing.display().to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE", missing.display().to_string()),
        ]),
    )
    .await;

    // A profile in shared config files with the right key id and a wrong secret; the
    // CloudWatch-specific endpoint variable wins over the general one (a closed port).
    let wrong = "wrong-secret-0123456789abcdefghijklmnopqrstuv";
    let config = dir.path().join("config");
    let credentials = dir.path().join("credentials");
    std::fs::write(&config, "[profile flotilla]\nregion = us-east-1\n").unwrap();
    std::fs::write(
        &credentials,
        format!("[flotilla]\naws_access_key_id = {key_id}\naws_secret_access_key = {wrong}\n"),
    )
    .unwrap();
    child(
        "wrong",
        &server,
        common_env.iter().cloned().chain([
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", common::closed_port()),
            ),
            ("AWS_ENDPOINT_URL_CLOUDWATCH", moto.clone()),
            ("AWS_PROFILE", "flotilla".to_owned()),
            ("AWS_CONFIG_FILE", config.display().to_string()),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.display().to_string(),
            ),
            (WRONG_SECRET, wrong.to_owned()),
        ]),
    )
    .await;
    println!(
        "moto ready after {ready_after:?}, data in after {data_after:?}, all cases done after \
         {:?}",
        started.elapsed()
    );
}

/// Runs this test in a child with `CASE=case` and exactly the environment given; panics with
/// its output unless it ran the test and passed.
async fn child(case: &str, server: &Moto, env: impl IntoIterator<Item = (&str, String)>) {
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CASE, case)
        .envs(env)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(&format!("{case} cases passed")),
        "the {case:?} cases failed ({}):\n{stdout}\n{stderr}\nmoto's log:\n{}",
        output.status,
        server.log()
    );
    print!("{stdout}");
}

/// Environment credentials: pass, fail (a backtest), dimensions, no data. No label or
/// expression has a space: moto re-encodes a form body before checking its signature, with `+`
/// for a space where the SDK (as AWS expects) sent `%20`.
async fn valid_credentials() {
    let at: i64 = std::env::var(AT).unwrap().parse().unwrap();
    let providers = common::providers();
    let ratio = json!([
        {"id": "ratio", "returnData": false, "metricStat": {
            "metric": {"namespace": NAMESPACE, "metricName": "ErrorRate"},
            "period": 60, "stat": "Average"}},
        {"id": "shown", "expression": "ratio", "label": "error-ratio"},
    ]);
    let success = "all(result[0].Values, {# < 0.05})";

    // The five minutes (the default interval) before the measurement: three one-minute
    // averages, newest first.
    let live = measure(&providers, at, json!({"metricDataQueries": ratio})).await;
    let (result, metadata) = value(live);
    let live = rows(&result);
    assert_eq!(live.len(), 1, "the hidden query is not returned: {live:?}");
    assert_eq!(live[0]["Id"], "shown");
    assert_eq!(live[0]["Label"], "error-ratio");
    assert_eq!(live[0]["StatusCode"], "Complete");
    assert_eq!(live[0]["Values"], json!([0.03, 0.02, 0.01]));
    let stamps = live[0]["Timestamps"].as_array().unwrap();
    assert_eq!(stamps.len(), 3);
    assert!(
        stamps.iter().all(|t| t.as_str().unwrap().ends_with('Z')),
        "{stamps:?}"
    );
    assert!(holds(success, &result));
    assert!(holds("result[0].Values[0] < 5", &result));
    assert!(!holds("result[0].Values[0] >= 0.05", &result));
    assert!(metadata.is_empty(), "{metadata:?}");

    // A backtest 15 minutes back with a 10-minute interval sees the spike, and only it.
    let past = measure(
        &providers,
        at - 15 * 60 * 1000,
        json!({"interval": "10m", "metricDataQueries": ratio}),
    )
    .await;
    let (result, _) = value(past);
    assert_eq!(rows(&result)[0]["Values"], json!([0.5]));
    assert!(!holds(success, &result));
    assert!(holds("result[0].Values[0] >= 0.05", &result));

    // Dimensions and a unit select one service's latency in seconds; the period may be a
    // string.
    let latency = measure(
        &providers,
        at,
        json!({"metricDataQueries": [{"id": "p", "label": "checkout-latency", "metricStat": {
            "metric": {"namespace": NAMESPACE, "metricName": "Latency",
                       "dimensions": [{"name": "Service", "value": "checkout"}]},
            "period": "60", "stat": "Maximum", "unit": "Seconds"}}]}),
    )
    .await;
    let (result, _) = value(latency);
    assert_eq!(rows(&result)[0]["Values"], json!([0.25]));
    assert!(holds(
        "result[0].Label == 'checkout-latency' && result[0].Values[0] < 0.5",
        &result
    ));

    // A metric with no data: a result with empty Values, which conditions can see.
    let idle = measure(
        &providers,
        at,
        json!({"metricDataQueries": [{"id": "idle", "metricStat": {
            "metric": {"namespace": NAMESPACE, "metricName": "Idle"},
            "period": 60, "stat": "Sum"}}]}),
    )
    .await;
    let (result, _) = value(idle);
    let idle_rows = rows(&result);
    assert_eq!(idle_rows.len(), 1);
    assert_eq!(idle_rows[0]["Id"], "idle");
    assert_eq!(idle_rows[0]["Values"], json!([]));
    assert_eq!(idle_rows[0]["Timestamps"], json!([]));
    assert!(holds("len(result[0].Values) == 0", &result));
    println!("valid cases passed");
}

/// A profile whose secret key is wrong: an Error naming CloudWatch, moto and AWS's error code,
/// never the secret.
async fn wrong_secret() {
    let at: i64 = std::env::var(AT).unwrap().parse().unwrap();
    let moto = std::env::var(MOTO).unwrap();
    let wrong = std::env::var(WRONG_SECRET).unwrap();
    let providers = common::providers();
    let outcome = measure(
        &providers,
        at,
        json!({"metricDataQueries": [{"id": "ratio", "metricStat": {
            "metric": {"namespace": NAMESPACE, "metricName": "ErrorRate"},
            "period": 60, "stat": "Average"}}]}),
    )
    .await;
    let Outcome::Error(message) = outcome else {
        panic!("expected an Error, got {outcome:?}");
    };
    println!("wrong secret: {message}");
    assert!(message.contains("CloudWatch"), "{message}");
    assert!(message.contains(&moto), "{message}");
    assert!(
        message.contains("SignatureDoesNotMatch") || message.contains("InvalidClientTokenId"),
        "{message}"
    );
    assert!(!message.contains(&wrong), "{message}");
    println!("wrong cases passed");
}

async fn measure(providers: &flotilla_providers::Providers, at: i64, metric: Value) -> Outcome {
    let mut request: MeasureRequest = common::request(json!({ "cloudWatch": metric }));
    request.at = at;
    providers.measure(&request).await
}

fn value(outcome: Outcome) -> (MetricResult, std::collections::BTreeMap<String, String>) {
    match outcome {
        Outcome::Value { result, metadata } => (result, metadata),
        other => panic!("expected a Value, got {other:?}"),
    }
}

fn rows(result: &MetricResult) -> Vec<Value> {
    match result {
        MetricResult::Json(Value::Array(rows)) => rows.clone(),
        other => panic!("expected a JSON array, got {other:?}"),
    }
}

fn holds(condition: &str, result: &MetricResult) -> bool {
    Condition::compile(condition)
        .unwrap()
        .evaluate(result)
        .unwrap_or_else(|e| panic!("{condition}: {e}"))
}

/// The first `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A `moto_server` child on loopback, killed however the test ends (through `setpriv
/// --pdeathsig KILL` where there is one, also if this process dies outright).
struct Moto {
    child: Child,
    log: PathBuf,
}

impl Moto {
    fn start(binary: &Path, port: u16, dir: &Path) -> Moto {
        let log = dir.join("moto.log");
        let output = std::fs::File::create(&log).unwrap();
        let mut command = match on_path("setpriv") {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let child = command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        Moto { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with moto's log if it has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("moto_server exited ({status}):\n{}", self.log());
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
