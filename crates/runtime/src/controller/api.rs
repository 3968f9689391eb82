//! The daemon's HTTP API (axum): reads are open, mutating calls need the bearer token, errors
//! are JSON with a reason, and decisions stream as server-sent events.
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
//! | `GET /v1/events` | `text/event-stream` of `AuditEntry` |
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

use super::Shared;
use super::record::{OperatorCommand, QueuedCommand};

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
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/v1/fleets", get(list))
        .route("/v1/fleets/{name}", get(fleet))
        .route("/v1/fleets/{name}/clusters/{cluster}", get(cluster))
        .route("/v1/fleets/{name}/history", get(history))
        .route("/v1/fleets/{name}/commands", post(command))
        .route("/v1/events", get(events))
        .route("/v1/sync", post(sync))
        .with_state(shared)
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
            "mutating calls need `Authorization: Bearer <token>` (the daemon's token file)".into(),
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

async fn command(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    authorized(&shared, &headers)?;
    let command: OperatorCommand = serde_json::from_slice(&body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("the command is not valid: {e}"),
        )
    })?;
    {
        let views = shared.views.read().expect("views lock");
        let view = &views
            .get(&name)
            .ok_or_else(|| not_found(format!("fleet rollout {name:?} not found")))?
            .1;
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
        accepted_at: crate::analysis::wall_clock(),
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

async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    let stream = BroadcastStream::new(shared.events.subscribe()).filter_map(|entry| {
        let entry = entry.ok()?;
        let data = serde_json::to_string(&entry).ok()?;
        Some(Ok(Event::default().event(entry.kind.clone()).data(data)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
