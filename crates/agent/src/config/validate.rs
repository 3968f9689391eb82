//! Checking a configuration beyond its shape: loopback listeners, the required subsets, bounds,
//! versions, subset names, workload templates (known placeholders, a port per replica) and
//! routes and mirrors compiled against the subsets. The first problem found is told with the
//! field it is at.

use std::collections::BTreeSet;

use flotilla_agent_backend::wire::{CANARY, STABLE};

use super::schema::{AgentConfig, MAX_REPLICAS_LIMIT, MAX_ROUTER_THREADS};
use super::template::WorkloadTemplate;
use crate::router::{compile_mirror, compile_route};

/// The longest version.
pub const MAX_VERSION_LEN: usize = 128;

/// Checks a version (what `{{version}}` becomes on a replica's command line): 1 to 128 of
/// `A-Z a-z 0-9 . _ : @ + / -`, with no `/`-separated part that is `.` or `..` and no leading
/// `/` (a template may put it in a path). The message quotes (at most 40 characters of) the
/// version.
pub fn check_version(version: &str) -> Result<(), String> {
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '@' | '+' | '/' | '-');
    let shown: String = version.chars().take(40).collect();
    let more = if version.chars().count() > 40 {
        "…"
    } else {
        ""
    };
    if version.is_empty() || version.len() > MAX_VERSION_LEN || !version.chars().all(allowed) {
        return Err(format!(
            "version {shown:?}{more} must be 1 to {MAX_VERSION_LEN} characters of A-Z a-z 0-9 . _ : @ + / -"
        ));
    }
    if version.starts_with('/') || version.split('/').any(|part| part == "." || part == "..") {
        return Err(format!(
            "version {shown:?}{more} must not start with / nor have a . or .. part between /: a \
             workload template may put it in a path"
        ));
    }
    Ok(())
}

/// Whether a subset name is usable (a DNS label).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A problem found by validation, before locations are attached.
pub(super) struct Problem {
    pub(super) field: String,
    pub(super) message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks a configuration: the first problem found, with the field it is at.
pub(super) fn validate(config: &AgentConfig) -> Result<(), Problem> {
    if config.cluster.trim().is_empty() {
        return Err(problem("cluster", "the cluster name must not be empty"));
    }
    if !(1..=MAX_ROUTER_THREADS).contains(&config.router.threads) {
        return Err(problem(
            "router.threads",
            format!(
                "{} router threads: give 1 to {MAX_ROUTER_THREADS} (one per core the router \
                 may use)",
                config.router.threads
            ),
        ));
    }
    for (field, listen) in [
        ("router.listen", config.router.listen),
        ("control.listen", config.control.listen),
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
    if config.router.listen == config.control.listen && config.router.listen.port() != 0 {
        return Err(problem(
            "control.listen",
            format!(
                "the router and the control API cannot both listen on {}",
                config.router.listen
            ),
        ));
    }
    for required in [STABLE, CANARY] {
        if !config.subsets.contains_key(required) {
            return Err(problem(
                "subsets",
                format!(
                    "subset {required:?} is missing; an agent has at least the subsets \
                     \"stable\" and \"canary\""
                ),
            ));
        }
    }
    if config.max_weight == 0 {
        return Err(problem("maxWeight", "maxWeight must be at least 1"));
    }
    if !(1..=MAX_REPLICAS_LIMIT).contains(&config.max_replicas) {
        return Err(problem(
            "maxReplicas",
            format!(
                "maxReplicas {} must be 1 to {MAX_REPLICAS_LIMIT}",
                config.max_replicas
            ),
        ));
    }
    if let Some(file) = &config.control.token_file
        && file.as_os_str().is_empty()
    {
        return Err(problem("control.tokenFile", "the token file path is empty"));
    }
    if config.weights.canary > config.max_weight {
        return Err(problem(
            "weights.canary",
            format!(
                "the canary weight {} is above maxWeight {}",
                config.weights.canary, config.max_weight
            ),
        ));
    }
    if let Some(template) = &config.workload {
        validate_template(template, "workload")?;
    }
    for (name, subset) in &config.subsets {
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
        if subset.replicas > config.max_replicas {
            return Err(problem(
                format!("{at}.replicas"),
                format!(
                    "{} replicas is more than maxReplicas ({})",
                    subset.replicas, config.max_replicas
                ),
            ));
        }
        if subset.replicas > 0 {
            if config.template_of(name).is_none() {
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
    let known: BTreeSet<&str> = config.subsets.keys().map(String::as_str).collect();
    let mut names = BTreeSet::new();
    for (i, route) in config.routes.iter().enumerate() {
        let at = format!("routes[{i}]");
        if !names.insert(route.name.as_str()) {
            return Err(problem(
                format!("{at}.name"),
                format!("route {:?} is defined twice", route.name),
            ));
        }
        compile_route(route, &known)
            .map_err(|e| problem(format!("{at}.{}", e.field), e.message))?;
    }
    let mut names = BTreeSet::new();
    for (i, mirror) in config.mirrors.iter().enumerate() {
        let at = format!("mirrors[{i}]");
        if !names.insert(mirror.name.as_str()) {
            return Err(problem(
                format!("{at}.name"),
                format!("mirror {:?} is defined twice", mirror.name),
            ));
        }
        compile_mirror(mirror, &known)
            .map_err(|e| problem(format!("{at}.{}", e.field), e.message))?;
    }
    Ok(())
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
