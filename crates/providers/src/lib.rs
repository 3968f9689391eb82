//! Flotilla's metric-provider adapters: Argo Rollouts' `prometheus`, `web`, `job`, `datadog`,
//! `newRelic`, `influxdb`, `graphite` and `cloudWatch` providers, behind the core's [`Measurer`]
//! port.
//!
//! [`Providers`] holds the HTTP clients the network providers share and dispatches each
//! [`MeasureRequest`] on the provider block that is set. Every failure is an [`Outcome::Error`]
//! whose message names the address and the cause; header values and passwords never appear in a
//! message or in metadata.
//!
//! The futures returned by [`Measurer::measure`] must be polled inside a Tokio runtime with its
//! IO and time drivers enabled (`Builder::enable_all`). Dropping one cancels the measurement; a
//! job's whole process group is killed.

mod cloudwatch;
mod datadog;
mod graphite;
mod http;
mod influxdb;
mod job;
mod newrelic;
mod prometheus;
mod web;

use std::sync::Arc;

use flotilla_core::analysis::{MeasureRequest, Measurer, Outcome, SecretStore, ServiceProxy};

/// The providers this crate implements, by their JSON key in a metric's `provider` block.
pub const SUPPORTED: &[&str] = &[
    "prometheus",
    "web",
    "job",
    "datadog",
    "newRelic",
    "influxdb",
    "graphite",
    "cloudWatch",
];

/// Why the shared HTTP clients could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct BuildError(#[source] reqwest::Error);

/// The metric providers Flotilla runs itself, sharing one connection pool.
///
/// Cloning is cheap: the clients are reference-counted.
#[derive(Debug, Clone)]
pub struct Providers {
    /// Verifies TLS certificates.
    secure: reqwest::Client,
    /// Skips TLS verification, for metrics that set `insecure: true`.
    insecure: reqwest::Client,
    /// Where the Datadog, New Relic and InfluxDB credentials are read (Argo reads them from
    /// Kubernetes Secrets).
    secrets: Arc<dyn SecretStore>,
    /// The AWS SDK client for CloudWatch, built from the standard chain on first use.
    cloudwatch: cloudwatch::Shared,
}

impl Providers {
    /// Builds the shared clients (installing rustls' ring provider for the process if no
    /// provider is installed yet); credentials are read from `secrets`.
    pub fn new(secrets: Arc<dyn SecretStore>) -> Result<Providers, BuildError> {
        // Err means another provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let secure = reqwest::Client::builder().build().map_err(BuildError)?;
        let insecure = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .map_err(BuildError)?;
        Ok(Providers {
            secure,
            insecure,
            secrets,
            cloudwatch: Default::default(),
        })
    }

    fn client(&self, insecure: Option<bool>) -> &reqwest::Client {
        if insecure == Some(true) {
            &self.insecure
        } else {
            &self.secure
        }
    }
}

impl Measurer for Providers {
    async fn measure(&self, request: &MeasureRequest) -> Outcome {
        self.measure_through(request, None).await
    }
}

impl Providers {
    /// The transport of one measurement: `insecure` picks the client; with `proxy`, in-cluster
    /// Service addresses go through it.
    pub(crate) fn transport<'a>(
        &'a self,
        insecure: Option<bool>,
        proxy: Option<&'a dyn ServiceProxy>,
    ) -> http::Transport<'a> {
        http::Transport {
            client: self.client(insecure),
            proxy,
        }
    }

    /// Takes one measurement; with `proxy` (a cluster whose `metrics.via` is `apiserver`), the
    /// Prometheus, web, Graphite and InfluxDB requests to in-cluster Service addresses
    /// (`http://prometheus.monitoring:9090`) go through that cluster's API server (one carrying
    /// an `Authorization` header is refused there, as the API server would consume it), and
    /// every other address, or a name the cluster has no Service for, is reached directly.
    pub async fn measure_through(
        &self,
        request: &MeasureRequest,
        proxy: Option<&dyn ServiceProxy>,
    ) -> Outcome {
        if tokio::runtime::Handle::try_current().is_err() {
            return Outcome::Error("measurements must run inside a Tokio runtime".into());
        }
        let provider = &request.provider;
        let kinds = provider.kinds();
        match kinds.as_slice() {
            [] => Outcome::Error(format!("metric {:?} has no provider", request.metric)),
            [_] => {
                if let Some(metric) = &provider.prometheus {
                    prometheus::measure(self.transport(metric.insecure, proxy), metric, request)
                        .await
                } else if let Some(metric) = &provider.web {
                    web::measure(self.transport(metric.insecure, proxy), metric).await
                } else if let Some(metric) = &provider.job {
                    job::measure(metric).await
                } else if let Some(metric) = &provider.datadog {
                    datadog::measure(self, metric, request).await
                } else if let Some(metric) = &provider.new_relic {
                    newrelic::measure(self, metric, request).await
                } else if let Some(metric) = &provider.influxdb {
                    influxdb::measure(self, proxy, metric, request).await
                } else if let Some(metric) = &provider.graphite {
                    graphite::measure(self, proxy, metric, request).await
                } else if let Some(metric) = &provider.cloud_watch {
                    cloudwatch::measure(self, metric, request).await
                } else {
                    Outcome::Error(format!(
                        "the {} provider is not supported by Flotilla yet",
                        kinds[0]
                    ))
                }
            }
            many => Outcome::Error(format!(
                "metric {:?} sets {} providers ({}); exactly one is allowed",
                request.metric,
                many.len(),
                many.join(", ")
            )),
        }
    }
}
