//! Keep-alive HTTP/1.1 connections to the upstreams: a request takes an idle connection to its
//! endpoint or makes one, and the connection comes back to the pool when the response's body
//! has been read to its end. Each router thread holds a pool of its own, so a request and the
//! connection it rides on are driven by one thread, and that pool's lock is not contended.
//!
//! Keyed by the endpoint's socket address, one lookup per request (hyper-util's general client
//! hashed its pool key three times a request and boxed its futures), hashed with foldhash: the
//! keys are the agent's own endpoints, not an attacker's choice, so SipHash's defence against
//! collisions buys nothing for its cost.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The body type the router sends and answers with, and its upstream connections carry.
pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// How long making a connection to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay idle in the pool before it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the whole pool is swept of closed and expired connections (at a request's
/// checkout, so a pool nobody uses costs nothing; an upstream that goes away closes its own).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

type Sender = http1::SendRequest<ProxyBody>;

/// An idle connection, and since when.
struct Idle {
    sender: Sender,
    since: Instant,
}

impl Idle {
    fn usable(&self, now: Instant) -> bool {
        !self.sender.is_closed() && now.saturating_duration_since(self.since) < IDLE_TIMEOUT
    }
}

#[derive(Default)]
struct Idles {
    by_endpoint: HashMap<SocketAddr, Vec<Idle>, foldhash::fast::FixedState>,
    swept: Option<Instant>,
}

impl Idles {
    /// Drops the closed and expired connections of every endpoint, at most every
    /// [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        self.by_endpoint.retain(|_, list| {
            list.retain(|idle| idle.usable(now));
            !list.is_empty()
        });
    }
}

/// Why a request got no response from its upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made (nothing reached the upstream).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The upstream.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The connection was not made within [`CONNECT_TIMEOUT`].
    #[error("no connection to {addr} within {}s", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout {
        /// The upstream.
        addr: SocketAddr,
    },
    /// A new connection closed before it took the request (an upstream that accepts and
    /// closes at once: shutting down, or its accept queue full): nothing reached it.
    #[error("{addr} closed a new connection before taking the request: {source}")]
    NotSent {
        /// The upstream.
        addr: SocketAddr,
        /// What hyper said.
        source: hyper::Error,
    },
    /// The exchange failed once the request was given to a connection.
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

impl UpstreamError {
    /// Whether the request never reached the upstream because no connection could be made
    /// (or a new one closed before it took the request): another endpoint may take it.
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            UpstreamError::Connect { .. }
                | UpstreamError::ConnectTimeout { .. }
                | UpstreamError::NotSent { .. }
        )
    }
}

/// A request its upstream did not answer: why, and the request itself when none of it reached
/// the upstream (no connection could be made, or a new one closed before taking it).
#[derive(Debug)]
pub struct SendError {
    /// Why.
    pub error: UpstreamError,
    /// The request, when nothing of it was sent.
    pub unsent: Option<Request<ProxyBody>>,
}

/// Keep-alive connections to the upstreams, shared by the clones of one pool. The router's
/// threads each hold one, whose connections are driven by the runtime they were made on.
#[derive(Clone, Default)]
pub struct Upstreams {
    idle: Arc<Mutex<Idles>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().expect("upstream pool");
        f.debug_struct("Upstreams")
            .field(
                "idle",
                &idle.by_endpoint.values().map(Vec::len).sum::<usize>(),
            )
            .finish()
    }
}

impl Upstreams {
    /// Sends `request` (origin-form URI, `Host` set) to the upstream at `addr` on an idle
    /// connection, or on a new one. A request an idle connection did not take (the upstream
    /// closed it just then) goes on another, and at last on a new one. A request that did not
    /// reach the upstream because no connection could be made comes back in the error, to go
    /// to another endpoint without a copy made beforehand.
    pub async fn send(
        &self,
        addr: SocketAddr,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<ProxyBody>, SendError> {
        loop {
            let (mut sender, fresh) = match self.take(addr) {
                Some(sender) => (sender, false),
                None => match connect(addr).await {
                    Ok(sender) => (sender, true),
                    Err(error) => {
                        return Err(SendError {
                            error,
                            unsent: Some(request),
                        });
                    }
                },
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = Returning {
                        body,
                        back: Some((self.clone(), addr, sender)),
                    };
                    return Ok(Response::from_parts(parts, body.boxed()));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if !fresh => request = unsent,
                    Some(unsent) => {
                        return Err(SendError {
                            error: UpstreamError::NotSent {
                                addr,
                                source: error.into_error(),
                            },
                            unsent: Some(unsent),
                        });
                    }
                    None => {
                        return Err(SendError {
                            error: UpstreamError::Http(error.into_error()),
                            unsent: None,
                        });
                    }
                },
            }
        }
    }

    /// An idle connection to `addr` ready for a request, taken from the end the connections
    /// are given back to (recently used ones first); closed and expired ones are dropped on
    /// the way.
    fn take(&self, addr: SocketAddr) -> Option<Sender> {
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("upstream pool");
        idle.sweep(now);
        let list = idle.by_endpoint.get_mut(&addr)?;
        let mut i = list.len();
        while i > 0 {
            i -= 1;
            if !list[i].usable(now) {
                list.swap_remove(i);
            } else if list[i].sender.is_ready() {
                return Some(list.swap_remove(i).sender);
            }
        }
        None
    }

    /// Puts a connection whose exchange is over back in the pool.
    fn give_back(&self, addr: SocketAddr, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("upstream pool");
        idle.by_endpoint.entry(addr).or_default().push(Idle {
            sender,
            since: Instant::now(),
        });
    }

    /// How many idle connections the pool holds.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        let idle = self.idle.lock().expect("upstream pool");
        idle.by_endpoint.values().map(Vec::len).sum()
    }
}

/// A new connection to `addr` (`TCP_NODELAY`), driven by a task on the current runtime.
async fn connect(addr: SocketAddr) -> Result<Sender, UpstreamError> {
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(source)) => return Err(UpstreamError::Connect { addr, source }),
        Err(_) => return Err(UpstreamError::ConnectTimeout { addr }),
    };
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(stream))
        .await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// A response body that gives its connection back to the pool once it has been read to its
/// end (a body dropped before its end, or broken, closes the connection with it).
struct Returning {
    body: Incoming,
    back: Option<(Upstreams, SocketAddr, Sender)>,
}

impl Returning {
    fn give_back(&mut self) {
        if let Some((pool, addr, sender)) = self.back.take() {
            pool.give_back(addr, sender);
        }
    }
}

impl Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            Some(Err(_)) => this.back = None,
            None => this.give_back(),
            // Trailers are a body's last frame (HTTP/1.1's chunked ones), and whoever reads
            // them may not poll again.
            Some(Ok(f)) if f.is_trailers() || this.body.is_end_stream() => this.give_back(),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        // A body with nothing left to read (an empty one is never polled) is over too.
        if self.body.is_end_stream() {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo_app::{DemoConfig, DemoServer};
    use http::header;

    fn get(server: SocketAddr) -> Request<ProxyBody> {
        let mut request = Request::get("/x")
            .body(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap();
        request.headers_mut().insert(
            header::HOST,
            http::HeaderValue::from_str(&server.to_string()).unwrap(),
        );
        request
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_body_is_read_and_not_before() {
        let server = DemoServer::start(DemoConfig::default()).await.unwrap();
        let addr = server.local_addr();
        let pool = Upstreams::default();
        let first = pool.send(addr, get(addr)).await.unwrap();
        assert_eq!(first.status(), 200);
        // Its body is not read yet: the connection is not the pool's.
        assert_eq!(pool.idle_count(), 0);
        let second = pool.send(addr, get(addr)).await.unwrap();
        first.into_body().collect().await.unwrap();
        second.into_body().collect().await.unwrap();
        assert_eq!(pool.idle_count(), 2, "both connections are back");
        for _ in 0..20 {
            let response = pool.send(addr, get(addr)).await.unwrap();
            response.into_body().collect().await.unwrap();
        }
        assert_eq!(
            pool.idle_count(),
            2,
            "no new connection for sequential requests"
        );
        assert_eq!(server.requests_served(), 22);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let server = DemoServer::start(DemoConfig::default()).await.unwrap();
        let addr = server.local_addr();
        let pool = Upstreams::default();
        let response = pool.send(addr, get(addr)).await.unwrap();
        let body = response.into_body();
        assert!(!body.is_end_stream(), "the demo app answers with a body");
        drop(body);
        assert_eq!(pool.idle_count(), 0);
        // An empty body is over before it is read: its connection comes back.
        let mut head = get(addr);
        *head.method_mut() = http::Method::HEAD;
        let response = pool.send(addr, head).await.unwrap();
        assert!(response.body().is_end_stream());
        drop(response);
        assert_eq!(pool.idle_count(), 1);
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The listener is gone: nothing listens there.
        let err = Upstreams::default()
            .send(addr, get(addr))
            .await
            .unwrap_err();
        assert!(err.error.is_connect(), "{}", err.error);
        assert!(
            err.error.to_string().contains(&addr.to_string()),
            "{}",
            err.error
        );
        // The request comes back, as it was, to go elsewhere.
        let unsent = err.unsent.expect("nothing was sent");
        assert_eq!(unsent.uri(), "/x");
        assert_eq!(unsent.headers()[header::HOST], addr.to_string().as_str());
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_while_idle_is_not_used() {
        let server = DemoServer::start(DemoConfig::default()).await.unwrap();
        let addr = server.local_addr();
        let pool = Upstreams::default();
        let response = pool.send(addr, get(addr)).await.unwrap();
        response.into_body().collect().await.unwrap();
        assert_eq!(pool.idle_count(), 1);
        server.shutdown().await;
        // Let the connection's task see the upstream's end.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The server is gone and closed its connections: the next request does not ride on
        // the idle one, it tries a new connection and is refused.
        let err = pool.send(addr, get(addr)).await.unwrap_err();
        assert!(err.error.is_connect(), "{}", err.error);
        assert!(err.unsent.is_some());
    }
}
