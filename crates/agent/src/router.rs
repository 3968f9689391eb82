//! The router: an HTTP/1.1 and HTTP/2 (h2c) reverse proxy that picks a subset per request.
//!
//! Order: header routes (exact, prefix, regex), then cookie routes, then the weighted
//! stable/canary split drawn from a seeded RNG. A mirror route may copy a percentage of requests
//! to another subset (its responses are discarded). Within a subset, requests go round-robin over
//! the ready endpoints; with none ready the answer is 503 naming the subset.
//!
//! The routing table is an immutable snapshot behind an `ArcSwap`: a change swaps the whole
//! table at once, a request reads one snapshot and keeps the endpoint it picked, so a change
//! never resets a connection or moves a request in flight.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::config::{CANARY, STABLE};
use crate::stats::Stats;

/// The body type the router sends and answers with.
pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// The response header that names the subset a request was routed to.
pub const SUBSET_HEADER: &str = "x-flotilla-subset";
/// The largest request body the router buffers to mirror a request.
const MIRROR_BODY_LIMIT: usize = 4 * 1024 * 1024;
/// How long an upstream has to answer with a response head.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// A header match: exactly one of `exact`, `prefix`, `regex`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderMatch {
    /// The header name (case-insensitive).
    pub name: String,
    /// The value, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// A prefix of the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// A regular expression the whole value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// A cookie match: the cookie `name` has exactly `value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CookieMatch {
    /// The cookie name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// A named route: requests that match go to `subset`, whatever the weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    /// The route's name (what removes it).
    pub name: String,
    /// The subset that matching requests go to.
    pub subset: String,
    /// Match on a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
    /// Match on a cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<CookieMatch>,
}

/// A named mirror route: `percentage` of the requests (that match `header`, when given) are
/// copied to `subset`; the copies' responses are discarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorSpec {
    /// The mirror's name.
    pub name: String,
    /// Where copies go.
    #[serde(default = "default_mirror_subset")]
    pub subset: String,
    /// The share of requests copied, 0..=100.
    pub percentage: u32,
    /// Only requests that match this header are copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
}

fn default_mirror_subset() -> String {
    CANARY.to_owned()
}

/// Why a route or mirror cannot be used, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The field, relative to the route (`header.regex`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn spec_error(field: &str, message: String) -> SpecError {
    SpecError {
        field: field.to_owned(),
        message,
    }
}

fn unknown_subset(field: &str, subset: &str, known: &BTreeSet<&str>) -> SpecError {
    spec_error(
        field,
        format!(
            "unknown subset {subset:?}; the subsets are {}",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        ),
    )
}

#[derive(Debug, Clone)]
enum ValueMatch {
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

#[derive(Debug, Clone)]
struct CompiledHeader {
    name: HeaderName,
    value: ValueMatch,
}

impl HeaderMatch {
    fn compile(&self, field: &str) -> Result<CompiledHeader, SpecError> {
        let name = HeaderName::from_bytes(self.name.as_bytes()).map_err(|_| {
            spec_error(
                &format!("{field}.name"),
                format!("{:?} is not a valid header name", self.name),
            )
        })?;
        let value = match (&self.exact, &self.prefix, &self.regex) {
            (Some(v), None, None) => ValueMatch::Exact(v.clone()),
            (None, Some(v), None) => ValueMatch::Prefix(v.clone()),
            (None, None, Some(v)) => {
                let anchored = format!("^(?:{v})$");
                ValueMatch::Regex(
                    regex::RegexBuilder::new(&anchored)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| {
                            spec_error(
                                &format!("{field}.regex"),
                                format!("invalid regular expression {v:?}: {e}"),
                            )
                        })?,
                )
            }
            _ => {
                return Err(spec_error(
                    field,
                    "a header match has exactly one of exact, prefix or regex".into(),
                ));
            }
        };
        Ok(CompiledHeader { name, value })
    }
}

impl CompiledHeader {
    fn matches(&self, headers: &HeaderMap) -> bool {
        headers.get_all(&self.name).iter().any(|v| {
            let Ok(v) = v.to_str() else { return false };
            match &self.value {
                ValueMatch::Exact(want) => v == want,
                ValueMatch::Prefix(want) => v.starts_with(want.as_str()),
                ValueMatch::Regex(re) => re.is_match(v),
            }
        })
    }
}

#[derive(Debug, Clone)]
enum Matcher {
    Header(CompiledHeader),
    Cookie(CookieMatch),
}

/// A usable route.
#[derive(Debug, Clone)]
pub struct Route {
    spec: RouteSpec,
    matcher: Matcher,
}

impl RouteSpec {
    /// Checks the route against the known subsets and compiles it.
    pub fn compile(&self, known: &BTreeSet<&str>) -> Result<Route, SpecError> {
        if self.name.trim().is_empty() {
            return Err(spec_error("name", "a route needs a name".into()));
        }
        if !known.contains(self.subset.as_str()) {
            return Err(unknown_subset("subset", &self.subset, known));
        }
        let matcher = match (&self.header, &self.cookie) {
            (Some(h), None) => Matcher::Header(h.compile("header")?),
            (None, Some(c)) => {
                if c.name.is_empty() || c.name.contains([';', '=', ' ']) {
                    return Err(spec_error(
                        "cookie.name",
                        format!("{:?} is not a valid cookie name", c.name),
                    ));
                }
                Matcher::Cookie(c.clone())
            }
            _ => {
                return Err(spec_error(
                    "",
                    "a route has exactly one of header or cookie".into(),
                ));
            }
        };
        Ok(Route {
            spec: self.clone(),
            matcher,
        })
    }
}

impl Route {
    fn matches(&self, headers: &HeaderMap) -> bool {
        match &self.matcher {
            Matcher::Header(h) => h.matches(headers),
            Matcher::Cookie(c) => cookie_matches(headers, c),
        }
    }

    fn is_header(&self) -> bool {
        matches!(self.matcher, Matcher::Header(_))
    }
}

fn cookie_matches(headers: &HeaderMap, want: &CookieMatch) -> bool {
    headers.get_all(header::COOKIE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(';').any(|pair| {
                pair.trim()
                    .split_once('=')
                    .is_some_and(|(n, val)| n.trim() == want.name && val.trim() == want.value)
            })
        })
    })
}

/// A usable mirror route.
#[derive(Debug, Clone)]
pub struct Mirror {
    spec: MirrorSpec,
    header: Option<CompiledHeader>,
}

impl MirrorSpec {
    /// Checks the mirror against the known subsets and compiles it.
    pub fn compile(&self, known: &BTreeSet<&str>) -> Result<Mirror, SpecError> {
        if self.name.trim().is_empty() {
            return Err(spec_error("name", "a mirror needs a name".into()));
        }
        if !known.contains(self.subset.as_str()) {
            return Err(unknown_subset("subset", &self.subset, known));
        }
        if self.percentage > 100 {
            return Err(spec_error(
                "percentage",
                format!("percentage {} is above 100", self.percentage),
            ));
        }
        let header = self
            .header
            .as_ref()
            .map(|h| h.compile("header"))
            .transpose()?;
        Ok(Mirror {
            spec: self.clone(),
            header,
        })
    }
}

/// The weights in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Weights {
    /// The canary's weight.
    pub canary: u32,
    /// The stable's weight (`max - canary`).
    pub stable: u32,
    /// The total.
    pub max: u32,
    /// Increases with every change to weights, routes or mirrors.
    pub generation: u64,
}

/// One immutable routing table.
#[derive(Debug, Clone)]
struct Table {
    canary: u32,
    max: u32,
    routes: Vec<Route>,
    mirrors: Vec<Mirror>,
    generation: u64,
}

/// The ready endpoints of one subset.
#[derive(Debug, Default)]
struct Endpoints {
    ready: ArcSwap<Vec<SocketAddr>>,
    next: AtomicUsize,
}

impl Endpoints {
    fn pick(&self, skip: &[SocketAddr]) -> Option<SocketAddr> {
        let ready = self.ready.load();
        if ready.is_empty() {
            return None;
        }
        for _ in 0..ready.len() {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
            if !skip.contains(&ready[i]) {
                return Some(ready[i]);
            }
        }
        None
    }
}

/// Why a routing change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// The weight is out of range.
    #[error("canary weight {weight} is out of range 0..={max}")]
    WeightOutOfRange {
        /// What was asked.
        weight: u32,
        /// The largest allowed.
        max: u32,
    },
    /// The route or mirror is invalid.
    #[error("{}{}", if .0.field.is_empty() { String::new() } else { format!("{}: ", .0.field) }, .0.message)]
    Spec(SpecError),
}

/// The router's state; [`Router::handle`] answers one request.
pub struct Router {
    table: ArcSwap<Table>,
    update: Mutex<()>,
    /// Read per request, written only when a subset is added: a snapshot, not a lock.
    endpoints: ArcSwap<BTreeMap<String, Arc<Endpoints>>>,
    rng: Mutex<StdRng>,
    stats: Arc<Stats>,
    client: Upstreams,
}

/// An HTTP client to the upstreams with its own pool of keep-alive connections. The router's
/// threads each hold one, so a request and the upstream connection it rides on are driven by
/// the same thread (no cross-thread wakeup per request).
pub type Upstreams = Client<HttpConnector, ProxyBody>;

/// A new client to the upstreams, with its own connection pool, whose connections are driven
/// by the runtime it is first used on.
pub fn upstreams() -> Upstreams {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("weights", &self.weights())
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A router over `subsets` (which must include `stable` and `canary`) with these initial
    /// weights and routes, already validated.
    pub fn new(
        subsets: &[String],
        max_weight: u32,
        canary: u32,
        routes: &[RouteSpec],
        mirrors: &[MirrorSpec],
        seed: u64,
        stats: Arc<Stats>,
    ) -> Result<Router, RouterError> {
        let client = upstreams();
        let router = Router {
            table: ArcSwap::from_pointee(Table {
                canary: 0,
                max: max_weight.max(1),
                routes: Vec::new(),
                mirrors: Vec::new(),
                generation: 0,
            }),
            update: Mutex::new(()),
            endpoints: ArcSwap::from_pointee(
                subsets
                    .iter()
                    .map(|s| (s.clone(), Arc::new(Endpoints::default())))
                    .collect(),
            ),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats,
            client,
        };
        router.set_weight(canary)?;
        for route in routes {
            router.set_route(route.clone())?;
        }
        for mirror in mirrors {
            router.set_mirror(mirror.clone())?;
        }
        Ok(router)
    }

    /// The subsets this router knows.
    pub fn subsets(&self) -> Vec<String> {
        self.endpoints.load().keys().cloned().collect()
    }

    /// Whether the router knows a subset.
    pub fn has_subset(&self, subset: &str) -> bool {
        self.endpoints.load().contains_key(subset)
    }

    /// Adds a subset (with no endpoints) if it is new.
    pub fn add_subset(&self, subset: &str) {
        let _update = self.update.lock().expect("update lock");
        if !self.has_subset(subset) {
            let mut map = self.endpoints.load().as_ref().clone();
            map.insert(subset.to_owned(), Arc::new(Endpoints::default()));
            self.endpoints.store(Arc::new(map));
        }
        self.stats.ensure(subset);
    }

    /// Replaces the ready endpoints of a subset.
    pub fn set_endpoints(&self, subset: &str, ready: Vec<SocketAddr>) {
        if let Some(e) = self.endpoints_of(subset) {
            e.ready.store(Arc::new(ready));
        }
    }

    /// The ready endpoints of a subset.
    pub fn ready_endpoints(&self, subset: &str) -> Vec<SocketAddr> {
        self.endpoints_of(subset)
            .map(|e| e.ready.load().as_ref().clone())
            .unwrap_or_default()
    }

    fn endpoints_of(&self, subset: &str) -> Option<Arc<Endpoints>> {
        self.endpoints.load().get(subset).cloned()
    }

    /// The next endpoint of `subset` not in `skip`; `None` when the subset has none left (or
    /// is unknown).
    fn pick(&self, subset: &str, skip: &[SocketAddr]) -> Option<SocketAddr> {
        self.endpoints.load().get(subset)?.pick(skip)
    }

    /// The weights in effect.
    pub fn weights(&self) -> Weights {
        let t = self.table.load();
        Weights {
            canary: t.canary,
            stable: t.max - t.canary,
            max: t.max,
            generation: t.generation,
        }
    }

    /// The routes in effect, in the order they are tried.
    pub fn routes(&self) -> Vec<RouteSpec> {
        self.table
            .load()
            .routes
            .iter()
            .map(|r| r.spec.clone())
            .collect()
    }

    /// The mirror routes in effect.
    pub fn mirrors(&self) -> Vec<MirrorSpec> {
        self.table
            .load()
            .mirrors
            .iter()
            .map(|m| m.spec.clone())
            .collect()
    }

    fn known(&self) -> Vec<String> {
        self.subsets()
    }

    fn update<T>(
        &self,
        change: impl FnOnce(&mut Table) -> Result<T, RouterError>,
    ) -> Result<T, RouterError> {
        let _guard = self.update.lock().expect("update lock");
        let mut next = Table::clone(&self.table.load());
        let out = change(&mut next)?;
        next.generation += 1;
        self.table.store(Arc::new(next));
        Ok(out)
    }

    /// Sets the canary's weight (the stable gets the rest).
    pub fn set_weight(&self, canary: u32) -> Result<Weights, RouterError> {
        self.update(|t| {
            if canary > t.max {
                return Err(RouterError::WeightOutOfRange {
                    weight: canary,
                    max: t.max,
                });
            }
            t.canary = canary;
            Ok(())
        })?;
        Ok(self.weights())
    }

    /// Adds or replaces a route (by name). Header routes are tried before cookie routes, each
    /// in the order they were first set.
    pub fn set_route(&self, spec: RouteSpec) -> Result<(), RouterError> {
        let names = self.known();
        let known = names.iter().map(String::as_str).collect();
        let route = spec.compile(&known).map_err(RouterError::Spec)?;
        self.update(|t| {
            match t.routes.iter_mut().find(|r| r.spec.name == spec.name) {
                Some(existing) => *existing = route,
                None => t.routes.push(route),
            }
            // Stable sort: header routes first, each kind keeping its order.
            t.routes.sort_by_key(|r| !r.is_header());
            Ok(())
        })
    }

    /// Removes a route; false when there was none by that name.
    pub fn remove_route(&self, name: &str) -> bool {
        // Nothing to remove aborts the update, so that the generation does not move.
        self.update(|t| {
            let before = t.routes.len();
            t.routes.retain(|x| x.spec.name != name);
            if before == t.routes.len() {
                return Err(RouterError::Spec(spec_error("name", String::new())));
            }
            Ok(())
        })
        .is_ok()
    }

    /// Adds or replaces a mirror route (by name).
    pub fn set_mirror(&self, spec: MirrorSpec) -> Result<(), RouterError> {
        let names = self.known();
        let known = names.iter().map(String::as_str).collect();
        let mirror = spec.compile(&known).map_err(RouterError::Spec)?;
        self.update(|t| {
            match t.mirrors.iter_mut().find(|m| m.spec.name == spec.name) {
                Some(existing) => *existing = mirror,
                None => t.mirrors.push(mirror),
            }
            Ok(())
        })
    }

    /// Removes a mirror route; false when there was none by that name.
    pub fn remove_mirror(&self, name: &str) -> bool {
        // Nothing to remove aborts the update, so that the generation does not move.
        self.update(|t| {
            let before = t.mirrors.len();
            t.mirrors.retain(|x| x.spec.name != name);
            if before == t.mirrors.len() {
                return Err(RouterError::Spec(spec_error("name", String::new())));
            }
            Ok(())
        })
        .is_ok()
    }

    /// Picks the subset for a request and whether (and where) to mirror it.
    fn choose(&self, headers: &HeaderMap) -> (Cow<'static, str>, Option<String>) {
        let table = self.table.load();
        let routed = table
            .routes
            .iter()
            .find(|r| r.matches(headers))
            .map(|r| Cow::Owned(r.spec.subset.clone()));
        let mut rng = self.rng.lock().expect("rng lock");
        let subset = routed.unwrap_or_else(|| {
            if rng.random_range(0..table.max) < table.canary {
                Cow::Borrowed(CANARY)
            } else {
                Cow::Borrowed(STABLE)
            }
        });
        let mirror = table
            .mirrors
            .iter()
            .filter(|m| m.spec.subset != subset)
            .find(|m| m.header.as_ref().is_none_or(|h| h.matches(headers)))
            .and_then(|m| {
                (rng.random_range(0..100u32) < m.spec.percentage).then(|| m.spec.subset.clone())
            });
        (subset, mirror)
    }

    /// Answers one request: routes it, proxies it, records it.
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<ProxyBody> {
        let client = self.client.clone();
        self.handle_with(&client, request).await
    }

    /// [`Router::handle`], proxying through `client` (a router thread's own).
    pub async fn handle_with(
        self: Arc<Self>,
        client: &Upstreams,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let (subset, mirror) = self.choose(request.headers());
        let response = self.forward(client, &subset, mirror, request).await;
        let mut response = response;
        let value = match &subset {
            Cow::Borrowed(name) => Ok(HeaderValue::from_static(name)),
            Cow::Owned(name) => HeaderValue::from_str(name),
        };
        if let Ok(value) = value {
            response
                .headers_mut()
                .insert(HeaderName::from_static(SUBSET_HEADER), value);
        }
        self.stats.record(
            &subset,
            response.status().as_u16(),
            started.elapsed(),
            SystemTime::now(),
        );
        response
    }

    async fn forward(
        &self,
        client: &Upstreams,
        subset: &str,
        mirror: Option<String>,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        if !self.has_subset(subset) {
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("no ready endpoint in subset {subset:?}: the agent has no such subset\n"),
            );
        }
        let (parts, body) = request.into_parts();
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        if !headers.contains_key(header::HOST)
            && let Some(authority) = parts.uri.authority()
            && let Ok(v) = HeaderValue::from_str(authority.as_str())
        {
            headers.insert(header::HOST, v);
        }
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        // The headers are moved into the last request built, cloned for the others (a mirror,
        // a first attempt that may be retried).
        let mut headers = Some(headers);
        let build = |addr: SocketAddr,
                     body: ProxyBody,
                     headers: &mut Option<HeaderMap>,
                     last: bool|
         -> Option<Request<ProxyBody>> {
            let authority = Authority::try_from(addr.to_string()).ok()?;
            let uri = Uri::builder()
                .scheme(Scheme::HTTP)
                .authority(authority)
                .path_and_query(path.clone())
                .build()
                .ok()?;
            let mut req = Request::builder()
                .method(parts.method.clone())
                .uri(uri)
                .body(body)
                .ok()?;
            *req.headers_mut() = if last {
                headers.take()?
            } else {
                headers.clone()?
            };
            Some(req)
        };

        // A request with no body can be sent again to another endpoint when the connection
        // could not be made (nothing reached the first one); a mirrored request is buffered.
        let empty = body.is_end_stream();
        let (buffered, mut body): (Option<Bytes>, Option<ProxyBody>) = if empty {
            (None, None)
        } else if mirror.is_some() {
            match Limited::new(body, MIRROR_BODY_LIMIT).collect().await {
                Ok(collected) => (Some(collected.to_bytes()), None),
                Err(e) => {
                    return plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("cannot mirror the request: its body could not be read: {e}\n"),
                    );
                }
            }
        } else {
            (None, Some(body.boxed()))
        };
        let make_body = |body: &mut Option<ProxyBody>| -> ProxyBody {
            if let Some(b) = body.take() {
                b
            } else if let Some(bytes) = &buffered {
                full(bytes.clone())
            } else {
                empty_body()
            }
        };

        if let Some(mirror) = mirror
            && let Some(target) = self.pick(&mirror, &[])
            && let Some(req) = build(target, make_body(&mut None), &mut headers, false)
        {
            let client = client.clone();
            tokio::spawn(async move {
                if let Ok(Ok(response)) =
                    tokio::time::timeout(UPSTREAM_TIMEOUT, client.request(req)).await
                {
                    let _ = tokio::time::timeout(UPSTREAM_TIMEOUT, response.into_body().collect())
                        .await;
                }
            });
        }

        let mut tried: Vec<SocketAddr> = Vec::new();
        loop {
            let Some(addr) = self.pick(subset, &tried) else {
                return if tried.is_empty() {
                    plain(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("no ready endpoint in subset {subset:?}\n"),
                    )
                } else {
                    plain(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "no endpoint of subset {subset:?} accepted a connection (tried {})\n",
                            list(&tried)
                        ),
                    )
                };
            };
            tried.push(addr);
            let retryable = body.is_none();
            // A request with a body is never sent again; nor is a third attempt.
            let last = !retryable || tried.len() >= 3;
            let Some(req) = build(addr, make_body(&mut body), &mut headers, last) else {
                return plain(
                    StatusCode::BAD_REQUEST,
                    format!("cannot forward a request for {path:?}\n"),
                );
            };
            match tokio::time::timeout(UPSTREAM_TIMEOUT, client.request(req)).await {
                Ok(Ok(response)) => {
                    let (mut parts, body) = response.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    return Response::from_parts(parts, body.boxed());
                }
                Ok(Err(e)) if e.is_connect() && retryable && tried.len() < 3 => continue,
                Ok(Err(e)) => {
                    return plain(
                        StatusCode::BAD_GATEWAY,
                        format!(
                            "upstream {addr} of subset {subset:?} failed: {}\n",
                            error_chain(&e)
                        ),
                    );
                }
                Err(_) => {
                    return plain(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!(
                            "upstream {addr} of subset {subset:?} did not answer within {}s\n",
                            UPSTREAM_TIMEOUT.as_secs()
                        ),
                    );
                }
            }
        }
    }
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error and its sources, joined with ": ".
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The hop-by-hop headers (RFC 9110 §7.6.1), as names ready to look up (no parsing per
/// request).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::TRANSFER_ENCODING,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// A body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn empty_body() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// A plain-text response the router makes itself.
fn plain(status: StatusCode, text: String) -> Response<ProxyBody> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(canary: u32, seed: u64) -> Router {
        Router::new(
            &["canary".into(), "stable".into(), "preview".into()],
            100,
            canary,
            &[],
            &[],
            seed,
            Arc::new(Stats::new(["canary", "stable", "preview"])),
        )
        .unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn header_route(name: &str, subset: &str, m: HeaderMatch) -> RouteSpec {
        RouteSpec {
            name: name.into(),
            subset: subset.into(),
            header: Some(m),
            cookie: None,
        }
    }

    #[test]
    fn header_routes_come_before_cookie_routes_and_weights() {
        let r = router(0, 1);
        r.set_route(RouteSpec {
            name: "cookie".into(),
            subset: "canary".into(),
            header: None,
            cookie: Some(CookieMatch {
                name: "canary".into(),
                value: "yes".into(),
            }),
        })
        .unwrap();
        r.set_route(header_route(
            "preview",
            "preview",
            HeaderMatch {
                name: "X-Preview".into(),
                exact: None,
                prefix: None,
                regex: Some("team-(a|b)".into()),
            },
        ))
        .unwrap();
        let cookie = headers(&[("cookie", "a=1; canary=yes")]);
        assert_eq!(r.choose(&cookie).0, "canary");
        let both = headers(&[("cookie", "canary=yes"), ("x-preview", "team-b")]);
        assert_eq!(r.choose(&both).0, "preview");
        // The regex is anchored.
        let partial = headers(&[("x-preview", "team-bb")]);
        assert_eq!(r.choose(&partial).0, "stable");
        assert_eq!(r.routes()[0].name, "preview");
        assert!(r.remove_route("preview"));
        assert!(!r.remove_route("preview"));
        assert_eq!(r.choose(&both).0, "canary");
    }

    #[test]
    fn bad_routes_and_weights_change_nothing() {
        let r = router(10, 1);
        let before = r.weights();
        let err = r.set_weight(101).unwrap_err();
        assert_eq!(err.to_string(), "canary weight 101 is out of range 0..=100");
        let err = r
            .set_route(header_route(
                "x",
                "canry",
                HeaderMatch {
                    name: "x".into(),
                    exact: Some("1".into()),
                    prefix: None,
                    regex: None,
                },
            ))
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown subset \"canry\""),
            "{err}"
        );
        let err = r
            .set_route(header_route(
                "x",
                "canary",
                HeaderMatch {
                    name: "x".into(),
                    exact: None,
                    prefix: None,
                    regex: Some("(".into()),
                },
            ))
            .unwrap_err();
        assert!(err.to_string().starts_with("header.regex: "), "{err}");
        assert_eq!(r.weights(), before);
        assert!(r.routes().is_empty());
    }

    #[test]
    fn the_seeded_split_is_reproducible() {
        let draw = |seed| {
            let r = router(30, seed);
            (0..1000)
                .map(|_| r.choose(&HeaderMap::new()).0)
                .collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        let canary = a.iter().filter(|s| *s == "canary").count();
        assert!((240..=360).contains(&canary), "{canary}");
    }

    #[test]
    fn round_robin_skips_endpoints_already_tried() {
        let e = Endpoints::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        e.ready.store(Arc::new(vec![a, b]));
        let picks: Vec<_> = (0..4).map(|_| e.pick(&[]).unwrap()).collect();
        assert_eq!(picks, [a, b, a, b]);
        assert_eq!(e.pick(&[a]), Some(b));
        assert_eq!(e.pick(&[a, b]), None);
    }
}
