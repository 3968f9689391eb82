//! The simulated fleets the scale benchmarks drive: one Fleet of `clusters` clusters in three
//! label-selected waves, a FleetRollout, a Rollout with two canary steps, its error-rate
//! template and the scenario's traffic (every cluster's stable healthy).

use flotilla_core::diagnostic::Severity;
use flotilla_core::manifest::load_bytes;
use flotilla_core::simulate::Inputs;

/// The simulator's inputs from a scenario's YAML stream, which must load without an error.
pub fn inputs(text: &str) -> Inputs {
    let load = load_bytes("scale.yaml", text.as_bytes());
    assert!(
        load.diagnostics
            .iter()
            .all(|d| d.severity != Severity::Error),
        "{:?}",
        load.diagnostics.first()
    );
    Inputs::from_manifests(&load.manifests).unwrap()
}

/// A fleet to simulate.
pub struct Scale<'a> {
    /// The FleetRollout's and the Rollout's name (the images are `NAME:1` and `NAME:2`).
    pub name: &'a str,
    pub clusters: usize,
    /// Where the second and third waves begin (clusters `0..first` are the first wave).
    pub waves_at: (usize, usize),
    /// Every `n`th cluster's canary fails its error rate (None: none fails).
    pub regress_every: Option<usize>,
    /// The FleetRollout's `failurePolicy`, as a YAML flow mapping.
    pub failure_policy: Option<&'a str>,
}

impl Scale<'_> {
    /// The manifests and the scenario (one YAML stream), and the Fleet's document alone.
    pub fn manifests(&self) -> (String, String) {
        let Scale {
            name,
            clusters,
            waves_at: (early, main),
            ..
        } = *self;
        let mut fleet = String::from(
            "apiVersion: flotilla.dev/v1alpha1\nkind: Fleet\nmetadata: {name: fleet}\nspec:\n  clusters:\n",
        );
        let mut traffic = String::new();
        for i in 0..clusters {
            let tier = if i < early {
                "canary"
            } else if i < main {
                "early"
            } else {
                "main"
            };
            fleet.push_str(&format!(
                "    - {{name: c{i}, region: r{}, labels: {{tier: {tier}}}}}\n",
                i % 7
            ));
            let canary = match self.regress_every {
                Some(n) if i % n == n - 1 => {
                    ", canary: {errorRate: 0.2, latency: {p50: 0.05, p95: 0.12}}"
                }
                _ => "",
            };
            traffic.push_str(&format!(
                "    - {{name: c{i}, requestsPerSecond: 50, stable: {{errorRate: 0.002, latency: {{p50: 0.05, p95: 0.12}}}}{canary}}}\n"
            ));
        }
        let failure_policy = self
            .failure_policy
            .map(|p| format!("  failurePolicy: {p}\n"))
            .unwrap_or_default();
        let text = format!(
            r#"{fleet}---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {{name: {name}}}
spec:
  fleet: fleet
  rollout: {name}
  bakeTime: 1m
{failure_policy}  waves:
    steps:
      - matchLabels: {{tier: canary}}
      - matchLabels: {{tier: early}}
      - matchLabels: {{tier: main}}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {{name: {name}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: svc}}}}
  template:
    metadata: {{labels: {{app: svc}}}}
    spec: {{containers: [{{name: app, image: "{name}:2"}}]}}
  strategy:
    canary:
      trafficRouting: {{plugins: {{flotilla/agent: {{}}}}}}
      analysis: {{templates: [{{templateName: error-rate}}]}}
      steps: [{{setWeight: 20}}, {{pause: {{duration: 1m}}}}, {{setWeight: 60}}, {{pause: {{duration: 1m}}}}]
---
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {{name: error-rate}}
spec:
  metrics:
    - name: error-rate
      interval: 30s
      failureLimit: 1
      successCondition: len(result) > 0 && result[0] < 0.02
      provider: {{builtin: {{metric: error-rate, window: 1m, minRequests: 100}}}}
---
apiVersion: flotilla.dev/v1alpha1
kind: Scenario
metadata: {{name: scale}}
spec:
  previousImage: "{name}:1"
  duration: 6h
  tick: 10s
  clusters:
{traffic}"#
        );
        (text, fleet)
    }
}
