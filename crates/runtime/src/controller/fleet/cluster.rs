//! One cluster under a fleet controller, through the cluster-backend port: a worker that
//! converges the cluster to the latest desired state the engine decided (retried by kind of
//! failure, a newer state replacing an older one), a poller that reads what it runs and the
//! commands issued in it, and the `builtin` measurements routed to it. Knows no backend kind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_core::analysis::{MeasureRequest, Measurer, Outcome};
use flotilla_core::backend::{
    BackendError, ClusterBackend, ClusterCommand, ClusterDesired, ClusterNotice, ClusterObserved,
    DesiredRun,
};
use flotilla_providers::Providers;
use tokio::sync::watch;

/// A cluster's latest observation and when it was read.
pub(super) type Latest = Arc<Mutex<Option<(Instant, Result<ClusterObserved, BackendError>)>>>;

/// The desired states given to a cluster, numbered.
type DesiredRx = watch::Receiver<(u64, Arc<ClusterDesired>)>;

/// The cluster's analysis runs as last reported by the tick.
type Reported = Arc<Mutex<Vec<DesiredRun>>>;

/// Whether every desired state given to a cluster was accepted, and since when.
#[derive(Debug)]
pub(super) struct Quiet {
    /// The generation of the latest desired state given.
    given: AtomicU64,
    /// The generation of the latest desired state the backend accepted.
    accepted: AtomicU64,
    /// The last time a state was given or accepted.
    since: Mutex<Instant>,
}

impl Quiet {
    fn touch(&self) {
        *self.since.lock().expect("quiet lock") = Instant::now();
    }

    /// Whether an observation read at `at` reflects every desired state given so far.
    pub(super) fn settled_before(&self, at: Instant) -> bool {
        self.accepted.load(Ordering::SeqCst) == self.given.load(Ordering::SeqCst)
            && at > *self.since.lock().expect("quiet lock")
    }
}

/// One cluster's backend and its workers.
pub(super) struct ClusterHandle {
    pub(super) backend: Arc<dyn ClusterBackend>,
    desired: watch::Sender<(u64, Arc<ClusterDesired>)>,
    pub(super) latest: Latest,
    /// Why the latest desired state was refused (forbidden, invalid), until one is accepted.
    pub(super) refused: Arc<Mutex<Option<BackendError>>>,
    /// Commands issued in the cluster, not yet taken by a tick.
    commands: Arc<Mutex<Vec<ClusterCommand>>>,
    pub(super) quiet: Arc<Quiet>,
    /// The cluster's analysis runs, handed to `observe` with the desired state (a report the
    /// backend may write in the cluster; never a reason to `ensure` again).
    runs: Arc<Mutex<Vec<DesiredRun>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ClusterHandle {
    /// Starts the worker and the poller of the cluster `name` behind `backend`, polling every
    /// `tick` (at most every second).
    pub(super) fn spawn(
        name: String,
        backend: Arc<dyn ClusterBackend>,
        tick: Duration,
    ) -> ClusterHandle {
        let latest: Latest = Arc::new(Mutex::new(None));
        let refused = Arc::new(Mutex::new(None));
        let commands = Arc::new(Mutex::new(Vec::new()));
        let quiet = Arc::new(Quiet {
            given: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            since: Mutex::new(Instant::now()),
        });
        let (tx, rx) = watch::channel((0, Arc::new(ClusterDesired::default())));
        let runs = Arc::new(Mutex::new(Vec::new()));
        let poller = tokio::spawn(poll(
            name.clone(),
            backend.clone(),
            (rx.clone(), runs.clone()),
            latest.clone(),
            commands.clone(),
            tick.min(Duration::from_secs(1)),
        ));
        let worker = tokio::spawn(converge(
            name,
            backend.clone(),
            rx,
            quiet.clone(),
            refused.clone(),
        ));
        ClusterHandle {
            backend,
            desired: tx,
            latest,
            refused,
            commands,
            quiet,
            runs,
            tasks: vec![poller, worker],
        }
    }

    /// The cluster's analysis runs as they are now, for the next observations.
    pub(super) fn report_runs(&self, runs: Vec<DesiredRun>) {
        *self.runs.lock().expect("runs lock") = runs;
    }

    /// Gives the cluster a new desired state (nothing when it is the one it has).
    pub(super) fn ensure(&self, desired: ClusterDesired) {
        if *self.desired.borrow().1 == desired {
            return;
        }
        self.force(desired);
    }

    /// Gives the cluster `desired` again even when unchanged (a repair, a restart): the cluster
    /// may have been changed by another writer since it was last accepted.
    pub(super) fn force(&self, desired: ClusterDesired) {
        let generation = self.quiet.given.fetch_add(1, Ordering::SeqCst) + 1;
        self.quiet.touch();
        self.desired.send_replace((generation, Arc::new(desired)));
    }

    /// Tells the cluster's watchers `notice` (best effort, in the background: a slow cluster
    /// never holds the tick).
    pub(super) fn notify(&self, notice: ClusterNotice) {
        let backend = self.backend.clone();
        tokio::spawn(async move { backend.notify(&notice).await });
    }

    /// The commands issued in the cluster since the last call.
    pub(super) fn take_commands(&self) -> Vec<ClusterCommand> {
        std::mem::take(&mut *self.commands.lock().expect("commands lock"))
    }
}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The worker: ensures each new desired state until accepted. Unreachable and conflict are
/// retried (a conflict at once, on a fresh read); forbidden and invalid are recorded as the
/// cluster's refusal (the tick holds it and says why) and retried slowly, since a permission
/// may be granted; a newer desired state replaces the one being retried.
async fn converge(
    name: String,
    backend: Arc<dyn ClusterBackend>,
    mut rx: watch::Receiver<(u64, Arc<ClusterDesired>)>,
    quiet: Arc<Quiet>,
    refused: Arc<Mutex<Option<BackendError>>>,
) {
    while rx.changed().await.is_ok() {
        let (generation, desired) = rx.borrow_and_update().clone();
        if desired.revisions.is_empty() {
            // Nothing decided for the cluster yet (it is being adopted).
            quiet.accepted.store(generation, Ordering::SeqCst);
            continue;
        }
        let mut delay = Duration::from_millis(200);
        loop {
            match backend.ensure(&desired).await {
                Ok(()) => {
                    *refused.lock().expect("refused lock") = None;
                    break;
                }
                Err(BackendError::Conflict { message }) => {
                    tracing::info!(cluster = %name, %message, "conflict; ensuring again on a fresh read");
                    delay = Duration::from_millis(50);
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(cluster = %name, error = %e, "ensure failed; retrying");
                }
                Err(e) => {
                    tracing::error!(cluster = %name, error = %e, "the cluster refused its desired state; held");
                    *refused.lock().expect("refused lock") = Some(e);
                    delay = delay.max(Duration::from_secs(2));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // A newer state: ensure it instead (marked unseen for the outer loop).
                    rx.mark_changed();
                    break;
                }
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
        if rx.has_changed().unwrap_or(false) {
            continue;
        }
        quiet.touch();
        quiet.accepted.store(generation, Ordering::SeqCst);
    }
}

/// The poller: reads what the cluster runs against the latest desired state, and takes the
/// commands issued in it.
async fn poll(
    name: String,
    backend: Arc<dyn ClusterBackend>,
    (rx, runs): (DesiredRx, Reported),
    latest: Latest,
    commands: Arc<Mutex<Vec<ClusterCommand>>>,
    every: Duration,
) {
    loop {
        let mut desired = rx.borrow().1.clone();
        let reported = runs.lock().expect("runs lock").clone();
        if !reported.is_empty() {
            Arc::make_mut(&mut desired).runs = reported;
        }
        // Dated when the read began: a read that began before an action was carried out may
        // show the cluster without it, however late it ends (a slow API server), and must not
        // be taken for the cluster after the action.
        let began = Instant::now();
        let result = backend.observe(&desired).await;
        *latest.lock().expect("observation lock") = Some((began, result));
        match backend.commands().await {
            Ok(new) if !new.is_empty() => commands.lock().expect("commands lock").extend(new),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(cluster = %name, error = %e, "cannot read the cluster's commands")
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Sends each plain read to the cluster's backend (`builtin`, a Kubernetes `job`) or to the
/// metric providers (through the cluster's API server when its `metrics.via` says so); a
/// composite metric's reads come through here one by one.
pub(super) struct Routed<'a> {
    pub(super) backend: Option<&'a dyn ClusterBackend>,
    pub(super) providers: &'a Providers,
}

impl Measurer for Routed<'_> {
    async fn measure(&self, request: &MeasureRequest) -> Outcome {
        if request.provider.job.is_some()
            && let Some(measured) = self.backend.and_then(|b| b.measure_job(request))
        {
            return measured.await;
        }
        if request.provider.builtin.is_some() {
            match self.backend {
                Some(backend) => backend.measure_builtin(request).await,
                None => Outcome::Error(
                    "a wave analysis cannot use builtin metrics in `flotilla serve` (they read one cluster's agent); use a prometheus or web metric".into(),
                ),
            }
        } else {
            let proxy = self.backend.and_then(|b| b.service_proxy());
            self.providers.measure_through(request, proxy).await
        }
    }
}
