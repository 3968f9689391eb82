//! What the HTTP providers share: headers that never leak their values, bounded body reads,
//! addresses with their passwords redacted, error messages that name the address and cause, and
//! the transport that sends in-cluster addresses through a cluster's API server.

use std::time::Duration;

use flotilla_core::analysis::{ProxyError, ServiceProxy, ServiceRequest};
use flotilla_core::spec::analysis::{Authentication, WebMetricHeader};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

/// How much of a response body an error message quotes.
pub(crate) const QUOTED_BODY_BYTES: usize = 1024;

/// Parses an address, refusing anything but an absolute http(s) URL with a host (core's
/// [`http_url`](flotilla_core::analysis::provider_checks::http_url), lint's rule too); the
/// message names `what` and never shows a password.
pub(crate) fn parse_http_url(text: &str, what: &str) -> Result<Url, String> {
    use flotilla_core::analysis::provider_checks::{HttpUrlError, http_url};
    http_url(text).map_err(|e| match e {
        HttpUrlError::NotAUrl(_) => format!("{what} {:?} {e}", redact_text(text)),
        HttpUrlError::NotHttp => {
            let shown = Url::parse(text.trim()).map_or_else(|_| redact_text(text), |u| redact(&u));
            format!("{what} {shown:?} {e}")
        }
    })
}

/// The URL as it may appear in a message: a password becomes `xxxxx` (as Go's `URL.Redacted`).
pub(crate) fn redact(url: &Url) -> String {
    if url.password().is_some() {
        let mut shown = url.clone();
        let _ = shown.set_password(Some("xxxxx"));
        shown.to_string()
    } else {
        url.to_string()
    }
}

/// Like [`redact`] for text that may not parse as a URL: anything between `://` and `@` goes.
fn redact_text(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://xxxxx{}", &text[..scheme_end], &text[at..])
        }
        _ => text.to_owned(),
    }
}

/// Builds a header map with `Set` semantics (a later header replaces an earlier one of the same
/// name, as Argo's providers do). Values are marked sensitive and never quoted in errors.
pub(crate) fn header_map(headers: &[WebMetricHeader]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for header in headers {
        let name = HeaderName::from_bytes(header.key.as_bytes()).map_err(|_| {
            format!(
                "header name {:?} is not a valid HTTP header name",
                header.key
            )
        })?;
        let mut value = HeaderValue::from_str(&header.value).map_err(|_| {
            format!(
                "the value of header {:?} is not a valid HTTP header value",
                header.key
            )
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(map)
}

/// Refuses the authentication methods Flotilla does not implement yet; returns basic-auth
/// credentials when they are set.
pub(crate) fn basic_auth(
    authentication: Option<&Authentication>,
    provider: &str,
) -> Result<Option<(String, String)>, String> {
    let Some(auth) = authentication else {
        return Ok(None);
    };
    if let Some(sigv4) = &auth.sigv4
        && (sigv4.region.is_some() || sigv4.profile.is_some() || sigv4.role_arn.is_some())
    {
        return Err(format!(
            "{provider} authentication.sigv4 is not supported by Flotilla yet"
        ));
    }
    if let Some(oauth2) = &auth.oauth2
        && oauth2.token_url.as_deref().is_some_and(|u| !u.is_empty())
    {
        return Err(format!(
            "{provider} authentication.oauth2 is not supported by Flotilla yet"
        ));
    }
    Ok(auth.basic_auth.as_ref().map(|basic| {
        (
            basic.username.clone().unwrap_or_default(),
            basic.password.clone().unwrap_or_default(),
        )
    }))
}

/// Describes a failed request: `GET http://host/path: cause: deeper cause`. The URL shown is
/// `shown` (redacted, without its query), never the one reqwest recorded.
pub(crate) fn describe_error(
    method: &str,
    shown: &str,
    error: reqwest::Error,
    timeout: Duration,
) -> String {
    let timed_out = error.is_timeout();
    let cause = error_chain(&error.without_url());
    if timed_out {
        format!(
            "{method} {shown}: timed out after {}s ({cause})",
            timeout.as_secs_f64()
        )
    } else {
        format!("{method} {shown}: {cause}")
    }
}

/// An error and its sources, `: `-separated, each said once.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p == &text) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

/// The endpoint as messages show it: redacted, without query string or fragment.
pub(crate) fn shown_endpoint(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    redact(&shown)
}

/// Reads a response body, failing once it exceeds `limit` bytes.
pub(crate) async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The connection failed or timed out mid-body.
    Read(reqwest::Error),
    /// The body exceeded the limit (in bytes).
    TooLarge(usize),
}

impl BodyError {
    /// Describes the failure the way [`describe_error`] does.
    pub(crate) fn describe(self, method: &str, shown: &str, timeout: Duration) -> String {
        match self {
            BodyError::Read(e) => describe_error(method, shown, e, timeout),
            BodyError::TooLarge(limit) => {
                format!("{method} {shown}: the response body exceeds {limit} bytes")
            }
        }
    }
}

/// At most [`QUOTED_BODY_BYTES`] of a body, as text, marked when cut.
pub(crate) fn quote_body(body: &[u8]) -> String {
    if body.len() <= QUOTED_BODY_BYTES {
        String::from_utf8_lossy(body).trim_end().to_owned()
    } else {
        let mut end = QUOTED_BODY_BYTES;
        // Do not split a UTF-8 sequence (continuation bytes are 0b10xxxxxx).
        while end > 0 && (body[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        format!(
            "{}… ({} bytes in all)",
            String::from_utf8_lossy(&body[..end]),
            body.len()
        )
    }
}

/// The most bytes of body a Service proxy reads before the provider's own limit applies (the
/// largest of the providers' limits).
const PROXIED_BODY_BYTES: usize = 64 * 1024 * 1024;

/// How much longer than the request's own timeout a proxy may take before it is given up on
/// without its word (it ends within the timeout itself, naming the cluster).
const PROXY_GRACE: Duration = Duration::from_secs(2);

/// Headers that belong to one connection (RFC 9110 §7.6.1), never passed through a proxy.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
];

/// Where a provider's requests go: straight out of this process, or, for a cluster whose
/// metrics are reached through its API server, to in-cluster Service addresses through that
/// cluster's [`ServiceProxy`] (any other address still goes straight out).
#[derive(Clone, Copy)]
pub(crate) struct Transport<'a> {
    /// Builds every request, and sends the direct ones.
    pub(crate) client: &'a reqwest::Client,
    /// The cluster's way in, when its metrics go through it.
    pub(crate) proxy: Option<&'a dyn ServiceProxy>,
}

impl<'a> Transport<'a> {
    /// Sends a built request and returns the response (any status), or a message naming the
    /// method, the address and the cause.
    pub(crate) async fn send(
        &self,
        builder: reqwest::RequestBuilder,
        verb: &str,
        shown: &str,
        timeout: Duration,
    ) -> Result<reqwest::Response, String> {
        let Some(proxy) = self.proxy else {
            return builder
                .send()
                .await
                .map_err(|e| describe_error(verb, shown, e, timeout));
        };
        let request = builder
            .build()
            .map_err(|e| describe_error(verb, shown, e, timeout))?;
        let Some((service, namespace)) = service_of(request.url()) else {
            return self
                .client
                .execute(request)
                .await
                .map_err(|e| describe_error(verb, shown, e, timeout));
        };
        let proxied = proxied_request(&request, service, namespace, timeout)
            .map_err(|e| format!("{verb} {shown}: {e}"))?;
        // The proxy ends within `timeout` and says why; this bound only backs that up.
        let answer = tokio::time::timeout(timeout + PROXY_GRACE, proxy.send(proxied))
            .await
            .map_err(|_| {
                format!(
                    "{verb} {shown}: no answer through the cluster's API server within {}s",
                    timeout.as_secs_f64()
                )
            })?;
        let answer = match answer {
            Ok(answer) => answer,
            Err(ProxyError::Failed(e)) => return Err(format!("{verb} {shown}: {e}")),
            // Not a Service of the cluster: looked up outside it, as a Pod's resolver does once
            // its cluster domains have no such name (`example.com` is no Service `example` in a
            // namespace `com`).
            Err(ProxyError::NoService(e)) => {
                return self.client.execute(request).await.map_err(|direct| {
                    format!(
                        "{verb} {shown}: {e}; reached directly: {}",
                        describe_error(verb, shown, direct, timeout)
                    )
                });
            }
        };
        let mut response = ::http::Response::builder().status(answer.status);
        for (name, value) in answer.headers {
            response = response.header(name, value);
        }
        let response = response
            .body(answer.body)
            .map_err(|e| format!("{verb} {shown}: the proxied answer is not HTTP: {e}"))?;
        Ok(reqwest::Response::from(response))
    }
}

/// The Service a URL's host names in a cluster (`svc`, `svc.ns`, `svc.ns.svc`,
/// `svc.ns.svc.<cluster domain>`), with its namespace when the host gives one; None for an IP,
/// `localhost` or any other name (reached directly).
pub(crate) fn service_of(url: &Url) -> Option<(String, Option<String>)> {
    let url::Host::Domain(host) = url.host()? else {
        return None;
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" {
        return None;
    }
    let labels: Vec<&str> = host.split('.').collect();
    match labels.as_slice() {
        [service] => Some(((*service).to_owned(), None)),
        [service, namespace] => Some(((*service).to_owned(), Some((*namespace).to_owned()))),
        [service, namespace, "svc", ..] => {
            Some(((*service).to_owned(), Some((*namespace).to_owned())))
        }
        _ => None,
    }
}

/// The request for a Service proxy, without hop-by-hop headers. Refuses an `Authorization`
/// header (the API server takes it as the caller's own credentials and does not pass it on) and
/// `Impersonate-*` headers (the API server would act as someone else for the controller).
fn proxied_request(
    request: &reqwest::Request,
    service: String,
    namespace: Option<String>,
    timeout: Duration,
) -> Result<ServiceRequest, String> {
    let url = request.url();
    if request
        .headers()
        .contains_key(reqwest::header::AUTHORIZATION)
    {
        return Err("an Authorization header (basic auth, a bearer or InfluxDB token) cannot go through the cluster's API server: the API server takes it as the caller's own credentials and does not pass it on; give this metric an address the controller reaches directly (an IP or a name outside the cluster), or drop metrics.via".into());
    }
    if let Some(name) = request
        .headers()
        .keys()
        .find(|name| name.as_str().starts_with("impersonate-"))
    {
        return Err(format!(
            "header {name} cannot go through the cluster's API server: the API server would act as another identity for the controller"
        ));
    }
    let port = url
        .port_or_known_default()
        .ok_or("the address has no port")?;
    let mut path_and_query = url.path().to_owned();
    if let Some(query) = url.query() {
        path_and_query.push('?');
        path_and_query.push_str(query);
    }
    let body = match request.body() {
        None => Vec::new(),
        Some(body) => body
            .as_bytes()
            .ok_or("a streamed request body cannot go through the cluster's API server")?
            .to_vec(),
    };
    Ok(ServiceRequest {
        method: request.method().as_str().to_owned(),
        scheme: url.scheme().to_owned(),
        service,
        namespace,
        port,
        path_and_query,
        headers: request
            .headers()
            .iter()
            .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()) && name.as_str() != "host")
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        body,
        timeout,
        max_body: PROXIED_BODY_BYTES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls_and_unparseable_text() {
        let url = Url::parse("https://user:s3cret@prom.example:9090/api").unwrap();
        let shown = redact(&url);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("user:xxxxx@prom.example:9090"), "{shown}");
        let err = parse_http_url("ftp://user:s3cret@x", "address").unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        let err = parse_http_url("http://user:s3cret@[bad", "address").unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(parse_http_url("not a url", "address").is_err());
        assert!(parse_http_url("http://127.0.0.1:9090", "address").is_ok());
    }

    #[test]
    fn header_values_never_appear_in_errors() {
        let bad = [WebMetricHeader {
            key: "Authorization".into(),
            value: "Bearer top\nsecret".into(),
        }];
        let err = header_map(&bad).unwrap_err();
        assert!(
            err.contains("Authorization") && !err.contains("secret"),
            "{err}"
        );
        let twice = [
            WebMetricHeader {
                key: "X-A".into(),
                value: "1".into(),
            },
            WebMetricHeader {
                key: "x-a".into(),
                value: "2".into(),
            },
        ];
        let map = header_map(&twice).unwrap();
        assert_eq!(map.get_all("x-a").iter().count(), 1);
        assert_eq!(map["x-a"], "2");
    }

    #[test]
    fn quoted_bodies_are_cut_at_a_kibibyte_on_a_character_boundary() {
        assert_eq!(quote_body(b"oops\n"), "oops");
        let long = "é".repeat(1000);
        let quoted = quote_body(long.as_bytes());
        assert!(quoted.ends_with("… (2000 bytes in all)"), "{quoted}");
        assert!(!quoted.contains('\u{FFFD}'));
        assert!(quoted.len() <= QUOTED_BODY_BYTES + 40);
    }

    #[test]
    fn service_addresses_are_told_from_other_hosts() {
        let of = |text: &str| service_of(&Url::parse(text).unwrap());
        assert_eq!(
            of("http://prometheus:9090"),
            Some(("prometheus".into(), None))
        );
        for text in [
            "http://prometheus.monitoring:9090/x",
            "http://prometheus.monitoring.svc:9090",
            "http://prometheus.monitoring.svc.cluster.local:9090",
            "http://Prometheus.Monitoring.svc.example.org.:9090",
        ] {
            assert_eq!(
                of(text),
                Some(("prometheus".into(), Some("monitoring".into()))),
                "{text}"
            );
        }
        for text in [
            "http://127.0.0.1:9090",
            "http://[::1]:9090",
            "http://localhost:9090",
            "https://metrics.eu.example.com",
        ] {
            assert_eq!(of(text), None, "{text}");
        }
    }

    #[test]
    fn a_proxied_request_keeps_path_query_body_and_headers_but_no_credentials() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let request = client
            .post("https://graphite.obs:8443/render/x%20y?target=a&from=-5min#frag")
            .header("x-scope", "tenant-1")
            .body("{}")
            .build()
            .unwrap();
        let proxied = proxied_request(
            &request,
            "graphite".into(),
            Some("obs".into()),
            Duration::from_secs(3),
        )
        .unwrap();
        assert_eq!(proxied.method, "POST");
        assert_eq!(proxied.scheme, "https");
        assert_eq!(proxied.port, 8443);
        assert_eq!(proxied.path_and_query, "/render/x%20y?target=a&from=-5min");
        assert_eq!(proxied.body, b"{}");
        assert!(
            proxied
                .headers
                .contains(&("x-scope".to_owned(), b"tenant-1".to_vec()))
        );
        let default_port = client.get("http://prometheus/api").build().unwrap();
        let proxied =
            proxied_request(&default_port, "prometheus".into(), None, Duration::ZERO).unwrap();
        assert_eq!(
            (proxied.port, proxied.path_and_query.as_str()),
            (80, "/api")
        );
        let with_auth = client
            .get("http://prometheus:9090/api")
            .basic_auth("u", Some("p"))
            .build()
            .unwrap();
        let refused =
            proxied_request(&with_auth, "prometheus".into(), None, Duration::ZERO).unwrap_err();
        assert!(refused.contains("Authorization"), "{refused}");
        let impersonating = client
            .get("http://prometheus:9090/api")
            .header("Impersonate-User", "system:admin")
            .header("Connection", "upgrade")
            .build()
            .unwrap();
        let refused =
            proxied_request(&impersonating, "prometheus".into(), None, Duration::ZERO).unwrap_err();
        assert!(refused.contains("impersonate-user"), "{refused}");
        let hop = client
            .get("http://prometheus:9090/api")
            .header("Connection", "upgrade")
            .header("Upgrade", "websocket")
            .header("TE", "trailers")
            .header("Accept", "application/json")
            .build()
            .unwrap();
        let proxied = proxied_request(&hop, "prometheus".into(), None, Duration::ZERO).unwrap();
        let names: Vec<&str> = proxied.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["accept"]);
        assert!(!refused.contains("dTpw"), "{refused}");
    }
}
