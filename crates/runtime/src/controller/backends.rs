//! Which backend drives each cluster of a Fleet: the only place in the controller that knows
//! backend kinds (today the Flotilla agent; a Kubernetes API server is its own issue). The fleet
//! controller sees only the core's [`ClusterBackend`] port.

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent_backend::{AgentBackend, AgentClient};
use flotilla_core::backend::ClusterBackend;
use flotilla_core::spec::fleet::Cluster;

use super::config::AgentTokens;

type Connect = dyn Fn(&Cluster) -> Result<Arc<dyn ClusterBackend>, String> + Send + Sync;

/// Makes each cluster's backend from its Fleet entry.
#[derive(Clone)]
pub struct Backends {
    connect: Arc<Connect>,
}

impl Backends {
    /// Clusters with an `agent` endpoint, each agent's control API called with its token.
    pub fn agents(tokens: AgentTokens) -> Backends {
        Backends::with(move |cluster: &Cluster| {
            let Some(agent) = cluster.endpoint.as_ref().and_then(|e| e.agent.clone()) else {
                return Err(format!(
                    "cluster {:?} has no agent endpoint; this version drives only agents",
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
        connect: impl Fn(&Cluster) -> Result<Arc<dyn ClusterBackend>, String> + Send + Sync + 'static,
    ) -> Backends {
        Backends {
            connect: Arc::new(connect),
        }
    }

    /// The backend of `cluster`.
    pub fn connect(&self, cluster: &Cluster) -> Result<Arc<dyn ClusterBackend>, String> {
        (self.connect)(cluster)
    }
}

/// What the backend of `cluster` can do, as `flotilla lint` checks a Rollout against it (None:
/// a kind of cluster this version does not drive).
pub fn capabilities_of(cluster: &Cluster) -> Option<flotilla_core::backend::Capabilities> {
    let endpoint = cluster.endpoint.as_ref()?;
    endpoint
        .agent
        .as_ref()
        .map(|_| AgentBackend::capabilities())
}
