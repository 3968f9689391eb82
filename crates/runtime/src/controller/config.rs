//! The daemon's own configuration file (`flotilla serve --config FILE`): only what is the
//! daemon's — where it listens, where it keeps its state, where its manifests are, how often it
//! ticks, and where notifications go. Cluster endpoints live in the Fleet, nowhere else.
//!
//! ```yaml
//! listen: "127.0.0.1:7070"     # the API (loopback by default)
//! store: state.redb            # relative paths are relative to this file
//! tokenFile: token             # default: <store>.token, created 0600 at first start
//! agentTokenFile: agents.token # the token sent to every agent's control API (its tokenFile)
//! agentTokenFiles: {prod-us-east: us-east.token}   # per-cluster overrides
//! manifests: manifests/        # a directory or file of Fleet, FleetRollout, Rollout, templates
//! # … or the desired state from Git (exactly one of manifests and git):
//! # git: {url: "git://127.0.0.1/fleet.git", branch: main, path: fleets/payments, interval: 30s}
//! # … or from a hub cluster's API server (custom resources and spoke Secrets, watched):
//! # hub: {namespace: flotilla, spokeNamespace: argocd}   # a Pod's in-cluster configuration,
//! #   or kubeconfig/context; serviceAccountDir where the Pod's token and CA are mounted;
//! #   state: hub keeps the controller's state there too (default: in `store`)
//! tick: 1s                     # how often the engines run (default 1s)
//! notifications:
//!   - {name: ops, url: "http://127.0.0.1:9000/hook", format: slack}
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use flotilla_core::manifest::located::{ConfigError, parse_located};
use flotilla_core::spec::common::{is_dns_label, parse_duration};
use serde::{Deserialize, Serialize};

/// The daemon's configuration, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonConfig {
    /// Where the API listens (default `127.0.0.1:7070`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The store file.
    pub store: PathBuf,
    /// The bearer token file (default: the store's path with `.token` appended).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The file holding the bearer token the daemon sends to every agent's control API (the
    /// agents' `control.tokenFile`); without it, the agents refuse the daemon's changes.
    #[serde(default)]
    pub agent_token_file: Option<PathBuf>,
    /// Per-cluster token files, overriding `agentTokenFile` for those clusters.
    #[serde(default)]
    pub agent_token_files: BTreeMap<String, PathBuf>,
    /// The manifests: a directory or a file (or `git`).
    #[serde(default)]
    pub manifests: Option<PathBuf>,
    /// The desired state from a Git repository (or `manifests`).
    #[serde(default)]
    pub git: Option<GitConfig>,
    /// The desired state and the spokes from a hub cluster's API server (or `manifests`, `git`).
    #[serde(default)]
    pub hub: Option<HubSourceConfig>,
    /// How often the engines run (default `1s`).
    #[serde(default)]
    pub tick: Option<String>,
    /// Webhook sinks.
    #[serde(default)]
    pub notifications: Vec<Sink>,
    /// Reads (fleet views, history, events, metrics) need the bearer token too (default: reads
    /// are open, which is only allowed on a loopback `listen`).
    #[serde(default)]
    pub reads_need_token: bool,
    /// Explicitly allow open reads on a `listen` address beyond loopback (anyone who reaches the
    /// port sees the fleets, their history and their clusters' endpoints).
    #[serde(default)]
    pub public_reads: bool,
    /// How many audit entries the store keeps, the oldest dropped first (0: every one). A state
    /// in the hub keeps its own, fewer (`hub_store::AUDIT_KEPT` per fleet).
    #[serde(default = "default_audit_kept")]
    pub audit_kept: u64,
    /// Where `valueFrom.secretKeyRef {name, key}` template arguments are read: the file
    /// `<dir>/<name>/<key>`, after the environment variable `FLOTILLA_SECRET_<NAME>_<KEY>`.
    #[serde(default)]
    pub secrets_dir: Option<PathBuf>,
    /// The web dashboard, served on the API's listener.
    #[serde(default)]
    pub dashboard: DashboardConfig,
}

/// The web dashboard's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DashboardConfig {
    /// Whether `serve` serves it (default: yes).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The path it lives under (default `/dashboard`), e.g. the prefix an SSO proxy forwards;
    /// everything the page loads or calls is under it.
    #[serde(default = "default_base_path")]
    pub base_path: String,
}

impl Default for DashboardConfig {
    fn default() -> DashboardConfig {
        DashboardConfig {
            enabled: true,
            base_path: default_base_path(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_base_path() -> String {
    "/dashboard".into()
}

/// A Git repository as the desired state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitConfig {
    /// A local path, `file://` or `git://` URL.
    pub url: String,
    /// The branch (default `main`).
    #[serde(default = "default_branch")]
    pub branch: String,
    /// The directory of the manifests in the repository (default: the whole repository).
    #[serde(default)]
    pub path: String,
    /// How often to poll (default `30s`; `flotilla sync` polls at once).
    #[serde(default)]
    pub interval: Option<String>,
    /// Push durable rollbacks to a branch for review instead of the watched branch.
    #[serde(default)]
    pub propose_only: bool,
    /// The identity of the controller's commits.
    #[serde(default)]
    pub identity: Option<IdentityConfig>,
    /// Correct drift (a cluster running a version Git does not say, outside a rollout and not
    /// Held) by re-asserting the cluster's desired state; default: report it only.
    #[serde(default)]
    pub correct_drift: bool,
}

/// A hub cluster as the desired state: Fleets, FleetRollouts, Rollouts and AnalysisTemplates as
/// custom resources in `namespace`, ClusterAnalysisTemplates, and the spoke Secrets in
/// `spokeNamespace`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HubSourceConfig {
    /// A kubeconfig file (default: the in-cluster configuration of the Pod).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Where the Pod's ServiceAccount token and CA are mounted, for the in-cluster
    /// configuration (default `/var/run/secrets/kubernetes.io/serviceaccount`).
    #[serde(default)]
    pub service_account_dir: Option<PathBuf>,
    /// The kubeconfig's context (default: its current one).
    #[serde(default)]
    pub context: Option<String>,
    /// The exec credential plugins a spoke Secret may run (Argo CD's `execProviderConfig`, a
    /// kubeconfig Secret's `exec`), by command exactly as the Secrets name them (default none:
    /// whoever may write a spoke Secret must not choose what the controller runs).
    #[serde(default)]
    pub exec_allowlist: Vec<String>,
    /// The API server hosts an Argo CD Secret's `awsAuthConfig` may send its EKS token to:
    /// `.suffix` for the hosts under it, or a host exactly (default EKS's endpoints,
    /// `.eks.amazonaws.com` and `.eks.amazonaws.com.cn`; a list replaces them). The token
    /// carries the controller's AWS identity: whoever may write a spoke Secret must not choose
    /// where it goes.
    #[serde(default)]
    pub eks_servers: Option<Vec<String>>,
    /// The namespace of the desired state (default `flotilla`).
    #[serde(default = "default_hub_namespace")]
    pub namespace: String,
    /// The namespace of the spoke Secrets (default `argocd`, Argo CD's).
    #[serde(default = "default_spoke_namespace")]
    pub spoke_namespace: String,
    /// Where the controller keeps its state: `store` (the redb file `store`; the default, as
    /// before this setting) or `hub` (`FleetRolloutRecord` and `FleetCommand` objects in
    /// `namespace`: a restart needs no local state).
    #[serde(default)]
    pub state: StateIn,
}

/// Where a hub's controller keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateIn {
    /// The redb file `store`.
    #[default]
    Store,
    /// Objects in the hub's API server.
    Hub,
}

fn default_hub_namespace() -> String {
    "flotilla".into()
}

fn default_spoke_namespace() -> String {
    "argocd".into()
}

/// Who the controller's commits are from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityConfig {
    /// The name.
    pub name: String,
    /// The email.
    pub email: String,
}

fn default_branch() -> String {
    "main".into()
}

/// Where the desired state comes from, resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceConfig {
    /// Files on disk.
    Files(PathBuf),
    /// A Git repository.
    Git {
        /// The settings.
        git: GitConfig,
        /// The poll interval, ms.
        interval_ms: u64,
        /// Where the clone is kept.
        cache: PathBuf,
    },
    /// A hub cluster.
    Hub(flotilla_kube::hub::HubConfig),
}

/// A webhook sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sink {
    /// A name for logs and metrics.
    pub name: String,
    /// The URL (http or https).
    pub url: String,
    /// The body: `slack` (`{"text": …}`) or `generic` (the notification as JSON; default).
    #[serde(default)]
    pub format: SinkFormat,
    /// Only these events (default: all).
    #[serde(default)]
    pub events: Vec<String>,
}

/// A webhook body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SinkFormat {
    /// The notification as JSON.
    #[default]
    Generic,
    /// Slack's incoming-webhook body.
    Slack,
}

/// The events a sink can subscribe to.
pub const EVENTS: &[&str] = &[
    "rollout-aborted",
    "analysis-failed",
    "wave-completed",
    "barrier-passed",
    "fleet-completed",
    "fleet-halted",
    "fleet-aborted",
    "desired-state-invalid",
    "cluster-paused",
];

/// The audit entries a store keeps by default: months of a busy fleet's decisions, a bounded
/// file and bounded reads of the history.
pub const DEFAULT_AUDIT_KEPT: u64 = 100_000;

fn default_audit_kept() -> u64 {
    DEFAULT_AUDIT_KEPT
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7070))
}

/// The bearer tokens the daemon sends to the agents' control APIs: one for every agent, and
/// overrides by cluster. Its `Debug` names the clusters with their own, never a token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AgentTokens {
    /// The token of every agent without its own (`agentTokenFile`).
    pub default: Option<String>,
    /// Tokens by cluster (`agentTokenFiles`).
    pub clusters: BTreeMap<String, String>,
}

impl AgentTokens {
    /// The token to send to `cluster`'s agent, if any.
    pub fn for_cluster(&self, cluster: &str) -> Option<&str> {
        self.clusters
            .get(cluster)
            .or(self.default.as_ref())
            .map(String::as_str)
    }
}

impl std::fmt::Debug for AgentTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTokens")
            .field("default", &self.default.as_ref().map(|_| "<redacted>"))
            .field("clusters", &self.clusters.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The configuration with paths resolved and durations parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Where the API listens.
    pub listen: SocketAddr,
    /// The store file.
    pub store: PathBuf,
    /// The token file.
    pub token_file: PathBuf,
    /// The tokens sent to the agents (read from `agentTokenFile` and `agentTokenFiles`).
    pub agent_tokens: AgentTokens,
    /// The desired state's source.
    pub source: SourceConfig,
    /// The tick, in milliseconds.
    pub tick_ms: u64,
    /// Webhook sinks.
    pub notifications: Vec<Sink>,
    /// Reads need the bearer token too.
    pub reads_need_token: bool,
    /// How many audit entries the store keeps (0: every one).
    pub audit_kept: u64,
    /// `--init-store`: create the store over an empty file (set by the command line).
    pub init_store: bool,
    /// The state is kept in the hub (`hub.state: hub`), not in `store`.
    pub state_in_hub: bool,
    /// The secrets directory, if any.
    pub secrets_dir: Option<PathBuf>,
    /// Where the dashboard is served (None: not served): a path starting with `/`, no
    /// trailing `/`.
    pub dashboard: Option<String>,
}

impl DaemonConfig {
    /// Reads, validates and resolves a configuration file.
    pub fn load(path: &Path) -> Result<Resolved, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read the daemon configuration: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        DaemonConfig::parse(&text, &file, base)
    }

    /// Parses and validates configuration text; relative paths are resolved against `base`.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Resolved, ConfigError> {
        let (config, locations): (DaemonConfig, _) =
            parse_located(text, file, "the daemon configuration")?;
        let fail = |field: &str, message: String| ConfigError::at(file, &locations, field, message);
        let tick_ms = match &config.tick {
            None => 1000,
            Some(text) => {
                let ms = parse_duration(text).map_err(|e| fail("tick", e.to_string()))?;
                if !(100..=60_000).contains(&ms) {
                    return Err(fail("tick", format!("{text} is outside 100ms..60s")));
                }
                ms
            }
        };
        for (i, sink) in config.notifications.iter().enumerate() {
            let url = url_ok(&sink.url);
            if let Err(message) = url {
                return Err(fail(&format!("notifications[{i}].url"), message));
            }
            for (j, event) in sink.events.iter().enumerate() {
                if !EVENTS.contains(&event.as_str()) {
                    return Err(fail(
                        &format!("notifications[{i}].events[{j}]"),
                        format!(
                            "unknown event {event:?}; the events are {}",
                            EVENTS.join(", ")
                        ),
                    ));
                }
            }
        }
        if !config.listen.ip().is_loopback() && !config.reads_need_token && !config.public_reads {
            return Err(fail(
                "listen",
                format!(
                    "{} is not a loopback address, and reads are open (fleet views, history, \
                     events): set readsNeedToken: true to require the bearer token for every call, \
                     or publicReads: true to serve reads to anyone who reaches the port",
                    config.listen
                ),
            ));
        }
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let store = resolve(&config.store);
        let token_file = config
            .token_file
            .as_deref()
            .map(resolve)
            .unwrap_or_else(|| {
                let mut name = store.clone().into_os_string();
                name.push(".token");
                PathBuf::from(name)
            });
        // The agents' tokens: a configured file that is missing, empty or open to every user is
        // an error naming the file and the field.
        let read_token = |field: &str, path: &Path| {
            flotilla_agent_backend::token::read_token_file(&resolve(path), field)
                .map_err(|e| fail(field, e.to_string()))
        };
        let mut agent_tokens = AgentTokens::default();
        if let Some(path) = &config.agent_token_file {
            agent_tokens.default = Some(read_token("agentTokenFile", path)?);
        }
        for (cluster, path) in &config.agent_token_files {
            let token = read_token(&format!("agentTokenFiles.{cluster}"), path)?;
            agent_tokens.clusters.insert(cluster.clone(), token);
        }
        let source = match (&config.manifests, &config.git, &config.hub) {
            (Some(path), None, None) => SourceConfig::Files(resolve(path)),
            (None, None, Some(hub)) => {
                for (field, value) in [
                    ("hub.namespace", &hub.namespace),
                    ("hub.spokeNamespace", &hub.spoke_namespace),
                ] {
                    if !is_dns_label(value) {
                        return Err(fail(
                            field,
                            format!(
                                "{value:?} is not a namespace name (a DNS label: lower-case letters, digits and `-`, at most 63)"
                            ),
                        ));
                    }
                }
                for (i, command) in hub.exec_allowlist.iter().enumerate() {
                    if !Path::new(command).is_absolute() {
                        return Err(fail(
                            &format!("hub.execAllowlist[{i}]"),
                            format!(
                                "{command:?} is not an absolute path: a plugin is allowed by where it is, never looked up in PATH"
                            ),
                        ));
                    }
                }
                let eks_servers = match &hub.eks_servers {
                    None => flotilla_kube::spokes::EKS_SERVERS
                        .iter()
                        .map(|s| (*s).to_owned())
                        .collect(),
                    Some(list) => list.clone(),
                };
                for (i, host) in eks_servers.iter().enumerate() {
                    let bare = host.strip_prefix('.').unwrap_or(host);
                    if bare.is_empty()
                        || !bare
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                    {
                        return Err(fail(
                            &format!("hub.eksServers[{i}]"),
                            format!(
                                "{host:?} is not a host (`api.example.com`) nor a suffix of hosts (`.eks.amazonaws.com`)"
                            ),
                        ));
                    }
                }
                SourceConfig::Hub(flotilla_kube::hub::HubConfig {
                    kubeconfig: hub
                        .kubeconfig
                        .as_deref()
                        .map(|p| resolve(p).display().to_string()),
                    service_account_dir: hub.service_account_dir.as_deref().map_or_else(
                        || flotilla_kube::hub::SERVICE_ACCOUNT_DIR.to_owned(),
                        |p| resolve(p).display().to_string(),
                    ),
                    context: hub.context.clone(),
                    exec_allowlist: hub.exec_allowlist.clone(),
                    eks_servers,
                    namespace: hub.namespace.clone(),
                    spoke_namespace: hub.spoke_namespace.clone(),
                })
            }
            (None, Some(git), None) => {
                let interval_ms = match &git.interval {
                    None => 30_000,
                    Some(text) => {
                        let ms = parse_duration(text)
                            .map_err(|e| fail("git.interval", e.to_string()))?;
                        if ms < 500 {
                            return Err(fail("git.interval", format!("{text} is below 500ms")));
                        }
                        ms
                    }
                };
                if git.url.trim().is_empty() {
                    return Err(fail("git.url", "the URL is empty".into()));
                }
                let mut cache = store.clone().into_os_string();
                cache.push(".git-cache");
                // A local path is relative to this file, like the other paths.
                let mut git = git.clone();
                if !git.url.contains("://") {
                    git.url = resolve(Path::new(&git.url)).display().to_string();
                }
                SourceConfig::Git {
                    git,
                    interval_ms,
                    cache: PathBuf::from(cache),
                }
            }
            _ => {
                return Err(fail(
                    "",
                    "set exactly one of `manifests` (files), `git` (a repository) and `hub` (a hub cluster's API server)".into(),
                ));
            }
        };
        let dashboard = config.dashboard.base_path.trim_end_matches('/').to_owned();
        let reserved = ["/v1", "/healthz", "/metrics"];
        if config.dashboard.enabled
            && (!config.dashboard.base_path.starts_with('/')
                || dashboard.is_empty()
                || dashboard.contains(['?', '#', ' ', '{', '}', '*'])
                || reserved
                    .iter()
                    .any(|r| dashboard == *r || dashboard.starts_with(&format!("{r}/"))))
        {
            return Err(fail(
                "dashboard.basePath",
                format!(
                    "{:?} is not a usable path: it starts with `/`, is not `/` alone, has no `?`, `#`, spaces, braces or `*`, and is not under the API's `/v1`, `/healthz` or `/metrics`",
                    config.dashboard.base_path
                ),
            ));
        }
        Ok(Resolved {
            listen: config.listen,
            store,
            token_file,
            agent_tokens,
            source,
            tick_ms,
            notifications: config.notifications,
            reads_need_token: config.reads_need_token,
            audit_kept: config.audit_kept,
            init_store: false,
            state_in_hub: config.hub.as_ref().is_some_and(|h| h.state == StateIn::Hub),
            secrets_dir: config.secrets_dir.as_deref().map(resolve),
            dashboard: config.dashboard.enabled.then_some(dashboard),
        })
    }
}

fn url_ok(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?} is not an http or https URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_line_and_field() {
        let text = "store: s.redb\nmanifests: m\nnotifications:\n  - name: ops\n    url: ftp://x\n";
        let error = DaemonConfig::parse(text, "serve.yaml", Path::new("/etc")).unwrap_err();
        assert_eq!(error.field, "notifications[0].url");
        assert_eq!(error.line, 5);
        assert!(error.to_string().starts_with("serve.yaml:5:"), "{error}");
        let error = DaemonConfig::parse("store: s\nmanifests: m\ntick: 5ms\n", "f", Path::new("/"))
            .unwrap_err();
        assert_eq!(error.field, "tick");
        let error =
            DaemonConfig::parse("store: s\nmanifest: m\n", "f", Path::new("/")).unwrap_err();
        assert!(error.message.contains("unknown field"), "{error}");
    }

    #[test]
    fn agent_tokens_are_read_from_their_files_by_cluster() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("agents.token", "all-agents\n", 0o600);
        write("east.token", "east-only", 0o600);
        let text = "store: s\nmanifests: m\nagentTokenFile: agents.token\n\
                    agentTokenFiles: {prod-us-east: east.token}\n";
        let resolved = DaemonConfig::parse(text, "serve.yaml", dir.path()).unwrap();
        let tokens = &resolved.agent_tokens;
        assert_eq!(tokens.for_cluster("prod-eu-west"), Some("all-agents"));
        assert_eq!(tokens.for_cluster("prod-us-east"), Some("east-only"));
        assert!(!format!("{resolved:?}").contains("all-agents"));
        let none = DaemonConfig::parse("store: s\nmanifests: m\n", "f", dir.path()).unwrap();
        assert_eq!(none.agent_tokens.for_cluster("x"), None);
        // Missing, empty, open to every user: the file and the field, exit 2 from serve.
        write("empty.token", "", 0o600);
        write("open.token", "t", 0o644);
        for (line, field, needle) in [
            (
                "agentTokenFile: missing.token",
                "agentTokenFile",
                "cannot be read",
            ),
            ("agentTokenFile: empty.token", "agentTokenFile", "is empty"),
            (
                "agentTokenFiles: {a: open.token}",
                "agentTokenFiles.a",
                "open to every user",
            ),
        ] {
            let text = format!("store: s\nmanifests: m\n{line}\n");
            let error = DaemonConfig::parse(&text, "serve.yaml", dir.path()).unwrap_err();
            assert_eq!(error.field, field, "{error}");
            assert_eq!(error.line, 3, "{error}");
            assert!(
                error.message.contains(needle) && error.message.contains(".token"),
                "{error}"
            );
        }
    }

    #[test]
    fn paths_resolve_against_the_file() {
        let resolved =
            DaemonConfig::parse("store: s.redb\nmanifests: m\n", "f", Path::new("/etc/fl"))
                .unwrap();
        assert_eq!(resolved.store, Path::new("/etc/fl/s.redb"));
        assert_eq!(resolved.token_file, Path::new("/etc/fl/s.redb.token"));
        assert_eq!(resolved.source, SourceConfig::Files("/etc/fl/m".into()));
        let error = DaemonConfig::parse("store: s\n", "f", Path::new("/")).unwrap_err();
        assert!(error.message.contains("exactly one"), "{error}");
        let git = DaemonConfig::parse(
            "store: s\ngit: {url: \"git://127.0.0.1/f.git\", path: fleets/a, interval: 2s}\n",
            "f",
            Path::new("/x"),
        )
        .unwrap();
        let SourceConfig::Git {
            git,
            interval_ms,
            cache,
        } = git.source
        else {
            panic!("a git source")
        };
        assert_eq!((git.branch.as_str(), interval_ms), ("main", 2000));
        assert_eq!(cache, Path::new("/x/s.git-cache"));
        assert_eq!(resolved.tick_ms, 1000);
        assert_eq!(resolved.audit_kept, super::DEFAULT_AUDIT_KEPT);
        assert_eq!(resolved.listen, default_listen());
    }

    #[test]
    fn a_hub_source_resolves_its_kubeconfig_and_checks_its_namespaces() {
        let hub = DaemonConfig::parse(
            "store: s\nhub: {kubeconfig: hub.yaml, context: mgmt}\n",
            "f",
            Path::new("/x"),
        )
        .unwrap();
        assert_eq!(
            hub.source,
            SourceConfig::Hub(flotilla_kube::hub::HubConfig {
                kubeconfig: Some("/x/hub.yaml".into()),
                service_account_dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
                context: Some("mgmt".into()),
                exec_allowlist: Vec::new(),
                eks_servers: vec![".eks.amazonaws.com".into(), ".eks.amazonaws.com.cn".into()],
                namespace: "flotilla".into(),
                spoke_namespace: "argocd".into(),
            })
        );
        let error = DaemonConfig::parse(
            "store: s\nhub:\n  spokeNamespace: Argo_CD\n",
            "f",
            Path::new("/x"),
        )
        .unwrap_err();
        assert_eq!(
            (error.field.as_str(), error.line),
            ("hub.spokeNamespace", 3),
            "{error}"
        );
        let error = DaemonConfig::parse(
            "store: s\nhub:\n  execAllowlist: [/bin/auth, argocd-k8s-auth]\n",
            "f",
            Path::new("/x"),
        )
        .unwrap_err();
        assert_eq!(error.field, "hub.execAllowlist[1]", "{error}");
        let error = DaemonConfig::parse(
            "store: s\nhub:\n  eksServers: [127.0.0.1, \"https://x\"]\n",
            "f",
            Path::new("/x"),
        )
        .unwrap_err();
        assert_eq!(error.field, "hub.eksServers[1]", "{error}");
        let error = DaemonConfig::parse("store: s\nmanifests: m\nhub: {}\n", "f", Path::new("/x"))
            .unwrap_err();
        assert!(error.message.contains("exactly one"), "{error}");
    }

    /// What `flotilla install` puts in the hub's ConfigMap is a configuration this daemon
    /// accepts: the in-cluster hub source keeping the state there, the API beyond loopback.
    #[test]
    fn the_installed_configuration_is_accepted() {
        let options = flotilla_kube::install::HubInstall {
            namespace: "delivery".into(),
            spoke_namespace: "spokes".into(),
            image: "flotilla:1".into(),
            exec_allowlist: vec!["/usr/local/bin/argocd-k8s-auth".into()],
        };
        let text = flotilla_kube::install::serve_config(&options);
        let resolved = DaemonConfig::parse(&text, "serve.yaml", Path::new("/etc/flotilla"))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(resolved.listen.port(), flotilla_kube::install::PORT);
        assert!(resolved.reads_need_token);
        assert_eq!(resolved.store, Path::new("/var/lib/flotilla/state.redb"));
        assert!(resolved.state_in_hub);
        assert_eq!(
            resolved.source,
            SourceConfig::Hub(flotilla_kube::hub::HubConfig {
                kubeconfig: None,
                service_account_dir: flotilla_kube::hub::SERVICE_ACCOUNT_DIR.into(),
                context: None,
                exec_allowlist: vec!["/usr/local/bin/argocd-k8s-auth".into()],
                eks_servers: vec![".eks.amazonaws.com".into(), ".eks.amazonaws.com.cn".into()],
                namespace: "delivery".into(),
                spoke_namespace: "spokes".into(),
            })
        );
    }

    #[test]
    fn a_listen_address_beyond_loopback_needs_an_explicit_read_policy() {
        let base = "store: s\nmanifests: m\nlisten: \"0.0.0.0:7070\"\n";
        let error = DaemonConfig::parse(base, "serve.yaml", Path::new("/")).unwrap_err();
        assert_eq!(error.field, "listen");
        assert_eq!(error.line, 3);
        assert!(error.message.contains("readsNeedToken"), "{error}");
        let r = DaemonConfig::parse(
            &format!("{base}readsNeedToken: true\n"),
            "f",
            Path::new("/"),
        )
        .unwrap();
        assert!(r.reads_need_token);
        let r = DaemonConfig::parse(&format!("{base}publicReads: true\n"), "f", Path::new("/"))
            .unwrap();
        assert!(!r.reads_need_token);
        let r = DaemonConfig::parse(
            "store: s\nmanifests: m\nlisten: \"[::1]:7070\"\n",
            "f",
            Path::new("/"),
        )
        .unwrap();
        assert!(!r.reads_need_token, "loopback reads stay open");
    }

    #[test]
    fn the_dashboard_is_served_under_a_usable_base_path_or_not_at_all() {
        let parse = |extra: &str| {
            DaemonConfig::parse(
                &format!("store: s\nmanifests: m\n{extra}"),
                "serve.yaml",
                Path::new("/"),
            )
        };
        assert_eq!(parse("").unwrap().dashboard.as_deref(), Some("/dashboard"));
        assert_eq!(
            parse("dashboard: {basePath: /ops/flotilla/}\n")
                .unwrap()
                .dashboard
                .as_deref(),
            Some("/ops/flotilla")
        );
        assert_eq!(
            parse("dashboard: {enabled: false}\n").unwrap().dashboard,
            None
        );
        for bad in ["/", "ui", "/v1/ui", "/metrics", "/a b"] {
            let error = parse(&format!("dashboard: {{basePath: \"{bad}\"}}\n")).unwrap_err();
            assert_eq!(error.field, "dashboard.basePath", "{bad}: {error}");
            assert_eq!(error.line, 3, "{bad}: {error}");
        }
        let error = parse("dashboard: {base: /x}\n").unwrap_err();
        assert!(error.to_string().contains("base"), "{error}");
    }
}
