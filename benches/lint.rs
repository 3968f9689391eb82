//! Lints a generated file of 1,000 Rollouts and 1,000 AnalysisTemplates (load + lint, from
//! bytes in memory). Run with `cargo bench --bench lint`.

use criterion::{Criterion, criterion_group, criterion_main};
use flotilla_core::lint::{Options, lint};
use flotilla_core::manifest::load_bytes;

/// The generated manifest file: each Rollout references its own template.
fn fleet_file(count: usize) -> String {
    let mut text = String::new();
    for i in 0..count {
        text.push_str(&format!(
            r#"---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: service-{i}
spec:
  replicas: 4
  selector:
    matchLabels: {{app: service-{i}}}
  template:
    metadata:
      labels: {{app: service-{i}}}
    spec:
      containers:
        - name: app
          image: registry.example/service-{i}:1.0.{i}
          ports: [{{containerPort: 8080}}]
          resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
  strategy:
    canary:
      canaryService: service-{i}-canary
      stableService: service-{i}-stable
      trafficRouting:
        istio:
          virtualService: {{name: service-{i}, routes: [primary]}}
      analysis:
        templates: [{{templateName: success-rate-{i}}}]
        args:
          - name: canary-hash
            valueFrom: {{podTemplateHashValue: Latest}}
      steps:
        - setWeight: 5
        - pause: {{duration: 2m}}
        - setWeight: 25
        - pause: {{duration: 5m}}
        - setWeight: 50
        - pause: {{duration: 10m}}
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: success-rate-{i}
spec:
  args:
    - name: canary-hash
  metrics:
    - name: success-rate
      interval: 1m
      count: 5
      failureLimit: 1
      successCondition: len(result) > 0 && !isNaN(result[0]) && result[0] >= 0.99
      provider:
        prometheus:
          address: http://127.0.0.1:9090
          query: |
            sum(rate(http_requests_total{{code!~"5..",rollouts_pod_template_hash="{{{{args.canary-hash}}}}"}}[2m]))
            / sum(rate(http_requests_total{{rollouts_pod_template_hash="{{{{args.canary-hash}}}}"}}[2m]))
"#
        ));
    }
    text
}

fn bench_lint(c: &mut Criterion) {
    let text = fleet_file(1000);
    // Sanity: everything decodes and nothing is an error, so the benchmark measures real work.
    let load = load_bytes("bench.yaml", text.as_bytes());
    assert_eq!(load.manifests.len(), 2000, "{:?}", load.diagnostics.first());
    let findings = lint(&load.manifests, Options::default());
    assert!(
        findings
            .iter()
            .all(|d| d.severity != flotilla_core::diagnostic::Severity::Error),
        "{:?}",
        findings.first()
    );

    let mut group = c.benchmark_group("lint");
    group.sample_size(10);
    group.bench_function("1000 rollouts + 1000 templates", |b| {
        b.iter(|| {
            let load = load_bytes("bench.yaml", text.as_bytes());
            lint(&load.manifests, Options::default())
        })
    });
    group.finish();
}

criterion_group!(benches, bench_lint);
criterion_main!(benches);
