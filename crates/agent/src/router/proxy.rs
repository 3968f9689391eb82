//! Proxying one request: hop-by-hop headers stripped, the request sent to a ready endpoint
//! of its subset (retried on another when nothing reached the first), a copy sent to a mirror,
//! and the answers the router makes itself when no endpoint can take it (503, 502, 504).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use flotilla_agent_backend::client::error_chain;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming};

use super::Lane;
use super::deadline::Deadlines;
use super::endpoints::SubsetEndpoints;
use super::pool::{ProxyBody, SendError, Upstreams};

/// The largest request body the router buffers to mirror a request.
const MIRROR_BODY_LIMIT: usize = 4 * 1024 * 1024;
/// How long an upstream has to answer with a response head (up to one tick of
/// [`DEADLINE_TICK`] more).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a router thread checks the deadlines of its requests in flight.
const DEADLINE_TICK: Duration = Duration::from_secs(1);

/// A router thread's own: its pool of connections to the upstreams, driven by the runtime they
/// are made on (a request and the upstream connection it rides on are driven by the same
/// thread: no cross-thread wakeup per request), and its requests' deadlines.
pub fn lane() -> Lane {
    Lane {
        upstreams: Upstreams::default(),
        deadlines: Deadlines::new(DEADLINE_TICK),
    }
}

/// A request body read for a mirrored copy.
enum Buffered {
    /// All of it, within [`MIRROR_BODY_LIMIT`]: sent to both.
    Whole(Bytes),
    /// Larger (or with trailers): what was read and the rest, as the client sent them, for the
    /// request alone.
    TooLarge(ProxyBody),
}

/// Reads `body` for a mirrored copy, up to [`MIRROR_BODY_LIMIT`].
async fn buffer_for_mirror(mut body: Incoming) -> Result<Buffered, hyper::Error> {
    let mut read: Vec<Frame<Bytes>> = Vec::new();
    let mut len = 0;
    loop {
        let Some(frame) = body.frame().await.transpose()? else {
            let mut whole = bytes::BytesMut::with_capacity(len);
            for frame in read {
                if let Ok(data) = frame.into_data() {
                    whole.extend_from_slice(&data);
                }
            }
            return Ok(Buffered::Whole(whole.freeze()));
        };
        let done = match frame.data_ref() {
            Some(data) => {
                len += data.len();
                len > MIRROR_BODY_LIMIT
            }
            None => true,
        };
        read.push(frame);
        if done {
            return Ok(Buffered::TooLarge(
                Replay {
                    read: read.into(),
                    len: len as u64,
                    rest: body,
                }
                .boxed(),
            ));
        }
    }
}

/// A body some of whose frames were read already: those, then the rest.
struct Replay {
    read: std::collections::VecDeque<Frame<Bytes>>,
    /// The data bytes in `read`.
    len: u64,
    rest: Incoming,
}

impl Body for Replay {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(frame) = self.read.pop_front() {
            if let Some(data) = frame.data_ref() {
                self.len -= data.len() as u64;
            }
            return std::task::Poll::Ready(Some(Ok(frame)));
        }
        std::pin::Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let rest = self.rest.size_hint();
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(rest.lower() + self.len);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + self.len);
        }
        hint
    }
}

/// Forwards a request to an endpoint of `subset` (another one when the connection cannot be
/// made and the request has no body, three attempts at most), and a copy of it to an endpoint
/// of `mirror`, when given, whose response is discarded.
pub(super) async fn forward(
    endpoints: &SubsetEndpoints,
    lane: &Lane,
    subset: &str,
    mirror: Option<String>,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    if !endpoints.contains(subset) {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no ready endpoint in subset {subset:?}: the agent has no such subset\n"),
        );
    }
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    if parts.version == http::Version::HTTP_2 {
        join_cookies(&mut headers);
    }
    // The URI's authority (an absolute-form request, HTTP/2's `:authority`) is the request's
    // host, whatever `Host` says (RFC 9112 §3.2.2, RFC 9113 §8.3.1).
    if let Some(authority) = parts.uri.authority()
        && let Ok(v) = HeaderValue::from_str(authority.as_str())
    {
        headers.insert(header::HOST, v);
    }
    // A client that sent no `Host` (nor an authority): each attempt names its endpoint.
    let endpoint_host = !headers.contains_key(header::HOST);
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    // The headers are cloned for a mirror and moved into the request: a request that did not
    // reach its endpoint comes back whole to go to another, so nothing is copied in advance.
    let mut headers = Some(headers);
    let build = |addr: SocketAddr,
                 body: ProxyBody,
                 headers: &mut Option<HeaderMap>,
                 copy: bool|
     -> Option<Request<ProxyBody>> {
        // Origin-form, as HTTP/1.1 sends it to a server that is not a proxy.
        let mut req = Request::builder()
            .method(parts.method.clone())
            .uri(Uri::from(path.clone()))
            .body(body)
            .ok()?;
        *req.headers_mut() = if copy {
            headers.clone()?
        } else {
            headers.take()?
        };
        if endpoint_host {
            set_host(&mut req, addr);
        }
        Some(req)
    };

    // A request with no body can be sent again to another endpoint when the connection
    // could not be made (nothing reached the first one); a mirrored request's body is buffered
    // (a larger one, or one with trailers, goes on as it came, not mirrored).
    let empty = body.is_end_stream();
    let mut mirror = mirror;
    let (buffered, mut body): (Option<Bytes>, Option<ProxyBody>) = if empty {
        (None, None)
    } else if mirror.is_some() {
        match lane
            .deadlines
            .within(UPSTREAM_TIMEOUT, buffer_for_mirror(body))
            .await
        {
            Ok(Ok(Buffered::Whole(bytes))) => (Some(bytes), None),
            Ok(Ok(Buffered::TooLarge(body))) => {
                mirror = None;
                (None, Some(body))
            }
            Ok(Err(e)) => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    format!("the request's body could not be read: {e}\n"),
                );
            }
            Err(_) => {
                return plain(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request's body did not arrive within {}s\n",
                        UPSTREAM_TIMEOUT.as_secs()
                    ),
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
        && let Some(addr) = endpoints.pick(&mirror, &[])
        && let Some(mut req) = build(addr, make_body(&mut None), &mut headers, true)
    {
        mark_shadow(&mut req);
        let lane = lane.clone();
        tokio::spawn(async move {
            if let Ok(Ok(response)) = lane
                .deadlines
                .within(UPSTREAM_TIMEOUT, lane.upstreams.send(addr, req))
                .await
            {
                let _ = lane
                    .deadlines
                    .within(UPSTREAM_TIMEOUT, response.into_body().collect())
                    .await;
            }
        });
    }

    // A request with a body is never sent again; nor is a third attempt.
    let retryable = body.is_none();
    let mut tried = Tried::default();
    // A request that did not reach its endpoint, to go to the next.
    let mut unsent: Option<Request<ProxyBody>> = None;
    loop {
        let Some(addr) = endpoints.pick(subset, tried.addrs()) else {
            return if tried.addrs().is_empty() {
                plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no ready endpoint in subset {subset:?}\n"),
                )
            } else {
                plain(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "no endpoint of subset {subset:?} accepted a connection (tried {})\n",
                        list(tried.addrs())
                    ),
                )
            };
        };
        tried.push(addr);
        let req = match unsent.take() {
            Some(mut req) => {
                if endpoint_host {
                    set_host(&mut req, addr);
                }
                req
            }
            None => match build(addr, make_body(&mut body), &mut headers, false) {
                Some(built) => built,
                None => {
                    return plain(
                        StatusCode::BAD_REQUEST,
                        format!("cannot forward a request for {path:?}\n"),
                    );
                }
            },
        };
        match lane
            .deadlines
            .within(UPSTREAM_TIMEOUT, lane.upstreams.send(addr, req))
            .await
        {
            Ok(Ok(mut response)) => {
                strip_hop_by_hop(response.headers_mut());
                return response;
            }
            Ok(Err(SendError {
                error,
                unsent: Some(req),
            })) if error.is_connect() && retryable && tried.addrs().len() < Tried::MOST => {
                unsent = Some(req);
            }
            Ok(Err(SendError { error, .. })) => {
                return plain(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "upstream {addr} of subset {subset:?} failed: {}\n",
                        error_chain(&error)
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

/// The endpoints a request was sent to, in order (no allocation: three at most).
struct Tried {
    addrs: [SocketAddr; Tried::MOST],
    len: usize,
}

impl Tried {
    /// How many endpoints a request is sent to at most.
    const MOST: usize = 3;

    fn addrs(&self) -> &[SocketAddr] {
        &self.addrs[..self.len]
    }

    fn push(&mut self, addr: SocketAddr) {
        if self.len < Tried::MOST {
            self.addrs[self.len] = addr;
            self.len += 1;
        }
    }
}

impl Default for Tried {
    fn default() -> Tried {
        Tried {
            addrs: [SocketAddr::from(([0, 0, 0, 0], 0)); Tried::MOST],
            len: 0,
        }
    }
}

/// Names the endpoint in `Host`, for a request whose client sent none.
/// Marks a mirrored copy as Istio's (Envoy's) mirroring does: `-shadow` appended to its
/// `Host`'s name (`shop.example:8080` becomes `shop.example-shadow:8080`), so that the
/// receiving application can tell the copies from the traffic it answers for real.
fn mark_shadow(req: &mut Request<ProxyBody>) {
    let Some(host) = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return;
    };
    // The port, if any, follows the last ':' after any IPv6 literal's ']'.
    let name_end = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => i,
        _ => host.len(),
    };
    let shadowed = format!("{}-shadow{}", &host[..name_end], &host[name_end..]);
    if let Ok(v) = HeaderValue::from_str(&shadowed) {
        req.headers_mut().insert(header::HOST, v);
    }
}

/// An HTTP/2 client may send its cookies as several `cookie` fields; they are joined with
/// `; ` into one before going on as HTTP/1.1 (RFC 9113 §8.2.3), where an application reads one
/// `Cookie` line.
fn join_cookies(headers: &mut HeaderMap) {
    let mut cookies = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (cookies.next(), cookies.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for value in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(value.as_bytes());
    }
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, v);
    }
}

fn set_host(req: &mut Request<ProxyBody>, addr: SocketAddr) {
    if let Ok(v) = HeaderValue::from_str(&addr.to_string()) {
        req.headers_mut().insert(header::HOST, v);
    }
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The hop-by-hop headers (RFC 9110 §7.6.1), as names ready to look up (no parsing per
/// request; a `static`, as a `const` array would be made and dropped at every use).
static HOP_BY_HOP: [HeaderName; 9] = [
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

/// Whether a name is one of [`HOP_BY_HOP`]: most names are told apart by their length alone
/// (2, 7, 10 and 16 to 19 bytes), without comparing them to the nine.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(name.as_str().len(), 2 | 7 | 10 | 16..=19) && HOP_BY_HOP.contains(name)
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of a lookup per name.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
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
    for name in HOP_BY_HOP.iter() {
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

    #[test]
    fn cookie_fields_are_joined_into_one() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1"));
        join_cookies(&mut headers);
        assert_eq!(headers.get_all(header::COOKIE).iter().count(), 1);
        headers.append(header::COOKIE, HeaderValue::from_static("b=2"));
        headers.append(header::COOKIE, HeaderValue::from_static("c=3"));
        join_cookies(&mut headers);
        let cookies: Vec<_> = headers.get_all(header::COOKIE).iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
    }

    #[test]
    fn a_mirrored_copy_names_its_host_with_shadow_before_the_port() {
        for (host, shadowed) in [
            ("shop.example", "shop.example-shadow"),
            ("shop.example:8080", "shop.example-shadow:8080"),
            ("127.0.0.1:80", "127.0.0.1-shadow:80"),
            ("[::1]:8080", "[::1]-shadow:8080"),
            ("[::1]", "[::1]-shadow"),
        ] {
            let mut req = Request::builder()
                .header(header::HOST, host)
                .body(empty_body())
                .unwrap();
            mark_shadow(&mut req);
            assert_eq!(req.headers()[header::HOST], shadowed, "{host}");
        }
    }

    #[test]
    fn every_hop_by_hop_name_passes_the_length_filter_and_others_stay() {
        for name in HOP_BY_HOP.iter() {
            assert!(is_hop_by_hop(name), "{name}");
        }
        for name in [
            "user-agent",
            "x-version",
            "host",
            "content-length",
            "accept",
        ] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("x-drop, close"),
        );
        headers.insert("x-drop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::USER_AGENT, HeaderValue::from_static("t"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().collect::<Vec<_>>(), [header::USER_AGENT]);
    }
}
