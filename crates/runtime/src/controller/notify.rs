//! Webhook delivery from the store's outbox: Slack-compatible or generic JSON bodies, and the
//! messages of Argo Rollouts' notification configuration (Slack's `chat.postMessage`, webhooks),
//! retried with backoff, never on the control loop's path. A notification leaves the outbox
//! once every sink and Argo destination that wants it answered, or after the last attempt (then
//! it is logged and counted): one delivery per event, also across a restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::argo_notifications::{self, Body, Outgoing, Request, Subject, Transport};
use super::config::{Sink, SinkFormat};
use super::durable::Store;
use super::record::{AuditEntry, AuditKind, FleetRecord, Notification};
use super::shared::Metrics;

/// Attempts per sink before a notification is given up on.
const ATTEMPTS: u32 = 6;

/// The body a sink receives.
pub fn body(sink: &Sink, notification: &Notification) -> serde_json::Value {
    match sink.format {
        SinkFormat::Generic => serde_json::to_value(notification).unwrap_or_default(),
        SinkFormat::Slack => {
            let mut text = format!(
                ":rotating_light: *{}* {}",
                notification.event, notification.message
            );
            if let (Some(metric), Some(value)) = (&notification.metric, &notification.value) {
                text.push_str(&format!(" (metric `{metric}` = `{value}`)"));
            }
            json!({ "text": text })
        }
    }
}

/// The longest wait a `Retry-After` answer is honoured for.
const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(30);

/// How one attempt at an Argo message failed.
enum Attempt {
    /// Tried again (a transport failure, 429, a 5xx), after the server's `Retry-After` if any.
    Again(String, Option<Duration>),
    /// Not tried again (the service refused the message).
    Refused(String),
}

/// The Slack threads of `groupingKey`s: (service, channel, key) → the thread's first message.
type Threads = HashMap<(String, String, String), String>;

fn shorten(text: &str) -> &str {
    match text.char_indices().nth(512) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// One attempt at a request; Slack's answer is read as slack-go reads it (HTTP 200 with
/// `{"ok": true}`, the message's `ts`), a webhook's as any 2xx.
async fn attempt(
    client: &reqwest::Client,
    request: &Request,
    transport: &Transport,
) -> Result<Option<String>, Attempt> {
    let method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|e| Attempt::Refused(format!("method {:?}: {e}", request.method)))?;
    let mut builder = client.request(method, &request.url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    if let Some((username, password)) = &request.basic_auth {
        builder = builder.basic_auth(username, Some(password));
    }
    let response = builder
        .body(request.body.encode())
        .send()
        .await
        .map_err(|e| Attempt::Again(e.to_string(), None))?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s).min(LONGEST_RETRY_AFTER));
    let text = response.text().await.unwrap_or_default();
    let again = status.as_u16() == 429 || (status.is_server_error() && status.as_u16() != 501);
    match transport {
        Transport::Slack { .. } => {
            if again {
                return Err(Attempt::Again(
                    format!("slack answered {status}"),
                    retry_after,
                ));
            }
            if status.as_u16() != 200 {
                return Err(Attempt::Refused(format!("slack server error: {status}")));
            }
            let answer: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                Attempt::Refused(format!("slack answered {:?}: {e}", shorten(&text)))
            })?;
            if answer["ok"] == true {
                Ok(answer["ts"].as_str().map(str::to_owned))
            } else {
                Err(Attempt::Refused(format!(
                    "slack refused the message: {}",
                    answer["error"].as_str().unwrap_or("no error given")
                )))
            }
        }
        Transport::Webhook => {
            if status.is_success() {
                Ok(None)
            } else {
                let error = format!(
                    "request to {} has failed with error code {} : {}",
                    request.url,
                    status.as_u16(),
                    shorten(&text)
                );
                Err(if again {
                    Attempt::Again(error, retry_after)
                } else {
                    Attempt::Refused(error)
                })
            }
        }
    }
}

/// Sends one Argo message with its retries; a Slack message of a `groupingKey` goes to its
/// thread.
async fn send(
    client: &reqwest::Client,
    out: &Outgoing,
    threads: &mut Threads,
) -> Result<(), String> {
    let mut request = out.request.clone();
    let thread = match &out.transport {
        Transport::Slack {
            thread: Some(thread),
        } => Some((
            (
                out.service.clone(),
                out.recipient.clone(),
                thread.grouping_key.clone(),
            ),
            thread.broadcast,
        )),
        _ => None,
    };
    if let Some((key, broadcast)) = &thread
        && let Some(ts) = threads.get(key)
        && let Body::Form(form) = &mut request.body
    {
        form.insert("thread_ts".into(), ts.clone());
        if *broadcast {
            form.insert("reply_broadcast".into(), "true".into());
        }
    }
    let mut delay = out.retry.first;
    let mut last = String::new();
    for n in 1..=out.retry.attempts {
        match attempt(client, &request, &out.transport).await {
            Ok(ts) => {
                if let (Some((key, _)), Some(ts)) = (thread, ts) {
                    threads.entry(key).or_insert(ts);
                }
                return Ok(());
            }
            Err(Attempt::Refused(error)) => return Err(error),
            Err(Attempt::Again(error, after)) => {
                tracing::warn!(service = %out.service, recipient = %out.recipient, attempt = n, "Argo notification failed: {error}");
                last = error;
                if n < out.retry.attempts {
                    tokio::time::sleep(after.unwrap_or(delay)).await;
                    delay = (delay * 2).min(out.retry.max);
                }
            }
        }
    }
    Err(format!(
        "{last} (given up after {} attempts)",
        out.retry.attempts
    ))
}

/// Delivers the outbox forever; wakes on `wake` or every second. `argo` is the Argo Rollouts
/// notification configuration in force.
pub async fn run(
    store: Arc<Store>,
    sinks: Vec<Sink>,
    argo: Arc<argo_notifications::Current>,
    metrics: Arc<Metrics>,
    wake: Arc<tokio::sync::Notify>,
    sent: impl Fn(AuditEntry),
) {
    // Slack's API is https: the process's TLS provider (ring), whoever installs it first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook client; notifications are off");
            return;
        }
    };
    let mut threads = Threads::new();
    loop {
        // The fleets' records, read once per pass when a notification needs its Rollout.
        let mut records: Option<Vec<FleetRecord>> = None;
        let outbox = match tokio::task::block_in_place(|| store.outbox()) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the outbox");
                Vec::new()
            }
        };
        for (id, notification) in outbox {
            for sink in &sinks {
                if !sink.events.is_empty() && !sink.events.contains(&notification.event) {
                    continue;
                }
                let payload = body(sink, &notification);
                let mut delay = Duration::from_millis(250);
                let mut delivered = false;
                for attempt in 1..=ATTEMPTS {
                    match client.post(&sink.url).json(&payload).send().await {
                        Ok(r) if r.status().is_success() => {
                            delivered = true;
                            break;
                        }
                        Ok(r) => {
                            tracing::warn!(sink = %sink.name, status = %r.status(), attempt, "webhook refused")
                        }
                        Err(e) => {
                            tracing::warn!(sink = %sink.name, error = %e, attempt, "webhook failed")
                        }
                    }
                    if attempt < ATTEMPTS {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(8));
                    }
                }
                metrics.notification(&sink.name, delivered);
                if !delivered {
                    tracing::error!(sink = %sink.name, event = %notification.event, "notification given up after {ATTEMPTS} attempts");
                }
                sent(audited(
                    &notification,
                    &format!("webhook {}", sink.name),
                    if delivered {
                        Ok(())
                    } else {
                        Err(format!("given up after {ATTEMPTS} attempts"))
                    },
                ));
            }
            if let Some(config) = argo.get() {
                let records = records.get_or_insert_with(|| {
                    tokio::task::block_in_place(|| store.fleets()).unwrap_or_else(|e| {
                        tracing::error!(error = %e, "cannot read the fleet records for Argo notifications");
                        Vec::new()
                    })
                });
                let subject = records
                    .iter()
                    .find(|r| r.name == notification.fleet)
                    .map_or_else(
                        || Subject::bare(&notification),
                        |r| Subject::of(r, &notification),
                    );
                for message in config.outgoing(&notification, &subject) {
                    match message {
                        Ok(out) => {
                            let result = send(&client, &out, &mut threads).await;
                            metrics.notification(&format!("argo/{}", out.service), result.is_ok());
                            sent(audited(
                                &notification,
                                &format!(
                                    "Argo {} to {} ({})",
                                    out.service, out.recipient, out.trigger
                                ),
                                result.as_ref().map(|_| ()).map_err(|e| e.to_string()),
                            ));
                            match result {
                                Ok(()) => {
                                    tracing::info!(trigger = %out.trigger, service = %out.service, recipient = %out.recipient, id = %notification.id, "Argo notification sent")
                                }
                                Err(e) => {
                                    tracing::error!(trigger = %out.trigger, service = %out.service, recipient = %out.recipient, id = %notification.id, "Argo notification not sent: {e}")
                                }
                            }
                        }
                        Err(u) => {
                            metrics.notification(&format!("argo/{}", u.service), false);
                            sent(audited(
                                &notification,
                                &format!("Argo {} to {} ({})", u.service, u.recipient, u.trigger),
                                Err(u.error.to_string()),
                            ));
                            tracing::error!(trigger = %u.trigger, service = %u.service, recipient = %u.recipient, id = %notification.id, "Argo notification not sent: {}", u.error);
                        }
                    }
                }
            }
            if let Err(e) = tokio::task::block_in_place(|| store.delivered(id)) {
                tracing::error!(error = %e, "cannot clear a delivered notification");
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The audit entry of a notification sent (or not) to `to`.
fn audited(notification: &Notification, to: &str, result: Result<(), String>) -> AuditEntry {
    AuditEntry::new(
        crate::clock::wall_clock(),
        &notification.fleet,
        &notification.revision,
        AuditKind::Notification,
        notification.cluster.as_deref(),
        match result {
            Ok(()) => format!("notification {} sent: {to}", notification.event),
            Err(e) => format!("notification {} not sent: {to}: {e}", notification.event),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::argo_notifications::{Retry, Thread};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A local HTTP server playing Slack's Web API and a webhook receiver (a protocol fixture,
    /// not Slack): `/flaky` answers 503 twice then accepts, `/refuses` answers `ok: false`,
    /// `/missing` 404 and `/broken` 500. Every body is kept.
    async fn fixture() -> (String, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (h, b) = (hits.clone(), bodies.clone());
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: String| {
            let (hits, bodies) = (h.clone(), b.clone());
            async move {
                let n = hits.fetch_add(1, Ordering::SeqCst);
                bodies.lock().unwrap().push(body);
                use axum::http::StatusCode;
                match uri.path() {
                    "/flaky/chat.postMessage" if n < 2 => {
                        (StatusCode::SERVICE_UNAVAILABLE, String::new())
                    }
                    "/flaky/chat.postMessage" => (
                        StatusCode::OK,
                        r#"{"ok":true,"ts":"1700000000.000100"}"#.into(),
                    ),
                    "/refuses/chat.postMessage" => (
                        StatusCode::OK,
                        r#"{"ok":false,"error":"channel_not_found"}"#.into(),
                    ),
                    "/missing" => (StatusCode::NOT_FOUND, "no such hook".into()),
                    _ => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{address}"), hits, bodies)
    }

    fn message(url: String, transport: Transport) -> Outgoing {
        let body = match transport {
            Transport::Slack { .. } => Body::Form(
                [("channel", "c"), ("text", "aborted"), ("token", "t")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            Transport::Webhook => Body::Text("aborted".into()),
        };
        Outgoing {
            trigger: "on-rollout-aborted".into(),
            service: "slack".into(),
            recipient: "c".into(),
            request: Request {
                method: "POST".into(),
                url,
                headers: Vec::new(),
                basic_auth: None,
                body,
            },
            transport,
            retry: Retry {
                attempts: 3,
                first: Duration::from_millis(10),
                max: Duration::from_millis(20),
            },
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn argo_messages_are_retried_on_5xx_threaded_and_never_retried_when_refused() {
        let (base, hits, bodies) = fixture().await;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let mut threads = Threads::new();
        let slack = Transport::Slack {
            thread: Some(Thread {
                grouping_key: "payment-api".into(),
                broadcast: true,
            }),
        };
        let flaky = message(format!("{base}/flaky/chat.postMessage"), slack.clone());
        send(&client, &flaky, &mut threads).await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 3, "two 503s, then accepted");
        // The grouping key's next message replies in the thread the first one started.
        send(&client, &flaky, &mut threads).await.unwrap();
        let last = bodies.lock().unwrap().last().cloned().unwrap();
        assert_eq!(
            last,
            "channel=c&reply_broadcast=true&text=aborted&thread_ts=1700000000.000100&token=t"
        );
        hits.store(0, Ordering::SeqCst);
        let refused = message(format!("{base}/refuses/chat.postMessage"), slack);
        let error = send(&client, &refused, &mut threads).await.unwrap_err();
        assert!(error.contains("channel_not_found"), "{error}");
        assert_eq!(hits.load(Ordering::SeqCst), 1, "a refusal is not retried");
        hits.store(0, Ordering::SeqCst);
        let missing = message(format!("{base}/missing"), Transport::Webhook);
        let error = send(&client, &missing, &mut threads).await.unwrap_err();
        assert!(error.contains("error code 404 : no such hook"), "{error}");
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        hits.store(0, Ordering::SeqCst);
        let broken = message(format!("{base}/broken"), Transport::Webhook);
        let error = send(&client, &broken, &mut threads).await.unwrap_err();
        assert!(error.contains("given up after 3 attempts"), "{error}");
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn slack_bodies_name_the_metric_and_value() {
        let sink = Sink {
            name: "ops".into(),
            url: "http://127.0.0.1:1/".into(),
            format: SinkFormat::Slack,
            events: vec![],
        };
        let n = Notification {
            event: "rollout-aborted".into(),
            id: String::new(),
            fleet: "payments".into(),
            revision: "r".into(),
            cluster: Some("prod-us-east".into()),
            metric: Some("latency-p95".into()),
            value: Some("[0.41]".into()),
            message: "rolled back".into(),
            time: 0,
        };
        let text = body(&sink, &n)["text"].as_str().unwrap().to_owned();
        assert!(
            text.contains("latency-p95") && text.contains("[0.41]"),
            "{text}"
        );
        let generic = Sink {
            format: SinkFormat::Generic,
            ..sink
        };
        assert_eq!(body(&generic, &n)["cluster"], "prod-us-east");
    }
}
