//! One kube client per cluster, shared by the backends of every Rollout driven there (one per
//! FleetRollout): one connection pool and one TLS state per API server, not one per Rollout;
//! and one set of watches per namespace there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flotilla_core::spec::fleet::KubernetesEndpoint;

/// What makes two endpoints the same cluster for a client: the kubeconfig, its context, the
/// server (the namespace is per request).
type Key = (Option<String>, Option<String>, Option<String>);

/// The slot of one cluster's client: empty until it is made (made again after a failure).
pub type Slot = Arc<tokio::sync::Mutex<Option<kube::Client>>>;

/// The slot of one namespace's watches in one cluster: empty until the first read starts them.
pub type WatchSlot = Arc<Mutex<Option<Arc<super::watch::Watches>>>>;

/// The clients of every cluster, shared by the backends one runtime makes.
#[derive(Clone, Default)]
pub struct KubeClients {
    slots: Arc<Mutex<HashMap<Key, Slot>>>,
    watches: Arc<Mutex<HashMap<(Key, String), WatchSlot>>>,
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
