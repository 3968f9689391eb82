//! [`AgentClient`]: the control API from the controller's side, one method per endpoint; its
//! changes carry the agent's bearer token ([`AgentClient::with_token`]).

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire::{
    AgentStatus, MirrorBody, MirrorSpec, RouteBody, RouteSpec, Scale, SetWeights, SubsetStatus,
    Weights, Window, WindowQuery,
};

/// Why a control API call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The agent could not be reached or did not answer in time.
    #[error("cannot reach the agent at {url}: {message}")]
    Transport {
        /// The URL called.
        url: String,
        /// Why.
        message: String,
    },
    /// The agent answered with an error.
    #[error("the agent refused {method} {url} ({status}): {message}")]
    Api {
        /// The method.
        method: String,
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The agent's `error` message.
        message: String,
    },
    /// The agent's answer could not be decoded.
    #[error("cannot decode the agent's answer to {url}: {message}")]
    Decode {
        /// The URL called.
        url: String,
        /// Why.
        message: String,
    },
    /// The client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
}

/// A client for one agent's control API. Its `Debug` does not show the token.
#[derive(Clone)]
pub struct AgentClient {
    base: String,
    http: reqwest::Client,
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl AgentClient {
    /// A client for the agent whose control API is at `base` (`http://127.0.0.1:9090`), with a
    /// 10-second timeout per call.
    pub fn new(base: impl Into<String>) -> Result<AgentClient, ClientError> {
        AgentClient::with_timeout(base, Duration::from_secs(10))
    }

    /// A client with its own timeout per call.
    pub fn with_timeout(
        base: impl Into<String>,
        timeout: Duration,
    ) -> Result<AgentClient, ClientError> {
        // reqwest is built without a default TLS provider; install ring's if nobody has.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(AgentClient {
            base: base.into().trim_end_matches('/').to_owned(),
            http,
            token: None,
        })
    }

    /// The same client sending `Authorization: Bearer <token>` on every call that changes
    /// something (all but GET): the agent's token (its `control.tokenFile`). Surrounding
    /// whitespace (a file's newline) is dropped.
    pub fn with_token(mut self, token: impl AsRef<str>) -> AgentClient {
        self.token = Some(token.as_ref().trim().into());
        self
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: Option<&WindowQuery>,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let text = self.call_text(method, path, query, body).await?;
        let url = format!("{}{path}", self.base);
        serde_json::from_str(&text).map_err(|e| ClientError::Decode {
            url,
            message: e.to_string(),
        })
    }

    async fn call_text<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        query: Option<&WindowQuery>,
        body: Option<&B>,
    ) -> Result<String, ClientError> {
        let mut url = format!("{}{path}", self.base);
        if let Some(query) = query {
            url.push_str(&query_string(query));
        }
        let mut request = self.http.request(method.clone(), &url);
        if method != Method::GET
            && let Some(token) = &self.token
        {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let transport = |e: reqwest::Error| ClientError::Transport {
            url: url.clone(),
            message: error_chain(&e),
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let text = response.text().await.map_err(transport)?;
        if !status.is_success() {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or(text);
            return Err(ClientError::Api {
                method: method.to_string(),
                url,
                status: status.as_u16(),
                message,
            });
        }
        Ok(text)
    }

    /// `GET /v1/status`: weights, routes, mirrors and every subset.
    pub async fn status(&self) -> Result<AgentStatus, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/status", None, None)
            .await
    }

    /// `GET /v1/weights`: the weights in effect.
    pub async fn weights(&self) -> Result<Weights, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/weights", None, None)
            .await
    }

    /// `PUT /v1/weights`: sets the canary's weight; returns the weights in effect.
    pub async fn set_weights(&self, canary: u32) -> Result<Weights, ClientError> {
        self.call(
            Method::PUT,
            "/v1/weights",
            None,
            Some(&SetWeights { canary }),
        )
        .await
    }

    /// `GET /v1/routes`.
    pub async fn routes(&self) -> Result<Vec<RouteSpec>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/routes", None, None)
            .await
    }

    /// `PUT /v1/routes/{name}`: adds or replaces a header or cookie route.
    pub async fn set_route(&self, route: &RouteSpec) -> Result<Vec<RouteSpec>, ClientError> {
        let body = RouteBody {
            subset: route.subset.clone(),
            header: route.header.clone(),
            cookie: route.cookie.clone(),
        };
        self.call(
            Method::PUT,
            &format!("/v1/routes/{}", encode(&route.name)),
            None,
            Some(&body),
        )
        .await
    }

    /// `DELETE /v1/routes/{name}`.
    pub async fn remove_route(&self, name: &str) -> Result<Vec<RouteSpec>, ClientError> {
        self.call::<(), _>(
            Method::DELETE,
            &format!("/v1/routes/{}", encode(name)),
            None,
            None,
        )
        .await
    }

    /// `GET /v1/mirrors`.
    pub async fn mirrors(&self) -> Result<Vec<MirrorSpec>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/mirrors", None, None)
            .await
    }

    /// `PUT /v1/mirrors/{name}`: adds or replaces a mirror route.
    pub async fn set_mirror(&self, mirror: &MirrorSpec) -> Result<Vec<MirrorSpec>, ClientError> {
        let body = MirrorBody {
            subset: Some(mirror.subset.clone()),
            percentage: mirror.percentage,
            header: mirror.header.clone(),
        };
        self.call(
            Method::PUT,
            &format!("/v1/mirrors/{}", encode(&mirror.name)),
            None,
            Some(&body),
        )
        .await
    }

    /// `DELETE /v1/mirrors/{name}`.
    pub async fn remove_mirror(&self, name: &str) -> Result<Vec<MirrorSpec>, ClientError> {
        self.call::<(), _>(
            Method::DELETE,
            &format!("/v1/mirrors/{}", encode(name)),
            None,
            None,
        )
        .await
    }

    /// `GET /v1/subsets`: every subset's replicas.
    pub async fn subsets(&self) -> Result<Vec<SubsetStatus>, ClientError> {
        self.call::<(), _>(Method::GET, "/v1/subsets", None, None)
            .await
    }

    /// `GET /v1/subsets/{subset}`: one subset's replicas.
    pub async fn subset(&self, subset: &str) -> Result<SubsetStatus, ClientError> {
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/subsets/{}", encode(subset)),
            None,
            None,
        )
        .await
    }

    /// `PUT /v1/subsets/{subset}/scale`: runs `replicas` of `version`.
    pub async fn scale(
        &self,
        subset: &str,
        version: &str,
        replicas: u32,
    ) -> Result<SubsetStatus, ClientError> {
        let body = Scale {
            version: version.to_owned(),
            replicas,
        };
        self.call(
            Method::PUT,
            &format!("/v1/subsets/{}/scale", encode(subset)),
            None,
            Some(&body),
        )
        .await
    }

    /// `GET /v1/subsets/{subset}/stats`: traffic over a window.
    pub async fn stats(&self, subset: &str, window: &WindowQuery) -> Result<Window, ClientError> {
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/subsets/{}/stats", encode(subset)),
            Some(window),
            None,
        )
        .await
    }

    /// `GET /v1/subsets/{subset}/series`: traffic over consecutive windows of `step`.
    pub async fn series(
        &self,
        subset: &str,
        window: &WindowQuery,
    ) -> Result<Vec<Window>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            &format!("/v1/subsets/{}/series", encode(subset)),
            Some(window),
            None,
        )
        .await
    }

    /// `POST /v1/config/reload`: reads the configuration file again.
    pub async fn reload_config(&self) -> Result<(), ClientError> {
        self.call_text::<()>(Method::POST, "/v1/config/reload", None, None)
            .await
            .map(drop)
    }

    /// `GET /metrics`: the Prometheus exposition.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        self.call_text::<()>(Method::GET, "/metrics", None, None)
            .await
    }
}

/// `?window=2m&offset=1h&quantile=0.95` (only the fields that are set).
fn query_string(q: &WindowQuery) -> String {
    let mut pairs: Vec<String> = Vec::new();
    if let Some(w) = &q.window {
        pairs.push(format!("window={}", encode(w)));
    }
    if let Some(o) = &q.offset {
        pairs.push(format!("offset={}", encode(o)));
    }
    if let Some(s) = q.start {
        pairs.push(format!("start={s}"));
    }
    if let Some(e) = q.end {
        pairs.push(format!("end={e}"));
    }
    if let Some(v) = q.quantile {
        pairs.push(format!("quantile={v}"));
    }
    if let Some(step) = &q.step {
        pairs.push(format!("step={}", encode(step)));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
}

/// An error and its sources, joined with ": " (a source whose text the chain already holds is
/// left out): how a failure to reach an agent is told, and how the agent's router and load
/// generator tell theirs.
pub fn error_chain(error: &dyn std::error::Error) -> String {
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

/// Percent-encodes a path segment.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
