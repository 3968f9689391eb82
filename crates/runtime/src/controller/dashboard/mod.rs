//! The web dashboard `serve` hosts on the API's listener under `dashboard.basePath`: the fleet
//! list, a fleet's waves live from server-sent events, a cluster's plots, a fleet's audit
//! timeline, and the operator's actions behind the API token.
//!
//! Live pages are made of parts (elements with ids) rendered here. Each publish of the views
//! re-renders the parts; a page whose parts changed gets the next sequence number and an event
//! with the changed parts. A page loads a snapshot `{seq, html}` when its stream connects and
//! whenever it sees a sequence gap (or a `gap` event: it fell behind, or a `layout` event:
//! the page's parts changed shape), so it never shows a mix of two states for long and never
//! reloads.
//!
//! | path under the base | answer |
//! |---|---|
//! | `/` | the fleet list |
//! | `/fleets/{name}` | the fleet's waves and clusters, live |
//! | `/fleets/{name}/clusters/{cluster}` | one cluster: state, steps, plots, analysis |
//! | `/fleets/{name}/clusters/{cluster}/body` | that page's body (refreshed on its events) |
//! | `/fleets/{name}/audit` | the audit timeline |
//! | `/live/snapshot?fleet=` | `{seq, html}` of the list (no fleet) or a fleet page |
//! | `/live/stream?fleet=` | `text/event-stream`: `parts`, `layout`, `gap` |
//! | `/api/token` (token) | 204: the token is the API's |
//! | `POST /api/fleets/{name}/commands` (token) | the API's own command call |
//!
//! Reads are open as the API's are (and closed with it by `readsNeedToken`); actions go
//! through the API's token check, the only authority. Every answer carries a strict
//! Content-Security-Policy: scripts and styles only from the dashboard's own files.

pub mod html;
pub mod live;
pub mod page;
pub mod svg;

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use super::shared::Shared;
use live::Live;
use page::Kind;

/// The Content-Security-Policy of every dashboard answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");

/// The dashboard's pages, nested under the base path by the API's router (which adds the
/// list at `<base>/` and the two token-checked calls under `<base>/api/`: the API's own).
pub fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/", get(list_page))
        .route("/fleets/{name}", get(fleet_page))
        .route("/fleets/{name}/audit", get(audit_page))
        .route("/fleets/{name}/clusters/{cluster}", get(cluster_page))
        .route(
            "/fleets/{name}/clusters/{cluster}/body",
            get(cluster_fragment),
        )
        .route("/live/snapshot", get(snapshot))
        .route("/live/stream", get(stream))
        .route(
            "/assets/app.js",
            get(|| asset(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/assets/app.css",
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .fallback(missing_page)
        .layer(axum::middleware::map_response(secure))
}

/// The headers every dashboard answer carries.
pub(crate) async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn base(shared: &Shared) -> &str {
    shared.live.as_ref().map_or("", |l| l.base())
}

fn live(shared: &Shared) -> &Live {
    // The routes exist only when the dashboard is served.
    shared.live.as_ref().expect("the dashboard is served")
}

pub(crate) async fn list_page(State(shared): State<Arc<Shared>>) -> Response {
    let body = live(&shared)
        .snapshot("")
        .map(|(_, body)| body)
        .unwrap_or_default();
    Html(page::shell(
        base(&shared),
        Kind::List,
        "Fleet rollouts",
        None,
        None,
        &body,
    ))
    .into_response()
}

fn missing(shared: &Shared, what: String, fleet: Option<&str>) -> Response {
    let base = base(shared);
    (
        StatusCode::NOT_FOUND,
        Html(page::shell(
            base,
            Kind::Missing,
            "Not found",
            fleet,
            None,
            &page::missing_body(base, &what),
        )),
    )
        .into_response()
}

async fn missing_page(State(shared): State<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    // The nested router sees the path without its base.
    missing(
        &shared,
        format!(
            "The dashboard has no page at {}{}.",
            base(&shared),
            uri.path()
        ),
        None,
    )
}

fn no_fleet(shared: &Shared, name: &str) -> Response {
    missing(
        shared,
        format!("There is no fleet rollout named {name:?}."),
        None,
    )
}

async fn fleet_page(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    match live(&shared).snapshot(&name) {
        Some((_, body)) => Html(page::shell(
            base(&shared),
            Kind::Fleet,
            &name,
            Some(&name),
            None,
            &body,
        ))
        .into_response(),
        None => no_fleet(&shared, &name),
    }
}

/// A cluster page's body, or why there is none.
fn cluster_html(shared: &Shared, name: &str, cluster: &str) -> Result<String, Box<Response>> {
    let rollout = {
        let views = shared.views.read().expect("views lock");
        let Some(view) = views.get(name) else {
            return Err(Box::new(no_fleet(shared, name)));
        };
        match view.2.get(cluster) {
            Some(r) => r.clone(),
            None => {
                return Err(Box::new(missing(
                    shared,
                    format!("Fleet rollout {name:?} has no cluster named {cluster:?}."),
                    Some(name),
                )));
            }
        }
    };
    let plots = shared.plots.lock().expect("plots lock");
    Ok(page::cluster_body(
        base(shared),
        name,
        &rollout,
        plots.get(name, cluster),
    ))
}

async fn cluster_page(
    State(shared): State<Arc<Shared>>,
    Path((name, cluster)): Path<(String, String)>,
) -> Response {
    match cluster_html(&shared, &name, &cluster) {
        Ok(body) => Html(page::shell(
            base(&shared),
            Kind::Cluster,
            &format!("{cluster} · {name}"),
            Some(&name),
            Some(&cluster),
            &body,
        ))
        .into_response(),
        Err(response) => *response,
    }
}

async fn cluster_fragment(
    State(shared): State<Arc<Shared>>,
    Path((name, cluster)): Path<(String, String)>,
) -> Response {
    match cluster_html(&shared, &name, &cluster) {
        Ok(body) => Html(body).into_response(),
        Err(response) => *response,
    }
}

async fn audit_page(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    if !shared.views.read().expect("views lock").contains_key(&name) {
        return no_fleet(&shared, &name);
    }
    let store = shared.store.clone();
    let fleet = name.clone();
    let entries = tokio::task::spawn_blocking(move || store.audit(Some(&fleet), 0)).await;
    match entries {
        Ok(Ok(entries)) => Html(page::shell(
            base(&shared),
            Kind::Audit,
            &format!("{name} · audit"),
            Some(&name),
            None,
            &page::audit_body(&name, &entries),
        ))
        .into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[derive(Deserialize)]
struct PageQuery {
    #[serde(default)]
    fleet: String,
}

async fn snapshot(State(shared): State<Arc<Shared>>, Query(q): Query<PageQuery>) -> Response {
    match live(&shared).snapshot(&q.fleet) {
        Some((seq, html)) => Json(json!({ "seq": seq, "html": html })).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("fleet rollout {:?} not found", q.fleet) })),
        )
            .into_response(),
    }
}

async fn stream(State(shared): State<Arc<Shared>>, Query(q): Query<PageQuery>) -> Response {
    let page = q.fleet;
    let events =
        BroadcastStream::new(live(&shared).subscribe()).filter_map(move |item| match item {
            Ok(event) if event.page == page => Some(Ok::<_, Infallible>(if event.layout {
                Event::default()
                    .event("layout")
                    .id(event.seq.to_string())
                    .data(json!({ "seq": event.seq }).to_string())
            } else {
                Event::default()
                    .event("parts")
                    .id(event.seq.to_string())
                    .data(json!({ "seq": event.seq, "parts": event.parts }).to_string())
            })),
            Ok(_) => None,
            // Fell behind: the page loads a snapshot.
            Err(_) => Some(Ok(Event::default().event("gap").data("{}"))),
        });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
