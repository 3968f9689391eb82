//! The HTTP request of one message, as notifications-engine's services send it: Slack's
//! `chat.postMessage` with slack-go's form (`token`, `channel`, `text`, `username`,
//! `icon_emoji`/`icon_url`, `attachments`, `blocks`, `unfurl_links`/`unfurl_media`), and a
//! webhook (the service's URL, headers and basic auth; the template's method, path and body for
//! that webhook, else `GET` with the message).

use std::collections::BTreeMap;
use std::time::Duration;

use super::config::{SlackService, WebhookService};

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `application/x-www-form-urlencoded` fields (sent sorted by name, as Go's `url.Values`).
    Form(BTreeMap<String, String>),
    /// Text as rendered (no content type, as notifications-engine sends it).
    Text(String),
}

/// An HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method.
    pub method: String,
    /// The URL.
    pub url: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// Basic authentication (username, password).
    pub basic_auth: Option<(String, String)>,
    /// The body.
    pub body: Body,
}

/// How a request's answer is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// Slack's Web API: HTTP 200 with `{"ok": true}`; `thread` replies in the thread of the
    /// template's `slack.groupingKey` (remembered for the daemon's lifetime, as Argo does).
    Slack {
        /// The thread, when the template groups its messages.
        thread: Option<Thread>,
    },
    /// Any 2xx.
    Webhook,
}

/// A Slack thread a message belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    /// The template's rendered `slack.groupingKey`.
    pub grouping_key: String,
    /// `slack.notifyBroadcast`: the reply is also sent to the channel.
    pub broadcast: bool,
}

/// How often a request is tried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Attempts in all.
    pub attempts: u32,
    /// The first wait.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

/// Slack: 6 attempts, 250 ms doubling to 8 s (Flotilla's webhook sinks' policy).
pub const SLACK_RETRY: Retry = Retry {
    attempts: 6,
    first: Duration::from_millis(250),
    max: Duration::from_secs(8),
};

/// One message to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The Argo trigger that sent it.
    pub trigger: String,
    /// The service's name.
    pub service: String,
    /// The recipient.
    pub recipient: String,
    /// The request.
    pub request: Request,
    /// How the answer is read.
    pub transport: Transport,
    /// How often it is tried.
    pub retry: Retry,
}

/// A template rendered (notifications-engine's `Notification`): the message and the parts of
/// the services Flotilla sends.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// `message`.
    pub message: String,
    /// `slack`, when a template had one.
    pub slack: Option<RenderedSlack>,
    /// `webhook.<service>`.
    pub webhook: BTreeMap<String, RenderedWebhook>,
}

/// A rendered `slack` part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RenderedSlack {
    /// `username`.
    pub username: String,
    /// `icon`.
    pub icon: String,
    /// `attachments` (JSON).
    pub attachments: String,
    /// `blocks` (JSON).
    pub blocks: String,
    /// `groupingKey`.
    pub grouping_key: String,
    /// `notifyBroadcast`.
    pub notify_broadcast: bool,
}

/// A rendered `webhook.<service>` part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RenderedWebhook {
    /// `method`.
    pub method: String,
    /// `body`.
    pub body: String,
    /// `path`.
    pub path: String,
}

/// Go's `url.QueryEscape` (a form value).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

impl Body {
    /// The body's bytes as sent.
    pub fn encode(&self) -> String {
        match self {
            Body::Form(fields) => fields
                .iter()
                .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
                .collect::<Vec<_>>()
                .join("&"),
            Body::Text(text) => text.clone(),
        }
    }
}

/// A JSON array as slack-go unmarshals `attachments` or `blocks` (empty: none), compact.
fn json_list(what: &str, text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Ok("[]".into());
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Array(_)) => Ok(value.to_string()),
        Ok(_) => Err(format!(
            "failed to unmarshal {what} '{text}' : not a JSON array"
        )),
        Err(e) => Err(format!("failed to unmarshal {what} '{text}' : {e}")),
    }
}

/// An icon URL notifications-engine accepts: http or https with a host.
fn icon_url(icon: &str) -> bool {
    let rest = icon
        .strip_prefix("http://")
        .or_else(|| icon.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace))
}

/// Slack's `chat.postMessage` for `recipient` (a channel).
pub(super) fn slack(
    service: &SlackService,
    recipient: &str,
    n: &Rendered,
) -> Result<(Request, Option<Thread>), String> {
    let mut form = BTreeMap::new();
    form.insert("token".to_owned(), service.token.clone());
    form.insert("channel".to_owned(), recipient.to_owned());
    form.insert("text".to_owned(), n.message.clone());
    let template = n.slack.as_ref();
    let username = template
        .map(|s| s.username.as_str())
        .filter(|u| !u.is_empty())
        .unwrap_or(&service.username);
    if !username.is_empty() {
        form.insert("username".to_owned(), username.to_owned());
    }
    let icon = template
        .map(|s| s.icon.as_str())
        .filter(|i| !i.is_empty())
        .unwrap_or(&service.icon);
    if !icon.is_empty() {
        if icon.len() > 2 && icon.starts_with(':') && icon.ends_with(':') {
            form.insert("icon_emoji".to_owned(), icon.to_owned());
        } else if icon_url(icon) {
            form.insert("icon_url".to_owned(), icon.to_owned());
        } else {
            tracing::warn!(
                icon,
                "Slack icon is not a valid emoji or url; sent without it"
            );
        }
    }
    let mut thread = None;
    if let Some(s) = template {
        form.insert(
            "attachments".to_owned(),
            json_list("attachments", &s.attachments)?,
        );
        form.insert("blocks".to_owned(), json_list("blocks", &s.blocks)?);
        if !s.grouping_key.is_empty() {
            thread = Some(Thread {
                grouping_key: s.grouping_key.clone(),
                broadcast: s.notify_broadcast,
            });
        }
    }
    if service.disable_unfurl {
        form.insert("unfurl_links".to_owned(), "false".to_owned());
        form.insert("unfurl_media".to_owned(), "false".to_owned());
    }
    let request = Request {
        method: "POST".to_owned(),
        url: format!("{}chat.postMessage", service.api_url),
        headers: vec![(
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        )],
        basic_auth: None,
        body: Body::Form(form),
    };
    Ok((request, thread))
}

/// A webhook's request for the service named `name`.
pub(super) fn webhook(name: &str, service: &WebhookService, n: &Rendered) -> Request {
    let (mut method, mut url, mut body) =
        ("GET".to_owned(), service.url.clone(), n.message.clone());
    if let Some(w) = n.webhook.get(name) {
        body = w.body.clone();
        if !w.method.is_empty() {
            method = w.method.clone();
        }
        if !w.path.is_empty() {
            url = format!(
                "{}/{}",
                url.trim_end_matches('/'),
                w.path.trim_start_matches('/')
            );
        }
    }
    Request {
        method,
        url,
        headers: service.headers.clone(),
        basic_auth: service.basic_auth.clone(),
        body: Body::Text(body),
    }
}

/// A webhook's retries: `retryMax` more attempts, from `retryWaitMin` doubling to
/// `retryWaitMax` (go-retryablehttp's, as notifications-engine configures it).
pub(super) fn webhook_retry(service: &WebhookService) -> Retry {
    Retry {
        attempts: service.retry_max.saturating_add(1).min(20),
        first: service.retry_wait_min,
        max: service.retry_wait_max.max(service.retry_wait_min),
    }
}
