//! One kube client per cluster, shared by the backends of every Rollout driven there (one per
//! FleetRollout): one connection pool and one TLS state per API server, not one per Rollout;
//! and one set of watches per namespace there. In a hub, the spokes' credentials read from its
//! Secrets are kept here too, by Secret, so a rotated Secret makes a new client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flotilla_core::spec::fleet::KubernetesEndpoint;

/// What makes two endpoints the same cluster for a client: the kubeconfig, its context, the
/// server, the spoke Secret (the namespace is per request).
type Key = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The slot of one cluster's clients: empty until they are made (made again after a failure),
/// with the generation of the spoke Secret they were made from (0 for a kubeconfig file).
pub type Slot = Arc<tokio::sync::Mutex<Option<(ClusterClients, u64)>>>;

/// One cluster's two clients, of the same configuration and credentials.
#[derive(Clone)]
pub struct ClusterClients {
    /// The controller's own calls: kube's retries of 429/503/504, a read timeout, and the
    /// cluster's in-flight bound.
    pub api: kube::Client,
    /// Metric requests through the API server's service proxy (`metrics.via: apiserver`): no
    /// retries (the API server's 503 "no endpoints" is an answer, and a provider's query is not
    /// the transport's to repeat), no read timeout (each request has its own), and a bound of
    /// its own, so that slow metric providers never hold the controller's slots.
    pub proxy: kube::Client,
}

/// A spoke Secret as the hub last read it: the spoke, or why it cannot be used; `generation`
/// changes when the Secret does.
#[derive(Debug, Clone)]
pub struct SpokeEntry {
    /// The Secret's resourceVersion when read.
    pub version: String,
    /// Bumped at every change of `version`.
    pub generation: u64,
    /// The spoke, or why the Secret is not one.
    pub spoke: Result<crate::spokes::Spoke, crate::spokes::SpokeError>,
}

/// The slot of one namespace's watches in one cluster: empty until the first read starts them.
pub type WatchSlot = Arc<Mutex<Option<Arc<super::watch::Watches>>>>;

/// The clients of every cluster, shared by the backends one runtime makes.
#[derive(Clone, Default)]
pub struct KubeClients {
    slots: Arc<Mutex<HashMap<Key, Slot>>>,
    watches: Arc<Mutex<HashMap<(Key, String), WatchSlot>>>,
    spokes: Arc<Mutex<HashMap<String, SpokeEntry>>>,
    generations: Arc<std::sync::atomic::AtomicU64>,
}

impl KubeClients {
    /// The slot of `endpoint`'s cluster (the same for every Rollout there).
    pub fn slot(&self, endpoint: &KubernetesEndpoint) -> Slot {
        self.slots
            .lock()
            .expect("clients lock")
            .entry(key(endpoint))
            .or_default()
            .clone()
    }

    /// Replaces the spokes read from the hub's Secrets, by `namespace/name` with their
    /// resourceVersion: an entry whose version changed gets a new generation (its clients are
    /// made again at their next use); a Secret gone is forgotten.
    pub fn set_spokes(
        &self,
        read: Vec<(
            String,
            String,
            Result<crate::spokes::Spoke, crate::spokes::SpokeError>,
        )>,
    ) {
        let mut spokes = self.spokes.lock().expect("spokes lock");
        let mut next = HashMap::with_capacity(read.len());
        for (id, version, spoke) in read {
            let generation = match spokes.remove(&id) {
                Some(old) if old.version == version => old.generation,
                _ => {
                    self.generations
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        + 1
                }
            };
            next.insert(
                id,
                SpokeEntry {
                    version,
                    generation,
                    spoke,
                },
            );
        }
        *spokes = next;
    }

    /// The spoke of Secret `id` (`namespace/name`) as last read, if the hub holds it.
    pub fn spoke(&self, id: &str) -> Option<SpokeEntry> {
        self.spokes.lock().expect("spokes lock").get(id).cloned()
    }

    /// The slot of the watches of `endpoint`'s namespace in its cluster (the same for every
    /// Rollout there).
    pub fn watch_slot(&self, endpoint: &KubernetesEndpoint) -> WatchSlot {
        self.watches
            .lock()
            .expect("watches lock")
            .entry((key(endpoint), endpoint.namespace().to_owned()))
            .or_default()
            .clone()
    }
}

fn key(endpoint: &KubernetesEndpoint) -> Key {
    (
        endpoint.kubeconfig.clone(),
        endpoint.context.clone(),
        endpoint.server.clone(),
        endpoint.secret.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rollouts_of_one_cluster_share_its_client_slot() {
        let clients = KubeClients::default();
        let endpoint = |namespace: &str, context: &str| KubernetesEndpoint {
            kubeconfig: Some("k.yaml".into()),
            context: Some(context.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        };
        let a = clients.slot(&endpoint("shop", "eu"));
        let b = clients.slot(&endpoint("payments", "eu"));
        let c = clients.slot(&endpoint("shop", "us"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        let shop = clients.watch_slot(&endpoint("shop", "eu"));
        assert!(Arc::ptr_eq(
            &shop,
            &clients.watch_slot(&endpoint("shop", "eu"))
        ));
        assert!(!Arc::ptr_eq(
            &shop,
            &clients.watch_slot(&endpoint("payments", "eu"))
        ));
    }
}
