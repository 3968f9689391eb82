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
    /// clusters with a `kubernetes` endpoint (its kubeconfig and context).
    pub fn standard(tokens: AgentTokens) -> Backends {
        // One kube client per Kubernetes cluster, whatever the number of Rollouts driven there.
        let clients = KubeClients::default();
        Backends::with(move |cluster: &Cluster, target: &Target| {
            let endpoint = cluster.endpoint.as_ref();
            if let Some(kubernetes) = endpoint.and_then(|e| e.kubernetes.clone()) {
                let source = kubernetes
                    .rollout_source
                    .or(target.rollout_source)
                    .unwrap_or_default();
                return Ok(Arc::new(KubeBackend::new(
                    &cluster.name,
                    kubernetes,
                    source,
                    &target.rollout,
                    crate::clock::wall_clock,
                    &clients,
                )) as Arc<dyn ClusterBackend>);
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
    cluster
        .endpoint
        .as_ref()
        .and_then(|e| e.kubernetes.as_ref())
        .is_some_and(|k| {
            k.rollout_source
                .or(target.rollout_source)
                .unwrap_or_default()
                == RolloutSource::Cluster
        })
}

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
