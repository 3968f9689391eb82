//! Who is subscribed to a trigger: the Rollout's annotations
//! (`notifications.argoproj.io/subscribe.<trigger>.<service>: <recipient>;<recipient>`,
//! `notifications.argoproj.io/subscribe.<service>` for the default triggers, and the
//! `notifications.argoproj.io/subscriptions` list), and the configuration's `subscriptions`
//! whose label selector matches the Rollout's labels.

use std::collections::BTreeMap;

use flotilla_core::manifest::located::parse_located;
use serde::Deserialize;

const SUBSCRIBE: &str = "notifications.argoproj.io/subscribe.";
const SUBSCRIPTIONS: &str = "notifications.argoproj.io/subscriptions";

/// One recipient of one service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Destination {
    /// The service's name (`slack`, or a webhook's name).
    pub service: String,
    /// The recipient (a Slack channel; often empty for a webhook).
    pub recipient: String,
}

#[derive(Deserialize)]
struct AnnotationSubscription {
    #[serde(default)]
    trigger: Vec<String>,
    #[serde(default)]
    destinations: Vec<AnnotationDestination>,
}

#[derive(Deserialize)]
struct AnnotationDestination {
    #[serde(default)]
    service: String,
    #[serde(default)]
    recipients: Vec<String>,
}

fn recipients(value: &str) -> Vec<String> {
    if value.is_empty() {
        return vec![String::new()];
    }
    value
        .split(';')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The destinations the annotations subscribe, by trigger (an annotation without a trigger
/// subscribes the service's default triggers, else the configuration's), and the annotations
/// that could not be read (logged; notifications-engine logs them too).
pub(super) fn from_annotations(
    annotations: &BTreeMap<String, String>,
    default_triggers: &[String],
    service_default_triggers: &BTreeMap<String, Vec<String>>,
) -> (BTreeMap<String, Vec<Destination>>, Vec<String>) {
    let mut out: BTreeMap<String, Vec<Destination>> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut add = |trigger: &str, service: &str, recipients: &[String]| {
        for recipient in recipients {
            let triggers: Vec<String> = if !trigger.is_empty() {
                vec![trigger.to_owned()]
            } else if let Some(t) = service_default_triggers.get(service) {
                t.clone()
            } else {
                default_triggers.to_vec()
            };
            for t in triggers {
                out.entry(t).or_default().push(Destination {
                    service: service.to_owned(),
                    recipient: recipient.clone(),
                });
            }
        }
    };
    for (key, value) in annotations {
        if let Some(rest) = key.strip_prefix(SUBSCRIBE) {
            let parts: Vec<&str> = rest.split('.').collect();
            let (trigger, service) = match parts.as_slice() {
                [service] => ("", *service),
                [trigger, service, ..] => (*trigger, *service),
                [] => continue,
            };
            add(trigger, service, &recipients(value));
        } else if key.starts_with(SUBSCRIPTIONS) {
            match parse_located::<Vec<AnnotationSubscription>>(value, key, "the annotation") {
                Ok((subscriptions, _)) => {
                    for s in subscriptions {
                        for d in &s.destinations {
                            if s.trigger.is_empty() {
                                add("", &d.service, &d.recipients);
                            }
                            for t in &s.trigger {
                                add(t, &d.service, &d.recipients);
                            }
                        }
                    }
                }
                Err(e) => errors.push(format!("annotation {key}: {e}")),
            }
        }
    }
    (out, errors)
}

/// A Kubernetes label selector (`labels.Parse`): `k`, `!k`, `k=v`, `k==v`, `k!=v`,
/// `k in (a,b)`, `k notin (a,b)`, comma-separated; empty matches everything.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

fn label_key(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

impl Selector {
    /// Parses a selector.
    pub fn parse(text: &str) -> Result<Selector, String> {
        // Split on the commas outside parentheses.
        let mut terms = Vec::new();
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    terms.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        terms.push(&text[start..]);
        let mut requirements = Vec::new();
        for term in terms.iter().map(|t| t.trim()) {
            if term.is_empty() {
                if terms.len() == 1 {
                    break;
                }
                return Err(format!("{text:?}: an empty requirement"));
            }
            let set = |rest: &str| -> Result<Vec<String>, String> {
                let inner = rest
                    .trim()
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| format!("{term:?}: expected a parenthesized set of values"))?;
                Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
            };
            let requirement = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(label_key(key)?)
            } else if let Some((key, rest)) = term.split_once(" notin ") {
                Requirement::NotIn(label_key(key)?, set(rest)?)
            } else if let Some((key, rest)) = term.split_once(" in ") {
                Requirement::In(label_key(key)?, set(rest)?)
            } else if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotIn(label_key(key)?, vec![value.trim().to_owned()])
            } else if let Some((key, value)) = term.split_once("==") {
                Requirement::In(label_key(key)?, vec![value.trim().to_owned()])
            } else if let Some((key, value)) = term.split_once('=') {
                Requirement::In(label_key(key)?, vec![value.trim().to_owned()])
            } else if term.contains(['<', '>']) {
                return Err(format!(
                    "{term:?}: the gt and lt operators are not supported"
                ));
            } else {
                Requirement::Exists(label_key(term)?)
            };
            requirements.push(requirement);
        }
        Ok(Selector(requirements))
    }

    /// Whether `labels` match every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
        })
    }
}
