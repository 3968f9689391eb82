//! The hub: a management cluster whose API server holds the desired state (Fleets,
//! FleetRollouts, Rollouts and AnalysisTemplates in one namespace, ClusterAnalysisTemplates, Argo
//! Rollouts' notification ConfigMap there),
//! the spokes' Secrets (Argo CD's cluster Secrets, kubeconfig Secrets), and the fleets'
//! summaries Flotilla writes back (`FleetRollout.status`, the hub Rollout's aggregate status).
//! Everything is read from watches (kube-runtime reflectors), never polled; a read is a
//! snapshot of their stores with a version that changes when any object does.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector as reflect};
use serde_json::Value;

use crate::backend::objects::{INSTANCE, INSTANCE_LABEL};
use crate::spokes::{self, ARGOCD_SECRET_TYPE, KUBECONFIG_LABEL, Spoke, SpokeError};

/// The field manager of Flotilla's writes in the hub (statuses and its own objects).
pub use crate::state::HUB_MANAGER;

/// Argo Rollouts' notification ConfigMap, read from the hub's namespace.
pub const NOTIFICATION_CONFIG_MAP: &str = "argo-rollouts-notification-configmap";

/// How long the first lists may take before the hub is refused.
const FIRST_LIST: Duration = Duration::from_secs(30);

/// Where the hub is and what of it Flotilla reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HubConfig {
    /// A kubeconfig file (None: the in-cluster configuration of a Pod).
    pub kubeconfig: Option<String>,
    /// Where the Pod's ServiceAccount token and CA are mounted, for the in-cluster
    /// configuration ([`SERVICE_ACCOUNT_DIR`] in a Pod).
    pub service_account_dir: String,
    /// Its context (None: the current one).
    pub context: Option<String>,
    /// The namespace of the Fleets, FleetRollouts, Rollouts and AnalysisTemplates.
    pub namespace: String,
    /// The exec credential plugins a spoke Secret may run, by command exactly as it names them.
    pub exec_allowlist: Vec<String>,
    /// The API server hosts an EKS token may be sent to (`.suffix` or a host; see
    /// [`spokes::SpokePolicy`]).
    pub eks_servers: Vec<String>,
    /// The namespace of the spoke Secrets (Argo CD's is `argocd`).
    pub spoke_namespace: String,
}

/// Where a Pod's ServiceAccount credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The in-cluster configuration of a Pod, as client-go builds it: the API server from
/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` (`host`, `port`), the CA and the
/// token from the ServiceAccount's files in `dir` (`ca.crt`, `token`). The token is read from
/// its file again as it rotates (the kubelet renews projected tokens), never copied.
pub fn in_cluster(
    host: Option<&str>,
    port: Option<&str>,
    dir: &std::path::Path,
) -> Result<kube::config::Kubeconfig, HubError> {
    let (Some(host), Some(port)) = (host.filter(|h| !h.is_empty()), port) else {
        return Err(HubError::Config(
            "no kubeconfig is configured and this is not a Pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set): set hub.kubeconfig outside the hub's Pods".into(),
        ));
    };
    let port: u16 = port
        .trim()
        .parse()
        .map_err(|_| HubError::Config(format!("KUBERNETES_SERVICE_PORT {port:?} is not a port")))?;
    // An IPv6 address is bracketed in a URL.
    let server = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(ip)) => format!("https://[{ip}]:{port}"),
        _ => format!("https://{host}:{port}"),
    };
    for file in ["token", "ca.crt"] {
        let path = dir.join(file);
        if let Err(e) = std::fs::metadata(&path) {
            return Err(HubError::Config(format!(
                "in-cluster configuration: the ServiceAccount's {file} ({}): {e}",
                path.display()
            )));
        }
    }
    let text = |p: std::path::PathBuf| p.display().to_string();
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": {
            "server": server,
            "certificate-authority": text(dir.join("ca.crt")),
        }}],
        "users": [{"name": "service-account", "user": {"tokenFile": text(dir.join("token"))}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "service-account"}}],
        "current-context": "in-cluster",
    });
    serde_json::from_value(kubeconfig)
        .map_err(|e| HubError::Config(format!("in-cluster configuration: {e}")))
}

/// Why the hub cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// The configuration or credentials cannot make a client.
    #[error("the hub: {0}")]
    Config(String),
    /// A kind Flotilla needs is not served by the hub's API server.
    #[error(
        "the hub's API server does not serve {0}: install Flotilla's CRDs (`flotilla crds | kubectl apply -f -`) and Argo Rollouts' from its release"
    )]
    MissingKinds(String),
    /// A watch did not list within the bound (its last error says why, e.g. a permission).
    #[error("the hub: {what} could not be listed within {seconds} s: {error}")]
    NotListed {
        /// The watch (`fleetrollouts in flotilla`).
        what: String,
        /// Seconds waited.
        seconds: u64,
        /// Its last error.
        error: String,
    },
    /// A write was refused or failed.
    #[error("the hub: {verb} {resource}: {message}")]
    Write {
        /// The verb (`patch`).
        verb: String,
        /// `fleetrollouts/status payments`.
        resource: String,
        /// Why.
        message: String,
    },
}

/// The watches' delays between retries: 0.5 s doubling to 2 s (kube's default waits up to 30 s),
/// so that a hub's API server back from an outage is watched again within about the probe's
/// period, before the fleets that waited for it go on.
struct WatchBackoff(Duration);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff(Duration::from_millis(500))
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

/// One watched kind: its store, its last error and its task.
struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    what: String,
    store: Store<K>,
    error: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: kube::Resource + 'static> Drop for Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: K::DynamicType,
    what: String,
) -> Watched<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let writer = Writer::new(dyntype);
    let store = writer.as_reader();
    let error = Arc::new(Mutex::new(None));
    let stream = watcher::watcher(api, config.timeout(10))
        .backoff(WatchBackoff::default())
        .modify(|object: &mut K| object.meta_mut().managed_fields = None);
    let last = error.clone();
    let name = what.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(reflect(writer, stream));
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                    *last.lock().expect("watch error lock") = None;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(watch = %name, error = %e, "a hub watch failed; retried");
                    *last.lock().expect("watch error lock") = Some(e.to_string());
                }
            }
        }
    });
    Watched {
        what,
        store,
        error,
        task,
    }
}

/// The hub's kinds, as Flotilla reads them.
fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1alpha1", kind))
}

/// A spoke Secret as read: who it says the cluster is, and the spoke or why it is unusable.
#[derive(Debug, Clone)]
pub struct SpokeSecret {
    /// `namespace/name` of the Secret.
    pub id: String,
    /// Its resourceVersion.
    pub version: String,
    /// The cluster's name ([`spokes::identity`]).
    pub name: String,
    /// The cluster's labels: the Secret's labels and annotations.
    pub labels: BTreeMap<String, String>,
    /// The spoke, or why the Secret cannot be used.
    pub spoke: Result<Spoke, SpokeError>,
}

impl SpokeSecret {
    /// Reads one Secret as the hub sees it, under the admin's `policy` (the plugins it may
    /// run, the servers an EKS token may go to).
    pub fn read(secret: &Secret, policy: &spokes::SpokePolicy) -> SpokeSecret {
        let (name, labels) = spokes::identity(secret);
        SpokeSecret {
            id: format!(
                "{}/{}",
                secret.metadata.namespace.as_deref().unwrap_or_default(),
                secret.metadata.name.as_deref().unwrap_or_default()
            ),
            version: secret.metadata.resource_version.clone().unwrap_or_default(),
            name,
            labels,
            spoke: Spoke::from_secret_with(secret, policy),
        }
    }

    /// Reads a Secret given as JSON (as `kubectl get secret -o json` prints it), running no
    /// credential plugin.
    pub fn from_json(value: Value) -> Result<SpokeSecret, serde_json::Error> {
        Ok(SpokeSecret::read(
            &serde_json::from_value(value)?,
            &spokes::SpokePolicy::default(),
        ))
    }
}

/// A snapshot of the hub.
#[derive(Debug, Default)]
pub struct HubRead {
    /// Each object as a manifest document: a name for diagnostics (`hub
    /// FleetRollout flotilla/payments`) and its JSON without `status` and `managedFields`.
    pub documents: Vec<(String, Vec<u8>)>,
    /// The spoke Secrets, by `namespace/name`.
    pub spokes: Vec<SpokeSecret>,
    /// Changes when any object read does (its content as read here: Flotilla's own status
    /// writes do not change it).
    pub version: String,
}

/// A connected hub and its watches.
pub struct Hub {
    client: kube::Client,
    namespace: String,
    documents: Vec<(&'static str, Watched<DynamicObject>)>,
    secrets: Vec<Watched<Secret>>,
    policy: spokes::SpokePolicy,
    /// Why the hub's API server does not answer now (None: it answered its last probe).
    unavailable: Arc<Mutex<Option<String>>>,
    probe: tokio::task::JoinHandle<()>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.probe.abort();
    }
}

/// How often the hub's API server is asked whether it answers.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Asks the hub's API server whether it is ready (`/readyz`, which every identity may read, and
/// which fails while its etcd does) every [`PROBE_EVERY`], and keeps why it did not answer, None
/// when it did.
fn probe(
    client: kube::Client,
    unavailable: Arc<Mutex<Option<String>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("a GET of /readyz is a request");
            let answer = tokio::time::timeout(PROBE_EVERY, client.request_text(request)).await;
            let why = match answer {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer in {} s", PROBE_EVERY.as_secs())),
            };
            {
                let mut now = unavailable.lock().expect("hub probe lock");
                if now.is_none() != why.is_none() {
                    match &why {
                        Some(e) => {
                            tracing::warn!(error = %e, "the hub's API server does not answer");
                        }
                        None => tracing::info!("the hub's API server answers again"),
                    }
                }
                *now = why;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    })
}

/// A client of the hub as `config` reaches it: its kubeconfig (and context), or the in-cluster
/// configuration of a Pod; bounded connect, read and write timeouts.
pub async fn client(config: &HubConfig) -> Result<kube::Client, HubError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut client_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| HubError::Config(format!("kubeconfig {path}: {e}")))?;
            let options = kube::config::KubeConfigOptions {
                context: config.context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| HubError::Config(format!("kubeconfig {path}: {e}")))?
        }
        None => {
            let kubeconfig = in_cluster(
                std::env::var("KUBERNETES_SERVICE_HOST").ok().as_deref(),
                std::env::var("KUBERNETES_SERVICE_PORT").ok().as_deref(),
                std::path::Path::new(&config.service_account_dir),
            )?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| HubError::Config(format!("in-cluster configuration: {e}")))?
        }
    };
    client_config.connect_timeout = Some(Duration::from_secs(5));
    client_config.read_timeout = Some(Duration::from_secs(15));
    client_config.write_timeout = Some(Duration::from_secs(15));
    kube::Client::try_from(client_config).map_err(|e| HubError::Config(e.to_string()))
}

impl Hub {
    /// Connects to the hub, checks it serves Flotilla's and Argo's kinds, starts the watches
    /// and waits until each has listed.
    pub async fn connect(config: &HubConfig) -> Result<Hub, HubError> {
        let client = client(config).await?;
        check_kinds(&client).await?;
        let namespace = config.namespace.clone();
        let mut documents = Vec::new();
        for (group, kind, plural, namespaced) in [
            (crate::crds::GROUP, "Fleet", "fleets", true),
            (crate::crds::GROUP, "FleetRollout", "fleetrollouts", true),
            ("argoproj.io", "Rollout", "rollouts", true),
            ("argoproj.io", "AnalysisTemplate", "analysistemplates", true),
            (
                "argoproj.io",
                "ClusterAnalysisTemplate",
                "clusteranalysistemplates",
                false,
            ),
        ] {
            let resource = resource(group, kind);
            let (api, what) = if namespaced {
                (
                    Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource),
                    format!("{plural} in namespace {namespace}"),
                )
            } else {
                (
                    Api::<DynamicObject>::all_with(client.clone(), &resource),
                    plural.to_owned(),
                )
            };
            documents.push((kind, watch(api, watcher::Config::default(), resource, what)));
        }
        // Argo Rollouts' notification configuration, where Argo's controller reads it: one
        // ConfigMap of the namespace, watched by name.
        let config_map = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
        documents.push((
            "ConfigMap",
            watch(
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &config_map),
                watcher::Config::default()
                    .fields(&format!("metadata.name={NOTIFICATION_CONFIG_MAP}")),
                config_map,
                format!("ConfigMap {NOTIFICATION_CONFIG_MAP} in namespace {namespace}"),
            ),
        ));
        let secrets_api = Api::<Secret>::namespaced(client.clone(), &config.spoke_namespace);
        let secrets = vec![
            watch(
                secrets_api.clone(),
                watcher::Config::default().labels(&format!("{ARGOCD_SECRET_TYPE}=cluster")),
                (),
                format!(
                    "Secrets labelled {ARGOCD_SECRET_TYPE}=cluster in namespace {}",
                    config.spoke_namespace
                ),
            ),
            watch(
                secrets_api,
                watcher::Config::default().labels(KUBECONFIG_LABEL),
                (),
                format!(
                    "Secrets labelled {KUBECONFIG_LABEL} in namespace {}",
                    config.spoke_namespace
                ),
            ),
        ];
        let unavailable = Arc::new(Mutex::new(None));
        let hub = Hub {
            probe: probe(client.clone(), unavailable.clone()),
            client,
            namespace,
            documents,
            secrets,
            policy: spokes::SpokePolicy {
                exec_allowlist: config.exec_allowlist.clone(),
                eks_servers: config.eks_servers.clone(),
            },
            unavailable,
        };
        hub.listed().await?;
        Ok(hub)
    }

    /// Waits until every watch has listed, or names the first that did not and why.
    async fn listed(&self) -> Result<(), HubError> {
        for (_, w) in &self.documents {
            if tokio::time::timeout(FIRST_LIST, w.store.wait_until_ready())
                .await
                .is_err()
            {
                return Err(not_listed(&w.what, &w.error));
            }
        }
        for w in &self.secrets {
            if tokio::time::timeout(FIRST_LIST, w.store.wait_until_ready())
                .await
                .is_err()
            {
                return Err(not_listed(&w.what, &w.error));
            }
        }
        Ok(())
    }

    /// Why the hub's API server did not answer its last probe (None: it did). While it does
    /// not, what the watches hold may be stale and nothing Flotilla writes there lands.
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable.lock().expect("hub probe lock").clone()
    }

    /// The controller's state objects and operators' commands in the desired state's namespace.
    pub fn state(&self) -> crate::state::HubState {
        crate::state::HubState::new(self.client.clone(), &self.namespace)
    }

    /// The namespace of the desired state.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// What the watches hold now.
    pub fn read(&self) -> HubRead {
        let mut read = HubRead::default();
        let mut versions = BTreeMap::new();
        for (kind, watched) in &self.documents {
            for object in watched.store.state() {
                let namespace = object.metadata.namespace.clone().unwrap_or_default();
                let name = object.metadata.name.clone().unwrap_or_default();
                let id = if namespace.is_empty() {
                    format!("hub {kind} {name}")
                } else {
                    format!("hub {kind} {namespace}/{name}")
                };
                let mut object = (*object).clone();
                // A list of a core kind leaves its items' apiVersion and kind out.
                if object.types.is_none() {
                    object.types = Some(kube::core::TypeMeta {
                        api_version: api_version_of(kind).to_owned(),
                        kind: (*kind).to_owned(),
                    });
                }
                let bytes = document(&object);
                versions.insert(id.clone(), bytes.clone());
                read.documents.push((id, bytes));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for watched in &self.secrets {
            for secret in watched.store.state() {
                if !spokes::is_spoke_secret(&secret) {
                    continue;
                }
                let spoke = SpokeSecret::read(&secret, &self.policy);
                if !seen.insert(spoke.id.clone()) {
                    continue;
                }
                versions.insert(
                    format!("Secret {}", spoke.id),
                    spoke.version.clone().into_bytes(),
                );
                read.spokes.push(spoke);
            }
        }
        read.documents.sort_by(|a, b| a.0.cmp(&b.0));
        read.spokes.sort_by(|a, b| a.id.cmp(&b.id));
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        versions.hash(&mut hasher);
        read.version = format!("{:016x}", hasher.finish());
        read
    }

    /// Merge-patches the `status` of FleetRollout `name` (its status subresource).
    pub async fn write_fleet_status(&self, name: &str, status: &Value) -> Result<(), HubError> {
        let resource = resource(crate::crds::GROUP, "FleetRollout");
        self.patch_status(&resource, "fleetrollouts", name, status)
            .await
    }

    /// Merge-patches the `status` of the hub's Rollout `name` (Argo's status subresource).
    pub async fn write_rollout_status(&self, name: &str, status: &Value) -> Result<(), HubError> {
        let resource = resource("argoproj.io", "Rollout");
        self.patch_status(&resource, "rollouts", name, status).await
    }

    async fn patch_status(
        &self,
        resource: &ApiResource,
        plural: &str,
        name: &str,
        status: &Value,
    ) -> Result<(), HubError> {
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), &self.namespace, resource);
        api.patch_status(
            name,
            &PatchParams {
                field_manager: Some(HUB_MANAGER.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .map(|_| ())
        .map_err(|e| HubError::Write {
            verb: "patch".to_owned(),
            resource: format!("{plural}/status {}/{name}", self.namespace),
            message: e.to_string(),
        })
    }
}

fn not_listed(what: &str, error: &Mutex<Option<String>>) -> HubError {
    HubError::NotListed {
        what: what.to_owned(),
        seconds: FIRST_LIST.as_secs(),
        error: error
            .lock()
            .expect("watch error lock")
            .clone()
            .unwrap_or_else(|| "no answer".to_owned()),
    }
}

/// An object as a manifest document: what its author wrote, without what the API server and
/// controllers add (`status`, `managedFields`, `resourceVersion`, which a status write moves).
/// The apiVersion of a kind the hub watches.
fn api_version_of(kind: &str) -> &'static str {
    match kind {
        "Fleet" | "FleetRollout" => "flotilla.dev/v1alpha1",
        "ConfigMap" => "v1",
        _ => "argoproj.io/v1alpha1",
    }
}

fn document(object: &DynamicObject) -> Vec<u8> {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            meta.remove("resourceVersion");
        }
    }
    serde_json::to_vec_pretty(&value).unwrap_or_default()
}

/// Refuses a hub that does not serve Flotilla's kinds (with FleetRollout's status) and Argo's.
async fn check_kinds(client: &kube::Client) -> Result<(), HubError> {
    let mut missing = Vec::new();
    for (group_version, names) in [
        (
            "flotilla.dev/v1alpha1",
            &["fleets", "fleetrollouts", "fleetrollouts/status"][..],
        ),
        (
            "argoproj.io/v1alpha1",
            &[
                "rollouts",
                "rollouts/status",
                "analysistemplates",
                "clusteranalysistemplates",
            ][..],
        ),
    ] {
        let served = match client.list_api_group_resources(group_version).await {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => {
                return Err(HubError::Config(format!(
                    "cannot read the API server's discovery of {group_version}: {e}"
                )));
            }
        };
        for name in names {
            if !served.iter().any(|s| s == name) {
                missing.push(format!("{group_version} {name}"));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(HubError::MissingKinds(missing.join(", ")))
    }
}

/// Whether a hub Rollout carries the instance-id label that keeps Argo's own controller off it
/// (a Rollout in the hub is a template for the spokes, never a workload there).
pub fn is_template(rollout: &Value) -> bool {
    rollout["metadata"]["labels"][INSTANCE_LABEL] == INSTANCE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_cluster_configuration_is_a_pods_environment_and_service_account_files() {
        let dir = tempfile::tempdir().unwrap();
        let outside = in_cluster(None, None, dir.path()).unwrap_err();
        assert!(outside.to_string().contains("hub.kubeconfig"), "{outside}");
        let bad = in_cluster(Some("10.0.0.1"), Some("https"), dir.path()).unwrap_err();
        assert!(bad.to_string().contains("KUBERNETES_SERVICE_PORT"), "{bad}");
        let missing = in_cluster(Some("10.0.0.1"), Some("443"), dir.path()).unwrap_err();
        assert!(missing.to_string().contains("token"), "{missing}");
        std::fs::write(dir.path().join("token"), "t").unwrap();
        std::fs::write(dir.path().join("ca.crt"), "c").unwrap();
        for (host, server) in [
            ("10.0.0.1", "https://10.0.0.1:443"),
            ("fd00::1", "https://[fd00::1]:443"),
            (
                "kubernetes.default.svc",
                "https://kubernetes.default.svc:443",
            ),
        ] {
            let config = in_cluster(Some(host), Some("443"), dir.path()).unwrap();
            let cluster = config.clusters[0].cluster.as_ref().unwrap();
            assert_eq!(cluster.server.as_deref(), Some(server));
            assert_eq!(
                cluster.certificate_authority.as_deref(),
                Some(dir.path().join("ca.crt").to_str().unwrap())
            );
            // The token is read from its file (and again as the kubelet rotates it).
            let user = config.auth_infos[0].auth_info.as_ref().unwrap();
            assert_eq!(
                user.token_file.as_deref(),
                Some(dir.path().join("token").to_str().unwrap())
            );
            assert!(user.token.is_none());
        }
    }

    #[test]
    fn a_document_drops_what_the_api_server_adds() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetRollout",
            "metadata": {"name": "payments", "namespace": "flotilla", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"fleet": "shop"},
            "status": {"phase": "Progressing"}
        }))
        .unwrap();
        let value: Value = serde_json::from_slice(&document(&object)).unwrap();
        assert!(value.get("status").is_none());
        assert!(value["metadata"].get("managedFields").is_none());
        assert_eq!(value["spec"]["fleet"], "shop");
        assert_eq!(value["kind"], "FleetRollout");
    }

    #[test]
    fn a_hub_rollout_is_a_template_only_with_the_instance_label() {
        let labelled = serde_json::json!({"metadata": {"labels": {INSTANCE_LABEL: INSTANCE}}});
        assert!(is_template(&labelled));
        assert!(!is_template(&serde_json::json!({"metadata": {}})));
    }
}
