//! What the HTTP providers share: headers that never leak their values, bounded body reads,
//! addresses with their passwords redacted, and error messages that name the address and cause.

use std::time::Duration;

use flotilla_core::spec::analysis::{Authentication, WebMetricHeader};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

/// How much of a response body an error message quotes.
pub(crate) const QUOTED_BODY_BYTES: usize = 1024;

/// Parses an address, refusing anything but an absolute http(s) URL with a host.
pub(crate) fn parse_http_url(text: &str, what: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim())
        .map_err(|e| format!("{what} {:?} is not a URL: {e}", redact_text(text)))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "{what} {:?} is not an http or https URL",
            redact(&url)
        ));
    }
    Ok(url)
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
}
