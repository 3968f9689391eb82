//! The agent in-process over real loopback sockets: the router in front of in-process demo
//! services (fixed endpoints), driven through the control API client. No child processes here;
//! the process-level tests are in the workspace's `tests/agent_cli.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_agent::demo_app::{DemoConfig, DemoServer};
use flotilla_agent::loadgen::{self, Target};
use flotilla_agent::{Agent, AgentConfig, AgentError};
use flotilla_agent_backend::wire::{CookieMatch, HeaderMatch, MirrorSpec, RouteSpec, WindowQuery};
use flotilla_agent_backend::{AgentClient, ClientError};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

type Http = Client<HttpConnector, Empty<Bytes>>;

/// The two heavy tests (10,000 requests; 2,000 requests/s) take turns, so that on a small
/// machine each gets the CPU it needs.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn demo(version: &str) -> DemoServer {
    DemoServer::start(DemoConfig {
        version: version.into(),
        ..DemoConfig::default()
    })
    .await
    .unwrap()
}

fn config_text(stable: SocketAddr, canary: SocketAddr, canary_weight: u32) -> String {
    format!(
        r#"
cluster: test
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
seed: 42
weights: {{canary: {canary_weight}}}
subsets:
  stable: {{endpoints: ["{stable}"]}}
  canary: {{endpoints: ["{canary}"]}}
"#
    )
}

struct Setup {
    agent: Agent,
    client: AgentClient,
    stable: DemoServer,
    canary: DemoServer,
    router: String,
}

impl Setup {
    async fn new(canary_weight: u32) -> Setup {
        let stable = demo("1.0").await;
        let canary = demo("2.0").await;
        let config = AgentConfig::parse(
            &config_text(stable.local_addr(), canary.local_addr(), canary_weight),
            "test.yaml",
        )
        .unwrap();
        let agent = Agent::start(config, None).await.unwrap();
        let client = AgentClient::new(format!("http://{}", agent.control_addr()))
            .unwrap()
            .with_token(agent.control_token().secret());
        let router = format!("http://{}", agent.router_addr());
        Setup {
            agent,
            client,
            stable,
            canary,
            router,
        }
    }

    async fn stop(self) {
        self.agent.shutdown().await;
        self.stable.shutdown().await;
        self.canary.shutdown().await;
    }
}

fn http1() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

fn http2() -> Http {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Sends a GET; returns the status, the `x-version` header and the body.
async fn get(http: &Http, url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut request = http::Request::get(url).body(Empty::new()).unwrap();
    for (k, v) in headers {
        request.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    let response = http.request(request).await.unwrap();
    let status = response.status().as_u16();
    let version = response
        .headers()
        .get("x-version")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, version, String::from_utf8_lossy(&body).into_owned())
}

/// Polls `check` until it returns true or the deadline passes.
async fn eventually(what: &str, deadline: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observed_split_matches_the_weight_over_ten_thousand_requests() {
    let _turn = HEAVY.lock().await;
    let setup = Setup::new(20).await;
    let canary_count = Arc::new(AtomicU32::new(0));
    let total = Arc::new(AtomicU32::new(0));
    let mut workers = tokio::task::JoinSet::new();
    // 40 workers × 250 requests, half over HTTP/1.1 keep-alive and half over HTTP/2: the
    // split is decided per request on both.
    for worker in 0..40 {
        let http = if worker % 2 == 0 { http1() } else { http2() };
        let url = format!("{}/split", setup.router);
        let canary_count = canary_count.clone();
        let total = total.clone();
        workers.spawn(async move {
            for _ in 0..250 {
                let (status, version, _) = get(&http, &url, &[]).await;
                assert_eq!(status, 200);
                if version == "2.0" {
                    canary_count.fetch_add(1, Ordering::Relaxed);
                }
                total.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    let n = f64::from(total.load(Ordering::Relaxed));
    assert_eq!(n, 10_000.0);
    let canary = f64::from(canary_count.load(Ordering::Relaxed));
    let stable = n - canary;
    let (e_canary, e_stable) = (n * 0.2, n * 0.8);
    let chi2 = (canary - e_canary).powi(2) / e_canary + (stable - e_stable).powi(2) / e_stable;
    // Chi-square with one degree of freedom, 99.9%: 10.828.
    assert!(chi2 < 10.828, "canary {canary} of {n}: chi² {chi2}");
    // The statistics saw the same split.
    let window = WindowQuery {
        window: Some("5m".into()),
        ..WindowQuery::default()
    };
    let canary_stats = setup.client.stats("canary", &window).await.unwrap();
    assert_eq!(canary_stats.requests as f64, canary);
    assert_eq!(canary_stats.by_class["2xx"] as f64, canary);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_weights_every_100ms_under_load_loses_nothing_and_adds_no_5xx() {
    let _turn = HEAVY.lock().await;
    let setup = Setup::new(0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicU32::new(0));
    let changer = {
        let client = setup.client.clone();
        let stop = stop.clone();
        let changes = changes.clone();
        tokio::spawn(async move {
            let weights = [0, 10, 50, 90, 100, 30, 70];
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let w = client
                    .set_weights(weights[i % weights.len()])
                    .await
                    .unwrap();
                assert_eq!(w.canary, weights[i % weights.len()]);
                changes.fetch_add(1, Ordering::Relaxed);
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let report = loadgen::run(
        &[Target::new(format!("{}/load", setup.router))],
        2000.0,
        Duration::from_secs(3),
        6000,
    )
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    changer.await.unwrap();
    assert!(changes.load(Ordering::Relaxed) >= 10, "{changes:?}");
    assert_eq!(report.not_sent, 0, "{report:?}");
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.sent, 6000, "{report:?}");
    assert_eq!(report.status_counts.get(&200), Some(&6000), "{report:?}");
    // Both versions served: the weights did change under the load.
    assert!(setup.stable.requests_served() > 0 && setup.canary.requests_served() > 0);
    assert_eq!(
        setup.stable.requests_served() + setup.canary.requests_served(),
        6000
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_cookie_routes_win_over_weights_and_mirroring_changes_no_response() {
    let setup = Setup::new(0).await;
    let http = http1();
    let url = format!("{}/r", setup.router);
    let route = |name: &str, subset: &str, header: Option<HeaderMatch>, cookie| RouteSpec {
        name: name.into(),
        subset: subset.into(),
        header,
        cookie,
    };
    let header = |name: &str, exact: Option<&str>, prefix: Option<&str>, regex: Option<&str>| {
        Some(HeaderMatch {
            name: name.into(),
            exact: exact.map(Into::into),
            prefix: prefix.map(Into::into),
            regex: regex.map(Into::into),
        })
    };
    let c = &setup.client;
    c.set_route(&route(
        "users",
        "canary",
        header("x-canary-user", Some("true"), None, None),
        None,
    ))
    .await
    .unwrap();
    c.set_route(&route(
        "team",
        "canary",
        header("x-team", None, Some("beta-"), None),
        None,
    ))
    .await
    .unwrap();
    c.set_route(&route(
        "build",
        "canary",
        header("x-build", None, None, Some("[0-9]+\\.rc")),
        None,
    ))
    .await
    .unwrap();
    c.set_route(&route(
        "cookie",
        "canary",
        None,
        Some(CookieMatch {
            name: "canary".into(),
            value: "yes".into(),
        }),
    ))
    .await
    .unwrap();
    for headers in [
        vec![("x-canary-user", "true")],
        vec![("x-team", "beta-7")],
        vec![("x-build", "12.rc")],
        vec![("cookie", "session=1; canary=yes")],
    ] {
        for _ in 0..5 {
            assert_eq!(get(&http, &url, &headers).await.1, "2.0", "{headers:?}");
        }
    }
    for headers in [
        vec![],
        vec![("x-canary-user", "false")],
        vec![("x-team", "alpha-beta-")],
        vec![("x-build", "12.rc1")],
        vec![("cookie", "canary=no")],
    ] {
        assert_eq!(get(&http, &url, &headers).await.1, "1.0", "{headers:?}");
    }
    // At weight 100 a header route to the stable still wins.
    c.set_weights(100).await.unwrap();
    c.set_route(&route(
        "pin",
        "stable",
        header("x-pin", Some("stable"), None, None),
        None,
    ))
    .await
    .unwrap();
    assert_eq!(get(&http, &url, &[("x-pin", "stable")]).await.1, "1.0");
    assert_eq!(get(&http, &url, &[]).await.1, "2.0");
    let routes = c.remove_route("pin").await.unwrap();
    assert_eq!(routes.len(), 4);
    assert_eq!(get(&http, &url, &[("x-pin", "stable")]).await.1, "2.0");

    // Mirroring: every request copied to the canary, clients still get the stable's answers.
    c.set_weights(0).await.unwrap();
    c.set_mirror(&MirrorSpec {
        name: "shadow".into(),
        subset: "canary".into(),
        percentage: 100,
        header: None,
    })
    .await
    .unwrap();
    let canary_before = setup.canary.requests_served();
    for _ in 0..50 {
        let (status, version, body) = get(&http, &url, &[]).await;
        assert_eq!((status, version.as_str()), (200, "1.0"));
        assert!(body.contains("\"version\":\"1.0\""), "{body}");
    }
    let canary = &setup.canary;
    eventually(
        "the canary to see 50 mirrored requests",
        Duration::from_secs(20),
        async || canary.requests_served() >= canary_before + 50,
    )
    .await;
    // Mirrored copies are not client traffic: the canary's statistics saw none of them.
    let window = WindowQuery {
        window: Some("5m".into()),
        ..WindowQuery::default()
    };
    let stats = c.stats("canary", &window).await.unwrap();
    let routed_to_canary = 5 * 4 + 1 + 1;
    assert_eq!(stats.requests, routed_to_canary, "{stats:?}");
    c.remove_mirror("shadow").await.unwrap();
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_going_away_leaves_traffic_flowing_with_the_last_weights() {
    let setup = Setup::new(0).await;
    {
        // A controller that sets the weights and a route, then dies mid-call.
        let controller = AgentClient::new(format!("http://{}", setup.agent.control_addr()))
            .unwrap()
            .with_token(setup.agent.control_token().secret());
        controller.set_weights(50).await.unwrap();
        let _ = controller
            .set_route(&RouteSpec {
                name: "users".into(),
                subset: "canary".into(),
                header: Some(HeaderMatch {
                    name: "x-canary-user".into(),
                    exact: Some("true".into()),
                    prefix: None,
                    regex: None,
                }),
                cookie: None,
            })
            .await
            .unwrap();
        // A half-sent request on a raw connection, then the connection drops.
        use tokio::io::AsyncWriteExt;
        let mut raw = tokio::net::TcpStream::connect(setup.agent.control_addr())
            .await
            .unwrap();
        raw.write_all(b"PUT /v1/weights HTTP/1.1\r\nhost: x\r\ncontent-length: 40\r\n\r\n{\"can")
            .await
            .unwrap();
        drop(raw);
        let pending = tokio::spawn(async move { controller.set_weights(0).await });
        pending.abort();
        let _ = pending.await;
    }
    let report = loadgen::run(
        &[Target::new(format!("{}/after", setup.router))],
        400.0,
        Duration::from_secs(1),
        400,
    )
    .await
    .unwrap();
    assert_eq!(report.status_counts.get(&200), Some(&400), "{report:?}");
    let canary_share = setup.canary.requests_served() as f64 / 400.0;
    // The weights in effect are still 50/50 (unless the aborted call landed, which it may
    // have: then 0). Either way traffic flowed and the route is kept.
    let weights = setup.client.weights().await.unwrap();
    if weights.canary == 50 {
        assert!((0.35..0.65).contains(&canary_share), "{canary_share}");
    } else {
        assert_eq!(weights.canary, 0);
    }
    assert_eq!(setup.client.routes().await.unwrap().len(), 1);
    let http = http1();
    let url = format!("{}/r", setup.router);
    assert_eq!(
        get(&http, &url, &[("x-canary-user", "true")]).await.1,
        "2.0"
    );
    setup.stop().await;
}

/// A server that answers each request with its method, URI, headers and body, as text.
async fn echo_server() -> SocketAddr {
    echo_server_seen().await.0
}

/// [`echo_server`], with the requests it received (method, `Host`, body length), in order.
async fn echo_server_seen() -> (SocketAddr, Arc<Mutex<Vec<(String, String, usize)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<(String, String, usize)>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let log = log.clone();
                        async move {
                            let method = request.method().to_string();
                            let host = request
                                .headers()
                                .get(http::header::HOST)
                                .map(|h| h.to_str().unwrap_or("?").to_owned())
                                .unwrap_or_default();
                            let mut text = format!("{} {}\n", request.method(), request.uri());
                            for (name, value) in request.headers() {
                                text += &format!("{name}: {}\n", value.to_str().unwrap_or("?"));
                            }
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            log.lock().unwrap().push((method, host, body.len()));
                            text += &format!("body: {}\n", String::from_utf8_lossy(&body));
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from(text),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// An agent in front of fixed endpoints (`stable` and `canary`: YAML lists of addresses),
/// every request to the stable, with `extra` lines of configuration.
async fn fixed_agent(stable: &str, canary: &str, extra: &str) -> Agent {
    let config = AgentConfig::parse(
        &format!(
            r#"
cluster: test
router: {{listen: "127.0.0.1:0"}}
control: {{listen: "127.0.0.1:0"}}
weights: {{canary: 0}}
{extra}
subsets:
  stable: {{endpoints: {stable}}}
  canary: {{endpoints: {canary}}}
"#
        ),
        "test.yaml",
    )
    .unwrap();
    Agent::start(config, None).await.unwrap()
}

/// A request that reached no endpoint (the first one refuses connections) goes whole to the
/// next one: its method, path, query, headers and `Host` as the client sent them. A request
/// with a body is never sent again: it is a 502 naming the endpoint when its turn comes to
/// the closed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_endpoint_took_goes_whole_to_the_next_unless_it_has_a_body() {
    let echo = echo_server().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let agent = fixed_agent(
        &format!(r#"["{closed}", "{echo}"]"#),
        &format!(r#"["{echo}"]"#),
        "",
    )
    .await;
    let router = agent.router_addr();
    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let send = async |method: &str, body: &'static str| {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("http://{router}/p/q?a=1&b=two"))
            .header("x-trace", "t-1")
            .header("x-trace", "t-2")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap();
        let response = http.request(request).await.unwrap();
        let status = response.status().as_u16();
        let text = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&text).into_owned())
    };
    // Round robin over [closed, echo]: each GET is picked the closed endpoint first, then the
    // echo (two picks), so the next one starts on the closed endpoint again.
    for _ in 0..6 {
        let (status, text) = send("GET", "").await;
        assert_eq!(status, 200, "{text}");
        assert!(text.starts_with("GET /p/q?a=1&b=two\n"), "{text}");
        assert!(text.contains(&format!("host: {router}\n")), "{text}");
        assert!(text.contains("x-trace: t-1\nx-trace: t-2\n"), "{text}");
        assert!(text.ends_with("body: \n"), "{text}");
    }
    // A client that sends no `Host` (nor an authority in the URI): the agent names the
    // endpoint, and names the next one when the request goes there.
    let bare: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .set_host(false)
        .build_http();
    let request = http::Request::get(format!("http://{router}/bare"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = bare.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    assert!(text.starts_with("GET /bare\n"), "{text}");
    assert!(text.contains(&format!("host: {echo}\n")), "{text}");
    // Requests with a body, which start on the closed endpoint every other time (one pick
    // each): those fail with a 502 naming it; none is lost in silence and none reaches the
    // echo twice.
    let mut answered = 0;
    let mut refused = 0;
    for _ in 0..4 {
        match send("POST", "hello").await {
            (200, text) => {
                assert!(text.starts_with("POST /p/q?a=1&b=two\n"), "{text}");
                assert!(text.ends_with("body: hello\n"), "{text}");
                answered += 1;
            }
            (502, text) => {
                assert!(text.contains(&closed.to_string()), "{text}");
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((answered, refused), (2, 2));
    agent.shutdown().await;
}

/// A mirrored request reaches both subsets whole, the copy's `Host` marked `-shadow` (as
/// Istio's); a body larger than the mirror's buffer, streamed by the client or of a length
/// known in advance, is not mirrored and reaches its subset whole, answered as any other. An
/// absolute-form request's host is its URI's authority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_request_reaches_both_and_a_large_body_goes_on_unmirrored() {
    let (stable, stable_seen) = echo_server_seen().await;
    let (canary, canary_seen) = echo_server_seen().await;
    let agent = fixed_agent(
        &format!(r#"["{stable}"]"#),
        &format!(r#"["{canary}"]"#),
        "mirrors: [{name: shadow, subset: canary, percentage: 100}]",
    )
    .await;
    let router = agent.router_addr();
    let http: Client<HttpConnector, http_body_util::StreamBody<_>> =
        Client::builder(TokioExecutor::new()).build_http();
    // The client streams its body in chunks of 64 KiB (no length known in advance).
    let post = async |len: usize| {
        let chunks = (0..len.div_ceil(65_536)).map(move |i| {
            let n = 65_536.min(len - i * 65_536);
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![b'x'; n])))
        });
        let request = http::Request::post(format!("http://{router}/upload"))
            .header("host", "shop.example:8080")
            .body(http_body_util::StreamBody::new(futures::stream::iter(
                chunks,
            )))
            .unwrap();
        let response = http.request(request).await.unwrap();
        let status = response.status().as_u16();
        let text = response.into_body().collect().await.unwrap().to_bytes();
        (status, text.len())
    };
    let small = 1_000;
    assert_eq!(post(small).await.0, 200);
    eventually("the mirrored copy", Duration::from_secs(10), async || {
        canary_seen.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(
        canary_seen.lock().unwrap()[0],
        (
            "POST".to_owned(),
            "shop.example-shadow:8080".to_owned(),
            small
        )
    );
    assert_eq!(
        stable_seen.lock().unwrap()[0],
        ("POST".to_owned(), "shop.example:8080".to_owned(), small)
    );
    let large = 5 * 1024 * 1024 + 123;
    let (status, _) = post(large).await;
    assert_eq!(status, 200);
    assert_eq!(
        stable_seen.lock().unwrap()[1],
        ("POST".to_owned(), "shop.example:8080".to_owned(), large),
        "the whole body reached the stable"
    );
    // The same with its length known in advance (`Content-Length`).
    let sized: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::post(format!("http://{router}/upload"))
        .header("host", "shop.example:8080")
        .body(Full::new(Bytes::from(vec![b'y'; large])))
        .unwrap();
    assert_eq!(sized.request(request).await.unwrap().status(), 200);
    assert_eq!(stable_seen.lock().unwrap()[2].2, large);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(canary_seen.lock().unwrap().len(), 1, "not mirrored");
    // An absolute-form request: its URI's authority is its host, not the `Host` it also sent
    // (RFC 9112 §3.2.2).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(router).await.unwrap();
        raw.write_all(
            b"GET http://real.example:81/x HTTP/1.1\r\nHost: fake.example\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let mut answer = String::new();
        raw.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    assert_eq!(
        stable_seen.lock().unwrap()[3],
        ("GET".to_owned(), "real.example:81".to_owned(), 0)
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error_and_changes_nothing() {
    let setup = Setup::new(10).await;
    let c = &setup.client;
    let before = c.status().await.unwrap();

    // Unknown subsets: 400 naming them, nothing changed.
    let api = |e: ClientError| match e {
        ClientError::Api {
            status, message, ..
        } => (status, message),
        other => panic!("{other}"),
    };
    let (status, message) = api(c
        .set_route(&RouteSpec {
            name: "r".into(),
            subset: "canry".into(),
            header: Some(HeaderMatch {
                name: "x".into(),
                exact: Some("1".into()),
                prefix: None,
                regex: None,
            }),
            cookie: None,
        })
        .await
        .unwrap_err());
    assert_eq!(status, 400);
    assert!(message.contains("unknown subset \"canry\""), "{message}");
    for result in [
        c.scale("canry", "1.0", 1).await.map(drop),
        c.stats(
            "canry",
            &WindowQuery {
                window: Some("1m".into()),
                ..WindowQuery::default()
            },
        )
        .await
        .map(drop),
        c.subset("canry").await.map(drop),
        c.set_mirror(&MirrorSpec {
            name: "m".into(),
            subset: "canry".into(),
            percentage: 5,
            header: None,
        })
        .await
        .map(drop),
    ] {
        let (status, message) = api(result.unwrap_err());
        assert_eq!(status, 400);
        assert!(message.contains("\"canry\""), "{message}");
    }
    let (status, message) = api(c.set_weights(101).await.unwrap_err());
    assert_eq!(
        (status, message.as_str()),
        (400, "canary weight 101 is out of range 0..=100")
    );
    let (status, _) = api(c.remove_route("nope").await.unwrap_err());
    assert_eq!(status, 404);
    let (status, message) = api(c
        .stats(
            "canary",
            &WindowQuery {
                window: Some("2 minutes".into()),
                ..WindowQuery::default()
            },
        )
        .await
        .unwrap_err());
    assert_eq!(status, 400, "{message}");
    // Fixed endpoints cannot be scaled.
    let (status, message) = api(c.scale("canary", "1.0", 1).await.unwrap_err());
    assert_eq!(status, 400);
    assert!(message.contains("fixed endpoints"), "{message}");
    let after = c.status().await.unwrap();
    assert_eq!(after.weights, before.weights);
    assert_eq!(after.routes, before.routes);
    assert_eq!(after.mirrors, before.mirrors);

    // A configuration naming an unknown subset is refused and the running one kept.
    let good = setup.agent.config();
    let bad_text = format!(
        "{}routes:\n  - {{name: r, subset: canry, cookie: {{name: canary, value: \"yes\"}}}}\n",
        config_text(setup.stable.local_addr(), setup.canary.local_addr(), 10)
    );
    let err = AgentConfig::parse(&bad_text, "bad.yaml").unwrap_err();
    assert_eq!(err.field, "routes[0].subset");
    assert!(err.to_string().starts_with("bad.yaml:11:"), "{err}");
    assert!(
        err.to_string().contains("unknown subset \"canry\""),
        "{err}"
    );
    let mut moved = good.clone();
    moved.router.listen = "127.0.0.1:1".parse().unwrap();
    let err = setup.agent.apply(moved).unwrap_err();
    assert!(
        err.to_string().contains("listen addresses cannot change"),
        "{err}"
    );
    let mut dropped = good.clone();
    dropped.subsets.remove("canary");
    assert!(setup.agent.apply(dropped).is_err());
    assert_eq!(setup.agent.config(), good);
    let err = setup.agent.reload().unwrap_err();
    assert!(
        err.to_string()
            .contains("not started from a configuration file")
    );

    // An unreachable upstream: 502 naming the endpoint and the subset; the other subset serves.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut unreachable = good.clone();
    unreachable.subsets.get_mut("canary").unwrap().endpoints = vec![closed];
    setup.agent.apply(unreachable).unwrap();
    c.set_weights(100).await.unwrap();
    let http = http1();
    let url = format!("{}/x", setup.router);
    let (status, _, body) = get(&http, &url, &[]).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains(&closed.to_string()) && body.contains("\"canary\""),
        "{body}"
    );
    // No ready endpoint: 503 naming the subset.
    let mut empty = good.clone();
    empty.subsets.get_mut("canary").unwrap().endpoints = Vec::new();
    setup.agent.apply(empty).unwrap();
    let (status, _, body) = get(&http, &url, &[]).await;
    assert_eq!(status, 503);
    assert_eq!(body.trim(), "no ready endpoint in subset \"canary\"");
    c.set_weights(0).await.unwrap();
    assert_eq!(get(&http, &url, &[]).await.0, 200);

    // A port in use: a clear error naming the address.
    let mut clash = good.clone();
    clash.router.listen = setup.agent.router_addr();
    let err = Agent::start(clash, None).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Listen { what: "router", .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&setup.agent.router_addr().to_string())
            && text.contains("another process holds this port"),
        "{text}"
    );
    // The 5xx answers above are in the statistics and on /metrics.
    let metrics = c.metrics().await.unwrap();
    assert!(
        metrics.contains("http_requests_total{cluster=\"test\",subset=\"canary\",code=\"502\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("http_requests_total{cluster=\"test\",subset=\"canary\",code=\"503\"} 1"),
        "{metrics}"
    );
    setup.stop().await;
}

/// Issue 15: this one unauthenticated GET passed the point count (5 s over a 10 s step), then
/// `from + step` wrapped and the series grew until the agent died (a panic on overflow in a
/// debug build). It is a 400 now, and the agent keeps answering and routing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_series_query_is_refused_and_the_agent_keeps_serving() {
    let setup = Setup::new(0).await;
    let control = format!("http://{}", setup.agent.control_addr());
    let http = http1();
    for query in [
        "start=18446744073709551610&end=18446744073709551615&step=10s",
        "start=0&end=18446744073709551615&step=18446744073709551615s",
        "window=2m&offset=18446744073709551615&step=10s",
        "window=18446744073709551615&step=10s",
        "start=1&end=2&step=10s&quantile=NaN",
    ] {
        let (status, _, body) = get(
            &http,
            &format!("{control}/v1/subsets/stable/series?{query}"),
            &[],
        )
        .await;
        assert_eq!(status, 400, "{query}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].is_string(), "{query}: {body}");
        let (status, _, body) = get(
            &http,
            &format!(
                "{control}/v1/subsets/stable/stats?{}",
                query.replace("&step=10s", "")
            ),
            &[],
        )
        .await;
        assert_eq!(status, 400, "stats {query}: {body}");
    }
    let (status, _, body) = get(&http, &format!("{control}/healthz"), &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, version, _) = get(&http, &format!("{}/after", setup.router), &[]).await;
    assert_eq!((status, version.as_str()), (200, "1.0"));
    // A sane series is still answered.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let windows = setup
        .client
        .series(
            "stable",
            &WindowQuery {
                start: Some(now - 60),
                end: Some(now + 1),
                step: Some("30s".into()),
                ..WindowQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(windows.len(), 3);
    assert!(windows.iter().any(|w| w.requests == 1), "{windows:?}");
    setup.stop().await;
}

/// Reads are open; every change needs the agent's token: 401 without it, 403 with a wrong one,
/// and either way nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_need_the_token_and_reads_do_not() {
    let setup = Setup::new(10).await;
    let base = format!("http://{}", setup.agent.control_addr());
    let anonymous = AgentClient::new(&base).unwrap();
    let wrong = AgentClient::new(&base).unwrap().with_token("not-the-token");
    let api = |e: ClientError| match e {
        ClientError::Api {
            status, message, ..
        } => (status, message),
        other => panic!("{other}"),
    };
    let route = RouteSpec {
        name: "users".into(),
        subset: "canary".into(),
        header: Some(HeaderMatch {
            name: "x-canary-user".into(),
            exact: Some("true".into()),
            prefix: None,
            regex: None,
        }),
        cookie: None,
    };
    let mirror = MirrorSpec {
        name: "shadow".into(),
        subset: "canary".into(),
        percentage: 50,
        header: None,
    };
    // Something to delete.
    setup.client.set_route(&route).await.unwrap();
    setup.client.set_mirror(&mirror).await.unwrap();
    let before = setup.client.status().await.unwrap();
    for (client, expected) in [(&anonymous, 401), (&wrong, 403)] {
        for result in [
            client.set_weights(90).await.map(drop),
            client
                .set_route(&RouteSpec {
                    name: "other".into(),
                    ..route.clone()
                })
                .await
                .map(drop),
            client.remove_route("users").await.map(drop),
            client.set_mirror(&mirror).await.map(drop),
            client.remove_mirror("shadow").await.map(drop),
            client.scale("stable", "1.0", 3).await.map(drop),
            client.reload_config().await.map(drop),
        ] {
            let (status, message) = api(result.unwrap_err());
            assert_eq!(status, expected, "{message}");
            if expected == 401 {
                assert!(
                    message.starts_with("changes need `Authorization: Bearer <token>`"),
                    "{message}"
                );
            } else {
                assert_eq!(message, "the bearer token is wrong");
            }
        }
        // Reads need nothing.
        let status = client.status().await.unwrap();
        assert_eq!(status.weights, before.weights);
        assert_eq!(status.routes, before.routes);
        assert_eq!(status.mirrors, before.mirrors);
        client.metrics().await.unwrap();
        client
            .stats(
                "canary",
                &WindowQuery {
                    window: Some("1m".into()),
                    ..WindowQuery::default()
                },
            )
            .await
            .unwrap();
    }
    // The 401 says how to authenticate, in the same JSON as every error.
    let response = reqwest::Client::new()
        .put(format!("{base}/v1/weights"))
        .body("{\"canary\": 90}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
    assert_eq!(setup.client.weights().await.unwrap().canary, 10);
    // The right token: 200.
    let right = AgentClient::new(&base)
        .unwrap()
        .with_token(format!("{}\n", setup.agent.control_token().secret()));
    assert_eq!(right.set_weights(90).await.unwrap().canary, 90);
    assert!(right.remove_route("users").await.unwrap().is_empty());
    // Open reads answer only clients that name the loopback (no DNS rebinding); probes any.
    for (path, host, expected) in [
        ("/v1/status", "attacker.example", 421),
        ("/v1/status", "localhost", 200),
        ("/healthz", "attacker.example", 200),
    ] {
        let response = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected, "{path} {host}");
    }
    setup.stop().await;
}
