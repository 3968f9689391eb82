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
