//! Argo Rollouts' notification configuration, so an Argo setup's notifications keep working:
//! the `argo-rollouts-notification-configmap` ConfigMap read from the manifests' source beside
//! the Rollouts (`service.slack`, `service.webhook.<name>`, `template.*`, `trigger.*`,
//! `defaultTriggers`, `subscriptions`; `$key` from the `argo-rollouts-notification-secret`
//! Secret through Flotilla's secret sources), the Rollout's subscription annotations, and for
//! each of the daemon's notifications the messages Argo would send (`notify` delivers them
//! from the outbox).
//!
//! Flotilla's events map to Argo's triggers by [`TRIGGERS`]; a trigger's `when` sees `rollout`
//! (the Rollout with the status Argo would have written for the cluster at that event) and
//! `secrets`; its templates see the same, `serviceType`, `recipient`, and `flotilla` (the
//! event, cluster, metric, value, fleet, revision, message, id and time).

mod condition;
mod config;
mod request;
mod subject;
mod subscriptions;
mod template;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

pub use config::{CONFIG_MAP, Config, ConfigError, SECRET, SLACK_API_URL};
pub use request::{
    Body, Outgoing, Rendered, RenderedSlack, RenderedWebhook, Request, Retry, SLACK_RETRY, Thread,
    Transport,
};
pub use subject::{Subject, rfc3339};
pub use subscriptions::Destination;
pub use template::SPRIG;

use crate::controller::record::Notification;
use config::{NotificationTemplate, Service};

/// Flotilla's events with a faithful Argo Rollouts counterpart: (Flotilla's event, Argo's event
/// reason, Argo's trigger: `translateReasonToTrigger` of the reason). A cluster's
/// `analysis-failed` whose run ended in Error is Argo's `AnalysisRunError`
/// (`on-analysis-run-error`).
pub const TRIGGERS: &[(&str, &str, &str)] = &[
    ("rollout-aborted", "RolloutAborted", "on-rollout-aborted"),
    (
        "analysis-failed",
        "AnalysisRunFailed",
        "on-analysis-run-failed",
    ),
    ("cluster-paused", "RolloutPaused", "on-rollout-paused"),
    (
        "fleet-completed",
        "RolloutCompleted",
        "on-rollout-completed",
    ),
];

/// The trigger of an errored analysis (`AnalysisRunError`).
pub const ANALYSIS_ERROR_TRIGGER: &str = "on-analysis-run-error";

/// Argo Rollouts' `translateReasonToTrigger`: `RolloutAborted` → `on-rollout-aborted`.
pub fn trigger_of_reason(reason: &str) -> String {
    let chars: Vec<char> = reason.chars().collect();
    let mut out = String::from("on-");
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let previous = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if previous.is_ascii_lowercase() || previous.is_ascii_digit() || next_lower {
                out.push('-');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The Argo trigger of one of Flotilla's events, if it has one.
pub fn trigger_of(event: &str, errored: bool) -> Option<&'static str> {
    if event == "analysis-failed" && errored {
        return Some(ANALYSIS_ERROR_TRIGGER);
    }
    TRIGGERS
        .iter()
        .find(|(e, _, _)| *e == event)
        .map(|(_, _, trigger)| *trigger)
}

/// A message that cannot be sent (logged and counted as a failed delivery).
#[derive(Debug, Clone, PartialEq)]
pub struct Undeliverable {
    /// The trigger.
    pub trigger: String,
    /// The service.
    pub service: String,
    /// The recipient.
    pub recipient: String,
    /// Why.
    pub error: String,
}

impl Config {
    /// The configuration a desired state gives: [`Config::load`] of its ConfigMaps; but when
    /// none is found while a configuration is `in_force` and some files could not be read at
    /// all (`unreadable`: a document too broken to tell what it was), those files may hold it,
    /// and that is an error too (the one in force stays).
    pub fn from_source(
        config_maps: &[flotilla_core::manifest::ConfigMapDocument],
        unreadable: &[String],
        in_force: bool,
        secret: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Option<Config>, String> {
        let config = Config::load(config_maps, secret).map_err(|e| e.to_string())?;
        if config.is_none() && in_force && !unreadable.is_empty() {
            return Err(format!(
                "no ConfigMap {CONFIG_MAP} was read, and files that may hold it could not be: {}",
                unreadable.join("; ")
            ));
        }
        Ok(config)
    }

    /// The destinations subscribed to `trigger` for `subject`'s Rollout: the configuration's
    /// `subscriptions` whose selector matches its labels, then its annotations; each once.
    pub fn destinations(&self, trigger: &str, subject: &Subject) -> Vec<Destination> {
        let labels = subject.metadata_map("labels");
        let mut out = Vec::new();
        for s in &self.subscriptions {
            let triggers = if s.triggers.is_empty() {
                &self.default_triggers
            } else {
                &s.triggers
            };
            if triggers.iter().any(|t| t == trigger) && s.selector.matches(&labels) {
                out.extend(s.recipients.iter().map(|(service, recipient)| Destination {
                    service: service.clone(),
                    recipient: recipient.clone(),
                }));
            }
        }
        let (mut by_trigger, errors) = subscriptions::from_annotations(
            &subject.metadata_map("annotations"),
            &self.default_triggers,
            &self.service_default_triggers,
        );
        for error in errors {
            tracing::error!("Argo notification subscription: {error}");
        }
        out.extend(by_trigger.remove(trigger).unwrap_or_default());
        let mut seen = std::collections::BTreeSet::new();
        out.retain(|d| seen.insert(d.clone()));
        out
    }

    /// The messages Argo Rollouts would send for notification `n` about `subject`: for each
    /// destination subscribed to its trigger, one per condition of the trigger whose `when`
    /// holds (an empty `when` always sends), with its templates rendered.
    pub fn outgoing(
        &self,
        n: &Notification,
        subject: &Subject,
    ) -> Vec<Result<Outgoing, Undeliverable>> {
        let Some(trigger) = trigger_of(&n.event, subject.errored) else {
            return Vec::new();
        };
        let destinations = self.destinations(trigger, subject);
        if destinations.is_empty() {
            return Vec::new();
        }
        let Some(conditions) = self.triggers.get(trigger) else {
            tracing::debug!(trigger, "subscribed trigger is not configured; skipped");
            return Vec::new();
        };
        let vars = subject.vars(n, trigger, &self.secrets);
        let fired: Vec<&config::Condition> = conditions
            .iter()
            .filter(|c| match &c.when {
                None => true,
                Some(when) => when.holds(&vars).unwrap_or_else(|e| {
                    tracing::error!(trigger, "failed to execute when condition: {e}");
                    false
                }),
            })
            .collect();
        let mut out = Vec::new();
        for destination in &destinations {
            for condition in &fired {
                out.push(
                    self.message(trigger, destination, &condition.send, &vars)
                        .map_err(|error| Undeliverable {
                            trigger: trigger.to_owned(),
                            service: destination.service.clone(),
                            recipient: destination.recipient.clone(),
                            error,
                        }),
                );
            }
        }
        out
    }

    /// The templates `send` rendered for `destination`, as that service's request.
    fn message(
        &self,
        trigger: &str,
        destination: &Destination,
        send: &[String],
        vars: &serde_json::Value,
    ) -> Result<Outgoing, String> {
        let service = self.services.get(&destination.service).ok_or_else(|| {
            format!(
                "notification service '{}' is not supported (no service.{0} or service.webhook.{0} in {CONFIG_MAP})",
                destination.service
            )
        })?;
        let mut data = vars.clone();
        data["serviceType"] = serde_json::json!(destination.service);
        data["recipient"] = serde_json::json!(destination.recipient);
        let data = template::from_json(&data);
        let mut rendered = Rendered::default();
        for name in send {
            let template = self
                .templates
                .get(name)
                .ok_or_else(|| format!("template '{name}' is not supported"))?;
            apply(template, &mut rendered, &data)?;
        }
        let (request, transport, retry) = match service {
            Service::Slack(slack) => {
                let (request, thread) = request::slack(slack, &destination.recipient, &rendered)?;
                (request, Transport::Slack { thread }, SLACK_RETRY)
            }
            Service::Webhook(webhook) => (
                request::webhook(&destination.service, webhook, &rendered),
                Transport::Webhook,
                request::webhook_retry(webhook),
            ),
            Service::Unsupported(kind) => {
                return Err(format!(
                    "service {:?} is of type {kind}, which Flotilla does not deliver (slack, webhook)",
                    destination.service
                ));
            }
        };
        Ok(Outgoing {
            trigger: trigger.to_owned(),
            service: destination.service.clone(),
            recipient: destination.recipient.clone(),
            request,
            transport,
            retry,
        })
    }
}

/// One template applied onto the notification (notifications-engine's templater: a non-empty
/// message replaces the one before; a `slack` part replaces the Slack fields; `webhook` parts
/// are set by service).
fn apply(
    template: &NotificationTemplate,
    rendered: &mut Rendered,
    data: &gotmpl::Value,
) -> Result<(), String> {
    let message = template.message.render(data)?;
    if !message.is_empty() {
        rendered.message = message;
    }
    if let Some(s) = &template.slack {
        rendered.slack = Some(RenderedSlack {
            username: s.username.render(data)?,
            icon: s.icon.render(data)?,
            attachments: s.attachments.render(data)?,
            blocks: s.blocks.render(data)?,
            grouping_key: s.grouping_key.render(data)?,
            notify_broadcast: s.notify_broadcast,
        });
    }
    for (service, w) in &template.webhook {
        rendered.webhook.insert(
            service.clone(),
            RenderedWebhook {
                method: w.method.clone(),
                body: w.body.render(data)?,
                path: w.path.render(data)?,
            },
        );
    }
    Ok(())
}

/// The configuration in force, shared by the control loop (which replaces it when the source
/// gives a valid new one) and the notifier (which reads it for each notification).
#[derive(Debug, Default)]
pub struct Current(RwLock<Option<Arc<Config>>>);

impl Current {
    /// The configuration in force, if any.
    pub fn get(&self) -> Option<Arc<Config>> {
        self.0
            .read()
            .expect("notification configuration lock")
            .clone()
    }

    /// Puts `config` in force; returns whether it differs from the one before.
    pub fn set(&self, config: Option<Config>) -> bool {
        let mut current = self.0.write().expect("notification configuration lock");
        let changed = match (&*current, &config) {
            (None, None) => false,
            (Some(a), Some(b)) => !a.same_as(b),
            _ => true,
        };
        *current = config.map(Arc::new);
        changed
    }
}

/// What the configuration does, for the log.
pub fn describe(config: &Config) -> String {
    let services: BTreeMap<&String, &str> = config
        .services
        .iter()
        .map(|(name, s)| (name, s.kind()))
        .collect();
    format!(
        "{}: services {:?}, triggers {:?}, templates {:?}",
        config.file,
        services,
        config.triggers.keys().collect::<Vec<_>>(),
        config.templates.keys().collect::<Vec<_>>()
    )
}
