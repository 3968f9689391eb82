//! Webhook delivery from the store's outbox: Slack-compatible or generic JSON bodies, retried
//! with backoff, never on the control loop's path. A notification leaves the outbox once every
//! sink that wants it answered 2xx, or after the last attempt (then it is logged and counted).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::config::{Sink, SinkFormat};
use super::record::Notification;
use super::shared::Metrics;
use super::store::Store;

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

/// Delivers the outbox forever; wakes on `wake` or every second.
pub async fn run(
    store: Arc<Store>,
    sinks: Vec<Sink>,
    metrics: Arc<Metrics>,
    wake: Arc<tokio::sync::Notify>,
) {
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
    loop {
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

#[cfg(test)]
mod tests {
    use super::*;

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
