//! The Kubernetes cluster backend: the core's `ClusterBackend` port over one cluster's API
//! server, driving one Argo-labelled Rollout as Argo Rollouts' controller would.
//!
//! - `ensure` applies the Rollout's spec when Flotilla owns it (`rolloutSource: flotilla`:
//!   server-side apply with Flotilla's field manager, never forced, never `spec.replicas` when
//!   an HPA targets the Rollout; a field owned by another manager is an `OwnershipConflict`),
//!   creates and scales each revision's ReplicaSet (`objects`) and points the Rollout's Services
//!   at their revisions;
//! - `observe` reads the Rollout and its ReplicaSets (by the hash label, owned by the Rollout's
//!   uid; from the namespace's watches while they are live, `watch`), maps them to the desired revisions by Argo's pod-template hash, and reports the
//!   engine's progress in the Rollout's `status` as Argo writes it (`status`), a merge patch on
//!   `/status` sent only when a field differs;
//! - operator patches on that status (`kubectl argo rollouts abort`, `promote`…) are told apart
//!   from Flotilla's own writes (`commands`) and handed to the fleet as commands; the status is
//!   not rewritten over them until the engine has reacted.
//!
//! Errors are typed as the port says: 403 is `Forbidden` naming the verb and resource, 409
//! `Conflict`, 400/422 `Invalid`, a transport failure `Unreachable`; a kubeconfig that cannot be
//! read is `Invalid` naming the cluster and the file.

pub mod clients;
pub mod commands;
pub mod events;
pub mod gateway;
pub mod istio;
pub mod objects;
pub mod proxy;
pub mod restart;
pub mod routes;
pub mod status;
pub mod watch;

use crate::chain::error_chain;
use crate::spokes;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_core::analysis::{MeasureRequest, Outcome};
use flotilla_core::backend::capabilities::TrafficProviders;
use flotilla_core::backend::{
    BackendError, BoxFuture, Capabilities, ClusterBackend, ClusterCommand, ClusterDesired,
    ClusterNotice, ClusterObserved, ObservedRevision, image_version,
};
use flotilla_core::rollout::{ReplicaCounts, RevisionNumber, RunKey};
use flotilla_core::spec::fleet::{KubernetesEndpoint, RolloutSource};
use flotilla_core::time::Millis;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use flotilla_core::rollout::pod_template_hash::pod_template_hash;
use objects::{FIELD_MANAGER, HASH_LABEL, INSTANCE, INSTANCE_LABEL};

/// How long Flotilla leaves an operator's status patch in place for the engine to react to it.
const OPERATOR_HOLD: Duration = Duration::from_secs(5);

/// Reads the caller's wall clock (milliseconds since the epoch).
pub type Clock = fn() -> Millis;

/// One Kubernetes cluster, one Rollout in it.
pub struct KubeBackend {
    cluster: String,
    endpoint: KubernetesEndpoint,
    source: RolloutSource,
    rollout: String,
    clock: Clock,
    client: clients::Slot,
    watches: clients::WatchSlot,
    clients: clients::KubeClients,
    /// Whether metric providers reach the cluster's Services through its API server
    /// (`metrics.via: apiserver`).
    via_apiserver: bool,
    memory: Mutex<Memory>,
}

/// What the backend remembers between calls.
#[derive(Default)]
struct Memory {
    /// The status Flotilla last wrote (two after a write of unknown outcome: the one before and
    /// the one sent; empty before the first read).
    written: Vec<Value>,
    /// Operator commands read and not yet taken.
    commands: Vec<ClusterCommand>,
    /// An operator's patch being left in place: until the desired progress differs from this
    /// one, or the hold expires.
    hold: Option<(Value, Instant)>,
    /// Since when the fleet holds the cluster behind its spec (its wave has not started).
    held_since: Option<Millis>,
    /// Each AnalysisRun object as last written, by name.
    runs: BTreeMap<String, Value>,
    /// Each Secret the analysis arguments read, by name: its data (None: not found) and when
    /// it was read (read again after [`SECRET_TTL`]).
    secrets: BTreeMap<String, (Instant, Option<BTreeMap<String, String>>)>,
    /// Whether a Secret that could not be read was logged already (said once, at warn).
    secrets_refused: bool,
    /// Events posted (names the next one apart from another of the same millisecond).
    events: u64,
    /// Whether a refused Event was logged already (said once, at warn).
    events_refused: bool,
    /// Whether old AnalysisRuns were collected since the last one was created.
    runs_collected: bool,
    /// Flotilla's writes the watches have not shown yet.
    laid: watch::Laid,
    /// `rolloutSource: flotilla`: the manifest last applied and the `metadata.generation` the
    /// apply returned. While the Rollout is still at that generation (no one changed its spec
    /// since) the same manifest is not applied again.
    applied: Option<(Value, Option<i64>)>,
    /// Each traffic route written, by kind and name (`HTTPRoute default/web`).
    routes: BTreeMap<String, routes::RouteMemory>,
}

/// Requests in flight to one API server at most, from every Rollout driven there (a watch
/// counts until its response starts, not while it streams). Each request in flight is an HTTP/1.1
/// connection; unbounded, a thousand Rollouts stepping at once open hundreds of TLS
/// connections and the API server stops accepting them in time. Argo's controller is bounded
/// likewise, by client-go's rate limiter over one HTTP/2 connection.
const IN_FLIGHT: usize = 32;

/// Metric requests through one cluster's API server's service proxy in flight at once (beyond
/// it they wait): apart from [`IN_FLIGHT`], so that slow providers never delay the controller's
/// own calls.
const PROXY_IN_FLIGHT: usize = 16;

/// How long a Secret read for analysis arguments is used before it is read again (a rotated
/// credential reaches new measurements within this).
const SECRET_TTL: Duration = Duration::from_secs(60);

/// The Rollout kind.
fn rollout_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"))
}

/// The AnalysisRun kind.
fn analysis_run_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AnalysisRun",
    ))
}

impl KubeBackend {
    /// What a Kubernetes backend can do: replica-based canaries and blue-green, and canaries
    /// routed by weight through Gateway API routes (`argoproj-labs/gatewayAPI`, with header
    /// routes of up to 16 header conditions, Gateway API's own bound) or Istio VirtualServices
    /// and DestinationRules (header and mirror routes); mirror routes only through Istio.
    pub fn capabilities() -> Capabilities {
        Capabilities {
            backend: "kubernetes".to_owned(),
            traffic: TrafficProviders::Only(vec![
                format!(
                    "plugins/{}",
                    flotilla_core::spec::rollout::GATEWAY_API_PLUGIN
                ),
                "istio".to_owned(),
            ]),
            header_route_matches: 16,
            mirroring: true,
            mirror_headers: 16,
            mirror_method_path: true,
            mirror_alternatives: 16,
            mirror_providers: vec!["istio".to_owned()],
            templates: true,
        }
    }

    /// The backend of cluster `cluster` reached through `endpoint`, driving the Rollout named
    /// `rollout` whose spec `source` owns; `clock` is the caller's wall clock; the cluster's
    /// client comes from `clients`, shared with the other Rollouts there. Connects lazily: a
    /// kubeconfig that cannot be read is the cluster's condition, not the fleet's failure.
    pub fn new(
        cluster: &str,
        endpoint: KubernetesEndpoint,
        source: RolloutSource,
        rollout: &str,
        clock: Clock,
        clients: &clients::KubeClients,
    ) -> KubeBackend {
        let client = clients.slot(&endpoint);
        let watches = clients.watch_slot(&endpoint);
        KubeBackend {
            cluster: cluster.to_owned(),
            endpoint,
            source,
            rollout: rollout.to_owned(),
            clock,
            client,
            watches,
            clients: clients.clone(),
            via_apiserver: false,
            memory: Mutex::new(Memory::default()),
        }
    }

    /// This backend, its cluster's metric providers reached through its API server's service
    /// proxy when `on` (the Fleet cluster's `metrics.via: apiserver`).
    pub fn with_metrics_via_apiserver(mut self, on: bool) -> KubeBackend {
        self.via_apiserver = on;
        self
    }

    fn namespace(&self) -> &str {
        self.endpoint.namespace()
    }

    /// The cluster's client, made on first use from the kubeconfig, or from the hub's spoke
    /// Secret (made again when the Secret changed).
    async fn client(&self) -> Result<kube::Client, BackendError> {
        Ok(self.clients().await?.api)
    }

    /// Both of the cluster's clients ([`clients::ClusterClients`]), made as [`Self::client`].
    async fn clients(&self) -> Result<clients::ClusterClients, BackendError> {
        let spoke = match &self.endpoint.secret {
            None => None,
            Some(id) => Some(self.clients.spoke(id).ok_or_else(|| BackendError::Invalid {
                field: "endpoint.kubernetes.secret".to_owned(),
                message: format!(
                    "cluster {:?}: the spoke Secret {id} is not in the hub (deleted, or its labels changed)",
                    self.cluster
                ),
            })?),
        };
        let generation = spoke.as_ref().map_or(0, |s| s.generation);
        let mut slot = self.client.lock().await;
        if let Some((client, made_at)) = &*slot
            && *made_at == generation
        {
            return Ok(client.clone());
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        if let Some(entry) = spoke {
            let invalid = |e: spokes::SpokeError| BackendError::Invalid {
                field: format!("Secret {} {}", e.secret, e.field),
                message: format!("cluster {:?}: {e}", self.cluster),
            };
            let spoke = entry.spoke.map_err(invalid)?;
            let config = spoke.config().await.map_err(invalid)?;
            let eks = match &spoke.aws_auth {
                None => None,
                Some(auth) => Some(
                    crate::eks::EksTokens::from_environment(
                        auth,
                        std::sync::Arc::new(std::time::SystemTime::now),
                    )
                    .await
                    .map_err(|e| match e {
                        crate::eks::EksError::NoRegion { .. } => BackendError::Invalid {
                            field: format!("Secret {} config.awsAuthConfig", spoke.secret),
                            message: format!("cluster {:?}: {e}", self.cluster),
                        },
                        // Credentials that cannot be had now may be had later.
                        _ => BackendError::Unreachable {
                            message: format!("cluster {:?}: {e}", self.cluster),
                        },
                    })?,
                ),
            };
            let clients = self.finish_client(config, eks).await?;
            *slot = Some((clients.clone(), generation));
            return Ok(clients);
        }
        let file = self.endpoint.kubeconfig.as_deref();
        let invalid = |message: String| BackendError::Invalid {
            field: "endpoint.kubernetes.kubeconfig".to_owned(),
            message: format!(
                "cluster {:?}: kubeconfig {}: {message}",
                self.cluster,
                file.unwrap_or("(default)")
            ),
        };
        let kubeconfig = match file {
            Some(path) => kube::config::Kubeconfig::read_from(path),
            None => kube::config::Kubeconfig::read(),
        }
        .map_err(|e| invalid(error_chain(&e)))?;
        let options = kube::config::KubeConfigOptions {
            context: self.endpoint.context.clone(),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| invalid(error_chain(&e)))?;
        let clients = self.finish_client(config, None).await?;
        *slot = Some((clients.clone(), 0));
        Ok(clients)
    }

    /// The clients of `config` with the endpoint's server, the Rollout's namespace, the
    /// timeouts and the in-flight bounds (and EKS tokens on every request when `eks` is given),
    /// once the cluster is seen to serve Argo's CRDs.
    async fn finish_client(
        &self,
        mut config: kube::Config,
        eks: Option<crate::eks::EksTokens>,
    ) -> Result<clients::ClusterClients, BackendError> {
        if let Some(server) = &self.endpoint.server {
            config.cluster_url = server.parse().map_err(|e| BackendError::Invalid {
                field: "endpoint.kubernetes.server".to_owned(),
                message: format!("cluster {:?}: {server:?}: {e}", self.cluster),
            })?;
        }
        config.default_namespace = self.namespace().to_owned();
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(Duration::from_secs(15));
        config.write_timeout = Some(Duration::from_secs(15));
        let mut proxy_config = config.clone();
        proxy_config.default_retry = false;
        proxy_config.read_timeout = None;
        let build = |config: kube::Config, in_flight: usize| {
            let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| {
                BackendError::Invalid {
                    field: "endpoint.kubernetes".to_owned(),
                    message: format!("cluster {:?}: {}", self.cluster, error_chain(&e)),
                }
            })?;
            let limit = tower::limit::ConcurrencyLimitLayer::new(in_flight);
            // The token goes on inside the bound: a request that waited for a slot gets a live
            // one.
            Ok::<_, BackendError>(match eks.clone() {
                None => builder.with_layer(&limit).build(),
                Some(tokens) => builder
                    .with_layer(&tokens.layer())
                    .with_layer(&limit)
                    .build(),
            })
        };
        let api = build(config, IN_FLIGHT)?;
        self.check_crds(&api).await?;
        let proxy = build(proxy_config, PROXY_IN_FLIGHT)?;
        Ok(clients::ClusterClients { api, proxy })
    }

    /// Refuses a cluster without Argo Rollouts' CRDs serving `argoproj.io/v1alpha1` Rollouts
    /// with their status subresource and AnalysisRuns (read through discovery, which every
    /// authenticated account may read). Flotilla never installs them: Argo's release does.
    async fn check_crds(&self, client: &kube::Client) -> Result<(), BackendError> {
        let resources = match client
            .list_api_group_resources("argoproj.io/v1alpha1")
            .await
        {
            Ok(list) => list.resources,
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(self.fail("get", "apis/argoproj.io/v1alpha1", e)),
        };
        let served = |name: &str| resources.iter().any(|r| r.name == name);
        let missing: Vec<&str> = ["rollouts", "rollouts/status", "analysisruns"]
            .into_iter()
            .filter(|name| !served(name))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(BackendError::Invalid {
            field: "argoproj.io/v1alpha1".to_owned(),
            message: format!(
                "cluster {:?} does not serve {} of argoproj.io/v1alpha1: install Argo Rollouts' CRDs from Argo's release (manifests/crds of argoproj/argo-rollouts; Flotilla is tested with v1.10.1's); Flotilla does not install them",
                self.cluster,
                missing.join(", ")
            ),
        })
    }

    /// The error of a call `verb` on `resource`, typed.
    fn fail(&self, verb: &str, resource: &str, error: kube::Error) -> BackendError {
        match &error {
            kube::Error::Api(status) => match status.code {
                403 | 401 => BackendError::Forbidden {
                    verb: verb.to_owned(),
                    resource: resource.to_owned(),
                    message: format!("cluster {:?}: {}", self.cluster, status.message),
                },
                409 => BackendError::Conflict {
                    message: format!("{verb} {resource}: {}", status.message),
                },
                400 | 404 | 422 => BackendError::Invalid {
                    field: resource.to_owned(),
                    message: format!("cluster {:?}: {verb}: {}", self.cluster, status.message),
                },
                _ => BackendError::Unreachable {
                    message: format!(
                        "cluster {:?}: {verb} {resource}: {}",
                        self.cluster, status.message
                    ),
                },
            },
            _ => BackendError::Unreachable {
                message: format!(
                    "cluster {:?}: {verb} {resource}: {}",
                    self.cluster,
                    error_chain(&error)
                ),
            },
        }
    }

    /// The Rollout the cluster holds, as `observe` reports it in `rolloutSource: cluster` (spec,
    /// labels, annotations; no status): what `flotilla lint --live` checks. None: there is no
    /// Rollout of that name in the namespace.
    pub async fn held(&self) -> Result<Option<Value>, BackendError> {
        let client = self.client().await?;
        Ok(self
            .get_rollout(&client)
            .await?
            .map(|rollout| objects::held_rollout(&rollout)))
    }

    /// The namespace's watches, started on first use.
    fn watches(&self, client: &kube::Client) -> std::sync::Arc<watch::Watches> {
        self.watches
            .lock()
            .expect("watches lock")
            .get_or_insert_with(|| {
                std::sync::Arc::new(watch::Watches::start(
                    client,
                    self.namespace(),
                    &self.cluster,
                ))
            })
            .clone()
    }

    /// The Rollout: from the watch when it is live and has it (with Flotilla's own newer write
    /// over it), else read from the API server.
    async fn read_rollout(&self, client: &kube::Client) -> Result<Option<Value>, BackendError> {
        let watches = self.watches(client);
        if let Some(watched) = watches.rollout(&self.rollout) {
            let rollout = self
                .memory
                .lock()
                .expect("memory lock")
                .laid
                .rollout(watched);
            return Ok(Some(serde_json::to_value(rollout).unwrap_or_default()));
        }
        if watches.rollouts_live() {
            // One Flotilla just made (applied) and the watch does not show yet.
            let unseen = self
                .memory
                .lock()
                .expect("memory lock")
                .laid
                .unseen_rollout();
            if let Some(rollout) = unseen {
                return Ok(Some(serde_json::to_value(rollout).unwrap_or_default()));
            }
        }
        let found = self.get_rollout(client).await?;
        self.memory
            .lock()
            .expect("memory lock")
            .laid
            .forget_rollout();
        Ok(found)
    }

    /// The Rollout, read from the API server.
    async fn get_rollout(&self, client: &kube::Client) -> Result<Option<Value>, BackendError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), self.namespace(), &rollout_resource());
        let found = api
            .get_opt(&self.rollout)
            .await
            .map_err(|e| self.fail("get", "rollouts.argoproj.io", e))?;
        Ok(found.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Lays a Rollout a write returned over the watch's copy.
    fn rollout_written(&self, rollout: DynamicObject) {
        self.memory
            .lock()
            .expect("memory lock")
            .laid
            .rollout_written(rollout);
    }

    /// Lays a ReplicaSet a write returned over the watch's copy.
    fn replica_set_written(&self, rs: ReplicaSet) {
        self.memory
            .lock()
            .expect("memory lock")
            .laid
            .replica_set_written(rs);
    }

    /// Whether a HorizontalPodAutoscaler in the namespace targets the Rollout.
    async fn hpa_targets(&self, client: &kube::Client) -> Result<bool, BackendError> {
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), self.namespace());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| self.fail("list", "horizontalpodautoscalers.autoscaling", e))?;
        Ok(list.items.iter().any(|hpa| {
            hpa.spec.as_ref().is_some_and(|s| {
                s.scale_target_ref.kind == "Rollout" && s.scale_target_ref.name == self.rollout
            })
        }))
    }

    /// Whether the Rollout holds the manifest of `desired` as Flotilla last applied it: the same
    /// manifest, and the Rollout still at the generation that apply returned (a spec changed by
    /// anyone since, an HPA's `spec.replicas` included, is a new generation: applied again).
    async fn still_applied(
        &self,
        client: &kube::Client,
        desired: &ClusterDesired,
    ) -> Result<bool, BackendError> {
        let generation = {
            let memory = self.memory.lock().expect("memory lock");
            match &memory.applied {
                Some((manifest, generation)) if Some(manifest) == desired.rollout.as_ref() => {
                    *generation
                }
                _ => return Ok(false),
            }
        };
        let Some(generation) = generation else {
            return Ok(false);
        };
        let read = self.read_rollout(client).await?;
        Ok(read.is_some_and(|r| r["metadata"]["generation"].as_i64() == Some(generation)))
    }

    /// Applies the Rollout's spec (`rolloutSource: flotilla`).
    async fn apply_rollout(
        &self,
        client: &kube::Client,
        desired: &ClusterDesired,
    ) -> Result<(), BackendError> {
        let manifest = desired
            .rollout
            .as_ref()
            .ok_or_else(|| BackendError::Invalid {
                field: "rollout".to_owned(),
                message: "no Rollout manifest to apply".to_owned(),
            })?;
        // An HPA owns `spec.replicas` once the Rollout exists; the Rollout is made with the
        // manifest's count, since an HPA reads a Rollout without one as scaled to 0 and leaves
        // it alone (autoscaling disabled), as Argo CD's first sync makes it with its count.
        let keep_replicas = self.hpa_targets(client).await?
            && self
                .read_rollout(client)
                .await?
                .is_some_and(|r| r["spec"]["replicas"].is_i64());
        let applied = objects::applied_rollout(manifest, self.namespace(), keep_replicas);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), self.namespace(), &rollout_resource());
        match api
            .patch(
                &self.rollout,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&applied),
            )
            .await
        {
            Ok(applied) => {
                self.memory.lock().expect("memory lock").applied =
                    Some((manifest.clone(), applied.metadata.generation));
                self.rollout_written(applied);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let (manager, field) = objects::apply_conflict(&status.message);
                Err(BackendError::OwnershipConflict {
                    field,
                    manager,
                    message: format!("cluster {:?}: {}", self.cluster, status.message),
                })
            }
            Err(e) => Err(self.fail("patch", "rollouts.argoproj.io", e)),
        }
    }

    /// Argo's pod-template hash of each desired revision.
    fn hashes(
        &self,
        desired: &ClusterDesired,
        rollout: &Value,
    ) -> Result<BTreeMap<RevisionNumber, String>, BackendError> {
        let collisions = rollout["status"]["collisionCount"]
            .as_i64()
            .map(|c| c as i32);
        let mut out = BTreeMap::new();
        for (number, revision) in &desired.revisions {
            let Some(template) = &revision.template else {
                continue;
            };
            let hash =
                pod_template_hash(template, collisions).map_err(|e| BackendError::Invalid {
                    field: format!("spec.template.{}", e.path),
                    message: e.message,
                })?;
            out.insert(*number, hash);
        }
        Ok(out)
    }

    /// The Rollout as read, checked to be Flotilla's to drive.
    fn drivable(&self, rollout: Option<Value>) -> Result<Value, BackendError> {
        let rollout = rollout.ok_or_else(|| BackendError::Invalid {
            field: "rollout".to_owned(),
            message: format!(
                "cluster {:?}: Rollout {}/{} not found",
                self.cluster,
                self.namespace(),
                self.rollout
            ),
        })?;
        if rollout["metadata"]["labels"][INSTANCE_LABEL] != INSTANCE {
            return Err(BackendError::Invalid {
                field: format!("metadata.labels[{INSTANCE_LABEL}]"),
                message: format!(
                    "cluster {:?}: Rollout {}/{} is not labelled {INSTANCE_LABEL}: {INSTANCE}, so Argo's controller may drive it; Flotilla does not",
                    self.cluster,
                    self.namespace(),
                    self.rollout
                ),
            });
        }
        Ok(rollout)
    }

    /// The Rollout's ReplicaSets (the hash label, owned by its uid), by hash: from the
    /// namespace's watch when it is live (with Flotilla's own newer writes over it), else listed
    /// with its selector's labels (the API server filters, so a namespace of many Rollouts is
    /// not read whole for each).
    async fn replica_sets(
        &self,
        client: &kube::Client,
        rollout: &Value,
    ) -> Result<BTreeMap<String, ReplicaSet>, BackendError> {
        let uid = rollout["metadata"]["uid"].as_str().unwrap_or_default();
        let items = match self.watches(client).replica_sets(uid) {
            Some(watched) => self
                .memory
                .lock()
                .expect("memory lock")
                .laid
                .replica_sets(watched, uid),
            None => {
                let api: Api<ReplicaSet> = Api::namespaced(client.clone(), self.namespace());
                api.list(&ListParams::default().labels(&objects::replica_set_selector(rollout)))
                    .await
                    .map_err(|e| self.fail("list", "replicasets.apps", e))?
                    .items
            }
        };
        Ok(items
            .into_iter()
            .filter(|rs| watch::owned_by(rs, uid))
            .filter_map(|rs| {
                let hash = rs.metadata.labels.as_ref()?.get(HASH_LABEL)?.clone();
                Some((hash, rs))
            })
            .collect())
    }

    async fn converge(&self, desired: &ClusterDesired) -> Result<(), BackendError> {
        let client = self.client().await?;
        if self.source == RolloutSource::Flotilla && !self.still_applied(&client, desired).await? {
            self.apply_rollout(&client, desired).await?;
        }
        let rollout = self.drivable(self.read_rollout(&client).await?)?;
        let hashes = self.hashes(desired, &rollout)?;
        let existing = self.replica_sets(&client, &rollout).await?;
        let api: Api<ReplicaSet> = Api::namespaced(client.clone(), self.namespace());
        let mut notices = Vec::new();
        for (number, hash) in &hashes {
            let revision = &desired.revisions[number];
            let name = objects::replica_set_name(&self.rollout, hash);
            match existing.get(hash) {
                None => {
                    let replicas = revision.replicas.unwrap_or(0);
                    if replicas == 0 && desired.current != Some(*number) {
                        continue;
                    }
                    let template = revision
                        .template
                        .as_ref()
                        .expect("hashed revisions have templates");
                    let manifest =
                        objects::replica_set(&rollout, template, hash, *number, replicas);
                    let rs: ReplicaSet =
                        serde_json::from_value(manifest).map_err(|e| BackendError::Invalid {
                            field: "spec.template".to_owned(),
                            message: e.to_string(),
                        })?;
                    match api.create(&post_params(), &rs).await {
                        Ok(made) => {
                            self.replica_set_written(made);
                            notices.push(events::created(&name, *number));
                            if replicas > 0 {
                                notices.push(events::scaled(&name, *number, 0, replicas));
                            }
                        }
                        Err(kube::Error::Api(status)) if status.code == 409 => {
                            // Made by a previous attempt, or a hash collision: read again.
                            return Err(BackendError::Conflict {
                                message: format!("ReplicaSet {name} exists: {}", status.message),
                            });
                        }
                        Err(e) => return Err(self.fail("create", "replicasets.apps", e)),
                    }
                }
                Some(rs) => {
                    let have = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let annotated = rs
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(objects::REVISION_ANNOTATION))
                        .cloned();
                    let want = revision.replicas.unwrap_or(have);
                    if want != have || annotated.as_deref() != Some(&number.to_string()) {
                        let patch = json!({
                            "metadata": {"annotations": {objects::REVISION_ANNOTATION: number.to_string()}},
                            "spec": {"replicas": want},
                        });
                        let scaled = api
                            .patch(&name, &patch_params(), &Patch::Merge(&patch))
                            .await
                            .map_err(|e| self.fail("patch", "replicasets.apps", e))?;
                        self.replica_set_written(scaled);
                        if want != have {
                            notices.push(events::scaled(&name, *number, have, want));
                        }
                    }
                }
            }
        }
        let pointed = self
            .point_services(&client, &rollout, desired, &hashes, &existing)
            .await;
        // The routes' weights once the Services select their revisions (as Argo orders them).
        let serving = desired.serving.and_then(|r| hashes.get(&r)).cloned();
        // A DestinationRule's canary subset moves to the canary's hash once a Pod of it is
        // available to take traffic (Argo delays the subset update likewise, its issue 2507).
        let subset_hashes = serving.map(|s| {
            let canary = canary_hash(desired, &hashes, &existing, &s);
            let available = existing
                .get(&canary)
                .and_then(|rs| rs.status.as_ref())
                .and_then(|status| status.available_replicas)
                .unwrap_or(0)
                > 0;
            (if available { canary } else { s.clone() }, s)
        });
        let routed = match pointed {
            Ok(()) => self
                .route_traffic(&client, &rollout, desired, subset_hashes)
                .await
                .map(|weights| notices.extend(weights)),
            Err(e) => Err(e),
        };
        self.post_events(&client, &rollout, &notices).await;
        routed
    }

    /// Posts `notices` as Events on the Rollout as read, best effort: a refused Event (no
    /// permission to create Events, say) is logged once at warn, never an error of the rollout.
    async fn post_events(&self, client: &kube::Client, rollout: &Value, notices: &[ClusterNotice]) {
        if notices.is_empty() {
            return;
        }
        let api: Api<Event> = Api::namespaced(client.clone(), self.namespace());
        for notice in notices {
            let sequence = {
                let mut memory = self.memory.lock().expect("memory lock");
                memory.events += 1;
                memory.events
            };
            let event = events::event(rollout, notice, (self.clock)(), sequence);
            let posted = match serde_json::from_value::<Event>(event) {
                Ok(event) => api
                    .create(&post_params(), &event)
                    .await
                    .map(|_| ())
                    .map_err(|e| error_chain(&e)),
                Err(e) => Err(e.to_string()),
            };
            if let Err(error) = posted {
                let first = !std::mem::replace(
                    &mut self.memory.lock().expect("memory lock").events_refused,
                    true,
                );
                if first {
                    tracing::warn!(cluster = %self.cluster, reason = %notice.reason, %error, "cannot post an Event on the Rollout (said once)");
                } else {
                    tracing::debug!(cluster = %self.cluster, reason = %notice.reason, %error, "cannot post an Event on the Rollout");
                }
            }
        }
    }

    /// Points the Rollout's Services at their revisions: canary `stableService` at the serving
    /// revision and `canaryService` at the canary (the serving one when there is none);
    /// blue-green `activeService` at the active revision and `previewService` at the preview.
    async fn point_services(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
        hashes: &BTreeMap<RevisionNumber, String>,
        existing: &BTreeMap<String, ReplicaSet>,
    ) -> Result<(), BackendError> {
        let hash = |r: Option<RevisionNumber>| r.and_then(|r| hashes.get(&r)).cloned();
        let Some(serving) = hash(desired.serving) else {
            return Ok(());
        };
        let strategy = &rollout["spec"]["strategy"];
        let mut wanted: Vec<(String, &str, String)> = Vec::new();
        if let Some(canary) = strategy["canary"].as_object() {
            if let Some(stable) = canary.get("stableService").and_then(Value::as_str) {
                wanted.push((
                    "spec.strategy.canary.stableService".into(),
                    stable,
                    serving.clone(),
                ));
            }
            if let Some(service) = canary.get("canaryService").and_then(Value::as_str) {
                // The canary Service switches once the canary's ReplicaSet exists (Argo waits
                // for it), and back to stable on abort.
                let canary_hash = canary_hash(desired, hashes, existing, &serving);
                wanted.push((
                    "spec.strategy.canary.canaryService".into(),
                    service,
                    canary_hash,
                ));
            }
        }
        if let Some(blue_green) = strategy["blueGreen"].as_object() {
            if let Some(active) = blue_green.get("activeService").and_then(Value::as_str) {
                wanted.push((
                    "spec.strategy.blueGreen.activeService".into(),
                    active,
                    serving.clone(),
                ));
            }
            if let Some(preview) = blue_green.get("previewService").and_then(Value::as_str) {
                let preview_hash = hash(desired.preview).unwrap_or_else(|| serving.clone());
                wanted.push((
                    "spec.strategy.blueGreen.previewService".into(),
                    preview,
                    preview_hash,
                ));
            }
        }
        let api: Api<Service> = Api::namespaced(client.clone(), self.namespace());
        for (field, name, target) in wanted {
            let service = api
                .get_opt(name)
                .await
                .map_err(|e| self.fail("get", "services", e))?
                .ok_or_else(|| BackendError::Invalid {
                    field: field.clone(),
                    message: format!(
                        "cluster {:?}: Service {}/{name} not found",
                        self.cluster,
                        self.namespace()
                    ),
                })?;
            let read = serde_json::to_value(&service).unwrap_or_default();
            if let Some(patch) = objects::service_patch(&read, &self.rollout, &target) {
                api.patch(name, &patch_params(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| self.fail("patch", "services", e))?;
            }
        }
        Ok(())
    }

    async fn read(&self, desired: &ClusterDesired) -> Result<ClusterObserved, BackendError> {
        let client = self.client().await?;
        let Some(rollout) = self.read_rollout(&client).await? else {
            // Not applied yet (`rolloutSource: flotilla` before the first ensure): nothing runs.
            return Ok(ClusterObserved::default());
        };
        let rollout = self.drivable(Some(rollout))?;
        let sets = self.replica_sets(&client, &rollout).await?;
        let counts: BTreeMap<String, ReplicaCounts> = sets
            .iter()
            .map(|(hash, rs)| (hash.clone(), counts_of(rs)))
            .collect();
        let hashes = self.hashes(desired, &rollout)?;
        let revisions = hashes
            .iter()
            .filter_map(|(number, hash)| {
                let counts = *counts.get(hash)?;
                Some((
                    *number,
                    ObservedRevision {
                        identity: hash.clone(),
                        counts,
                        requested: sets.get(hash).map(requested_of),
                    },
                ))
            })
            .collect();
        let restarted = match restart::due(&rollout, (self.clock)()) {
            Some((text, at)) => self
                .restart(&client, &rollout, &sets, at)
                .await?
                .then_some(text),
            None => None,
        };
        let mut stable = rollout["status"]["stableRS"].as_str().map(str::to_owned);
        if !desired.revisions.is_empty()
            && let Some(written) = self
                .report(&client, &rollout, desired, &hashes, &counts, restarted)
                .await?
        {
            // The status as this read leaves it: a first deployment's stable is served as
            // soon as its status says so, not one poll later.
            stable = Some(written);
        }
        let serving = stable
            .and_then(|hash| sets.get(&hash))
            .and_then(first_image)
            .map(|image| image_version(&image));
        let weights = self.routed_weights(&client, &rollout, desired).await?;
        Ok(ClusterObserved {
            revisions,
            weights,
            serving,
            rollout: (self.source == RolloutSource::Cluster)
                .then(|| objects::held_rollout(&rollout)),
            // Argo sizes the ReplicaSets by the live count (an HPA's, or Argo CD's), and so
            // does the engine.
            spec_replicas: rollout["spec"]["replicas"]
                .as_i64()
                .and_then(|n| i32::try_from(n).ok()),
            secrets: self.secrets(&client, &desired.secret_refs).await,
        })
    }

    /// One pass of `spec.restartAt` ([`restart`]): evicts the Rollout's Pods created before `at`
    /// that may go now; true once none is left (the status then says `restartedAt`).
    async fn restart(
        &self,
        client: &kube::Client,
        rollout: &Value,
        sets: &BTreeMap<String, ReplicaSet>,
        at: Millis,
    ) -> Result<bool, BackendError> {
        let owners: Vec<&str> = sets
            .values()
            .filter_map(|rs| rs.metadata.uid.as_deref())
            .collect();
        let api: Api<Pod> = Api::namespaced(client.clone(), self.namespace());
        let list = api
            .list(&ListParams::default().labels(&objects::replica_set_selector(rollout)))
            .await
            .map_err(|e| self.fail("list", "pods", e))?;
        let now = (self.clock)();
        let min_ready = rollout["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let pods: Vec<restart::PodFacts> = list
            .items
            .iter()
            .filter(|pod| {
                pod.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| owners.contains(&o.uid.as_str()))
            })
            .map(|pod| {
                restart::facts(
                    &serde_json::to_value(pod).unwrap_or_default(),
                    min_ready,
                    now,
                )
            })
            .collect();
        let total: i64 = sets
            .values()
            .map(|rs| i64::from(rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)))
            .sum();
        let replicas = rollout["spec"]["replicas"].as_i64().unwrap_or(1);
        let (evict, remaining) = restart::plan(
            &pods,
            at,
            replicas,
            total,
            restart::max_unavailable(rollout),
        );
        for name in &evict {
            match api.evict(name, &EvictParams::default()).await {
                Ok(_) => {
                    tracing::info!(cluster = %self.cluster, pod = %name, "restart: evicted a Pod older than spec.restartAt");
                }
                // A disruption budget says not now, or it is gone already: the next poll.
                Err(kube::Error::Api(status)) if status.code == 429 || status.code == 404 => {}
                Err(e) => return Err(self.fail("create", "pods/eviction", e)),
            }
        }
        Ok(remaining == 0)
    }

    /// The values of `refs` (Secret name, key) in the Rollout's namespace, as analysis
    /// arguments read them (`valueFrom.secretKeyRef`, read where the AnalysisRun would run, as
    /// Argo reads them): cached for [`SECRET_TTL`]; a Secret or key not found is left out (its
    /// argument is then unresolved and the run an Error, as in Argo); one that cannot be read
    /// (forbidden) is logged once and left out.
    async fn secrets(
        &self,
        client: &kube::Client,
        refs: &std::collections::BTreeSet<(String, String)>,
    ) -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        if refs.is_empty() {
            return out;
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), self.namespace());
        let names: std::collections::BTreeSet<&str> =
            refs.iter().map(|(n, _)| n.as_str()).collect();
        for name in names {
            let cached = self
                .memory
                .lock()
                .expect("memory lock")
                .secrets
                .get(name)
                .filter(|(at, _)| at.elapsed() < SECRET_TTL)
                .map(|(_, data)| data.clone());
            let data = match cached {
                Some(data) => data,
                None => {
                    let read = match api.get_opt(name).await {
                        Ok(secret) => Some(secret.map(|s| {
                            s.data
                                .unwrap_or_default()
                                .into_iter()
                                .filter_map(|(k, v)| Some((k, String::from_utf8(v.0).ok()?)))
                                .collect::<BTreeMap<_, _>>()
                        })),
                        Err(error) => {
                            let first = !std::mem::replace(
                                &mut self.memory.lock().expect("memory lock").secrets_refused,
                                true,
                            );
                            let error = self.fail("get", "secrets", error);
                            if first {
                                tracing::warn!(cluster = %self.cluster, secret = %name, %error, "cannot read a Secret that analysis arguments name (said once)");
                            }
                            None
                        }
                    };
                    match read {
                        Some(data) => {
                            self.memory
                                .lock()
                                .expect("memory lock")
                                .secrets
                                .insert(name.to_owned(), (Instant::now(), data.clone()));
                            data
                        }
                        None => None,
                    }
                }
            };
            for (secret, key) in refs.iter().filter(|(n, _)| n == name) {
                if let Some(value) = data.as_ref().and_then(|d| d.get(key)) {
                    out.insert((secret.clone(), key.clone()), value.clone());
                }
            }
        }
        out
    }

    /// A `job` metric's measurement as Argo's `job` provider takes it: a Job made in the
    /// Rollout's namespace from the metric's `metadata` and `spec`, watched (read every second)
    /// until it is Complete (Successful) or Failed (Failed, with the condition's message); its
    /// name and namespace are the measurement's metadata (`job-name`, `job-namespace`), where
    /// `kubectl argo rollouts get` finds it. A Job that cannot be made or read is an Error.
    async fn run_job(
        &self,
        request: &MeasureRequest,
        job: &flotilla_core::spec::analysis::JobMetric,
    ) -> Outcome {
        let client = match self.client().await {
            Ok(client) => client,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        let name = objects::job_name(&self.rollout, &request.metric, request.at);
        let object = objects::job(&name, self.namespace(), &self.rollout, &request.metric, job);
        let object: Job = match serde_json::from_value(object) {
            Ok(job) => job,
            Err(e) => return Outcome::Error(format!("the job metric's Job: {e}")),
        };
        let api: Api<Job> = Api::namespaced(client, self.namespace());
        if let Err(e) = api.create(&post_params(), &object).await {
            return Outcome::Error(self.fail("create", "jobs.batch", e).to_string());
        }
        let metadata: BTreeMap<String, String> = [
            ("job-name".to_owned(), name.clone()),
            ("job-namespace".to_owned(), self.namespace().to_owned()),
        ]
        .into();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let read = match api.get(&name).await {
                Ok(read) => read,
                Err(e) => return Outcome::Error(self.fail("get", "jobs.batch", e).to_string()),
            };
            let conditions = read.status.and_then(|s| s.conditions).unwrap_or_default();
            let holds = |kind: &str| {
                conditions
                    .iter()
                    .find(|c| c.type_ == kind && c.status == "True")
            };
            if holds("Complete").is_some() {
                return Outcome::Decided {
                    phase: flotilla_core::spec::analysis::AnalysisPhase::Successful,
                    value: String::new(),
                    message: String::new(),
                    metadata,
                };
            }
            if let Some(failed) = holds("Failed") {
                return Outcome::Decided {
                    phase: flotilla_core::spec::analysis::AnalysisPhase::Failed,
                    value: String::new(),
                    message: failed.message.clone().unwrap_or_default(),
                    metadata,
                };
            }
        }
    }

    /// Deletes the Rollout's old AnalysisRuns beyond its history limits
    /// ([`objects::runs_to_delete`]), once after each new one is created.
    async fn collect_runs(
        &self,
        client: &kube::Client,
        rollout: &Value,
        keep: &std::collections::BTreeSet<String>,
        hashes: &std::collections::BTreeSet<String>,
    ) -> Result<(), BackendError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), self.namespace(), &analysis_run_resource());
        let uid = rollout["metadata"]["uid"].as_str().unwrap_or_default();
        let list = api
            .list(&ListParams::default().labels(&format!("{INSTANCE_LABEL}={INSTANCE}")))
            .await
            .map_err(|e| self.fail("list", "analysisruns.argoproj.io", e))?;
        let owned: Vec<Value> = list
            .items
            .into_iter()
            .filter(|run| {
                run.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid)
            })
            .map(|run| serde_json::to_value(run).unwrap_or_default())
            .collect();
        let limit = |field: &str| {
            rollout["spec"]["analysis"][field]
                .as_u64()
                .map_or(5, |n| n as usize)
        };
        for name in objects::runs_to_delete(
            &owned,
            keep,
            hashes,
            limit("successfulRunHistoryLimit"),
            limit("unsuccessfulRunHistoryLimit"),
        ) {
            match api.delete(&name, &Default::default()).await {
                Ok(_) => {
                    tracing::debug!(cluster = %self.cluster, run = %name, "deleted an old AnalysisRun");
                    self.memory.lock().expect("memory lock").runs.remove(&name);
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(self.fail("delete", "analysisruns.argoproj.io", e)),
            }
        }
        Ok(())
    }

    /// Writes each analysis run as an AnalysisRun object (created, then merge-patched when it
    /// changes: AnalysisRuns have no status subresource), and returns each run's object name.
    async fn write_runs(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
        hashes: &BTreeMap<RevisionNumber, String>,
    ) -> Result<Vec<(RunKey, String)>, BackendError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), self.namespace(), &analysis_run_resource());
        let mut names = Vec::with_capacity(desired.runs.len());
        for run in &desired.runs {
            let Some(hash) = hashes.get(&run.key.revision) else {
                continue;
            };
            let (name, object) = objects::analysis_run(rollout, run, hash);
            names.push((run.key, name.clone()));
            let written = self
                .memory
                .lock()
                .expect("memory lock")
                .runs
                .get(&name)
                .cloned();
            if written.as_ref() == Some(&object) {
                continue;
            }
            let created = if written.is_none() {
                let create: DynamicObject =
                    serde_json::from_value(object.clone()).map_err(|e| BackendError::Invalid {
                        field: "analysisruns".to_owned(),
                        message: e.to_string(),
                    })?;
                match api.create(&post_params(), &create).await {
                    Ok(_) => {
                        self.memory.lock().expect("memory lock").runs_collected = false;
                        true
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => false,
                    Err(e) => return Err(self.fail("create", "analysisruns.argoproj.io", e)),
                }
            } else {
                false
            };
            if !created {
                let patch = json!({
                    "metadata": {"labels": object["metadata"]["labels"]},
                    "spec": object["spec"],
                    "status": object["status"],
                });
                match api
                    .patch(&name, &patch_params(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        // Deleted meanwhile: made again at the next poll.
                        self.memory.lock().expect("memory lock").runs.remove(&name);
                        continue;
                    }
                    Err(e) => return Err(self.fail("patch", "analysisruns.argoproj.io", e)),
                }
            }
            self.memory
                .lock()
                .expect("memory lock")
                .runs
                .insert(name, object);
        }
        Ok(names)
    }

    /// Since when the fleet holds this cluster on an older revision than its spec asks for
    /// (`rolloutSource: cluster`: Argo CD synced the new spec, the cluster's wave has not
    /// started), None when it does not.
    fn held_since(
        &self,
        rollout: &Value,
        desired: &ClusterDesired,
        hashes: &BTreeMap<RevisionNumber, String>,
        now: Millis,
    ) -> Option<Millis> {
        let mut memory = self.memory.lock().expect("memory lock");
        let current = desired.current.and_then(|c| hashes.get(&c));
        let collisions = rollout["status"]["collisionCount"]
            .as_i64()
            .map(|c| c as i32);
        let asked = pod_template_hash(&rollout["spec"]["template"], collisions).ok();
        let held = self.source == RolloutSource::Cluster
            && !desired.progress.abort
            && current.is_some()
            && asked.is_some()
            && current != asked.as_ref();
        if !held {
            memory.held_since = None;
            return None;
        }
        Some(*memory.held_since.get_or_insert(now))
    }

    /// Writes the engine's progress in the Rollout's status when a field differs, after taking
    /// the operator commands the status carries (left in place until the engine reacts).
    /// Returns the `stableRS` the status holds after it (None: unchanged by this call, as read).
    async fn report(
        &self,
        client: &kube::Client,
        rollout: &Value,
        desired: &ClusterDesired,
        hashes: &BTreeMap<RevisionNumber, String>,
        counts: &BTreeMap<String, ReplicaCounts>,
        restarted: Option<String>,
    ) -> Result<Option<String>, BackendError> {
        let progress = serde_json::to_value(&desired.progress).unwrap_or_default();
        {
            let mut memory = self.memory.lock().expect("memory lock");
            if memory.written.is_empty() {
                // After a restart: the writes as the Rollout remembers them.
                memory.written = commands::recalled(rollout);
            }
            let issued = commands::issued_among(rollout, &memory.written);
            // `spec.paused` (the plugin's pause, its promote's unpause): heard once per spec
            // generation; the status is not left in place for it.
            let paused = commands::spec_pause(rollout, desired.progress.paused);
            memory.commands.extend(paused);
            if !issued.is_empty() {
                memory.commands.extend(issued);
                memory.hold = Some((progress.clone(), Instant::now()));
                // The operator's patch is now the baseline: the same patch is not heard again.
                memory.written = vec![rollout["status"].clone()];
            }
            if let Some((held, since)) = &memory.hold {
                if *held == progress && since.elapsed() < OPERATOR_HOLD {
                    return Ok(None);
                }
                memory.hold = None;
            }
        }
        let now = (self.clock)();
        let held = self.held_since(rollout, desired, hashes, now);
        let mut wanted = status::status(&status::StatusInput {
            rollout,
            desired,
            hashes,
            counts,
            now,
            held,
        });
        // AnalysisRuns are a report beside the status: a failure to write one is logged, and
        // neither the observation nor the status waits for it.
        let runs = match self.write_runs(client, rollout, desired, hashes).await {
            Ok(runs) => runs,
            Err(error) if error.is_transient() => {
                // The API server is slow or away: the next observation writes them.
                tracing::debug!(cluster = %self.cluster, %error, "cannot write the AnalysisRuns yet");
                Vec::new()
            }
            Err(error) => {
                tracing::warn!(cluster = %self.cluster, %error, "cannot write the AnalysisRuns");
                Vec::new()
            }
        };
        status::add_run_statuses(&mut wanted, rollout, desired, &runs);
        let collect = !runs.is_empty()
            && !std::mem::replace(
                &mut self.memory.lock().expect("memory lock").runs_collected,
                true,
            );
        if collect {
            let keep = runs.iter().map(|(_, name)| name.clone()).collect();
            let hashes = counts.keys().cloned().collect();
            if let Err(error) = self.collect_runs(client, rollout, &keep, &hashes).await {
                // Tried again at the next observation; only a refusal (RBAC, a bad object) is
                // worth a warning: a slow API server is the ordinary case under load.
                if error.is_transient() {
                    tracing::debug!(cluster = %self.cluster, %error, "cannot delete old AnalysisRuns yet");
                } else {
                    tracing::warn!(cluster = %self.cluster, %error, "cannot delete old AnalysisRuns");
                }
                self.memory.lock().expect("memory lock").runs_collected = false;
            }
        }
        if let Some(at) = restarted {
            wanted["restartedAt"] = json!(at);
        }
        let current = &rollout["status"];
        let stable = wanted["stableRS"].as_str().map(str::to_owned);
        if status::holds(current, &wanted) {
            self.memory.lock().expect("memory lock").written = vec![wanted];
            return Ok(stable);
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), self.namespace(), &rollout_resource());
        let params = patch_params();
        let mut version = rollout["metadata"]["resourceVersion"].clone();
        // What the commands are told apart by, kept on the Rollout before the write that
        // changes it (a pause, a step, an abort): the status before and the one being written,
        // both Flotilla's to a restarted controller whether or not the write lands.
        if commands::remembered(current) != commands::remembered(&wanted) {
            let patch = json!({"metadata": {"annotations": {
                commands::LAST_STATUS_ANNOTATION: commands::remembering(current, &wanted),
            }}});
            let patched = api
                .patch(&self.rollout, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| self.fail("patch", "rollouts.argoproj.io", e))?;
            version = json!(patched.metadata.resource_version);
            self.rollout_written(patched);
        }
        // Only if nothing changed since the read (an operator's patch made meanwhile is read
        // and heard at the next poll, never overwritten).
        let patch = json!({"metadata": {"resourceVersion": version}, "status": wanted});
        match api
            .patch_status(&self.rollout, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                self.rollout_written(written);
                let phases: BTreeMap<String, String> = runs
                    .iter()
                    .filter_map(|(key, name)| {
                        let run = desired.runs.iter().find(|r| r.key == *key)?;
                        let phase = serde_json::to_value(run.run.phase).ok()?;
                        Some((name.clone(), phase.as_str()?.to_owned()))
                    })
                    .collect();
                let notices = events::of_status(rollout, current, &wanted, hashes, &phases);
                self.memory.lock().expect("memory lock").written = vec![wanted];
                self.post_events(client, rollout, &notices).await;
                Ok(stable)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(cluster = %self.cluster, "the Rollout changed since it was read; its status is written at the next poll");
                Ok(None)
            }
            Err(error) => {
                // The write may have landed: both the status before and the one sent are
                // Flotilla's until the next read tells.
                self.memory.lock().expect("memory lock").written = vec![current.clone(), wanted];
                Err(self.fail("patch", "rollouts.argoproj.io/status", error))
            }
        }
    }
}

/// Patches (merge) under Flotilla's field manager.
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// Creates under Flotilla's field manager.
fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    }
}

/// A ReplicaSet's counts, from its status.
fn counts_of(rs: &ReplicaSet) -> ReplicaCounts {
    let status = rs.status.as_ref();
    ReplicaCounts {
        replicas: status.map_or(0, |s| s.replicas),
        ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        available: status.and_then(|s| s.available_replicas).unwrap_or(0),
    }
}

/// The replicas a ReplicaSet is asked for (`spec.replicas`, 1 when unset as the API server
/// defaults it): what Flotilla decided, however many Pods the ReplicaSet controller made yet.
fn requested_of(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// The hash the canary's traffic goes to (its Service, its DestinationRule subset): the
/// canary revision's once its ReplicaSet exists (Argo waits for it), the serving one's before
/// that and on abort.
fn canary_hash(
    desired: &ClusterDesired,
    hashes: &BTreeMap<RevisionNumber, String>,
    existing: &BTreeMap<String, ReplicaSet>,
    serving: &str,
) -> String {
    desired
        .canary()
        .and_then(|r| hashes.get(&r))
        .filter(|h| existing.contains_key(*h) && !desired.progress.abort)
        .cloned()
        .unwrap_or_else(|| serving.to_owned())
}
/// The image of a ReplicaSet's first container.
fn first_image(rs: &ReplicaSet) -> Option<String> {
    rs.spec
        .as_ref()?
        .template
        .as_ref()?
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

impl ClusterBackend for KubeBackend {
    fn capabilities(&self) -> Capabilities {
        KubeBackend::capabilities()
    }

    fn ensure<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.converge(desired))
    }

    fn observe<'a>(
        &'a self,
        desired: &'a ClusterDesired,
    ) -> BoxFuture<'a, Result<ClusterObserved, BackendError>> {
        Box::pin(self.read(desired))
    }

    fn commands(&self) -> BoxFuture<'_, Result<Vec<ClusterCommand>, BackendError>> {
        let taken = std::mem::take(&mut self.memory.lock().expect("memory lock").commands);
        Box::pin(async move { Ok(taken) })
    }

    fn measure_builtin<'a>(&'a self, _request: &'a MeasureRequest) -> BoxFuture<'a, Outcome> {
        Box::pin(async {
            Outcome::Error(
                "the builtin provider reads a Flotilla agent's traffic statistics; a Kubernetes cluster has none (use a prometheus or web metric)".to_owned(),
            )
        })
    }

    fn service_proxy(&self) -> Option<&dyn flotilla_core::analysis::ServiceProxy> {
        self.via_apiserver
            .then_some(self as &dyn flotilla_core::analysis::ServiceProxy)
    }

    fn measure_job<'a>(&'a self, request: &'a MeasureRequest) -> Option<BoxFuture<'a, Outcome>> {
        let job = request.provider.job.as_ref()?;
        Some(Box::pin(async move { self.run_job(request, job).await }))
    }

    fn notify<'a>(&'a self, notice: &'a ClusterNotice) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let read = match self.client().await {
                Ok(client) => self.read_rollout(&client).await.map(|r| (client, r)),
                Err(e) => Err(e),
            };
            match read {
                Ok((client, Some(rollout))) => {
                    self.post_events(&client, &rollout, std::slice::from_ref(notice))
                        .await
                }
                Ok((_, None)) => {}
                Err(error) => {
                    tracing::debug!(cluster = %self.cluster, %error, reason = %notice.reason, "cannot read the Rollout to post an Event on it")
                }
            }
        })
    }
}
