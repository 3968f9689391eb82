//! The `argo-rollouts-notification-configmap` ConfigMap parsed as notifications-engine parses it
//! (`service.*`, `template.*`, `trigger.*`, `defaultTriggers`, `defaultTriggers.*`,
//! `subscriptions`), every value checked before anything is used: each error names the file, the
//! line of the key, the key and the cause.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::manifest::ConfigMapDocument;
use flotilla_core::manifest::located::parse_located;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::condition::When;
use super::subscriptions::Selector;
use super::template::Tmpl;

/// The ConfigMap's name (Argo Rollouts' `NotificationConfigMap`).
pub const CONFIG_MAP: &str = flotilla_kube::hub::NOTIFICATION_CONFIG_MAP;
/// The Secret whose keys `$key` references in `service.*` values name (Argo Rollouts'
/// `NotificationSecret`), read from Flotilla's secret sources.
pub const SECRET: &str = "argo-rollouts-notification-secret";
/// Slack's API (slack-go's `APIURL`).
pub const SLACK_API_URL: &str = "https://slack.com/api/";

/// The service types notifications-engine knows; Flotilla delivers `slack` and `webhook`.
const ARGO_SERVICE_TYPES: &[&str] = &[
    "alertmanager",
    "awssqs",
    "email",
    "gcppubsub",
    "github",
    "googlechat",
    "grafana",
    "mattermost",
    "nats",
    "newrelic",
    "opsgenie",
    "pagerduty",
    "pagerdutyv2",
    "pushover",
    "rocketchat",
    "slack",
    "teams",
    "teams-workflows",
    "telegram",
    "webex",
    "webhook",
];

/// A configuration that cannot be used: where, which key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: ConfigMap {CONFIG_MAP}: {key}: {message}")]
pub struct ConfigError {
    /// The file (`path@commit` from Git).
    pub file: String,
    /// The key's line (1-based).
    pub line: u32,
    /// The key's column (1-based).
    pub column: u32,
    /// The key (`trigger.on-rollout-aborted`), or the field (`metadata.name`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// A notification service of the configuration.
#[derive(Clone, PartialEq)]
pub(super) enum Service {
    /// Slack's Web API.
    Slack(SlackService),
    /// An HTTP webhook.
    Webhook(WebhookService),
    /// A type notifications-engine knows that Flotilla does not deliver (its subscriptions are
    /// logged and counted as failed).
    Unsupported(String),
}

/// `service.slack`.
#[derive(Clone, PartialEq)]
pub(super) struct SlackService {
    pub token: String,
    pub api_url: String,
    pub username: String,
    pub icon: String,
    pub disable_unfurl: bool,
}

/// `service.webhook.<name>`.
#[derive(Clone, PartialEq)]
pub(super) struct WebhookService {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub basic_auth: Option<(String, String)>,
    pub retry_wait_min: Duration,
    pub retry_wait_max: Duration,
    pub retry_max: u32,
}

/// `template.<name>`: the message and the parts of the services Flotilla sends.
#[derive(Debug)]
pub(super) struct NotificationTemplate {
    pub message: Tmpl,
    pub slack: Option<SlackTemplate>,
    pub webhook: BTreeMap<String, WebhookTemplate>,
}

/// A template's `slack` part.
#[derive(Debug)]
pub(super) struct SlackTemplate {
    pub username: Tmpl,
    pub icon: Tmpl,
    pub attachments: Tmpl,
    pub blocks: Tmpl,
    pub grouping_key: Tmpl,
    pub notify_broadcast: bool,
}

/// A template's `webhook.<service>` part.
#[derive(Debug)]
pub(super) struct WebhookTemplate {
    pub method: String,
    pub body: Tmpl,
    pub path: Tmpl,
}

/// One condition of a trigger.
#[derive(Debug)]
pub(super) struct Condition {
    /// None: an empty `when`, which Argo Rollouts sends on unconditionally.
    pub when: Option<When>,
    pub send: Vec<String>,
}

/// One entry of `subscriptions`.
#[derive(Debug)]
pub(super) struct GlobalSubscription {
    /// `(service, recipient)`, from `service:recipient`.
    pub recipients: Vec<(String, String)>,
    pub triggers: Vec<String>,
    pub selector: Selector,
}

/// The notification configuration, checked. Its `Debug` names what it holds, never a secret's
/// value or a token.
pub struct Config {
    /// The file it was read from.
    pub file: String,
    pub(super) services: BTreeMap<String, Service>,
    pub(super) templates: BTreeMap<String, NotificationTemplate>,
    pub(super) triggers: BTreeMap<String, Vec<Condition>>,
    pub(super) default_triggers: Vec<String>,
    pub(super) service_default_triggers: BTreeMap<String, Vec<String>>,
    pub(super) subscriptions: Vec<GlobalSubscription>,
    /// The Secret's keys the services reference, with their values (the templates' `secrets`).
    pub(super) secrets: BTreeMap<String, String>,
    /// What is read but not done (logged at load).
    pub warnings: Vec<String>,
    /// The ConfigMap's data as read (to tell a changed configuration).
    data: Value,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let services: BTreeMap<&String, &str> = self
            .services
            .iter()
            .map(|(name, service)| (name, service.kind()))
            .collect();
        f.debug_struct("Config")
            .field("file", &self.file)
            .field("services", &services)
            .field("templates", &self.templates.keys().collect::<Vec<_>>())
            .field("triggers", &self.triggers.keys().collect::<Vec<_>>())
            .field("default_triggers", &self.default_triggers)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// The service's type.
    pub fn kind(&self) -> &str {
        match self {
            Service::Slack(_) => "slack",
            Service::Webhook(_) => "webhook",
            Service::Unsupported(kind) => kind,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConditionSpec {
    #[serde(default)]
    when: String,
    #[serde(default)]
    send: Vec<String>,
    /// Computed by notifications-engine, never read by Argo Rollouts' event path.
    #[serde(default)]
    once_per: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateSpec {
    #[serde(default)]
    message: String,
    #[serde(default)]
    slack: Option<SlackTemplateSpec>,
    #[serde(default)]
    webhook: Option<BTreeMap<String, WebhookTemplateSpec>>,
    // The other services' parts: accepted, not sent by Flotilla.
    #[serde(default)]
    email: Option<Value>,
    #[serde(default)]
    awssqs: Option<Value>,
    #[serde(default)]
    gcppubsub: Option<Value>,
    #[serde(default)]
    mattermost: Option<Value>,
    #[serde(default)]
    rocketchat: Option<Value>,
    #[serde(default)]
    teams: Option<Value>,
    #[serde(default, rename = "teams-workflows")]
    teams_workflows: Option<Value>,
    #[serde(default)]
    opsgenie: Option<Value>,
    #[serde(default)]
    github: Option<Value>,
    #[serde(default)]
    alertmanager: Option<Value>,
    #[serde(default)]
    googlechat: Option<Value>,
    #[serde(default)]
    pagerduty: Option<Value>,
    #[serde(default)]
    pagerdutyv2: Option<Value>,
    #[serde(default)]
    newrelic: Option<Value>,
}

impl TemplateSpec {
    /// The parts of services Flotilla does not deliver.
    fn unsent_parts(&self) -> Vec<&'static str> {
        [
            ("email", self.email.is_some()),
            ("awssqs", self.awssqs.is_some()),
            ("gcppubsub", self.gcppubsub.is_some()),
            ("mattermost", self.mattermost.is_some()),
            ("rocketchat", self.rocketchat.is_some()),
            ("teams", self.teams.is_some()),
            ("teams-workflows", self.teams_workflows.is_some()),
            ("opsgenie", self.opsgenie.is_some()),
            ("github", self.github.is_some()),
            ("alertmanager", self.alertmanager.is_some()),
            ("googlechat", self.googlechat.is_some()),
            ("pagerduty", self.pagerduty.is_some()),
            ("pagerdutyv2", self.pagerdutyv2.is_some()),
            ("newrelic", self.newrelic.is_some()),
        ]
        .into_iter()
        .filter(|(_, present)| *present)
        .map(|(name, _)| name)
        .collect()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SlackTemplateSpec {
    #[serde(default)]
    username: String,
    #[serde(default)]
    icon: String,
    #[serde(default)]
    attachments: String,
    #[serde(default)]
    blocks: String,
    #[serde(default)]
    grouping_key: String,
    #[serde(default)]
    notify_broadcast: bool,
    #[serde(default)]
    delivery_policy: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookTemplateSpec {
    #[serde(default)]
    method: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SlackOptions {
    #[serde(default)]
    username: String,
    #[serde(default)]
    icon: String,
    #[serde(default)]
    token: String,
    /// For Slack's interactive callbacks, which Flotilla does not receive.
    #[serde(default)]
    #[allow(dead_code)]
    signing_secret: String,
    /// Read by notifications-engine's bot, not when sending.
    #[serde(default)]
    #[allow(dead_code)]
    channels: Vec<String>,
    #[serde(default, rename = "apiURL", alias = "apiUrl")]
    api_url: String,
    #[serde(default)]
    disable_unfurl: bool,
    /// Refused when true (checked on the value).
    #[serde(default)]
    #[allow(dead_code)]
    insecure_skip_verify: bool,
    // notifications-engine's HTTP transport tuning: accepted, Flotilla's client is used as is.
    #[serde(default)]
    #[allow(dead_code)]
    max_idle_conns: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    max_idle_conns_per_host: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    max_conns_per_host: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    idle_conn_timeout: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WebhookOptions {
    url: String,
    #[serde(default)]
    headers: Vec<HeaderSpec>,
    #[serde(default)]
    basic_auth: Option<BasicAuthSpec>,
    /// Go's `time.Duration` in JSON: nanoseconds.
    #[serde(default)]
    retry_wait_min: Option<u64>,
    #[serde(default)]
    retry_wait_max: Option<u64>,
    #[serde(default)]
    retry_max: Option<u32>,
    /// Refused when true (checked on the value).
    #[serde(default)]
    #[allow(dead_code)]
    insecure_skip_verify: bool,
    // notifications-engine's HTTP transport tuning: accepted, Flotilla's client is used as is.
    #[serde(default)]
    #[allow(dead_code)]
    max_idle_conns: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    max_idle_conns_per_host: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    max_conns_per_host: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    idle_conn_timeout: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderSpec {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BasicAuthSpec {
    username: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscriptionSpec {
    #[serde(default)]
    recipients: Vec<String>,
    #[serde(default)]
    triggers: Vec<String>,
    #[serde(default)]
    selector: String,
}

/// Where the keys of one ConfigMap are, for errors.
struct Keys<'a> {
    config_map: &'a ConfigMapDocument,
}

impl Keys<'_> {
    fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let path = if key.starts_with("metadata") || key == "data" {
            key.to_owned()
        } else {
            format!("data.{key}")
        };
        let at = self.config_map.document.locations.find(&path);
        ConfigError {
            file: self.config_map.file.clone(),
            line: at.line,
            column: at.column,
            key: key.to_owned(),
            message: message.into(),
        }
    }

    /// One value, itself YAML, read into `T` with the core's bounded loader.
    fn parse<T: DeserializeOwned>(&self, key: &str, text: &str) -> Result<T, ConfigError> {
        parse_located::<T>(text, "", "the value")
            .map(|(value, _)| value)
            .map_err(|e| {
                let mut message = String::from("invalid value: ");
                if e.line > 0 {
                    message.push_str(&format!("line {}, column {}: ", e.line, e.column));
                }
                if !e.field.is_empty() {
                    message.push_str(&format!("{}: ", e.field));
                }
                message.push_str(&e.message);
                self.error(key, message)
            })
    }
}

impl Config {
    /// Reads the notification configuration from the source's ConfigMaps: None when there is no
    /// `argo-rollouts-notification-configmap`. `secret` reads one key of the
    /// `argo-rollouts-notification-secret` Secret (a `$key` in a `service.*` value).
    pub fn load(
        config_maps: &[ConfigMapDocument],
        secret: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Option<Config>, ConfigError> {
        let ours: Vec<&ConfigMapDocument> = config_maps
            .iter()
            .filter(|c| c.name() == CONFIG_MAP)
            .collect();
        let config_map = match ours.as_slice() {
            [] => return Ok(None),
            [one] => *one,
            [first, second, ..] => {
                return Err(Keys {
                    config_map: second,
                }
                .error(
                    "metadata.name",
                    format!(
                        "defined again (first in {}): the daemon reads one notification configuration",
                        first.file
                    ),
                ));
            }
        };
        let keys = Keys { config_map };
        let data = config_map.document.value["data"].clone();
        let entries: BTreeMap<String, String> = match &data {
            Value::Null => BTreeMap::new(),
            Value::Object(map) => {
                let mut entries = BTreeMap::new();
                for (key, value) in map {
                    let Value::String(text) = value else {
                        return Err(keys.error(
                            key,
                            "a ConfigMap's data values are strings (quote it, or use a block scalar `|`)",
                        ));
                    };
                    entries.insert(key.clone(), text.clone());
                }
                entries
            }
            _ => return Err(keys.error("data", "data must be a mapping of strings")),
        };
        let mut config = Config {
            file: config_map.file.clone(),
            services: BTreeMap::new(),
            templates: BTreeMap::new(),
            triggers: BTreeMap::new(),
            default_triggers: Vec::new(),
            service_default_triggers: BTreeMap::new(),
            subscriptions: Vec::new(),
            secrets: BTreeMap::new(),
            warnings: Vec::new(),
            data,
        };
        let mut once_per = Vec::new();
        for (key, text) in &entries {
            if key == "subscriptions" {
                let specs: Vec<SubscriptionSpec> = keys.parse(key, text)?;
                for (i, spec) in specs.into_iter().enumerate() {
                    let selector = Selector::parse(&spec.selector)
                        .map_err(|e| keys.error(key, format!("[{i}].selector: {e}")))?;
                    let recipients = spec
                        .recipients
                        .iter()
                        .map(|r| {
                            let mut parts = r.split(':');
                            let service = parts.next().unwrap_or_default().to_owned();
                            let recipient = parts.next().unwrap_or_default().to_owned();
                            (service, recipient)
                        })
                        .collect();
                    config.subscriptions.push(GlobalSubscription {
                        recipients,
                        triggers: spec.triggers,
                        selector,
                    });
                }
            } else if key == "defaultTriggers" {
                config.default_triggers = keys.parse(key, text)?;
            } else if let Some(service) = key.strip_prefix("defaultTriggers.") {
                let triggers: Vec<String> = keys.parse(key, text)?;
                config
                    .service_default_triggers
                    .insert(service.to_owned(), triggers);
            } else if let Some(name) = key.strip_prefix("template.") {
                let template = template(&keys, key, name, text, &mut config.warnings)?;
                config.templates.insert(name.to_owned(), template);
            } else if let Some(name) = key.strip_prefix("trigger.") {
                let specs: Vec<ConditionSpec> = keys.parse(key, text)?;
                let mut conditions = Vec::new();
                for (i, spec) in specs.into_iter().enumerate() {
                    let when = if spec.when.trim().is_empty() {
                        None
                    } else {
                        Some(
                            When::compile(&spec.when)
                                .map_err(|e| keys.error(key, format!("[{i}].when: {e}")))?,
                        )
                    };
                    if !spec.once_per.trim().is_empty() {
                        When::compile_value(&spec.once_per)
                            .map_err(|e| keys.error(key, format!("[{i}].oncePer: {e}")))?;
                        once_per.push(key.clone());
                    }
                    if spec.send.is_empty() {
                        return Err(keys.error(key, format!("[{i}].send: no template to send")));
                    }
                    conditions.push(Condition {
                        when,
                        send: spec.send,
                    });
                }
                config.triggers.insert(name.to_owned(), conditions);
            } else if let Some(rest) = key.strip_prefix("service.") {
                let (kind, name) = match rest.split('.').collect::<Vec<_>>().as_slice() {
                    [kind] => ((*kind).to_owned(), (*kind).to_owned()),
                    [kind, name] => ((*kind).to_owned(), (*name).to_owned()),
                    _ => {
                        return Err(keys.error(
                            key,
                            "invalid service key; expected 'service.<type>(.<name>)'",
                        ));
                    }
                };
                let service = service(&keys, key, &kind, text, secret, &mut config)?;
                config.services.insert(name, service);
            } else {
                config.warnings.push(format!(
                    "{key}: not a key of the notification configuration; ignored"
                ));
            }
        }
        // Every template a trigger sends must exist.
        for (name, conditions) in &config.triggers {
            for (i, condition) in conditions.iter().enumerate() {
                for template in &condition.send {
                    if !config.templates.contains_key(template) {
                        let known: Vec<&str> =
                            config.templates.keys().map(String::as_str).collect();
                        return Err(keys.error(
                            &format!("trigger.{name}"),
                            format!(
                                "[{i}].send: template {template:?} is not defined (the templates are: {})",
                                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                            ),
                        ));
                    }
                }
            }
        }
        for key in once_per {
            config.warnings.push(format!(
                "{key}: oncePer is checked but, as in Argo Rollouts, each event sends once"
            ));
        }
        let defaults = config
            .default_triggers
            .iter()
            .chain(config.service_default_triggers.values().flatten());
        for trigger in defaults {
            if !config.triggers.contains_key(trigger) {
                config.warnings.push(format!(
                    "default trigger {trigger:?} is not defined: its subscriptions send nothing"
                ));
            }
        }
        Ok(Some(config))
    }

    /// Whether `other` was read from the same data with the same secrets.
    pub fn same_as(&self, other: &Config) -> bool {
        self.file == other.file && self.data == other.data && self.secrets == other.secrets
    }
}

fn template(
    keys: &Keys<'_>,
    key: &str,
    name: &str,
    text: &str,
    warnings: &mut Vec<String>,
) -> Result<NotificationTemplate, ConfigError> {
    let spec: TemplateSpec = keys.parse(key, text)?;
    let parse = |field: &str, source: &str| {
        Tmpl::parse(name, source).map_err(|e| keys.error(key, format!("{field}: {e}")))
    };
    let unsent = spec.unsent_parts();
    if !unsent.is_empty() {
        warnings.push(format!(
            "{key}: the parts for {} are not sent (Flotilla delivers slack and webhook)",
            unsent.join(", ")
        ));
    }
    let slack = match spec.slack {
        None => None,
        Some(s) => {
            if !matches!(s.delivery_policy.as_str(), "" | "Post") {
                warnings.push(format!(
                    "{key}: slack.deliveryPolicy {:?} is not supported; messages are posted",
                    s.delivery_policy
                ));
            }
            Some(SlackTemplate {
                username: parse("slack.username", &s.username)?,
                icon: parse("slack.icon", &s.icon)?,
                attachments: parse("slack.attachments", &s.attachments)?,
                blocks: parse("slack.blocks", &s.blocks)?,
                grouping_key: parse("slack.groupingKey", &s.grouping_key)?,
                notify_broadcast: s.notify_broadcast,
            })
        }
    };
    let mut webhook = BTreeMap::new();
    for (service, w) in spec.webhook.unwrap_or_default() {
        webhook.insert(
            service.clone(),
            WebhookTemplate {
                method: w.method,
                body: parse(&format!("webhook.{service}.body"), &w.body)?,
                path: parse(&format!("webhook.{service}.path"), &w.path)?,
            },
        );
    }
    Ok(NotificationTemplate {
        message: parse("message", &spec.message)?,
        slack,
        webhook,
    })
}

fn service(
    keys: &Keys<'_>,
    key: &str,
    kind: &str,
    text: &str,
    secret: &dyn Fn(&str) -> Result<String, String>,
    config: &mut Config,
) -> Result<Service, ConfigError> {
    if !ARGO_SERVICE_TYPES.contains(&kind) {
        return Err(keys.error(
            key,
            format!(
                "service type {kind:?} is not supported (notifications-engine's types are {})",
                ARGO_SERVICE_TYPES.join(", ")
            ),
        ));
    }
    if kind != "slack" && kind != "webhook" {
        config.warnings.push(format!(
            "{key}: Flotilla delivers slack and webhook services, not {kind}: its subscriptions are logged as failed"
        ));
        return Ok(Service::Unsupported(kind.to_owned()));
    }
    let mut value: Value = keys.parse(key, text)?;
    substitute_secrets(&mut value, &mut |name| match secret(name) {
        Ok(found) => {
            config.secrets.insert(name.to_owned(), found.clone());
            Ok(found)
        }
        Err(e) => Err(keys.error(
            key,
            format!("${name} names a key of the Secret {SECRET}: {e}"),
        )),
    })?;
    let typed = |value: Value| {
        let decoded: Result<Service, serde_path_to_error::Error<serde_json::Error>> =
            if kind == "slack" {
                serde_path_to_error::deserialize::<_, SlackOptions>(value).map(|o| {
                    Service::Slack(SlackService {
                        token: o.token,
                        api_url: if o.api_url.is_empty() {
                            SLACK_API_URL.to_owned()
                        } else {
                            o.api_url
                        },
                        username: o.username,
                        icon: o.icon,
                        disable_unfurl: o.disable_unfurl,
                    })
                })
            } else {
                serde_path_to_error::deserialize::<_, WebhookOptions>(value).map(|o| {
                    Service::Webhook(WebhookService {
                        url: o.url,
                        headers: o.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                        basic_auth: o.basic_auth.map(|b| (b.username, b.password)),
                        retry_wait_min: Duration::from_nanos(
                            o.retry_wait_min.filter(|n| *n > 0).unwrap_or(1_000_000_000),
                        ),
                        retry_wait_max: Duration::from_nanos(
                            o.retry_wait_max.filter(|n| *n > 0).unwrap_or(5_000_000_000),
                        ),
                        retry_max: o.retry_max.filter(|n| *n > 0).unwrap_or(3),
                    })
                })
            };
        decoded.map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            if path == "." || path.is_empty() {
                message
            } else {
                format!("{path}: {message}")
            }
        })
    };
    let insecure = value["insecureSkipVerify"] == Value::Bool(true);
    let service = typed(value).map_err(|e| keys.error(key, format!("invalid value: {e}")))?;
    if insecure {
        return Err(keys.error(
            key,
            "insecureSkipVerify: true is not supported: Flotilla verifies TLS certificates",
        ));
    }
    match &service {
        Service::Slack(slack) => {
            if slack.token.trim().is_empty() {
                return Err(keys.error(
                    key,
                    format!("token is required (a bot token, e.g. `token: $slack-token` from the Secret {SECRET})"),
                ));
            }
            http_url(&slack.api_url).map_err(|e| keys.error(key, format!("apiURL: {e}")))?;
        }
        Service::Webhook(webhook) => {
            http_url(&webhook.url).map_err(|e| keys.error(key, format!("url: {e}")))?;
        }
        Service::Unsupported(_) => {}
    }
    Ok(service)
}

/// An http or https URL with a host.
fn http_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?} is not an http or https URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

/// Replaces every `$key` (`$` then word characters or `-`, notifications-engine's `[$][\w-]+`)
/// in the string scalars of a service's value with the Secret's value for that key.
pub(super) fn substitute_secrets<E>(
    value: &mut Value,
    read: &mut dyn FnMut(&str) -> Result<String, E>,
) -> Result<(), E> {
    match value {
        Value::String(text) if text.contains('$') => {
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find('$') {
                out.push_str(&rest[..at]);
                let after = &rest[at + 1..];
                let len = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(after.len());
                if len == 0 {
                    out.push('$');
                } else {
                    out.push_str(&read(&after[..len])?);
                }
                rest = &after[len..];
            }
            out.push_str(rest);
            *text = out;
            Ok(())
        }
        Value::Array(items) => {
            for item in items {
                substitute_secrets(item, read)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for item in map.values_mut() {
                substitute_secrets(item, read)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
