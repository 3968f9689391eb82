//! Which backend drives each cluster of a Fleet: the only place in the controller that knows
//! backend kinds (a Flotilla agent, a Kubernetes API server). The fleet controller sees only the
//! core's [`ClusterBackend`] port.

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent_backend::{AgentBackend, AgentClient};
use flotilla_core::backend::ClusterBackend;
use flotilla_core::spec::fleet::{Cluster, RolloutSource};
use flotilla_kube::{KubeBackend, KubeClients};

use super::config::AgentTokens;

/// What a cluster's backend drives there: the FleetRollout's Rollout, and who owns its spec
/// (the FleetRollout's `rolloutSource`, which a cluster's own overrides).
#[derive(Debug, Clone)]
pub struct Target {
    /// The Rollout's name.
    pub rollout: String,
    /// The FleetRollout's `spec.rolloutSource`.
    pub rollout_source: Option<RolloutSource>,
}

type Connect = dyn Fn(&Cluster, &Target) -> Result<Arc<dyn ClusterBackend>, String> + Send + Sync;

/// Makes each cluster's backend from its Fleet entry.
#[derive(Clone)]
pub struct Backends {
    connect: Arc<Connect>,
}

impl Backends {
    /// Clusters with an `agent` endpoint (each agent's control API called with its token) and
    /// clusters with a `kubernetes` endpoint (its kubeconfig and context, or a hub's spoke
    /// Secret, which the hub source keeps in `clients`).
    pub fn standard(tokens: AgentTokens, clients: KubeClients) -> Backends {
        // One kube client per Kubernetes cluster, whatever the number of Rollouts driven there.
        Backends::with(move |cluster: &Cluster, target: &Target| {
            let endpoint = cluster.endpoint.as_ref();
            if let Some(kubernetes) = endpoint.and_then(|e| e.kubernetes.clone()) {
                let source = kubernetes
                    .rollout_source
                    .or(target.rollout_source)
                    .unwrap_or_default();
                let via_apiserver = cluster.metrics.as_ref().is_some_and(|m| m.via_apiserver());
                return Ok(Arc::new(
                    KubeBackend::new(
                        &cluster.name,
                        kubernetes,
                        source,
                        &target.rollout,
                        crate::clock::wall_clock,
                        &clients,
                    )
                    .with_metrics_via_apiserver(via_apiserver),
                ) as Arc<dyn ClusterBackend>);
            }
            let Some(agent) = endpoint.and_then(|e| e.agent.clone()) else {
                return Err(format!(
                    "cluster {:?} has no endpoint (agent or kubernetes)",
                    cluster.name
                ));
            };
            let mut client = AgentClient::with_timeout(agent, Duration::from_secs(5))
                .map_err(|e| e.to_string())?;
            if let Some(token) = tokens.for_cluster(&cluster.name) {
                client = client.with_token(token);
            }
            Ok(
                Arc::new(AgentBackend::new(client, crate::clock::wall_clock))
                    as Arc<dyn ClusterBackend>,
            )
        })
    }

    /// Backends made by `connect` (another kind of cluster, or a test's).
    pub fn with(
        connect: impl Fn(&Cluster, &Target) -> Result<Arc<dyn ClusterBackend>, String>
        + Send
        + Sync
        + 'static,
    ) -> Backends {
        Backends {
            connect: Arc::new(connect),
        }
    }

    /// The backend of `cluster`, driving `target` there.
    pub fn connect(
        &self,
        cluster: &Cluster,
        target: &Target,
    ) -> Result<Arc<dyn ClusterBackend>, String> {
        (self.connect)(cluster, target)
    }
}

/// Whether `cluster`'s Rollout spec is owned in the cluster (a Kubernetes cluster with
/// `rolloutSource: cluster`, its own or the FleetRollout's, the default): the fleet then reads
/// its revision from such clusters' specs.
pub fn spec_in_cluster(cluster: &Cluster, target: &Target) -> bool {
    cluster.spec_in_cluster(target.rollout_source)
}

/// The Rollout each Kubernetes cluster holds for each FleetRollout among `manifests` whose Fleet
/// is among them too, for the clusters whose spec is owned there ([`spec_in_cluster`]): what
/// `flotilla lint --live` checks. One client per cluster; clusters are read one after another
/// (a lint, not a controller), each bounded by the client's timeouts.
pub async fn held_rollouts(
    manifests: &[flotilla_core::manifest::LoadedManifest],
) -> flotilla_core::lint::HeldRollouts {
    use flotilla_core::spec::Manifest;
    let clients = KubeClients::default();
    let mut out = flotilla_core::lint::HeldRollouts::new();
    for loaded in manifests {
        let Manifest::FleetRollout(fleet_rollout) = &loaded.manifest else {
            continue;
        };
        let Some(fleet) = manifests.iter().find_map(|m| match &m.manifest {
            Manifest::Fleet(f) if m.manifest.name() == fleet_rollout.spec.fleet => Some(f),
            _ => None,
        }) else {
            continue;
        };
        let target = Target {
            rollout: fleet_rollout.spec.rollout.clone(),
            rollout_source: fleet_rollout.spec.rollout_source,
        };
        let held = out.entry(loaded.manifest.name().to_owned()).or_default();
        for cluster in &fleet.spec.clusters {
            let Some(kubernetes) = cluster.endpoint.as_ref().and_then(|e| e.kubernetes.clone())
            else {
                continue;
            };
            if !spec_in_cluster(cluster, &target) {
                continue;
            }
            let namespace = kubernetes.namespace().to_owned();
            let backend = KubeBackend::new(
                &cluster.name,
                kubernetes,
                RolloutSource::Cluster,
                &target.rollout,
                crate::clock::wall_clock,
                &clients,
            );
            let read = match backend.held().await {
                Ok(Some(value)) => serde_json::from_value(value).map_err(|e| e.to_string()),
                Ok(None) => Err(format!("Rollout {namespace}/{} not found", target.rollout)),
                Err(e) => Err(e.to_string()),
            };
            held.insert(cluster.name.clone(), read);
        }
    }
    out
}

/// The CustomResourceDefinitions of Flotilla's own kinds, as YAML (`flotilla crds`).
pub fn crds_yaml() -> String {
    flotilla_kube::crds::yaml()
}

/// The manifests that install Flotilla in a hub and its spokes (`flotilla install`).
pub use flotilla_kube::install;

/// What the backend of `cluster` can do, as `flotilla lint` checks a Rollout against it (None:
/// a cluster without an endpoint).
pub fn capabilities_of(cluster: &Cluster) -> Option<flotilla_core::backend::Capabilities> {
    let endpoint = cluster.endpoint.as_ref()?;
    if endpoint.kubernetes.is_some() {
        return Some(KubeBackend::capabilities());
    }
    endpoint
        .agent
        .as_ref()
        .map(|_| AgentBackend::capabilities())
}
