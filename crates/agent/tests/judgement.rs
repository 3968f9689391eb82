//! The per-cluster judgement reads a real agent: an in-process agent routes open-loop load over
//! loopback to two in-process upstreams (stable failing 1% of requests, canary 4%), and the
//! composite metrics run through the `builtin` provider exactly as `flotilla serve` runs them:
//! the sequential error-rate test, a rank-sum comparison of per-step series read with the
//! agent's series endpoint, and a calibrated metric whose conditions read the stable traffic
//! before the run started.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use flotilla_agent::loadgen::{self, Target};
use flotilla_agent::{Agent, AgentConfig};
use flotilla_agent_backend::AgentClient;
use flotilla_agent_backend::builtin::BuiltinProvider;
use flotilla_core::analysis::compare::{baseline_variables, measure};
use flotilla_core::analysis::{Condition, MeasureRequest, Outcome, measurement_verdict_with};
use flotilla_core::spec::analysis::{AnalysisPhase, Calibration, MetricProvider};
use serde_json::json;

const RATE: f64 = 300.0;

/// An upstream answering 500 to every `every`-th request.
async fn upstream(every: u64) -> SocketAddr {
    let served = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().fallback(move || {
        let served = served.clone();
        async move {
            if (served.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(every) {
                (StatusCode::INTERNAL_SERVER_ERROR, "injected\n")
            } else {
                (StatusCode::OK, "ok\n")
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn request(provider: serde_json::Value, not_before: i64) -> MeasureRequest {
    MeasureRequest {
        metric_index: 0,
        metric: "m".into(),
        provider: Arc::new(serde_json::from_value::<MetricProvider>(provider).unwrap()),
        at: unix_ms(),
        window: None,
        not_before: Some(not_before),
        step: None,
        baseline: None,
        reference: None,
        last: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_metrics_judge_a_worse_canary_from_the_agents_traffic() {
    let stable = upstream(100).await;
    let canary = upstream(25).await;
    let config = AgentConfig::parse(
        &format!(
            r#"
cluster: judged
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
seed: 3
weights: {{canary: 0}}
subsets:
  stable: {{endpoints: ["{stable}"]}}
  canary: {{endpoints: ["{canary}"]}}
"#
        ),
        "judged.yaml",
    )
    .unwrap();
    let agent = Agent::start(config, None).await.unwrap();
    let client = AgentClient::new(format!("http://{}", agent.control_addr()))
        .unwrap()
        .with_token(agent.control_token().secret());
    // Stable only for 10 s (the reference), then half the traffic on the canary for 15 s (the
    // run). Windows are read in whole 10-second buckets: the reference may take in a few seconds
    // of the run's stable traffic, which behaves the same.
    let run_start_s = unix_ms() / 1000 + 10;
    let seconds = 25;
    let load = tokio::spawn({
        let url = format!("http://{}/judged", agent.router_addr());
        async move {
            loadgen::run(
                &[Target::new(url)],
                RATE,
                Duration::from_secs(seconds),
                RATE as u64 * (seconds + 1),
            )
            .await
            .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(
        (run_start_s * 1000 - unix_ms()).max(0) as u64,
    ))
    .await;
    client.set_weights(50).await.unwrap();
    let report = load.await.unwrap();
    assert_eq!(report.failed, 0, "{report:?}");
    let builtin = BuiltinProvider::new(client.clone(), unix_ms);
    let run_start = run_start_s * 1000;

    // The sequential test: 4% against 1% fails the canary, naming the counts.
    let outcome = measure(
        &builtin,
        &request(
            json!({"sequential": {"minRequests": 500, "step": "10s"}}),
            run_start,
        ),
    )
    .await;
    let Outcome::Decided {
        phase, metadata, ..
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(*phase, AnalysisPhase::Failed, "{outcome:?}");
    let (errors, requests) = metadata["canary"].split_once('/').unwrap();
    let (errors, requests): (f64, f64) = (errors.parse().unwrap(), requests.parse().unwrap());
    assert!(
        requests >= 500.0 && (errors / requests - 0.04).abs() < 0.01,
        "{metadata:?}"
    );

    // The rank-sum comparison of 10-second error-rate series, canary against concurrent stable.
    let outcome = measure(
        &builtin,
        &request(
            json!({"compare": {"canary": {"builtin": {"metric": "error-rate"}}, "window": "20s", "step": "10s", "minPoints": 2, "confidence": 0.9}}),
            run_start,
        ),
    )
    .await;
    let Outcome::Decided {
        value, metadata, ..
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(value, "High", "{outcome:?}");
    assert_eq!(metadata["reference"], "the stable subset, concurrent");
    assert!(metadata.contains_key("ci") && metadata.contains_key("effectSize"));

    // A calibrated metric: the canary's error rate against twice the stable's before the run.
    let mut calibrated = request(
        json!({"builtin": {"metric": "error-rate", "window": "20s", "minRequests": 100}}),
        run_start,
    );
    calibrated.baseline = Some(
        serde_json::from_value::<Calibration>(json!({"window": "10s", "minRequests": 100}))
            .unwrap(),
    );
    let outcome = measure(&builtin, &calibrated).await;
    let Outcome::Value { result, metadata } = &outcome else {
        panic!("{outcome:?}")
    };
    let baseline = baseline_variables(metadata);
    assert!((baseline["errorRate"] - 0.01).abs() < 0.005, "{metadata:?}");
    assert!(baseline["requests"] >= 2000.0, "{metadata:?}");
    let condition = Condition::compile("result[0] <= baseline.errorRate * 2").unwrap();
    let (phase, _) = measurement_verdict_with(Some(&condition), None, result, Some(&baseline));
    assert_eq!(phase, AnalysisPhase::Failed, "{outcome:?}");
}
