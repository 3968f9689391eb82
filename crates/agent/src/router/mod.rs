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
//!
//! Here the table and the choice of a subset; routes and mirrors are compiled into [`Route`]
//! and [`Mirror`] by [`compile_route`] and [`compile_mirror`]; each subset's ready endpoints
//! are kept apart from the table; a request is proxied through its router thread's [`Lane`]
//! (its pool of [`Upstreams`] and its requests' deadlines).

mod deadline;
mod endpoints;
mod matching;
mod pool;
mod proxy;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use flotilla_agent_backend::wire::{CANARY, MirrorSpec, RouteSpec, STABLE, Weights};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::stats::Stats;
use endpoints::SubsetEndpoints;
use matching::spec_error;
use proxy::forward;

pub use matching::{Mirror, Route, SpecError, compile_mirror, compile_route};
pub use pool::{ProxyBody, SendError, UpstreamError, Upstreams};
pub use proxy::{full, lane};

/// The response header that names the subset a request was routed to.
pub const SUBSET_HEADER: &str = "x-flotilla-subset";
/// [`SUBSET_HEADER`], as a header name made once.
const SUBSET_HEADER_NAME: HeaderName = HeaderName::from_static(SUBSET_HEADER);

/// One immutable routing table.
#[derive(Debug, Clone)]
struct Table {
    canary: u32,
    max: u32,
    routes: Vec<Route>,
    mirrors: Vec<Mirror>,
    generation: u64,
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
    endpoints: SubsetEndpoints,
    rng: Mutex<StdRng>,
    stats: Arc<Stats>,
}

/// What one router thread keeps for its requests (made by [`lane`] on that thread): its pool of
/// upstream connections and its requests' deadlines. Clones share them.
#[derive(Clone)]
pub struct Lane {
    upstreams: Upstreams,
    deadlines: deadline::Deadlines,
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
        let router = Router {
            table: ArcSwap::from_pointee(Table {
                canary: 0,
                max: max_weight.max(1),
                routes: Vec::new(),
                mirrors: Vec::new(),
                generation: 0,
            }),
            update: Mutex::new(()),
            endpoints: SubsetEndpoints::new(subsets),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats,
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
        self.endpoints.names()
    }

    /// Whether the router knows a subset.
    pub fn has_subset(&self, subset: &str) -> bool {
        self.endpoints.contains(subset)
    }

    /// Adds a subset (with no endpoints) if it is new.
    pub fn add_subset(&self, subset: &str) {
        let _update = self.update.lock().expect("update lock");
        self.endpoints.add(subset);
        self.stats.ensure(subset);
    }

    /// Replaces the ready endpoints of a subset.
    pub fn set_endpoints(&self, subset: &str, ready: Vec<SocketAddr>) {
        self.endpoints.set_ready(subset, ready);
    }

    /// The ready endpoints of a subset.
    pub fn ready_endpoints(&self, subset: &str) -> Vec<SocketAddr> {
        self.endpoints.ready(subset)
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
            .map(|r| r.spec().clone())
            .collect()
    }

    /// The mirror routes in effect.
    pub fn mirrors(&self) -> Vec<MirrorSpec> {
        self.table
            .load()
            .mirrors
            .iter()
            .map(|m| m.spec().clone())
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
        let route = compile_route(&spec, &known).map_err(RouterError::Spec)?;
        self.update(|t| {
            match t.routes.iter_mut().find(|r| r.spec().name == spec.name) {
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
            t.routes.retain(|x| x.spec().name != name);
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
        let mirror = compile_mirror(&spec, &known).map_err(RouterError::Spec)?;
        self.update(|t| {
            match t.mirrors.iter_mut().find(|m| m.spec().name == spec.name) {
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
            t.mirrors.retain(|x| x.spec().name != name);
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
            .map(|r| Cow::Owned(r.spec().subset.clone()));
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
            .filter(|m| m.spec().subset != subset)
            .find(|m| m.matches(headers))
            .and_then(|m| {
                (rng.random_range(0..100u32) < m.spec().percentage).then(|| m.spec().subset.clone())
            });
        (subset, mirror)
    }

    /// Answers one request: routes it, proxies it through `lane` (the router thread's own),
    /// records it.
    pub async fn handle(&self, lane: &Lane, request: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let (subset, mirror) = self.choose(request.headers());
        let response = forward(&self.endpoints, lane, &subset, mirror, request).await;
        let mut response = response;
        let value = match &subset {
            Cow::Borrowed(name) => Ok(HeaderValue::from_static(name)),
            Cow::Owned(name) => HeaderValue::from_str(name),
        };
        if let Ok(value) = value {
            response.headers_mut().insert(SUBSET_HEADER_NAME, value);
        }
        self.stats.record(
            &subset,
            response.status().as_u16(),
            started.elapsed(),
            SystemTime::now(),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use flotilla_agent_backend::wire::{CookieMatch, HeaderMatch};

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
}
