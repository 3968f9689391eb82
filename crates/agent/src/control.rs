//! The control API (axum, loopback only): weights, header/cookie routes, mirror routes,
//! scaling, replica status, traffic statistics over a window, configuration reload, and the
//! Prometheus exposition on `/metrics`. Errors are `{"error": "..."}` with a 4xx/5xx status; a
//! request naming an unknown subset is a 400 that names it and changes nothing. Reads are open
//! (on loopback); every other method needs `Authorization: Bearer <token>` (401 without it, 403
//! with a wrong one). docs/agent.md is the reference.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router as Routes;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use flotilla_agent_backend::wire::{
    AgentStatus, CANARY, MirrorBody, MirrorSpec, RouteBody, RouteSpec, Scale, SetWeights,
    SubsetStatus, Weights, Window, WindowQuery,
};
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::ControlToken;
use crate::error::AgentError;
use crate::query::{QueryError, plan_series, plan_window};
use crate::router::RouterError;
use crate::shared::Shared;
use crate::workload::WorkloadError;

type AppState = State<Arc<Shared>>;

/// An API error: a status and a message, sent as `{"error": message}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        ApiError::bad_request(e.0)
    }
}

/// Whether a request may change anything: reads (GET, HEAD) are open; every other method
/// needs the bearer token. 401 without one, 403 with a wrong one.
fn authorize(token: &ControlToken, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    match given {
        None => Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "changes need `Authorization: Bearer <token>` (the agent's token: \
                      control.tokenFile, by default <configuration file>.token, or \
                      FLOTILLA_AGENT_TOKEN)"
                .into(),
        }),
        Some(given) if token.matches(given) => Ok(()),
        Some(_) => Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: "the bearer token is wrong".into(),
        }),
    }
}

async fn require_token(State(shared): AppState, request: Request, next: Next) -> Response {
    // Reads are open, on loopback only: to clients that name it (no DNS rebinding).
    if request.uri().path() != "/healthz"
        && let Some(host) = request.headers().get(axum::http::header::HOST)
        && !flotilla_agent_backend::loopback::names_loopback(host.to_str().unwrap_or(""))
    {
        return ApiError {
            status: StatusCode::MISDIRECTED_REQUEST,
            message: format!(
                "host {:?} is not a loopback name: the control API answers only clients that \
                 name it (localhost, 127.0.0.1, [::1])",
                host.to_str().unwrap_or("?")
            ),
        }
        .into_response();
    }
    match authorize(&shared.token, request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

impl From<RouterError> for ApiError {
    fn from(e: RouterError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl From<WorkloadError> for ApiError {
    fn from(e: WorkloadError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

fn decode<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ApiError::bad_request(format!("invalid JSON body: {inner}"))
        } else {
            ApiError::bad_request(format!("invalid JSON body at {path}: {inner}"))
        }
    })
}

fn check_subset(shared: &Shared, subset: &str) -> Result<(), ApiError> {
    if shared.router.has_subset(subset) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "unknown subset {subset:?}; the subsets are {}",
            shared.router.subsets().join(", ")
        )))
    }
}

pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let app = routes(shared);
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
}

fn routes(shared: Arc<Shared>) -> Routes {
    Routes::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/weights", get(weights).put(set_weights))
        .route("/v1/routes", get(list_routes))
        .route("/v1/routes/{name}", put(set_route).delete(remove_route))
        .route("/v1/mirrors", get(list_mirrors))
        .route("/v1/mirrors/{name}", put(set_mirror).delete(remove_mirror))
        .route("/v1/subsets", get(subsets))
        .route("/v1/subsets/{subset}", get(subset))
        .route("/v1/subsets/{subset}/scale", put(scale))
        .route("/v1/subsets/{subset}/stats", get(stats))
        .route("/v1/subsets/{subset}/series", get(series))
        .route("/v1/config/reload", post(reload))
        .fallback(|| async { ApiError::not_found("no such endpoint; see docs/agent.md") })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                message: "method not allowed on this endpoint; see docs/agent.md".into(),
            }
        })
        // Last, so that it wraps every route and both fallbacks.
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ))
        .with_state(shared)
}

async fn metrics(State(shared): AppState) -> Response {
    let cluster = shared.config.lock().expect("config lock").cluster.clone();
    let mut text = String::new();
    shared.stats.render_prometheus(&cluster, &mut text);
    let weights = shared.router.weights();
    let label = cluster.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(
        text,
        "# HELP flotilla_agent_weight The weight of a subset in the weighted split.\n\
         # TYPE flotilla_agent_weight gauge\n\
         flotilla_agent_weight{{cluster=\"{label}\",subset=\"canary\"}} {}\n\
         flotilla_agent_weight{{cluster=\"{label}\",subset=\"stable\"}} {}\n\
         # HELP flotilla_agent_ready_endpoints Endpoints of a subset in routing.\n\
         # TYPE flotilla_agent_ready_endpoints gauge",
        weights.canary, weights.stable
    );
    for subset in shared.router.subsets() {
        let _ = writeln!(
            text,
            "flotilla_agent_ready_endpoints{{cluster=\"{label}\",subset=\"{subset}\"}} {}",
            shared.router.ready_endpoints(&subset).len()
        );
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn status(State(shared): AppState) -> Result<Json<AgentStatus>, ApiError> {
    let cluster = shared.config.lock().expect("config lock").cluster.clone();
    let mut subsets = Vec::new();
    for name in shared.router.subsets() {
        subsets.push(shared.workloads.status(&name)?);
    }
    Ok(Json(AgentStatus {
        cluster,
        weights: shared.router.weights(),
        routes: shared.router.routes(),
        mirrors: shared.router.mirrors(),
        subsets,
    }))
}

async fn weights(State(shared): AppState) -> Json<Weights> {
    Json(shared.router.weights())
}

async fn set_weights(State(shared): AppState, body: Bytes) -> Result<Json<Weights>, ApiError> {
    let body: SetWeights = decode(&body)?;
    Ok(Json(shared.router.set_weight(body.canary)?))
}

async fn list_routes(State(shared): AppState) -> Json<Vec<RouteSpec>> {
    Json(shared.router.routes())
}

async fn set_route(
    State(shared): AppState,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<RouteSpec>>, ApiError> {
    let body: RouteBody = decode(&body)?;
    check_subset(&shared, &body.subset)?;
    shared.router.set_route(RouteSpec {
        name,
        subset: body.subset,
        header: body.header,
        cookie: body.cookie,
    })?;
    Ok(Json(shared.router.routes()))
}

async fn remove_route(
    State(shared): AppState,
    Path(name): Path<String>,
) -> Result<Json<Vec<RouteSpec>>, ApiError> {
    if shared.router.remove_route(&name) {
        Ok(Json(shared.router.routes()))
    } else {
        Err(ApiError::not_found(format!("there is no route {name:?}")))
    }
}

async fn list_mirrors(State(shared): AppState) -> Json<Vec<MirrorSpec>> {
    Json(shared.router.mirrors())
}

async fn set_mirror(
    State(shared): AppState,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Vec<MirrorSpec>>, ApiError> {
    let body: MirrorBody = decode(&body)?;
    let subset = body.subset.unwrap_or_else(|| CANARY.to_owned());
    check_subset(&shared, &subset)?;
    shared.router.set_mirror(MirrorSpec {
        name,
        subset,
        percentage: body.percentage,
        header: body.header,
    })?;
    Ok(Json(shared.router.mirrors()))
}

async fn remove_mirror(
    State(shared): AppState,
    Path(name): Path<String>,
) -> Result<Json<Vec<MirrorSpec>>, ApiError> {
    if shared.router.remove_mirror(&name) {
        Ok(Json(shared.router.mirrors()))
    } else {
        Err(ApiError::not_found(format!("there is no mirror {name:?}")))
    }
}

async fn subsets(State(shared): AppState) -> Result<Json<Vec<SubsetStatus>>, ApiError> {
    let mut out = Vec::new();
    for name in shared.router.subsets() {
        out.push(shared.workloads.status(&name)?);
    }
    Ok(Json(out))
}

async fn subset(
    State(shared): AppState,
    Path(subset): Path<String>,
) -> Result<Json<SubsetStatus>, ApiError> {
    check_subset(&shared, &subset)?;
    Ok(Json(shared.workloads.status(&subset)?))
}

async fn scale(
    State(shared): AppState,
    Path(subset): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<SubsetStatus>), ApiError> {
    check_subset(&shared, &subset)?;
    let body: Scale = decode(&body)?;
    // An empty version is only "nothing": no replica runs it.
    if (body.replicas > 0 || !body.version.is_empty())
        && let Err(message) = crate::config::check_version(&body.version)
    {
        return Err(ApiError::bad_request(format!("version: {message}")));
    }
    let max = shared.config.lock().expect("config lock").max_replicas;
    if body.replicas > max {
        return Err(ApiError::bad_request(format!(
            "replicas: {} is more than this agent runs (maxReplicas is {max})",
            body.replicas
        )));
    }
    shared
        .workloads
        .scale(&subset, &body.version, body.replicas)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(shared.workloads.status(&subset)?),
    ))
}

/// The subset's statistics and the query a stats or series request asks.
fn query_of(
    shared: &Shared,
    subset: &str,
    query: Result<Query<WindowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<(Arc<crate::stats::SubsetStats>, WindowQuery), ApiError> {
    check_subset(shared, subset)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let stats = shared
        .stats
        .get(subset)
        .ok_or_else(|| ApiError::bad_request(format!("unknown subset {subset:?}")))?;
    Ok((stats, query))
}

/// The end of the current second: a window ending "now" must include the bucket that holds
/// this second's requests, also when the second starts a new 10-second bucket.
fn now_end() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        .saturating_add(1)
}

async fn stats(
    State(shared): AppState,
    Path(subset): Path<String>,
    query: Result<Query<WindowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Window>, ApiError> {
    let (stats, query) = query_of(&shared, &subset, query)?;
    let (start, end) = plan_window(&query, now_end())?;
    Ok(Json(stats.window(&subset, start, end, query.quantile)))
}

async fn series(
    State(shared): AppState,
    Path(subset): Path<String>,
    query: Result<Query<WindowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<Window>>, ApiError> {
    let (stats, query) = query_of(&shared, &subset, query)?;
    let windows = plan_series(&query, now_end())?
        .into_iter()
        .map(|(from, to)| stats.window(&subset, from, to, query.quantile))
        .collect();
    Ok(Json(windows))
}

async fn reload(State(shared): AppState) -> Result<Json<BTreeMap<String, String>>, ApiError> {
    shared.reload()?;
    Ok(Json(BTreeMap::from([(
        "status".to_owned(),
        "reloaded".to_owned(),
    )])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_open_and_changes_need_the_token() {
        let token = ControlToken::new("s3cret").unwrap();
        let headers = |value: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = value {
                h.insert(header::AUTHORIZATION, v.parse().unwrap());
            }
            h
        };
        let status = |method: Method, value: Option<&str>| {
            authorize(&token, &method, &headers(value)).map_err(|e| e.status)
        };
        assert_eq!(status(Method::GET, None), Ok(()));
        assert_eq!(status(Method::HEAD, Some("Bearer nope")), Ok(()));
        for method in [
            Method::PUT,
            Method::POST,
            Method::DELETE,
            Method::PATCH,
            Method::OPTIONS,
        ] {
            assert_eq!(status(method.clone(), None), Err(StatusCode::UNAUTHORIZED));
            assert_eq!(
                status(method.clone(), Some("Basic czNjcmV0")),
                Err(StatusCode::UNAUTHORIZED)
            );
            assert_eq!(
                status(method.clone(), Some("Bearer s3cre")),
                Err(StatusCode::FORBIDDEN)
            );
            assert_eq!(
                status(method.clone(), Some("Bearer s3cret2")),
                Err(StatusCode::FORBIDDEN)
            );
            assert_eq!(status(method.clone(), Some("Bearer s3cret")), Ok(()));
            assert_eq!(status(method, Some("bearer  s3cret")), Ok(()));
        }
    }
}
