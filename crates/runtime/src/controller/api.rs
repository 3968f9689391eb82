//! The daemon's HTTP API (axum): reads are open (on loopback; `readsNeedToken` closes them),
//! mutating calls need the bearer token, request bodies are strict (an unknown field is a 400
//! that names it), errors are JSON with a reason, and decisions stream as server-sent events.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /healthz` | `ok` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /v1/fleets` | `[FleetSummary]` |
//! | `GET /v1/fleets/{name}` | `FleetView` |
//! | `GET /v1/fleets/{name}/clusters/{cluster}` | `RolloutView` |
//! | `GET /v1/fleets/{name}/history` | `[AuditEntry]` |
//! | `POST /v1/fleets/{name}/commands` (token) | `OperatorCommand` in, 202 `{"id", "message"}` |
//! | `GET /v1/events` | `text/event-stream` of `AuditEntry` (`id`: its sequence number; `Last-Event-ID` replays; `gap` when missed) |
//! | `POST /v1/sync` (token) | reads the Git source now; 202 |

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use super::record::{OperatorCommand, QueuedCommand};
use super::shared::{INVALID, Shared};

/// An error answer: `{"error": reason}` with a status.
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

fn not_found(what: String) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, what)
}

/// The API's routes.
pub fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new();
    if let Some(live) = &shared.live {
        let base = live.base().to_owned();
        router = router
            .nest(&base, super::dashboard::router())
            .route(&format!("{base}/"), get(super::dashboard::list_page))
            // The page's two calls, under its base so that a proxy forwards one prefix.
            .route(&format!("{base}/api/token"), get(token))
            .route(
                &format!("{base}/api/fleets/{{name}}/commands"),
                post(command),
            )
            .route_layer(axum::middleware::map_response(super::dashboard::secure));
    }
    router
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/v1/fleets", get(list))
        .route("/v1/fleets/{name}", get(fleet))
        .route("/v1/fleets/{name}/clusters/{cluster}", get(cluster))
        .route("/v1/fleets/{name}/history", get(history))
        .route("/v1/fleets/{name}/commands", post(command))
        .route("/v1/events", get(events))
        .route("/v1/sync", post(sync))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            guard_reads,
        ))
        .with_state(shared)
}

/// With `readsNeedToken`, every call but `/healthz` needs the bearer token; with reads open on
/// loopback, every call but `/healthz` must name a loopback host.
async fn guard_reads(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if shared.loopback_hosts_only
        && request.uri().path() != "/healthz"
        && let Some(host) = request.headers().get(axum::http::header::HOST)
        && !flotilla_agent_backend::loopback::names_loopback(host.to_str().unwrap_or(""))
    {
        return ApiError(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "host {:?} is not a loopback name: the API's reads are open on loopback only, \
                 to clients that name it (localhost, 127.0.0.1, [::1]); `readsNeedToken` serves \
                 other names with the token",
                host.to_str().unwrap_or("?")
            ),
        )
        .into_response();
    }
    if shared.reads_need_token
        && request.uri().path() != "/healthz"
        && let Err(e) = authorized(&shared, request.headers())
    {
        return e.into_response();
    }
    next.run(request).await
}

async fn metrics(State(shared): State<Arc<Shared>>) -> String {
    shared.metrics.render()
}

async fn list(State(shared): State<Arc<Shared>>) -> Response {
    let views = shared.views.read().expect("views lock");
    let list: Vec<_> = views.values().map(|v| v.0.clone()).collect();
    Json(list).into_response()
}

async fn fleet(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let views = shared.views.read().expect("views lock");
    let view = views
        .get(&name)
        .ok_or_else(|| not_found(format!("fleet rollout {name:?} not found")))?;
    Ok(Json(view.1.clone()).into_response())
}

async fn cluster(
    State(shared): State<Arc<Shared>>,
    Path((name, cluster)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let views = shared.views.read().expect("views lock");
    let view = views
        .get(&name)
        .ok_or_else(|| not_found(format!("fleet rollout {name:?} not found")))?;
    let rollout = view.2.get(&cluster).ok_or_else(|| {
        not_found(format!(
            "cluster {cluster:?} is not a target of fleet rollout {name:?}"
        ))
    })?;
    Ok(Json(rollout.clone()).into_response())
}

async fn history(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    if !shared.views.read().expect("views lock").contains_key(&name) {
        return Err(not_found(format!("fleet rollout {name:?} not found")));
    }
    let store = shared.store.clone();
    let entries = tokio::task::spawn_blocking(move || store.audit(Some(&name), 0))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(entries).into_response())
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => Err(ApiError(
            StatusCode::UNAUTHORIZED,
            "this call needs `Authorization: Bearer <token>` (the daemon's token file)".into(),
        )),
        Some(token) if constant_time_eq(token.as_bytes(), shared.token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError(
            StatusCode::FORBIDDEN,
            "the bearer token is wrong".into(),
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 204 when the request carries the API's token (the dashboard checks a token once entered).
async fn token(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match authorized(&shared, &headers) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn command(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    authorized(&shared, &headers)?;
    let command = strict_command(&body)?;
    {
        let views = shared.views.read().expect("views lock");
        let view = &views
            .get(&name)
            .ok_or_else(|| not_found(format!("fleet rollout {name:?} not found")))?
            .1;
        if view.phase == INVALID {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "fleet rollout {name:?} is not running: its desired state is invalid ({})",
                    view.errors.join("; ")
                ),
            ));
        }
        let clusters: Vec<&str> = view
            .waves
            .iter()
            .flat_map(|w| w.clusters.iter().map(|c| c.name.as_str()))
            .collect();
        let bad = |m: String| Err(ApiError(StatusCode::BAD_REQUEST, m));
        match &command {
            OperatorCommand::Abort { cluster: Some(c) } if !clusters.contains(&c.as_str()) => {
                return bad(format!(
                    "cluster {c:?} is not a target of {name:?}; the targets are {}",
                    clusters.join(", ")
                ));
            }
            OperatorCommand::Promote { wave: Some(w), .. } if *w == 0 || *w > view.waves.len() => {
                return bad(format!(
                    "wave {w} does not exist; {name:?} has waves 1..={}",
                    view.waves.len()
                ));
            }
            OperatorCommand::SetImage { image, .. } if image.trim().is_empty() => {
                return bad("the image is empty".into());
            }
            _ => {}
        }
    }
    let operator = headers
        .get("x-flotilla-operator")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("operator")
        .to_owned();
    let verb = command.verb();
    let queued = QueuedCommand {
        id: 0,
        fleet: name.clone(),
        command,
        operator,
        accepted_at: crate::clock::wall_clock(),
        uid: None,
    };
    let store = shared.store.clone();
    let queued = tokio::task::spawn_blocking(move || store.enqueue(queued))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    shared.wake.notify_one();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "id": queued.id,
            "message": format!("fleet rollout '{name}' {verb} accepted"),
        })),
    )
        .into_response())
}

/// Decodes a command body strictly: an unknown field is refused by name, also for the commands
/// without fields (serde's `deny_unknown_fields` does not reach an internally tagged enum's unit
/// variants), so that no body is ever run as a plainer command than it says.
fn strict_command(body: &[u8]) -> Result<OperatorCommand, ApiError> {
    let given: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("the command is not valid: {e}"),
        )
    })?;
    OperatorCommand::strict(&given).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("the command is not valid: {e}"),
        )
    })
}

async fn sync(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Result<Response, ApiError> {
    authorized(&shared, &headers)?;
    shared.sync.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.wake.notify_one();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"message": "sync requested"})),
    )
        .into_response())
}

/// One audit entry as a server-sent event: its kind the event's name, its sequence number the
/// event's `id`.
fn audit_event(entry: &super::record::AuditEntry) -> Option<Event> {
    let data = serde_json::to_string(entry).ok()?;
    Some(
        Event::default()
            .id(entry.seq.to_string())
            .event(entry.kind.as_str())
            .data(data),
    )
}

/// A `gap` event: entries were missed (the client was too slow, or they could not be read
/// back); the client reloads what it shows (`/v1/fleets/{name}/history`).
fn gap_event(missed: Option<u64>) -> Event {
    Event::default()
        .event("gap")
        .data(json!({"missed": missed}).to_string())
}

/// The audit entries as they are decided. A client that reconnects with `Last-Event-ID` (as an
/// `EventSource` does) first gets the entries it missed, from the store, then the live ones, with
/// none twice; a client that falls behind gets a `gap` event instead of a silent loss.
async fn events(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    // Subscribed before the store is read: nothing decided meanwhile is lost.
    let live = BroadcastStream::new(shared.events.subscribe());
    let last: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let mut first = Vec::new();
    // The last entry the client has (none: it takes the live ones only).
    let mut seen = last;
    if let Some(last) = last {
        let store = shared.store.clone();
        // The largest number is a client that has everything there can be (no overflow).
        let read = move || {
            // The newest first: an entry committed meanwhile is among those read, or live.
            let newest = store.newest_audit()?;
            Ok::<_, super::store::StoreError>((newest, store.audit(None, last.saturating_add(1))?))
        };
        match tokio::task::spawn_blocking(read).await {
            // A client that counts past this store (one restored from a backup): told, and
            // given every entry from now on.
            Ok(Ok((newest, _))) if last > newest => {
                seen = None;
                first.push(gap_event(None));
            }
            Ok(Ok((_, missed))) => {
                seen = Some(missed.last().map_or(last, |e| e.seq));
                // Entries the store no longer keeps (`auditKept`): said, not skipped in silence.
                if let Some(oldest) = missed.first()
                    && oldest.seq > last.saturating_add(1)
                {
                    first.push(gap_event(Some(oldest.seq - last - 1)));
                }
                first.extend(missed.iter().filter_map(audit_event));
            }
            _ => first.push(gap_event(None)),
        }
    }
    let live = live.filter_map(move |item| match item {
        Ok(entry) if seen.is_some_and(|seen| entry.seq <= seen) => None,
        Ok(entry) => audit_event(&entry),
        Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(missed)) => {
            Some(gap_event(Some(missed)))
        }
    });
    let stream = tokio_stream::iter(first).chain(live).map(Ok);
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex, RwLock};

    use tokio::sync::{Notify, broadcast};

    use super::super::durable::Store;
    use super::super::record::{FleetSummary, FleetView, OperatorCommand, WaveView};
    use super::super::shared::{Metrics, Shared};
    use super::super::store::OpenMode;

    const TOKEN: &str = "s3cret-token";

    /// A live API on loopback with one fleet, `payments`, of two waves and one cluster each.
    async fn api(reads_need_token: bool) -> (String, Arc<Shared>, tempfile::TempDir) {
        api_keeping(reads_need_token, 0).await
    }

    /// [`api`] over a store that keeps `audit_kept` audit entries (0: every one).
    async fn api_keeping(
        reads_need_token: bool,
        audit_kept: u64,
    ) -> (String, Arc<Shared>, tempfile::TempDir) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(&dir.path().join("s.redb"), OpenMode::Existing).unwrap();
        store.keep_audit(audit_kept);
        let summary = FleetSummary {
            name: "payments".into(),
            revision: "r1".into(),
            image: "payment-api:1.9.0".into(),
            phase: "Progressing".into(),
            wave: 1,
            waves: 2,
            message: String::new(),
            errors: Vec::new(),
        };
        let wave = |index, name: &str| WaveView {
            index,
            started_at: None,
            completed_at: None,
            clusters: vec![
                serde_json::from_value(serde_json::json!({
                    "name": name, "status": "NotStarted", "reason": "", "reachable": true,
                    "rolloutPhase": "Healthy", "rolloutMessage": "", "step": null, "weights": null,
                    "desiredWeight": null, "stableVersion": null, "currentVersion": null,
                    "failure": null, "startedAt": null, "decidedAt": null, "analysis": []
                }))
                .unwrap(),
            ],
            lockstep: false,
            barrier: None,
        };
        let view = FleetView {
            name: "payments".into(),
            revision: "r1".into(),
            image: "payment-api:1.9.0".into(),
            previous_image: "payment-api:1.8.3".into(),
            phase: "Progressing".into(),
            message: String::new(),
            wave: 1,
            paused: false,
            git: None,
            waves: vec![wave(1, "canary-eu-west"), wave(2, "prod-us-east")],
            errors: Vec::new(),
        };
        let (events, _) = broadcast::channel(16);
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            views: RwLock::new(BTreeMap::from([(
                "payments".to_owned(),
                (summary, view, BTreeMap::new()),
            )])),
            events,
            token: TOKEN.into(),
            reads_need_token,
            loopback_hosts_only: !reads_need_token,
            wake: Notify::new(),
            sync: AtomicBool::new(false),
            pending_audit: Mutex::new(Vec::new()),
            git_results: Mutex::new(Vec::new()),
            metrics: Arc::new(Metrics::default()),
            unrunnable: RwLock::new(BTreeMap::new()),
            live: Some(crate::controller::dashboard::live::Live::new("/dashboard")),
            plots: Mutex::new(Default::default()),
        });
        republish(&shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = super::router(shared.clone());
        tokio::spawn(super::super::listen::serve(listener, app));
        (format!("http://{address}"), shared, dir)
    }

    /// What the control loop does after a tick: the dashboard's pages follow the views.
    fn republish(shared: &Shared) {
        let views = shared.views.read().unwrap();
        let list: Vec<FleetSummary> = views.values().map(|v| v.0.clone()).collect();
        let fleets: Vec<&FleetView> = views.values().map(|v| &v.1).collect();
        shared.live.as_ref().unwrap().update(&list, &fleets);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_dashboard_serves_its_pages_under_its_base_with_a_strict_policy() {
        let (base, shared, _dir) = api(false).await;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let get = |path: &str| client.get(format!("{base}{path}")).send();
        let bare = get("/dashboard").await.unwrap();
        assert_eq!(bare.status(), 200);
        assert!(bare.text().await.unwrap().contains("id=\"f-payments\""));
        let list = get("/dashboard/").await.unwrap();
        assert_eq!(list.status(), 200);
        let csp = list.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
            "{csp}"
        );
        let html = list.text().await.unwrap();
        assert!(html.contains("id=\"f-payments\""), "{html}");
        for (path, says) in [
            ("/dashboard/fleets/nope", "no fleet rollout named \"nope\""),
            (
                "/dashboard/fleets/payments/clusters/nope",
                "has no cluster named \"nope\"",
            ),
            ("/dashboard/fleets/nope/audit", "no fleet rollout named"),
            ("/dashboard/elsewhere", "no page at /dashboard/elsewhere"),
        ] {
            let answer = get(path).await.unwrap();
            assert_eq!(answer.status(), 404, "{path}");
            assert!(answer.headers().contains_key("content-security-policy"));
            let text = answer.text().await.unwrap();
            assert!(
                text.contains(&super::super::dashboard::html::esc(says)),
                "{path}: {text}"
            );
        }
        let js = get("/dashboard/assets/app.js").await.unwrap();
        assert!(
            js.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript")
        );
        // The token check is the API's.
        let token = |t: &str| {
            client
                .get(format!("{base}/dashboard/api/token"))
                .bearer_auth(t)
                .send()
        };
        assert_eq!(token(TOKEN).await.unwrap().status(), 204);
        assert_eq!(token("wrong").await.unwrap().status(), 403);
        let post = |auth: Option<&str>| {
            let r = client
                .post(format!("{base}/dashboard/api/fleets/payments/commands"))
                .json(&serde_json::json!({"command": "abort", "cluster": "prod-us-east"}));
            match auth {
                Some(t) => r.bearer_auth(t),
                None => r,
            }
            .send()
        };
        assert_eq!(post(None).await.unwrap().status(), 401);
        assert_eq!(post(Some("forged")).await.unwrap().status(), 403);
        assert!(shared.store.pending_commands().unwrap().is_empty());
        assert_eq!(post(Some(TOKEN)).await.unwrap().status(), 202);
        assert_eq!(shared.store.pending_commands().unwrap().len(), 1);
        // Live: a snapshot, then the changed row on the stream with the next number.
        let snap: serde_json::Value = get("/dashboard/live/snapshot?fleet=payments")
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let seq = snap["seq"].as_u64().unwrap();
        let mut stream = get("/dashboard/live/stream?fleet=payments").await.unwrap();
        assert_eq!(stream.headers()["content-type"], "text/event-stream");
        {
            let mut views = shared.views.write().unwrap();
            let view = &mut views.get_mut("payments").unwrap().1;
            view.waves[1].clusters[0].status = "Progressing".into();
        }
        republish(&shared);
        let mut text = String::new();
        while !text.contains("\n\n") {
            let chunk = stream.chunk().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        assert!(text.starts_with("event: parts\n"), "{text}");
        assert!(text.contains(&format!("id: {}", seq + 1)), "{text}");
        assert!(text.contains("c-prod-us-east"), "{text}");
        assert!(!text.contains("c-canary-eu-west"), "{text}");
    }

    /// The command bodies docs/controller.md shows, one a line in its `jsonl` block.
    fn documented_bodies() -> Vec<serde_json::Value> {
        let doc = include_str!("../../../../docs/controller.md");
        let block = doc
            .split("```jsonl\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/controller.md has a jsonl block of commands");
        block
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn every_documented_command_body_is_queued_as_written() {
        let (base, shared, _dir) = api(false).await;
        let client = reqwest::Client::new();
        let bodies = documented_bodies();
        assert!(bodies.len() >= 11, "{bodies:?}");
        for body in &bodies {
            let answer = client
                .post(format!("{base}/v1/fleets/payments/commands"))
                .bearer_auth(TOKEN)
                .json(body)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let text = answer.text().await.unwrap();
            assert_eq!(status, 202, "{body}: {text}");
            let queued = shared.store.pending_commands().unwrap();
            let last = &queued.last().unwrap().command;
            // What was queued says exactly what the body said: no field dropped or defaulted
            // away (the bug: `toRevision` was ignored and a plain undo ran).
            let mut back = serde_json::to_value(last).unwrap();
            let object = back.as_object_mut().unwrap();
            object.retain(|_, v| !v.is_null() && *v != serde_json::json!(false));
            assert_eq!(&back, body, "queued {last:?}");
        }
        let queued = shared.store.pending_commands().unwrap();
        assert!(queued.iter().any(|q| q.command
            == OperatorCommand::Undo {
                to_revision: Some(1)
            }));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_unknown_field_is_a_400_that_names_it_and_queues_nothing() {
        let (base, shared, _dir) = api(false).await;
        let client = reqwest::Client::new();
        for (body, field) in [
            (r#"{"command": "undo", "revision": 1}"#, "revision"),
            (r#"{"command": "undo", "toRevison": 1}"#, "toRevison"),
            (
                r#"{"command": "abort", "clusters": "prod-us-east"}"#,
                "clusters",
            ),
            (r#"{"command": "retry", "force": true}"#, "force"),
            (r#"{"command": "promote", "wave": 1, "ful": true}"#, "ful"),
        ] {
            let answer = client
                .post(format!("{base}/v1/fleets/payments/commands"))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 400, "{body}");
            let text = answer.text().await.unwrap();
            assert!(text.contains(field), "{body}: {text}");
        }
        assert!(shared.store.pending_commands().unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn reads_need_the_token_when_configured_and_healthz_never_does() {
        // reqwest is built without a default TLS provider (as `ApiClient::new` does).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let (open, _, _d1) = api(false).await;
        let status = |r: reqwest::Response| r.status().as_u16();
        assert_eq!(
            status(
                client
                    .get(format!("{open}/v1/fleets"))
                    .send()
                    .await
                    .unwrap()
            ),
            200
        );
        let (closed, _, _d2) = api(true).await;
        for path in [
            "/v1/fleets",
            "/v1/fleets/payments",
            "/metrics",
            "/v1/events",
        ] {
            let r = client.get(format!("{closed}{path}")).send().await.unwrap();
            assert_eq!(status(r), 401, "{path}");
            let r = client
                .get(format!("{closed}{path}"))
                .bearer_auth("wrong")
                .send()
                .await
                .unwrap();
            assert_eq!(status(r), 403, "{path}");
        }
        let r = client
            .get(format!("{closed}/v1/fleets"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(status(r), 200);
        let r = client
            .get(format!("{closed}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(status(r), 200);
        // Open reads answer only requests that name a loopback host (no DNS rebinding).
        for (host, expected) in [
            ("127.0.0.1:7070", 200),
            ("localhost", 200),
            ("LOCALHOST.:7070", 200),
            ("[::1]:7070", 200),
            ("attacker.example:7070", 421),
            ("127.0.0.1.attacker.example", 421),
        ] {
            let r = client
                .get(format!("{open}/v1/fleets"))
                .header("host", host)
                .send()
                .await
                .unwrap();
            assert_eq!(status(r), expected, "{host}");
        }
        let r = client
            .get(format!("{open}/healthz"))
            .header("host", "attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(status(r), 200, "probes name any host");
        // The CLI's client sends its token on reads too.
        use super::super::client::{ApiClient, ApiClientError};
        assert!(
            ApiClient::new(&closed, Some(TOKEN.into()))
                .list()
                .await
                .is_ok()
        );
        assert!(matches!(
            ApiClient::new(&closed, None).list().await,
            Err(ApiClientError::Refused { status: 401, .. })
        ));
        // A Last-Event-ID of the largest number is answered, not overflowed.
        let r = client
            .get(format!("{closed}/v1/events"))
            .bearer_auth(TOKEN)
            .header("last-event-id", u64::MAX.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(status(r), 200);
    }

    /// Reads the event stream at `url` (with `last` as `Last-Event-ID`) until `until` holds of
    /// the text read, at most 10 s.
    async fn read_events(url: &str, last: Option<u64>, until: impl Fn(&str) -> bool) -> String {
        let client = reqwest::Client::new();
        let mut request = client.get(url);
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        let mut response = request.send().await.unwrap();
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !until(&text) {
            let chunk = tokio::time::timeout_at(deadline, response.chunk())
                .await
                .unwrap_or_else(|_| panic!("events: {text}"))
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        text
    }

    #[tokio::test]
    async fn events_carry_their_sequence_replay_what_was_missed_and_say_a_gap() {
        use super::super::record::{AuditEntry, AuditKind};
        use super::super::store::TickWrite;
        let (base, shared, _dir) = api(false).await;
        let url = format!("{base}/v1/events");
        let entry = |n: u64| {
            AuditEntry::new(
                n as i64,
                "payments",
                "r1",
                AuditKind::Command,
                None,
                format!("e{n}"),
            )
        };
        // Three decisions stored (sequences 1-3); a client that had 1 gets 2 and 3 from the
        // store, then the live 4, each once.
        let stored = shared
            .store
            .commit_ticks(vec![TickWrite {
                audit: (1..=3).map(entry).collect(),
                ..TickWrite::default()
            }])
            .unwrap();
        let reader = tokio::spawn({
            let url = url.clone();
            async move { read_events(&url, Some(1), |t| t.contains("\"e4\"")).await }
        });
        while shared.events.receiver_count() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // A live copy of an entry the store already gave: not sent twice.
        let _ = shared.events.send(stored[0][2].clone());
        let mut fourth = entry(4);
        fourth.seq = 4;
        let _ = shared.events.send(fourth);
        let text = reader.await.unwrap();
        let ids: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
            .collect();
        assert_eq!(ids, ["2", "3", "4"], "{text}");
        assert!(!text.contains("\"e1\""), "{text}");
        // A client that falls behind the channel (16 here) is told, not silently skipped (a
        // daemon of its own: the first client's subscription may outlive its connection).
        let (base, shared, _dir) = api(false).await;
        let url = format!("{base}/v1/events");
        let reader = tokio::spawn(async move {
            read_events(&url, None, |t| {
                t.contains("event: gap") || t.contains("event:gap")
            })
            .await
        });
        while shared.events.receiver_count() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for n in 10..50 {
            let mut e = entry(n);
            e.seq = n;
            let _ = shared.events.send(e);
        }
        let text = reader.await.unwrap();
        assert!(text.contains("\"missed\":"), "{text}");
        // A store that keeps two entries (`auditKept`): a client that had 1 is told that one
        // (2) is gone, then gets the two kept.
        let (base, shared, _dir) = api_keeping(false, 2).await;
        shared
            .store
            .commit_ticks(vec![TickWrite {
                audit: (1..=4).map(entry).collect(),
                ..TickWrite::default()
            }])
            .unwrap();
        assert_eq!(
            shared
                .store
                .audit(None, 0)
                .unwrap()
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>(),
            [3, 4],
            "the oldest dropped"
        );
        let text = read_events(&format!("{base}/v1/events"), Some(1), |t| {
            t.contains("\"e4\"")
        })
        .await;
        let gap = text.find("gap").unwrap_or_else(|| panic!("{text}"));
        assert!(text[gap..].contains("{\"missed\":1}"), "{text}");
        assert!(text.find("\"e3\"").unwrap() > gap, "{text}");
        // A client that counts past the store (restored from a backup): told, then given the
        // entries decided from now on, not silently none until the count passes its own.
        let (base, shared, _dir) = api(false).await;
        let url = format!("{base}/v1/events");
        let reader =
            tokio::spawn(async move { read_events(&url, Some(5), |t| t.contains("\"e1\"")).await });
        while shared.events.receiver_count() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let mut first = entry(1);
        first.seq = 1;
        let _ = shared.events.send(first);
        let text = reader.await.unwrap();
        assert!(text.contains("gap"), "{text}");
    }
}
