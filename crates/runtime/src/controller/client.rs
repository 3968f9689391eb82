//! [`ApiClient`]: the daemon's API from the CLI's side.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::record::{AuditEntry, FleetSummary, FleetView, OperatorCommand, RolloutView};

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    /// The daemon could not be reached.
    #[error("cannot reach the Flotilla server at {url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The daemon refused.
    #[error("{message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The daemon's reason.
        message: String,
    },
    /// The answer could not be decoded.
    #[error("cannot decode the answer of {url}: {message}")]
    Decode {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
}

/// A client of one daemon.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    operator: String,
    http: reqwest::Client,
}

impl ApiClient {
    /// A client of the daemon at `base`, with a token for mutating calls (and for reads, which
    /// a daemon with `readsNeedToken` closes).
    pub fn new(base: &str, token: Option<String>) -> ApiClient {
        // reqwest is built without a default TLS provider; install ring's if nobody has.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        ApiClient {
            base: base.trim_end_matches('/').to_owned(),
            token,
            operator: std::env::var("USER").unwrap_or_else(|_| "operator".into()),
            http,
        }
    }

    /// A read, with the token when the client has one (a daemon with `readsNeedToken` asks
    /// for it on reads too).
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ApiClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?;
        decode(url, response).await
    }

    /// `GET /v1/fleets`.
    pub async fn list(&self) -> Result<Vec<FleetSummary>, ApiClientError> {
        self.get("/v1/fleets").await
    }

    /// `GET /v1/fleets/{name}`.
    pub async fn fleet(&self, name: &str) -> Result<FleetView, ApiClientError> {
        self.get(&format!("/v1/fleets/{name}")).await
    }

    /// `GET /v1/fleets/{name}/clusters/{cluster}`.
    pub async fn rollout(&self, name: &str, cluster: &str) -> Result<RolloutView, ApiClientError> {
        self.get(&format!("/v1/fleets/{name}/clusters/{cluster}"))
            .await
    }

    /// `GET /v1/fleets/{name}/history`.
    pub async fn history(&self, name: &str) -> Result<Vec<AuditEntry>, ApiClientError> {
        self.get(&format!("/v1/fleets/{name}/history")).await
    }

    /// A mutating call: the body (if any), the token and the operator; the daemon's message.
    async fn post(
        &self,
        path: &str,
        body: Option<&OperatorCommand>,
    ) -> Result<String, ApiClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .post(&url)
            .header("x-flotilla-operator", &self.operator);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ApiClientError::Transport {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let answer: serde_json::Value = decode(url, response).await?;
        Ok(answer["message"].as_str().unwrap_or("accepted").to_owned())
    }

    /// `POST /v1/sync`: read the Git source now.
    pub async fn sync(&self) -> Result<String, ApiClientError> {
        self.post("/v1/sync", None).await
    }

    /// `POST /v1/fleets/{name}/commands`: the daemon's acceptance message.
    pub async fn command(
        &self,
        name: &str,
        command: &OperatorCommand,
    ) -> Result<String, ApiClientError> {
        self.post(&format!("/v1/fleets/{name}/commands"), Some(command))
            .await
    }
}

async fn decode<T: DeserializeOwned>(
    url: String,
    response: reqwest::Response,
) -> Result<T, ApiClientError> {
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| ApiClientError::Transport {
            url: url.clone(),
            message: e.to_string(),
        })?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(ApiClientError::Refused {
            status: status.as_u16(),
            message,
        });
    }
    serde_json::from_str(&text).map_err(|e| ApiClientError::Decode {
        url,
        message: e.to_string(),
    })
}
