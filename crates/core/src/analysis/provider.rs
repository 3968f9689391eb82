//! The port through which analysis reaches metric providers: a request to measure one metric at
//! one time (optionally over a window), and the outcome. Adapters implement [`Measurer`]; the
//! core never performs the I/O itself.

use std::collections::BTreeMap;
use std::future::Future;

use crate::spec::analysis::{AnalysisPhase, MetricProvider};

use super::condition::MetricResult;

pub use crate::time::Millis;

/// One measurement to take.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasureRequest {
    /// The metric's position in its run.
    pub metric_index: usize,
    /// The metric's name.
    pub metric: String,
    /// The provider block, with every `{{args.x}}` already substituted.
    pub provider: std::sync::Arc<MetricProvider>,
    /// The instant to evaluate at (now for live runs; a past instant for backtests).
    pub at: Millis,
    /// A window ending at `at`, for providers that answer series (None: an instant query).
    pub window: Option<u64>,
    /// When the run started: traffic before it may be another version's (a previous canary
    /// in the same subset) and is not this run's to judge (None: no bound, e.g. a backtest).
    pub not_before: Option<Millis>,
    /// For providers that answer series: one point per step of this many milliseconds over the
    /// window (None: one value for the whole window).
    pub step: Option<u64>,
    /// The metric's conditions read a per-cluster reference (a Flotilla `baseline:` block).
    pub baseline: Option<crate::spec::analysis::Calibration>,
    /// A calibrated metric's reference as its run first read it (the `baseline.*` values and
    /// their source): later measurements reuse it instead of reading the past window again, so
    /// a run is judged against one reference however long it lasts.
    pub reference: Option<BTreeMap<String, String>>,
    /// Whether this is the metric's last scheduled measurement (its count is reached after it):
    /// a composite measurement then concludes instead of deferring.
    pub last: bool,
}

/// What a provider answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A value for the metric's conditions to judge.
    Value {
        /// The result as conditions see it.
        result: MetricResult,
        /// Provider details kept with the measurement (e.g. the query that ran).
        metadata: BTreeMap<String, String>,
    },
    /// A provider that decides the phase itself (a Job's exit status, a Kayenta score).
    Decided {
        /// Successful, Failed or Inconclusive.
        phase: AnalysisPhase,
        /// The value to record (e.g. the exit code or score).
        value: String,
        /// A message to record (e.g. the job's output).
        message: String,
        /// Provider details kept with the measurement.
        metadata: BTreeMap<String, String>,
    },
    /// The provider failed: unreachable, bad query, timeout. An Error measurement.
    Error(String),
    /// Not enough evidence yet (a sequential test below its minimum sample, a comparison with
    /// too few points): no measurement is recorded and the metric is asked again after its
    /// interval. At the metric's last measurement it becomes Inconclusive with this reason.
    Deferred(String),
    /// The measurement was cancelled because the run terminated.
    Terminated,
}

/// Where providers read the credentials Argo's providers read from Kubernetes Secrets (Datadog's
/// `datadog` Secret, New Relic's and InfluxDB's `profile`): a Secret's name and one key in it.
///
/// The runtime implements it over its secret sources (the environment, a secrets directory);
/// a value never appears in an error message.
pub trait SecretStore: Send + Sync + std::fmt::Debug {
    /// One key of one Secret, or why it cannot be read (naming the Secret, the key and where it
    /// was looked for).
    fn read(&self, name: &str, key: &str) -> Result<String, String>;
}

/// A metric provider adapter.
///
/// # Guarantees expected from implementations
/// - `measure` never panics and never blocks the caller's thread; every failure is an
///   [`Outcome::Error`] whose message names the address and the cause.
/// - Dropping the returned future cancels the measurement and releases what it holds (a Job's
///   process is killed).
pub trait Measurer: Send + Sync {
    /// Takes one measurement.
    fn measure(&self, request: &MeasureRequest) -> impl Future<Output = Outcome> + Send;
}

/// One HTTP request to a Service in a cluster's own network (an in-cluster address such as
/// `http://prometheus.monitoring:9090/api/v1/query?…`, taken apart), for a [`ServiceProxy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRequest {
    /// The HTTP method (`GET`, `POST`).
    pub method: String,
    /// `http` or `https`: how the proxy reaches the Service.
    pub scheme: String,
    /// The Service's name.
    pub service: String,
    /// The Service's namespace (None: the namespace of the cluster's Rollout, as a one-label
    /// host resolves in the Rollout's Pods).
    pub namespace: Option<String>,
    /// The Service's port (its number, as written in the address).
    pub port: u16,
    /// The path and query, percent-encoded, starting with `/`.
    pub path_and_query: String,
    /// The request's headers (names lower-case), in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The request's body (empty for a GET).
    pub body: Vec<u8>,
    /// How long the whole exchange may take.
    pub timeout: std::time::Duration,
    /// The most bytes of response body to read; a longer body is an error.
    pub max_body: usize,
}

/// What a Service answered through a [`ServiceProxy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceResponse {
    /// The HTTP status (the proxy's own when it could not reach the Service, e.g. 503).
    pub status: u16,
    /// The response's headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The response's body.
    pub body: Vec<u8>,
}

/// Why a [`ServiceProxy`] brought no answer from the Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyError {
    /// The cluster has no such Service (or namespace): the address may name something outside
    /// the cluster, as a Pod's resolver would then look it up outside. Says what was not found.
    NoService(String),
    /// Anything else: no answer, a timeout, a refusal, a body over `max_body`. Names the cluster
    /// and the cause.
    Failed(String),
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyError::NoService(message) | ProxyError::Failed(message) => f.write_str(message),
        }
    }
}

/// A cluster's own way into its network, for metric providers that live there: on Kubernetes
/// the API server's service proxy, with the cluster's credentials (a Fleet cluster's
/// `metrics.via: apiserver`).
///
/// # Guarantees expected from implementations
/// - `send` never panics; an answer of the Service with any status is an Ok; the proxy's own
///   refusals are errors naming the cluster and the cause.
/// - It ends within `request.timeout`, and never retries on its own (a retried query or POST is
///   the provider's decision, not the transport's).
pub trait ServiceProxy: Send + Sync {
    /// Sends `request` to its Service and reads the whole answer.
    fn send<'a>(
        &'a self,
        request: ServiceRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<ServiceResponse, ProxyError>> + Send + 'a>>;
}
