//! Analysis engine benchmarks (core only, no I/O): measurements evaluated per second, and the
//! scheduling cost of 10,000 concurrent runs in one tick. Run with `cargo bench --bench analysis`.

use std::collections::BTreeMap;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use flotilla_core::analysis::plan::{RunPlan, resolve};
use flotilla_core::analysis::run::{Run, value};
use flotilla_core::analysis::{MetricResult, measurement_verdict};
use flotilla_core::spec::analysis::AnalysisTemplateSpec;

fn plan() -> RunPlan {
    let spec: AnalysisTemplateSpec = serde_json::from_value(serde_json::json!({
        "metrics": [
            {"name": "success-rate", "interval": "1m", "failureLimit": 3,
             "successCondition": "len(result) > 0 && result[0] >= 0.99",
             "provider": {"prometheus": {"address": "http://127.0.0.1:9090", "query": "x"}}},
            {"name": "latency", "interval": "30s", "count": 10,
             "successCondition": "result <= 0.3",
             "provider": {"prometheus": {"address": "http://127.0.0.1:9090", "query": "y"}}}
        ]
    }))
    .unwrap();
    resolve(&spec, &BTreeMap::new()).unwrap()
}

fn bench_measurements(c: &mut Criterion) {
    let plan = plan();
    let condition = plan.metrics[0].success.clone();
    let mut group = c.benchmark_group("analysis");
    group.throughput(Throughput::Elements(1));
    group.bench_function("condition verdict (one measurement)", |b| {
        let result = MetricResult::Vector(vec![0.995]);
        b.iter(|| measurement_verdict(condition.as_ref(), None, std::hint::black_box(&result)))
    });
    // A whole measurement through the machine: due, evaluated, counted, retained, assessed.
    const BATCH: u64 = 1_000;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("measurement through the run machine (x1000)", |b| {
        b.iter_batched(
            || Run::new(&plan, 0),
            |mut run| {
                let mut now = 0;
                for _ in 0..BATCH / 2 {
                    for request in run.poll_due(&plan, now) {
                        run.handle_outcome(
                            &plan,
                            request.metric_index,
                            now,
                            value(MetricResult::Vector(vec![0.995])),
                        );
                    }
                    run.assess(&plan, now);
                    now += 60_000;
                    if run.is_completed() {
                        run = Run::new(&plan, now);
                    }
                }
                run
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn bench_tick(c: &mut Criterion) {
    let plan = plan();
    let mut group = c.benchmark_group("analysis tick");
    group.sample_size(20);
    // 10,000 runs started over the last minute, each having taken its first measurements.
    let runs: Vec<Run> = (0..10_000)
        .map(|i| {
            let start = i as i64 * 6;
            let mut run = Run::new(&plan, start);
            for request in run.poll_due(&plan, start) {
                run.handle_outcome(
                    &plan,
                    request.metric_index,
                    start,
                    value(MetricResult::Scalar(0.2)),
                );
            }
            run.assess(&plan, start);
            run
        })
        .collect();
    group.throughput(Throughput::Elements(runs.len() as u64));
    group.bench_function("10,000 runs, one tick (due ones measured)", |b| {
        b.iter_batched(
            || runs.clone(),
            |mut runs| {
                let now = 45_000; // the 30 s latency metric is due for about half the runs
                let mut due = 0;
                for run in &mut runs {
                    for request in run.poll_due(&plan, now) {
                        due += 1;
                        run.handle_outcome(
                            &plan,
                            request.metric_index,
                            now,
                            value(MetricResult::Scalar(0.2)),
                        );
                    }
                    run.assess(&plan, now);
                    std::hint::black_box(run.next_due(&plan));
                }
                (runs, due)
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("10,000 runs, one tick (nothing due)", |b| {
        b.iter_batched(
            || runs.clone(),
            |mut runs| {
                for run in &mut runs {
                    std::hint::black_box(run.poll_due(&plan, 10));
                    std::hint::black_box(run.next_due(&plan));
                }
                runs
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_measurements, bench_tick);
criterion_main!(benches);
