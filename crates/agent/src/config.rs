//! The agent's configuration file: YAML (or JSON) read with the core's loader, so that every
//! error names the file, line, column and field path.
//!
//! ```yaml
//! cluster: eu-west
//! router: {listen: "127.0.0.1:8080", threads: 2}
//! control: {listen: "127.0.0.1:9090", tokenFile: agent.token}  # default: <this file>.token
//! seed: 42
//! maxReplicas: 32
//! weights: {canary: 0}
//! workload:
//!   command: [flotilla, demo-app, --version, "{{version}}", --port, "{{port}}"]
//!   readiness: {path: /healthz}
//! subsets:
//!   stable: {version: "1.8.3", replicas: 2}
//!   canary: {version: "1.9.0", replicas: 0}
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use flotilla_core::manifest::yaml::{Budget, Locations, parse_documents};
use serde::{Deserialize, Serialize};

use crate::router::{MirrorSpec, RouteSpec};

/// The largest configuration file the agent reads.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The subset that receives `maxWeight - canary` of the weighted traffic.
pub const STABLE: &str = "stable";
/// The subset that receives `canary` of the weighted traffic.
pub const CANARY: &str = "canary";

/// One agent's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    /// The cluster this agent is (the `cluster` label of its metrics).
    pub cluster: String,
    /// Where the router listens, and on how many threads it serves.
    pub router: RouterListener,
    /// Where the control API listens, and where its bearer token is.
    pub control: ControlListener,
    /// Seed of the router's random choices (weighted split, mirroring); random when absent.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The total weight: the canary's weight is out of this (Argo's `maxTrafficWeight`).
    #[serde(default = "default_max_weight")]
    pub max_weight: u32,
    /// The most replicas one subset may run (default 32, at most 1000): the control API refuses
    /// to scale above it.
    #[serde(default = "default_max_replicas")]
    pub max_replicas: u32,
    /// The weights in effect when the agent starts.
    #[serde(default)]
    pub weights: InitialWeights,
    /// Routes in effect when the agent starts, tried in order before the weights.
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    /// Mirror routes in effect when the agent starts.
    #[serde(default)]
    pub mirrors: Vec<MirrorSpec>,
    /// The workload template of every subset that does not have its own.
    #[serde(default)]
    pub workload: Option<WorkloadTemplate>,
    /// The subsets (revisions) the router sends traffic to; `stable` and `canary` are required.
    pub subsets: BTreeMap<String, SubsetConfig>,
}

fn default_max_weight() -> u32 {
    100
}

/// The replicas a subset may run when the configuration does not say.
pub const DEFAULT_MAX_REPLICAS: u32 = 32;
/// The most a configuration's `maxReplicas` may be.
pub const MAX_REPLICAS_LIMIT: u32 = 1000;

fn default_max_replicas() -> u32 {
    DEFAULT_MAX_REPLICAS
}

/// The longest version.
pub const MAX_VERSION_LEN: usize = 128;

/// Checks a version (what `{{version}}` becomes on a replica's command line): 1 to 128 of
/// `A-Z a-z 0-9 . _ : @ + / -`. The message quotes (at most 40 characters of) the version.
pub fn check_version(version: &str) -> Result<(), String> {
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '@' | '+' | '/' | '-');
    if !version.is_empty() && version.len() <= MAX_VERSION_LEN && version.chars().all(allowed) {
        return Ok(());
    }
    let shown: String = version.chars().take(40).collect();
    let more = if version.chars().count() > 40 {
        "…"
    } else {
        ""
    };
    Err(format!(
        "version {shown:?}{more} must be 1 to {MAX_VERSION_LEN} characters of A-Z a-z 0-9 . _ : @ + / -"
    ))
}

/// The router's listen address and threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterListener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Threads serving the router's connections, each with a single-threaded runtime of its
    /// own (like nginx's `worker_processes`); 1 to [`MAX_ROUTER_THREADS`].
    #[serde(default = "default_router_threads")]
    pub threads: usize,
}

/// The router's threads when the configuration does not say.
pub const DEFAULT_ROUTER_THREADS: usize = 2;
/// The most router threads a configuration may ask for.
pub const MAX_ROUTER_THREADS: usize = 64;

fn default_router_threads() -> usize {
    DEFAULT_ROUTER_THREADS
}

/// A listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
}

/// The control API's listen address and bearer token file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlListener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
    /// The file holding the token mutating calls need (relative to the configuration file);
    /// default `<configuration file>.token`, created with mode 0600 at first start.
    /// `FLOTILLA_AGENT_TOKEN` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
}

/// The weights in effect at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitialWeights {
    /// The canary's weight, 0..=maxWeight.
    #[serde(default)]
    pub canary: u32,
}

/// One subset: a revision run as local processes, or fixed upstream endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubsetConfig {
    /// The version the replicas run (`{{version}}` in the command template).
    #[serde(default)]
    pub version: String,
    /// How many replicas to run.
    #[serde(default)]
    pub replicas: u32,
    /// This subset's own workload template (instead of the top-level one).
    #[serde(default)]
    pub workload: Option<WorkloadTemplate>,
    /// Fixed upstream endpoints instead of processes (loopback addresses).
    #[serde(default)]
    pub endpoints: Vec<SocketAddr>,
}

/// How to run one replica of a revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadTemplate {
    /// The program and its arguments; `{{version}}` and `{{port}}` are substituted.
    pub command: Vec<String>,
    /// Variables added to the inherited environment (values are templates too).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The readiness probe.
    #[serde(default)]
    pub readiness: Readiness,
    /// How long a replica has between SIGTERM and SIGKILL.
    #[serde(default = "default_grace")]
    pub termination_grace_period_seconds: u64,
    /// How long a replica keeps serving after it leaves routing and before it gets SIGTERM.
    #[serde(default = "default_drain")]
    pub drain_delay_ms: u64,
    /// The first delay before restarting a crashed replica; it doubles up to `maxMs`.
    #[serde(default)]
    pub restart_backoff: Backoff,
}

fn default_grace() -> u64 {
    10
}

fn default_drain() -> u64 {
    300
}

/// The HTTP readiness probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Readiness {
    /// The path probed with GET; any 2xx or 3xx is ready.
    #[serde(default = "default_probe_path")]
    pub path: String,
    /// Time between probes.
    #[serde(default = "default_period")]
    pub period_ms: u64,
    /// Time a probe may take.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Consecutive failures that take a ready replica out of routing.
    #[serde(default = "default_failures")]
    pub failure_threshold: u32,
}

fn default_probe_path() -> String {
    "/healthz".into()
}
fn default_period() -> u64 {
    250
}
fn default_timeout() -> u64 {
    1000
}
fn default_failures() -> u32 {
    2
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            path: default_probe_path(),
            period_ms: default_period(),
            timeout_ms: default_timeout(),
            failure_threshold: default_failures(),
        }
    }
}

/// Restart backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backoff {
    /// The first delay.
    #[serde(default = "default_backoff_initial")]
    pub initial_ms: u64,
    /// The largest delay.
    #[serde(default = "default_backoff_max")]
    pub max_ms: u64,
}

fn default_backoff_initial() -> u64 {
    200
}
fn default_backoff_max() -> u64 {
    10_000
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_ms: default_backoff_initial(),
            max_ms: default_backoff_max(),
        }
    }
}

impl WorkloadTemplate {
    /// The grace period between SIGTERM and SIGKILL.
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.termination_grace_period_seconds)
    }

    /// The command line for one replica.
    pub fn argv(&self, version: &str, port: u16) -> Vec<String> {
        self.command
            .iter()
            .map(|a| substitute(a, version, port))
            .collect()
    }

    /// The environment added for one replica.
    pub fn env_for(&self, version: &str, port: u16) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| (k.clone(), substitute(v, version, port)))
            .collect()
    }
}

fn substitute(template: &str, version: &str, port: u16) -> String {
    template
        .replace("{{version}}", version)
        .replace("{{port}}", &port.to_string())
}

/// The placeholders of a template other than `{{version}}` and `{{port}}`.
fn unknown_placeholders(template: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = &after[..end];
                if name != "version" && name != "port" {
                    unknown.push(format!("{{{{{name}}}}}"));
                }
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    unknown
}

/// A configuration that cannot be used, with where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (empty when the text did not come from a file).
    pub file: String,
    /// 1-based line (0 when unknown).
    pub line: u32,
    /// 1-based column (0 when unknown).
    pub column: u32,
    /// The field path, Argo style (`subsets.canary.replicas`); empty for the whole file.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}:", self.file)?;
        }
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if !self.file.is_empty() || self.line > 0 {
            f.write_str(" ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl ConfigError {
    /// An error about `field`, located in the source.
    pub fn at(file: &str, locations: &Locations, field: &str, message: impl Into<String>) -> Self {
        let at = locations.find(field);
        ConfigError {
            file: file.to_owned(),
            line: at.line,
            column: at.column,
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// Parses one YAML (or JSON) document into `T` with the core's loader, keeping where each field
/// is; every error names the file, line, column and field path. `what` names the document in
/// messages ("the agent configuration").
pub fn parse_located<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &str,
    what: &str,
) -> Result<(T, Locations), ConfigError> {
    let error = |line: u32, column: u32, message: String| ConfigError {
        file: file.to_owned(),
        line,
        column,
        field: String::new(),
        message,
    };
    let mut documents = parse_documents(text, Budget::default())
        .map_err(|e| error(e.location.line, e.location.column, e.message.clone()))?;
    if documents.len() != 1 {
        return Err(error(
            0,
            0,
            format!(
                "{what} must be exactly one YAML document, not {}",
                documents.len()
            ),
        ));
    }
    let document = documents.remove(0);
    let value: T = serde_path_to_error::deserialize(document.value.clone()).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        ConfigError::at(
            file,
            &document.locations,
            &field,
            e.into_inner().to_string(),
        )
    })?;
    Ok((value, document.locations))
}

/// A problem found by validation, before locations are attached.
struct Problem {
    field: String,
    message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        field: field.into(),
        message: message.into(),
    }
}

impl AgentConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let file = path.display().to_string();
        let whole = |message: String| ConfigError {
            file: file.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| whole(format!("cannot read the agent configuration: {e}")))?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(whole(format!(
                "the agent configuration is {} bytes; the limit is {MAX_CONFIG_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| whole(format!("cannot read the agent configuration: {e}")))?;
        AgentConfig::parse(&text, &file)
    }

    /// Parses and validates configuration text; `file` only names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<AgentConfig, ConfigError> {
        let (config, locations): (AgentConfig, Locations) =
            parse_located(text, file, "the agent configuration")?;
        if let Err(p) = config.validate() {
            return Err(ConfigError::at(file, &locations, &p.field, p.message));
        }
        Ok(config)
    }

    /// The names of the subsets, for messages.
    pub fn subset_names(&self) -> String {
        self.subsets.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The workload template of a subset (its own or the top-level one).
    pub fn template_of(&self, subset: &str) -> Option<&WorkloadTemplate> {
        self.subsets
            .get(subset)
            .and_then(|s| s.workload.as_ref())
            .or(self.workload.as_ref())
    }

    fn validate(&self) -> Result<(), Problem> {
        if self.cluster.trim().is_empty() {
            return Err(problem("cluster", "the cluster name must not be empty"));
        }
        if !(1..=MAX_ROUTER_THREADS).contains(&self.router.threads) {
            return Err(problem(
                "router.threads",
                format!(
                    "{} router threads: give 1 to {MAX_ROUTER_THREADS} (one per core the router \
                     may use)",
                    self.router.threads
                ),
            ));
        }
        for (field, listen) in [
            ("router.listen", self.router.listen),
            ("control.listen", self.control.listen),
        ] {
            if !listen.ip().is_loopback() {
                return Err(problem(
                    field,
                    format!(
                        "{} is not a loopback address; the agent listens on loopback only \
                         (127.0.0.1 or ::1)",
                        listen
                    ),
                ));
            }
        }
        if self.router.listen == self.control.listen && self.router.listen.port() != 0 {
            return Err(problem(
                "control.listen",
                format!(
                    "the router and the control API cannot both listen on {}",
                    self.router.listen
                ),
            ));
        }
        for required in [STABLE, CANARY] {
            if !self.subsets.contains_key(required) {
                return Err(problem(
                    "subsets",
                    format!(
                        "subset {required:?} is missing; an agent has at least the subsets \
                         \"stable\" and \"canary\""
                    ),
                ));
            }
        }
        if self.max_weight == 0 {
            return Err(problem("maxWeight", "maxWeight must be at least 1"));
        }
        if !(1..=MAX_REPLICAS_LIMIT).contains(&self.max_replicas) {
            return Err(problem(
                "maxReplicas",
                format!(
                    "maxReplicas {} must be 1 to {MAX_REPLICAS_LIMIT}",
                    self.max_replicas
                ),
            ));
        }
        if let Some(file) = &self.control.token_file
            && file.as_os_str().is_empty()
        {
            return Err(problem("control.tokenFile", "the token file path is empty"));
        }
        if self.weights.canary > self.max_weight {
            return Err(problem(
                "weights.canary",
                format!(
                    "the canary weight {} is above maxWeight {}",
                    self.weights.canary, self.max_weight
                ),
            ));
        }
        if let Some(template) = &self.workload {
            validate_template(template, "workload")?;
        }
        for (name, subset) in &self.subsets {
            let at = format!("subsets.{name}");
            if !valid_name(name) {
                return Err(problem(
                    at,
                    format!(
                        "subset name {name:?} must be lowercase letters, digits and '-' \
                         (at most 63)"
                    ),
                ));
            }
            if let Some(template) = &subset.workload {
                validate_template(template, &format!("{at}.workload"))?;
            }
            for (i, endpoint) in subset.endpoints.iter().enumerate() {
                if !endpoint.ip().is_loopback() || endpoint.port() == 0 {
                    return Err(problem(
                        format!("{at}.endpoints[{i}]"),
                        format!("endpoint {endpoint} must be a loopback address with a port"),
                    ));
                }
            }
            if !subset.endpoints.is_empty() && (subset.replicas > 0 || subset.workload.is_some()) {
                return Err(problem(
                    at,
                    "a subset has either fixed endpoints or a workload, not both",
                ));
            }
            if !subset.version.is_empty()
                && let Err(message) = check_version(&subset.version)
            {
                return Err(problem(format!("{at}.version"), message));
            }
            if subset.replicas > self.max_replicas {
                return Err(problem(
                    format!("{at}.replicas"),
                    format!(
                        "{} replicas is more than maxReplicas ({})",
                        subset.replicas, self.max_replicas
                    ),
                ));
            }
            if subset.replicas > 0 {
                if self.template_of(name).is_none() {
                    return Err(problem(
                        format!("{at}.replicas"),
                        format!(
                            "subset {name:?} asks for {} replicas but there is no workload \
                             template (set workload at the top level or in the subset)",
                            subset.replicas
                        ),
                    ));
                }
                if subset.version.trim().is_empty() {
                    return Err(problem(
                        format!("{at}.version"),
                        "a subset with replicas needs a version",
                    ));
                }
            }
        }
        let known: BTreeSet<&str> = self.subsets.keys().map(String::as_str).collect();
        let mut names = BTreeSet::new();
        for (i, route) in self.routes.iter().enumerate() {
            let at = format!("routes[{i}]");
            if !names.insert(route.name.as_str()) {
                return Err(problem(
                    format!("{at}.name"),
                    format!("route {:?} is defined twice", route.name),
                ));
            }
            route
                .compile(&known)
                .map_err(|e| problem(format!("{at}.{}", e.field), e.message))?;
        }
        let mut names = BTreeSet::new();
        for (i, mirror) in self.mirrors.iter().enumerate() {
            let at = format!("mirrors[{i}]");
            if !names.insert(mirror.name.as_str()) {
                return Err(problem(
                    format!("{at}.name"),
                    format!("mirror {:?} is defined twice", mirror.name),
                ));
            }
            mirror
                .compile(&known)
                .map_err(|e| problem(format!("{at}.{}", e.field), e.message))?;
        }
        Ok(())
    }
}

/// Whether a subset name is usable (a DNS label).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn validate_template(template: &WorkloadTemplate, at: &str) -> Result<(), Problem> {
    if template.command.is_empty() || template.command[0].trim().is_empty() {
        return Err(problem(
            format!("{at}.command"),
            "the command must name a program",
        ));
    }
    for (i, arg) in template.command.iter().enumerate() {
        if let Some(bad) = unknown_placeholders(arg).first() {
            return Err(problem(
                format!("{at}.command[{i}]"),
                format!(
                    "unknown placeholder {bad}; the command knows {{{{version}}}} and {{{{port}}}}"
                ),
            ));
        }
    }
    for (key, value) in &template.env {
        if let Some(bad) = unknown_placeholders(value).first() {
            return Err(problem(
                format!("{at}.env.{key}"),
                format!(
                    "unknown placeholder {bad}; the environment knows {{{{version}}}} and {{{{port}}}}"
                ),
            ));
        }
    }
    let uses_port = template.command.iter().any(|a| a.contains("{{port}}"))
        || template.env.values().any(|v| v.contains("{{port}}"));
    if !uses_port {
        return Err(problem(
            format!("{at}.command"),
            "the command (or env) must contain {{port}}: each replica listens on its own port",
        ));
    }
    if !template.readiness.path.starts_with('/') {
        return Err(problem(
            format!("{at}.readiness.path"),
            "the readiness path must start with '/'",
        ));
    }
    if template.readiness.period_ms == 0 || template.readiness.timeout_ms == 0 {
        return Err(problem(
            format!("{at}.readiness"),
            "periodMs and timeoutMs must be above zero",
        ));
    }
    if template.restart_backoff.initial_ms == 0
        || template.restart_backoff.max_ms < template.restart_backoff.initial_ms
    {
        return Err(problem(
            format!("{at}.restartBackoff"),
            "initialMs must be above zero and maxMs at least initialMs",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
cluster: eu-west
router: {listen: "127.0.0.1:0"}
control: {listen: "127.0.0.1:0"}
workload:
  command: [flotilla, demo-app, --version, "{{version}}", --port, "{{port}}"]
subsets:
  stable: {version: "1.0", replicas: 2}
  canary: {version: "1.1"}
"#;

    #[test]
    fn a_good_config_parses_with_defaults() {
        let config = AgentConfig::parse(GOOD, "a.yaml").unwrap();
        assert_eq!(config.max_weight, 100);
        assert_eq!(config.router.threads, DEFAULT_ROUTER_THREADS);
        let t = config.template_of("canary").unwrap();
        assert_eq!(
            t.argv("1.1", 4000),
            ["flotilla", "demo-app", "--version", "1.1", "--port", "4000"]
        );
        assert_eq!(t.readiness.path, "/healthz");
    }

    #[test]
    fn errors_name_the_line_column_and_field() {
        let text = GOOD.replace("replicas: 2", "replicas: two");
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
        assert_eq!(err.field, "subsets.stable.replicas");
        assert_eq!(err.line, 8, "{err}");
        assert!(err.to_string().starts_with("a.yaml:8:"), "{err}");

        let text = format!(
            "{GOOD}routes:\n  - name: r\n    subset: canry\n    header: {{name: x-canary, exact: \"true\"}}\n"
        );
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
        assert_eq!(err.field, "routes[0].subset", "{err}");
        assert!(err.message.contains("\"canry\""), "{err}");
        assert_eq!(err.line, 12, "{err}");
    }

    #[test]
    fn bad_configs_are_refused() {
        let cases = [
            (
                GOOD.replace("127.0.0.1:0\"}\ncontrol", "0.0.0.0:80\"}\ncontrol"),
                "loopback",
            ),
            (
                GOOD.replace("  canary: {version: \"1.1\"}\n", ""),
                "\"canary\" is missing",
            ),
            (
                GOOD.replace(
                    "127.0.0.1:0\"}\ncontrol",
                    "127.0.0.1:0\", threads: 0}\ncontrol",
                ),
                "0 router threads",
            ),
            (GOOD.replace("\"{{port}}\"", "\"8080\""), "{{port}}"),
            (
                GOOD.replace("\"{{port}}\"", "\"{{prot}}\""),
                "unknown placeholder {{prot}}",
            ),
            (
                GOOD.replace(
                    "cluster: eu-west",
                    "cluster: eu-west\nweights: {canary: 101}",
                ),
                "above maxWeight",
            ),
            (
                GOOD.replace("cluster: eu-west", "cluster: eu-west\nbogus: 1"),
                "unknown field `bogus`",
            ),
        ];
        for (text, needle) in cases {
            let err = AgentConfig::parse(&text, "a.yaml").unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn versions_and_replicas_are_bounded_with_file_line_and_field() {
        // A NUL (or a space, a quote, a newline) in a version crash-looped a replica.
        for version in ["1.0\\u0000", "1.0 beta", "$(id)", "a\\nb", ""] {
            let text = GOOD.replace(
                "stable: {version: \"1.0\", replicas: 2}",
                &format!("stable: {{version: \"{version}\", replicas: 2}}"),
            );
            let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
            assert_eq!(err.field, "subsets.stable.version", "{version}: {err}");
            assert_eq!(err.line, 8, "{err}");
            assert!(err.to_string().starts_with("a.yaml:8:"), "{err}");
        }
        let long = "9".repeat(MAX_VERSION_LEN + 1);
        let text = GOOD.replace("version: \"1.1\"", &format!("version: \"{long}\""));
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
        assert_eq!(err.field, "subsets.canary.version", "{err}");
        assert!(err.message.contains("1 to 128 characters"), "{err}");
        for good in [
            "1.9.0",
            "v2.0.0-rc.1+build_7",
            "registry.example:5000/app@sha256:ab",
        ] {
            assert_eq!(check_version(good), Ok(()), "{good}");
        }

        let config = AgentConfig::parse(GOOD, "a.yaml").unwrap();
        assert_eq!(config.max_replicas, DEFAULT_MAX_REPLICAS);
        let text = GOOD.replace("replicas: 2", "replicas: 33");
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
        assert_eq!(err.field, "subsets.stable.replicas", "{err}");
        assert!(err.message.contains("maxReplicas (32)"), "{err}");
        let raised = text.replace("cluster: eu-west", "cluster: eu-west\nmaxReplicas: 40");
        assert_eq!(
            AgentConfig::parse(&raised, "a.yaml").unwrap().max_replicas,
            40
        );
        let err = AgentConfig::parse(
            &GOOD.replace("cluster: eu-west", "cluster: eu-west\nmaxReplicas: 1001"),
            "a.yaml",
        )
        .unwrap_err();
        assert_eq!((err.field.as_str(), err.line), ("maxReplicas", 3), "{err}");
    }

    #[test]
    fn the_control_api_names_its_token_file() {
        let text = GOOD.replace(
            "control: {listen: \"127.0.0.1:0\"}",
            "control: {listen: \"127.0.0.1:0\", tokenFile: secrets/agent.token}",
        );
        let config = AgentConfig::parse(&text, "a.yaml").unwrap();
        assert_eq!(
            config.control.token_file.as_deref(),
            Some(Path::new("secrets/agent.token"))
        );
        assert_eq!(
            AgentConfig::parse(GOOD, "a.yaml")
                .unwrap()
                .control
                .token_file,
            None
        );
    }
}
