//! The desired state read from a hub cluster: its custom resources loaded as manifests (each
//! object its own document, named by kind and name in every error), a Fleet's `spokes` turned
//! into one cluster per selected spoke Secret, and the hub's Rollouts checked to be templates
//! (the instance-id label that keeps Argo's own controller off them).

use std::collections::BTreeMap;
use std::sync::Mutex;

use flotilla_core::diagnostic::Severity;
use flotilla_core::manifest;
use flotilla_core::spec::Manifest;
use flotilla_core::spec::fleet::{Cluster, ClusterEndpoint, KubernetesEndpoint, MetricsEndpoint};
use flotilla_kube::hub::{Hub, HubConfig, HubRead, SpokeSecret};

use super::desired::{DesiredSet, desired_from};
use crate::controller::ServeError;

/// The annotation (or label) of a spoke Secret giving the cluster's metrics address, which
/// reaches analysis as `metrics-address`.
pub const METRICS_ADDRESS: &str = "flotilla.dev/metrics-address";
/// The Secret annotation (or label) that makes the spoke's metrics go through its API server
/// (`apiserver`, as a Fleet cluster's `metrics.via`).
pub const METRICS_VIA: &str = "flotilla.dev/metrics-via";

/// Annotations the hub's tools put on its Rollout that are not copied to the spokes.
const HUB_ONLY_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "argocd.argoproj.io/tracking-id",
];

/// A connected hub and the version of its last read.
pub struct HubSource {
    hub: Hub,
    last: Mutex<Option<String>>,
}

impl HubSource {
    /// Connects (from within the runtime: the watches run on it).
    pub fn open(config: &HubConfig) -> Result<HubSource, ServeError> {
        let hub = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(Hub::connect(config))
        })
        .map_err(|e| ServeError::Invalid(e.to_string()))?;
        Ok(HubSource {
            hub,
            last: Mutex::new(None),
        })
    }

    /// The hub.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The desired state now, and its version.
    pub fn load(&self) -> (DesiredSet, String) {
        let read = self.hub.read();
        *self.last.lock().expect("hub version lock") = Some(read.version.clone());
        let version = format!("hub@{}", read.version);
        (desired_of(read, self.hub.namespace()), version)
    }

    /// The desired state when anything changed since the last read.
    pub fn poll(&self) -> Option<(DesiredSet, String)> {
        let read = self.hub.read();
        let mut last = self.last.lock().expect("hub version lock");
        if last.as_deref() == Some(read.version.as_str()) {
            return None;
        }
        *last = Some(read.version.clone());
        let version = format!("hub@{}", read.version);
        Some((desired_of(read, self.hub.namespace()), version))
    }
}

/// The desired state of a hub's read: its documents loaded, the Fleets' spokes made clusters,
/// the spokes kept for the backends.
pub fn desired_of(read: HubRead, namespace: &str) -> DesiredSet {
    let mut manifests = Vec::new();
    let mut diagnostics = Vec::new();
    let mut config_maps = Vec::new();
    for (name, bytes) in &read.documents {
        let load = manifest::load_bytes(name, bytes);
        manifests.extend(load.manifests);
        diagnostics.extend(load.diagnostics);
        config_maps.extend(load.config_maps);
    }
    for loaded in &mut manifests {
        if let Manifest::Fleet(fleet) = &loaded.manifest {
            // Whoever may write a Fleet in the hub must not choose where a cluster's
            // credentials go, nor make the controller read a file of its machine: a Fleet
            // there reaches Kubernetes clusters only through spoke Secrets.
            for (i, cluster) in fleet.spec.clusters.iter().enumerate() {
                let Some(endpoint) = &cluster.endpoint else {
                    continue;
                };
                let kubernetes = endpoint.kubernetes.as_ref();
                for (field, set) in [
                    ("agent", endpoint.agent.is_some()),
                    (
                        "kubernetes.kubeconfig",
                        kubernetes.is_some_and(|k| k.kubeconfig.is_some()),
                    ),
                    (
                        "kubernetes.server",
                        kubernetes.is_some_and(|k| k.server.is_some()),
                    ),
                    (
                        "kubernetes.secret",
                        kubernetes.is_some_and(|k| k.secret.is_some()),
                    ),
                ] {
                    if set {
                        diagnostics.push(loaded.diagnostic(
                            Severity::Error,
                            "hub/cluster-endpoint",
                            format!("spec.clusters[{i}].endpoint.{field}"),
                            "a Fleet in the hub reaches its clusters only through the spoke Secrets it selects (spec.spokes): an endpoint listed here would send a cluster's credentials where the Fleet says, or read a file of the controller's machine",
                        ));
                    }
                }
            }
        }
        match &mut loaded.manifest {
            Manifest::Fleet(fleet) => {
                if let Some(spokes) = fleet.spec.spokes.take() {
                    let explicit = fleet.spec.clusters.len();
                    for secret in read.spokes.iter().filter(|s| spokes.selects(&s.labels)) {
                        fleet.spec.clusters.push(cluster_of(secret, &spokes));
                    }
                    tracing::debug!(
                        fleet = ?fleet.metadata.name,
                        spokes = fleet.spec.clusters.len() - explicit,
                        "spokes selected"
                    );
                }
            }
            Manifest::Rollout(rollout) => {
                // What the hub's own tools record on it is not the spokes': Argo CD's tracking
                // annotation there would make the spokes' Rollouts look like the hub app's.
                if let Some(annotations) = rollout.metadata.annotations.as_mut() {
                    for key in HUB_ONLY_ANNOTATIONS {
                        annotations.remove(*key);
                    }
                }
                let labelled = rollout.metadata.labels.as_ref().is_some_and(|l| {
                    l.get(flotilla_kube::backend::objects::INSTANCE_LABEL)
                        .is_some_and(|v| v == flotilla_kube::backend::objects::INSTANCE)
                });
                if !labelled {
                    diagnostics.push(loaded.diagnostic(
                        Severity::Error,
                        "hub/rollout-not-template",
                        "metadata.labels",
                        format!(
                            "a Rollout in the hub is a template for the spokes: it must carry the label {}: {} so that no Argo Rollouts controller in the hub runs it",
                            flotilla_kube::backend::objects::INSTANCE_LABEL,
                            flotilla_kube::backend::objects::INSTANCE
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    let mut set = desired_from(
        &manifests,
        diagnostics,
        &[],
        &format!("the hub's namespace {namespace}"),
    );
    set.config_maps = config_maps;
    set.spokes = Some(
        read.spokes
            .into_iter()
            .map(|s| (s.id, s.version, s.spoke))
            .collect(),
    );
    set
}

/// A spoke's metrics endpoint from its Secret's `flotilla.dev/metrics-address` and
/// `flotilla.dev/metrics-via` (annotation or label). A `via` other than `apiserver` is kept as
/// no `via` and logged: the cluster's analysis then reaches the address directly.
fn metrics_of(labels: &BTreeMap<String, String>) -> Option<MetricsEndpoint> {
    let address = labels.get(METRICS_ADDRESS).cloned();
    let via = labels.get(METRICS_VIA).and_then(|via| match via.as_str() {
        "apiserver" => Some(flotilla_core::spec::fleet::MetricsVia::Apiserver),
        other => {
            tracing::warn!(
                value = other,
                "{METRICS_VIA}: only `apiserver` is known; ignored"
            );
            None
        }
    });
    (address.is_some() || via.is_some()).then_some(MetricsEndpoint { address, via })
}

/// The cluster a spoke Secret makes in a Fleet: its name and labels, reached through the
/// Secret (an unusable Secret is that cluster's condition, named, never skipped).
fn cluster_of(secret: &SpokeSecret, spokes: &flotilla_core::spec::fleet::Spokes) -> Cluster {
    let labels: BTreeMap<String, String> = secret.labels.clone();
    Cluster {
        name: secret.name.clone(),
        region: labels.get("topology.kubernetes.io/region").cloned(),
        metrics: metrics_of(&labels),
        labels,
        endpoint: Some(ClusterEndpoint {
            agent: None,
            kubernetes: Some(KubernetesEndpoint {
                secret: Some(secret.id.clone()),
                namespace: spokes.namespace.clone(),
                rollout_source: spokes.rollout_source,
                ..KubernetesEndpoint::default()
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HUB: &str = r#"
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {name: payments, namespace: flotilla, generation: 3}
spec:
  fleet: shop
  rollout: payments
  waves:
    steps:
      - matchLabels: {ring: canary}
      - matchLabels: {ring: late}
"#;

    fn fleet(selector: &str) -> String {
        format!(
            "apiVersion: flotilla.dev/v1alpha1\nkind: Fleet\nmetadata: {{name: shop, namespace: flotilla}}\nspec:\n  spokes:\n    selector: {{matchLabels: {selector}}}\n    namespace: payments\n"
        )
    }

    fn rollout(labelled: bool) -> String {
        let labels = if labelled {
            "labels: {argo-rollouts.argoproj.io/controller-instance-id: flotilla}, "
        } else {
            ""
        };
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {{name: payments, {labels}annotations: {{argocd.argoproj.io/tracking-id: hub, team: pay}}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: payments}}}}\n  template:\n    metadata: {{labels: {{app: payments}}}}\n    spec: {{containers: [{{name: app, image: payments:1.0}}]}}\n  strategy: {{canary: {{steps: [{{setWeight: 50}}]}}}}\n"
        )
    }

    fn secret(name: &str, labels: serde_json::Value, config: &str) -> SpokeSecret {
        let mut all = json!({"argocd.argoproj.io/secret-type": "cluster"});
        all.as_object_mut()
            .unwrap()
            .extend(labels.as_object().unwrap().clone());
        SpokeSecret::from_json(json!({
            "metadata": {"name": name, "namespace": "argocd", "resourceVersion": "1",
                         "labels": all,
                         "annotations": {"flotilla.dev/metrics-address": "http://127.0.0.1:9090"}},
            "stringData": {"name": format!("{name}-cluster"), "server": "https://10.0.0.1:6443",
                           "config": config}
        }))
        .unwrap()
    }

    fn read(documents: &[String], spokes: Vec<SpokeSecret>) -> HubRead {
        HubRead {
            documents: documents
                .iter()
                .enumerate()
                .map(|(i, d)| (format!("hub doc {i}"), d.as_bytes().to_vec()))
                .collect(),
            spokes,
            version: "v".into(),
        }
    }

    #[test]
    fn a_fleets_spokes_are_its_clusters_named_and_labelled_by_their_secrets() {
        let spokes = vec![
            secret(
                "eu",
                json!({"env": "prod", "ring": "canary"}),
                r#"{"bearerToken": "t"}"#,
            ),
            secret("us", json!({"env": "prod", "ring": "late"}), "{not json"),
            secret(
                "lab",
                json!({"env": "lab", "ring": "late"}),
                r#"{"bearerToken": "t"}"#,
            ),
        ];
        let set = desired_of(
            read(
                &[HUB.to_owned(), fleet("{env: prod}"), rollout(true)],
                spokes,
            ),
            "flotilla",
        );
        assert!(set.is_clean(), "{:?}", set.errors());
        let desired = &set.desired[0];
        let clusters = &desired.fleet.spec.clusters;
        let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["eu-cluster", "us-cluster"]);
        // The unusable Secret is a cluster too: its backend says why.
        let us = &clusters[1];
        assert_eq!(us.labels["ring"], "late");
        let endpoint = us.endpoint.as_ref().unwrap().kubernetes.as_ref().unwrap();
        assert_eq!(endpoint.secret.as_deref(), Some("argocd/us"));
        assert_eq!(endpoint.namespace(), "payments");
        assert_eq!(
            us.metrics.as_ref().unwrap().address.as_deref(),
            Some("http://127.0.0.1:9090")
        );
        assert_eq!(us.metrics.as_ref().unwrap().via, None);
        assert!(desired.fleet.spec.spokes.is_none());
        // The hub's tracking stays in the hub; the user's annotations go on.
        let annotations = desired.rollout.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key("argocd.argoproj.io/tracking-id"));
        assert_eq!(annotations["team"], "pay");
        assert_eq!(desired.fleet_rollout.metadata.generation, Some(3));
        let kept = set.spokes.as_ref().unwrap();
        assert_eq!(kept.len(), 3);
        assert!(
            kept.iter()
                .any(|(id, _, s)| id == "argocd/us" && s.is_err())
        );
    }

    #[test]
    fn a_hub_rollout_without_the_instance_label_is_refused_by_name() {
        let set = desired_of(
            read(
                &[HUB.to_owned(), fleet("{env: prod}"), rollout(false)],
                vec![secret("eu", json!({"env": "prod", "ring": "canary"}), "{}")],
            ),
            "flotilla",
        );
        assert!(set.desired.is_empty());
        let errors = set.errors().join("\n");
        assert!(
            errors.contains("hub/rollout-not-template")
                || errors.contains("controller-instance-id: flotilla"),
            "{errors}"
        );
        assert!(errors.contains("hub doc 2"), "{errors}");
    }

    /// Whoever may write a Fleet in the hub cannot send a spoke's credentials elsewhere (a
    /// listed cluster naming a spoke Secret and another server) nor make the controller read
    /// a kubeconfig file of its machine.
    #[test]
    fn a_hub_fleet_lists_no_endpoint_of_its_own() {
        let listed = "apiVersion: flotilla.dev/v1alpha1\nkind: Fleet\nmetadata: {name: shop, namespace: flotilla}\nspec:\n  clusters:\n    - {name: eu, labels: {ring: canary}, endpoint: {kubernetes: {secret: argocd/eu, server: \"https://203.0.113.9\"}}}\n    - {name: us, labels: {ring: late}, endpoint: {kubernetes: {kubeconfig: /root/.kube/config}}}\n    - {name: lab, labels: {ring: late}, endpoint: {agent: \"http://203.0.113.9:7071\"}}\n";
        let set = desired_of(
            read(
                &[HUB.to_owned(), listed.to_owned(), rollout(true)],
                Vec::new(),
            ),
            "flotilla",
        );
        assert!(set.desired.is_empty());
        let errors = set.errors().join("\n");
        for field in [
            "spec.clusters[0].endpoint.kubernetes.server",
            "spec.clusters[0].endpoint.kubernetes.secret",
            "spec.clusters[1].endpoint.kubernetes.kubeconfig",
            "spec.clusters[2].endpoint.agent",
        ] {
            assert!(errors.contains(field), "{field} not in {errors}");
        }
    }

    #[test]
    fn spokes_outside_a_hub_are_refused() {
        let load = flotilla_core::manifest::load_bytes(
            "fleet.yaml",
            format!("{HUB}---\n{}---\n{}", fleet("{env: prod}"), rollout(true)).as_bytes(),
        );
        let set = desired_from(&load.manifests, load.diagnostics, &[], "files");
        let errors = set.errors().join("\n");
        assert!(
            errors.contains("spokes-need-hub")
                || errors.contains("only `flotilla serve` with a `hub` source"),
            "{errors}"
        );
    }

    #[test]
    fn a_spokes_metrics_come_from_its_annotations() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(metrics_of(&labels(&[("ring", "early")])), None);
        let via = metrics_of(&labels(&[(METRICS_VIA, "apiserver")])).unwrap();
        assert!(via.via_apiserver() && via.address.is_none());
        let both = metrics_of(&labels(&[
            (METRICS_VIA, "apiserver"),
            (METRICS_ADDRESS, "http://prometheus.monitoring:9090"),
        ]))
        .unwrap();
        assert!(both.via_apiserver());
        assert_eq!(
            both.address.as_deref(),
            Some("http://prometheus.monitoring:9090")
        );
        assert_eq!(metrics_of(&labels(&[(METRICS_VIA, "direct")])), None);
    }
}
