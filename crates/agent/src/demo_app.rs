//! The demo service: an HTTP service whose behaviour comes from its configuration.
//!
//! Every response carries the version (body and `x-version` header). A request takes a base
//! latency drawn from a log-normal distribution (given by its p50 and p95, seeded), plus
//! `dependency_calls × dependency_latency_ms`: the per-version number of calls to a dependency
//! times the per-cluster latency to it, which is how seed 004's N+1 query hurts only the cluster
//! far from its database. A share `error_rate` of requests answers 500. `/healthz` answers at
//! once. It serves HTTP/1.1 and HTTP/2 (h2c) and finishes its requests in flight on shutdown.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The z-score of the 95th percentile of the standard normal distribution.
const Z95: f64 = 1.644_853_626_951_472_2;

/// How the demo service behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoConfig {
    /// The version label.
    pub version: String,
    /// The address to listen on (loopback by default).
    pub host: IpAddr,
    /// The port (0 picks a free one).
    pub port: u16,
    /// Median base latency, milliseconds.
    pub base_latency_p50_ms: f64,
    /// 95th-percentile base latency, milliseconds (at least the median).
    pub base_latency_p95_ms: f64,
    /// Share of requests answered with 500, 0..=1.
    pub error_rate: f64,
    /// Latency of one dependency call from this cluster, milliseconds.
    pub dependency_latency_ms: f64,
    /// Dependency calls per request (this version's N+1).
    pub dependency_calls: u32,
    /// Seed of the latency and error draws (derived from the port when absent).
    pub seed: Option<u64>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            version: "dev".into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            base_latency_p50_ms: 0.0,
            base_latency_p95_ms: 0.0,
            error_rate: 0.0,
            dependency_latency_ms: 0.0,
            dependency_calls: 0,
            seed: None,
        }
    }
}

/// Why the demo service cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A setting is out of range.
    #[error("{0}")]
    Invalid(String),
    /// The port cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Signal handling could not be set up.
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
}

impl DemoConfig {
    fn validate(&self) -> Result<(), DemoError> {
        let finite_non_negative = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(DemoError::Invalid(format!(
                    "{name} must be a number of milliseconds >= 0, not {v}"
                )))
            }
        };
        finite_non_negative("the base latency p50", self.base_latency_p50_ms)?;
        finite_non_negative("the base latency p95", self.base_latency_p95_ms)?;
        finite_non_negative("the dependency latency", self.dependency_latency_ms)?;
        if self.base_latency_p95_ms < self.base_latency_p50_ms {
            return Err(DemoError::Invalid(format!(
                "the base latency p95 ({} ms) is below its p50 ({} ms)",
                self.base_latency_p95_ms, self.base_latency_p50_ms
            )));
        }
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err(DemoError::Invalid(format!(
                "the error rate must be between 0 and 1, not {}",
                self.error_rate
            )));
        }
        if self.version.is_empty() || self.version.len() > 128 {
            return Err(DemoError::Invalid(
                "the version must be 1 to 128 characters".into(),
            ));
        }
        if http::HeaderValue::from_str(&self.version).is_err() {
            return Err(DemoError::Invalid(format!(
                "the version {:?} cannot be sent in a header",
                self.version
            )));
        }
        Ok(())
    }
}

struct Behaviour {
    config: DemoConfig,
    mu: f64,
    sigma: f64,
    rng: Mutex<StdRng>,
    served: AtomicU64,
}

impl Behaviour {
    /// The latency of one request and whether it fails.
    fn draw(&self) -> (Duration, bool) {
        let mut rng = self.rng.lock().expect("rng lock");
        let base = if self.config.base_latency_p50_ms > 0.0 {
            // Box-Muller: one standard normal from two uniforms.
            let u1: f64 = 1.0 - rng.random::<f64>();
            let u2: f64 = rng.random::<f64>();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (self.mu + self.sigma * z).exp()
        } else {
            0.0
        };
        let fails = self.config.error_rate > 0.0 && rng.random::<f64>() < self.config.error_rate;
        let total =
            base + f64::from(self.config.dependency_calls) * self.config.dependency_latency_ms;
        (Duration::from_secs_f64(total.max(0.0) / 1000.0), fails)
    }
}

/// A running demo service.
#[derive(Debug)]
pub struct DemoServer {
    local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    behaviour: Arc<Behaviour>,
}

impl std::fmt::Debug for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Behaviour")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DemoServer {
    /// Requests answered so far (not counting `/healthz`).
    pub fn requests_served(&self) -> u64 {
        self.behaviour.served.load(Ordering::Relaxed)
    }

    /// Binds and starts serving in the background.
    pub async fn start(config: DemoConfig) -> Result<DemoServer, DemoError> {
        config.validate()?;
        let addr = SocketAddr::new(config.host, config.port);
        let listener =
            crate::serve::bind(addr).map_err(|source| DemoError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| DemoError::Bind { addr, source })?;
        let sigma = if config.base_latency_p50_ms > 0.0 {
            (config.base_latency_p95_ms / config.base_latency_p50_ms).ln() / Z95
        } else {
            0.0
        };
        let seed = config
            .seed
            .unwrap_or(0x5eed_0000 ^ u64::from(local_addr.port()));
        let behaviour = Arc::new(Behaviour {
            mu: config.base_latency_p50_ms.max(f64::MIN_POSITIVE).ln(),
            sigma,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            served: AtomicU64::new(0),
            config,
        });
        let counted = behaviour.clone();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let handler = move |request: Request<Incoming>| {
            let behaviour = behaviour.clone();
            async move { answer(&behaviour, request).await }
        };
        let task = tokio::spawn(crate::serve::serve(
            listener,
            handler,
            shutdown_rx,
            Duration::from_secs(30),
        ));
        Ok(DemoServer {
            local_addr,
            shutdown,
            task,
            behaviour: counted,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, finishes the requests in flight, and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// Runs the demo service until SIGTERM or SIGINT, then finishes its requests in flight.
pub async fn serve(config: DemoConfig) -> Result<(), DemoError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(DemoError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DemoError::Signals)?;
    let server = DemoServer::start(config).await?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}

async fn answer(behaviour: &Behaviour, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let version = &behaviour.config.version;
    let path = request.uri().path().to_owned();
    if path == "/healthz" {
        return respond(StatusCode::OK, version, "text/plain", "ok\n".into());
    }
    behaviour.served.fetch_add(1, Ordering::Relaxed);
    let (latency, fails) = behaviour.draw();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let status = if fails {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let body = serde_json::json!({
        "version": version,
        "path": path,
        "status": status.as_u16(),
        "dependencyCalls": behaviour.config.dependency_calls,
        "latencyMs": latency.as_secs_f64() * 1000.0,
    });
    respond(status, version, "application/json", format!("{body}\n"))
}

fn respond(
    status: StatusCode,
    version: &str,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    if let Ok(v) = http::HeaderValue::from_str(version) {
        headers.insert("x-version", v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behaviour(config: DemoConfig) -> Behaviour {
        let sigma = (config.base_latency_p95_ms / config.base_latency_p50_ms).ln() / Z95;
        Behaviour {
            mu: config.base_latency_p50_ms.ln(),
            sigma,
            rng: Mutex::new(StdRng::seed_from_u64(3)),
            served: AtomicU64::new(0),
            config,
        }
    }

    #[test]
    fn latency_follows_the_configured_quantiles_and_dependency_calls() {
        let b = behaviour(DemoConfig {
            base_latency_p50_ms: 20.0,
            base_latency_p95_ms: 60.0,
            error_rate: 0.1,
            dependency_latency_ms: 5.0,
            dependency_calls: 4,
            ..DemoConfig::default()
        });
        let mut draws: Vec<(f64, bool)> = (0..20_000)
            .map(|_| {
                let (d, f) = b.draw();
                (d.as_secs_f64() * 1000.0 - 20.0, f)
            })
            .collect();
        let errors = draws.iter().filter(|d| d.1).count() as f64 / draws.len() as f64;
        assert!((0.09..0.11).contains(&errors), "{errors}");
        draws.sort_by(|a, b| a.0.total_cmp(&b.0));
        let p50 = draws[10_000].0;
        let p95 = draws[19_000].0;
        assert!((19.0..21.0).contains(&p50), "{p50}");
        assert!((56.0..64.0).contains(&p95), "{p95}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = DemoConfig {
            error_rate: 1.5,
            ..DemoConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("error rate")
        );
        let bad = DemoConfig {
            base_latency_p50_ms: 10.0,
            base_latency_p95_ms: 5.0,
            ..DemoConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("below its p50")
        );
    }
}
