//! The controller daemon (`flotilla serve`): loads and validates its configuration and
//! manifests, resumes every fleet rollout from the store, ticks the core engines on the wall
//! clock, persists each tick before executing it, and serves the HTTP API.
//!
//! # The tick (every `tick`, or at once when a command arrives)
//! 1. read the queued operator commands and each cluster's latest observation;
//! 2. run the fleet machine (commands, measurement outcomes, observations, `now`);
//! 3. commit the new state, the consumed commands, the audit entries and notifications in one
//!    store transaction;
//! 4. only then hand the actions to the clusters' workers and start the measurements.
//!
//! With a hub source, no fleet ticks while the hub's API server does not answer (its intent
//! may have changed unseen): the fleets wait, the error on their views, and go on after.
//!
//! A `kill -9` between 3 and 4 loses nothing: on restart every cluster's last intent is
//! re-asserted (idempotently) and in-flight measurements are taken again.

pub mod api;
pub mod argo_notifications;
pub mod backends;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod durable;
#[cfg(test)]
pub mod fake_backend;
pub mod fleet;
pub mod hub_client;
pub mod hub_status;
pub mod hub_store;
pub mod listen;
pub mod notify;
pub mod plots;
pub mod record;
pub mod shared;
pub mod source;
pub mod store;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, broadcast};

use config::Resolved;
use durable::Store;
use fleet::FleetController;
use record::{AuditEntry, AuditKind, FleetSummary, FleetView};
pub use shared::{GitResult, INVALID, Metrics, Published, Shared};
use source::Source;
use store::TickWrite;

/// Why the daemon cannot start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration or manifests are invalid (nothing was started).
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// A file or socket could not be used.
    #[error("{0}")]
    Io(String),
}

/// Reads the bearer token, or creates it (mode 0600) at first start or over an empty file. A
/// token file that exists is used only when it is open to no user but its owner and group and
/// holds a token an HTTP header carries (the agents' rule): the token guards every change.
pub fn token(path: &Path) -> Result<String, ServeError> {
    let empty = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0);
    if path.exists() && !empty {
        return flotilla_agent_backend::token::read_token_file(path, "tokenFile")
            .map_err(|e| ServeError::Invalid(e.to_string()));
    }
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| ServeError::Io(format!("cannot read /dev/urandom for a token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let cannot = |e: std::io::Error| {
        ServeError::Io(format!(
            "cannot write the token file {}: {e}",
            path.display()
        ))
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(cannot)?;
    // An empty file that was there keeps its mode through `open`: made 0600 before the token
    // goes in.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(cannot)?;
    file.write_all(format!("{token}\n").as_bytes())
        .map_err(cannot)?;
    Ok(token)
}

/// Runs the daemon until `shutdown` resolves. Everything is validated before anything starts.
/// `on_listening` receives the API's bound address.
pub async fn serve(
    config: Resolved,
    shutdown: impl std::future::Future<Output = ()>,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> Result<(), ServeError> {
    let source = Arc::new(Source::open(&config.source)?);
    let secrets = crate::secrets::Secrets {
        dir: config.secrets_dir.clone(),
    };
    let (mut set, _) = source.load()?;
    // A hub's spoke Secrets, kept where the Kubernetes backends make their clients.
    let kube_clients = flotilla_kube::KubeClients::default();
    if let Some(spokes) = set.spokes.take() {
        kube_clients.set_spokes(spokes);
    }
    source::read_secrets(&mut set, &secrets);
    // Argo Rollouts' notification configuration, from the same source: refused before anything
    // starts when it is invalid.
    let argo = Arc::new(argo_notifications::Current::default());
    argo.set(load_argo_notifications(&set, &secrets, false).map_err(|e| {
        ServeError::Invalid(format!(
            "the Argo Rollouts notification configuration is invalid; nothing was started:\n{e}"
        ))
    })?);
    // Nothing can run at a first start whose every fleet is invalid: refused before anything
    // (store, token) is created. A hub is watched: it may hold no valid FleetRollout yet (a
    // fresh install), and those that become valid start then.
    let watched = source.hub().is_some();
    if set.desired.is_empty() && !config.store.exists() && !watched {
        return Err(ServeError::Invalid(format!(
            "the manifests are invalid; nothing was started:\n{}",
            set.errors().join("\n")
        )));
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServeError::Io(format!("cannot listen on {}: {e}", config.listen)))?;
    let mode = if config.init_store {
        store::OpenMode::Init
    } else {
        store::OpenMode::Existing
    };
    let store = match source.hub().filter(|_| config.state_in_hub) {
        // The state in the hub's API server: nothing local is read or written.
        Some(hub) => {
            let store = hub_store::HubStore::open(hub.state()).await?;
            tracing::info!(namespace = %hub.namespace(), "the state is kept in the hub");
            // An upgrade from `state: store`: the store file's fleets are imported once (the file
            // is renamed after), so that no fleet in flight starts over.
            if config.store.exists() {
                import_store_file(&store, &config.store)?;
            }
            Store::Hub(Box::new(store))
        }
        None => {
            let (mut store, created) = Store::open(&config.store, mode)?;
            if created {
                tracing::info!(store = %config.store.display(), "created a new store (first start)");
            }
            store.keep_audit(config.audit_kept);
            store
        }
    };
    let store = Arc::new(store);
    let mut stored: BTreeMap<String, record::FleetRecord> = store
        .fleets()?
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect();
    let wiring = fleet::Wiring {
        providers: flotilla_providers::Providers::new(Arc::new(secrets.clone()))
            .map_err(|e| ServeError::Io(e.to_string()))?,
        tick: Duration::from_millis(config.tick_ms),
        correct_drift: matches!(
            &config.source,
            config::SourceConfig::Git { git, .. } if git.correct_drift
        ),
        backends: backends::Backends::standard(config.agent_tokens.clone(), kube_clients.clone()),
        urgent: Arc::new(Notify::new()),
    };
    let urgent = wiring.urgent.clone();
    let tick = wiring.tick;
    let in_hub = matches!(*store, Store::Hub(_));
    let build = |d: &record::Desired, stored: Option<record::FleetRecord>| {
        if in_hub
            && let Some(problem) = hub_store::fleet_name_problem(
                d.fleet_rollout.metadata.name.as_deref().unwrap_or(""),
            )
        {
            return Err(fleet::FleetError(problem));
        }
        FleetController::new(d, stored, &wiring)
    };
    // Per-fleet isolation: a fleet whose desired state is invalid (or cannot be driven) keeps
    // running its last valid one, kept in its record; the others are untouched.
    let mut controllers = Vec::new();
    let mut refused: BTreeMap<String, Vec<String>> = set.invalid.clone();
    for d in &set.desired {
        let name = d.fleet_rollout.metadata.name.clone().unwrap_or_default();
        let record = stored.remove(&name);
        match build(d, record.clone()) {
            Ok(controller) => controllers.push(controller),
            Err(e) => {
                if let Some(record) = record {
                    stored.insert(name.clone(), record);
                }
                refused.entry(name).or_default().push(e.to_string());
            }
        }
    }
    // A fleet absent from the desired state while some file could not be read may be in it.
    if !set.unattributed.is_empty() {
        for name in stored.keys() {
            refused
                .entry(name.clone())
                .or_default()
                .extend(set.unattributed.iter().cloned());
        }
    }
    let now = crate::clock::wall_clock();
    let mut unrunnable: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, errors) in refused {
        let last = stored
            .remove(&name)
            .and_then(|r| r.desired.clone().map(|d| (d, r)));
        let controller = match last {
            Some((mut desired, record)) => match source::read_secrets_of(&mut desired, &secrets) {
                Ok(()) => build(&desired, Some(record)).map_err(|e| e.to_string()),
                Err(errors) => Err(errors.join("\n")),
            },
            None => Err("no valid desired state was ever read for it".to_owned()),
        };
        match controller {
            Ok(mut controller) => {
                controller.set_invalid(errors, now);
                controllers.push(controller);
            }
            Err(why) => {
                let mut errors = errors;
                errors.push(format!("not started: {why}"));
                tracing::error!(fleet = %name, "{}", errors.join("\n"));
                unrunnable.insert(name, errors);
            }
        }
    }
    if controllers.is_empty() && !watched {
        return Err(ServeError::Invalid(format!(
            "the manifests are invalid and no fleet has a last valid state to keep running; nothing was started:\n{}",
            set.errors().join("\n")
        )));
    }
    let token = token(&config.token_file)?;
    let address = listener
        .local_addr()
        .map_err(|e| ServeError::Io(e.to_string()))?;
    let metrics = Arc::new(Metrics::default());
    let (events, _) = broadcast::channel(1024);
    let shared = Arc::new(Shared {
        store: store.clone(),
        views: RwLock::new(BTreeMap::new()),
        events,
        token,
        reads_need_token: config.reads_need_token,
        loopback_hosts_only: !config.reads_need_token && config.listen.ip().is_loopback(),
        wake: Notify::new(),
        sync: AtomicBool::new(false),
        pending_audit: Mutex::new(Vec::new()),
        git_results: Mutex::new(Vec::new()),
        metrics: metrics.clone(),
        unrunnable: RwLock::new(BTreeMap::new()),
        live: config.dashboard.as_deref().map(dashboard::live::Live::new),
        plots: Mutex::new(plots::Plots::restore(tokio::task::block_in_place(|| {
            store.plots()
        })?)),
    });
    *shared.unrunnable.write().expect("unrunnable lock") = unrunnable;
    // A write of the state that waits for the hub's API server holds the loop: each fleet's
    // view says why meanwhile, and its history when the wait began and ended.
    if let Store::Hub(hub_store) = &*store {
        let shared = Arc::downgrade(&shared);
        hub_store.observe_waits(Arc::new(move |why: Option<&str>| {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let now = crate::clock::wall_clock();
            let message = match why {
                Some(why) => hub_waits(why),
                None => HUB_ANSWERS.to_owned(),
            };
            let mut views = shared.views.write().expect("views lock");
            let mut audit = shared.pending_audit.lock().expect("audit lock");
            for (name, (summary, view, _)) in views.iter_mut() {
                if why.is_some() {
                    view.errors.push(message.clone());
                    summary.errors.push(message.clone());
                }
                audit.push(AuditEntry::new(
                    now,
                    name,
                    &view.revision,
                    AuditKind::Fleet,
                    None,
                    message.clone(),
                ));
            }
        }));
    }
    publish(&shared, &controllers);
    // A hub shows each fleet's summary on its custom resources, written apart from the loop.
    let (hub_statuses, hub_rx) = tokio::sync::watch::channel(Vec::new());
    let hub_writer = source
        .hub()
        .is_some()
        .then(|| tokio::spawn(hub_status::run(source.clone(), hub_rx)));
    let statuses_of = |controllers: &[FleetController]| -> Vec<hub_status::HubStatus> {
        let views = shared.views.read().expect("views lock");
        controllers
            .iter()
            .filter_map(|c| {
                let desired = c.record.desired.as_ref()?;
                let (_, view, _) = views.get(c.name())?;
                Some(hub_status::HubStatus {
                    fleet: c.name().to_owned(),
                    rollout: desired.rollout.metadata.name.clone().unwrap_or_default(),
                    fleet_status: hub_status::fleet_status(
                        view,
                        desired.fleet_rollout.metadata.generation,
                    ),
                    rollout_status: hub_status::rollout_status(
                        view,
                        desired.rollout.metadata.generation,
                    ),
                })
            })
            .collect()
    };
    if hub_writer.is_some() {
        hub_statuses.send_replace(statuses_of(&controllers));
    }
    let app = api::router(shared.clone());
    let server = tokio::spawn(async move {
        listen::serve(listener, app).await;
    });
    let notify_wake = Arc::new(Notify::new());
    let notifier = tokio::spawn(notify::run(
        store.clone(),
        config.notifications.clone(),
        argo.clone(),
        metrics.clone(),
        notify_wake.clone(),
        {
            let shared = shared.clone();
            move |entry| shared.pending_audit.lock().expect("audit lock").push(entry)
        },
    ));
    on_listening(address);
    let mut next_poll = Instant::now();
    // When an answer last brought a tick forward.
    let mut last_urgent: Option<tokio::time::Instant> = None;
    let mut git_retry: BTreeMap<String, GitRetry> = BTreeMap::new();
    let control = async {
        loop {
            let started = Instant::now();
            // In a hub, its commands are read from it: not while it does not answer (the fleets
            // wait then), and a failed read is tried again at the next pass.
            let pending = match &*store {
                Store::Hub(_) if source.hub().and_then(|h| h.unavailable()).is_some() => Vec::new(),
                Store::Hub(_) => tokio::task::block_in_place(|| store.pending_commands())
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "the FleetCommands could not be read; read again at the next pass");
                        Vec::new()
                    }),
                Store::Local(_) => tokio::task::block_in_place(|| store.pending_commands())?,
            };
            let now = crate::clock::wall_clock();
            let mut extra: Vec<AuditEntry> =
                std::mem::take(&mut *shared.pending_audit.lock().expect("audit lock"));
            // Durable changes that reached Git, or failed to (retried with backoff).
            let results = std::mem::take(&mut *shared.git_results.lock().expect("git lock"));
            for (fleet, decision, result) in results {
                let revision = decision.revision.clone();
                let Some(controller) = controllers.iter_mut().find(|c| c.name() == fleet) else {
                    continue;
                };
                let message = match result {
                    Ok(message) => {
                        git_retry.remove(&fleet);
                        controller.committed(&decision, message.clone());
                        message
                    }
                    Err(error) => {
                        let retry = git_retry.entry(fleet.clone()).or_default();
                        retry.in_flight = false;
                        retry.attempts += 1;
                        retry.delay = (retry.delay * 2).clamp(GIT_RETRY_FIRST, GIT_RETRY_MAX);
                        retry.next_at = Instant::now() + retry.delay;
                        let message = format!(
                            "the durable change for revision {revision} is not in Git yet (attempt {}, next in {:.1} s; the clusters' rollback and the rejection stand): {error}",
                            retry.attempts,
                            retry.delay.as_secs_f64()
                        );
                        tracing::error!(fleet = %fleet, "{message}");
                        controller.git_failed(message.clone());
                        message
                    }
                };
                extra.push(AuditEntry::new(
                    now,
                    &fleet,
                    &revision,
                    AuditKind::Gitops,
                    None,
                    message,
                ));
            }
            // The source: a moved branch is a new desired state.
            if let Some(interval) = source.interval_ms()
                && (Instant::now() >= next_poll || shared.sync.swap(false, Ordering::SeqCst))
            {
                next_poll = Instant::now() + Duration::from_millis(interval);
                match tokio::task::block_in_place(|| source.poll()) {
                    None => {}
                    Some(Ok((mut set, commit))) => {
                        if let Some(spokes) = set.spokes.take() {
                            kube_clients.set_spokes(spokes);
                        }
                        source::read_secrets(&mut set, &secrets);
                        // A refused notification configuration leaves the one in force, and
                        // so does a commit whose files that could hold it cannot be read.
                        match load_argo_notifications(&set, &secrets, argo.get().is_some()) {
                            Ok(loaded) => {
                                if argo.set(loaded) {
                                    tracing::info!(commit = %commit, "the Argo Rollouts notification configuration changed");
                                }
                            }
                            Err(e) => {
                                let message = format!(
                                    "commit {}: the Argo Rollouts notification configuration was refused; the one in force stays: {e}",
                                    &commit[..commit.len().min(12)]
                                );
                                tracing::error!("{message}");
                                for controller in controllers.iter() {
                                    extra.push(AuditEntry::new(
                                        now,
                                        controller.name(),
                                        &controller.record.state.revision,
                                        AuditKind::Sync,
                                        None,
                                        message.clone(),
                                    ));
                                }
                            }
                        }
                        for controller in controllers.iter_mut() {
                            if let Some(d) = set.desired.iter().find(|d| {
                                d.fleet_rollout.metadata.name.as_deref() == Some(controller.name())
                            }) {
                                extra.extend(controller.take(d, &commit, &wiring, now));
                            } else {
                                let mut errors = set.errors_of(controller.name());
                                if errors.is_empty() {
                                    errors.push(format!(
                                        "commit {}: the FleetRollout is gone from the desired state; the fleet keeps its last one",
                                        &commit[..commit.len().min(12)]
                                    ));
                                }
                                controller.set_invalid(errors, now);
                            }
                        }
                        // A FleetRollout new to the source (or valid at last) starts now.
                        for d in &set.desired {
                            let name = d.fleet_rollout.metadata.name.clone().unwrap_or_default();
                            if controllers.iter().any(|c| c.name() == name) {
                                continue;
                            }
                            match build(d, stored.remove(&name)) {
                                Ok(controller) => {
                                    tracing::info!(fleet = %name, commit = %commit, "a new FleetRollout started");
                                    extra.push(AuditEntry::new(
                                        now,
                                        &name,
                                        &controller.record.state.revision,
                                        AuditKind::Sync,
                                        None,
                                        format!(
                                            "commit {}: the FleetRollout appeared in the desired state and started",
                                            &commit[..commit.len().min(12)]
                                        ),
                                    ));
                                    shared
                                        .unrunnable
                                        .write()
                                        .expect("unrunnable lock")
                                        .remove(&name);
                                    controllers.push(controller);
                                }
                                Err(e) => {
                                    tracing::error!(fleet = %name, error = %e, "a new FleetRollout cannot start");
                                    shared
                                        .unrunnable
                                        .write()
                                        .expect("unrunnable lock")
                                        .insert(name, vec![format!("not started: {e}")]);
                                }
                            }
                        }
                    }
                    Some(Err(e)) => {
                        let what = match e {
                            ServeError::Io(_) => {
                                "Git could not be read (read again at the next poll); nothing changed"
                            }
                            _ => "the desired state was refused; nothing changed",
                        };
                        tracing::error!(error = %e, "{what}");
                        for controller in controllers.iter() {
                            extra.push(AuditEntry::new(
                                now,
                                controller.name(),
                                &controller.record.state.revision,
                                AuditKind::Sync,
                                None,
                                format!("{what}: {e}"),
                            ));
                        }
                    }
                }
            }
            let mut all_audit = Vec::new();
            let mut notified = false;
            // While a hub's API server does not answer, every fleet waits: its intent may have
            // changed unseen and nothing written there lands, so nothing is promoted, rolled
            // back or consumed (the spokes' data planes keep what they serve) until it answers.
            let waiting = source
                .hub()
                .and_then(|hub| hub.unavailable())
                .map(|why| hub_waits(&why));
            for controller in controllers.iter_mut() {
                if controller.waiting.is_some() != waiting.is_some() {
                    extra.push(AuditEntry::new(
                        now,
                        controller.name(),
                        &controller.record.state.revision,
                        AuditKind::Fleet,
                        None,
                        waiting.clone().unwrap_or_else(|| HUB_ANSWERS.into()),
                    ));
                }
                controller.waiting.clone_from(&waiting);
            }
            if waiting.is_some() && matches!(*store, Store::Hub(_)) {
                // The state is in the hub that does not answer: the entries are written with
                // the first pass after it does.
                shared
                    .pending_audit
                    .lock()
                    .expect("audit lock")
                    .splice(0..0, extra.drain(..));
            } else if waiting.is_some() {
                let writes: Vec<TickWrite> = controllers
                    .iter()
                    .map(|controller| TickWrite {
                        record: None,
                        consumed: Vec::new(),
                        audit: extra
                            .iter()
                            .filter(|e| e.fleet == controller.name())
                            .cloned()
                            .collect(),
                        notifications: Vec::new(),
                        plots: Vec::new(),
                    })
                    .filter(|w| !w.audit.is_empty())
                    .collect();
                if !writes.is_empty() {
                    let audits = tokio::task::block_in_place(|| store.commit_ticks(writes))?;
                    all_audit.extend(audits.into_iter().flatten());
                }
            }
            let ticking: &mut [FleetController] = if waiting.is_some() {
                &mut []
            } else {
                &mut controllers[..]
            };
            // Every fleet ticks, then their ticks are written in one transaction (one sync to
            // disk per pass, however many fleets), then their actions run.
            let mut ticked = Vec::with_capacity(ticking.len());
            for controller in ticking.iter_mut() {
                let commands: Vec<_> = pending
                    .iter()
                    .filter(|c| c.fleet == controller.name())
                    .cloned()
                    .collect();
                let out = controller.tick(&commands, now);
                let plots = {
                    let mut plots = shared.plots.lock().expect("plots lock");
                    controller.observe_plots(&mut plots, now);
                    plots.take_dirty(controller.name(), now)
                };
                let mut audit: Vec<AuditEntry> = extra
                    .iter()
                    .filter(|e| e.fleet == controller.name())
                    .cloned()
                    .collect();
                audit.extend(out.audit.iter().cloned());
                ticked.push((out, audit, plots));
            }
            let writes: Vec<TickWrite> = ticking
                .iter()
                .zip(&mut ticked)
                .map(|(controller, (out, audit, plots))| TickWrite {
                    record: Some(&controller.record),
                    consumed: out.consumed.clone(),
                    audit: std::mem::take(audit),
                    notifications: out.notifications.clone(),
                    plots: std::mem::take(plots),
                })
                .collect();
            let audits = tokio::task::block_in_place(|| store.commit_ticks(writes))?;
            for ((controller, (out, _, _)), audit) in ticking.iter_mut().zip(ticked).zip(audits) {
                notified |= !out.notifications.is_empty();
                controller.dispatch(out);
                all_audit.extend(audit);
                // The durable change goes to Git apart from the loop (one attempt at a time,
                // with backoff after a failure); its outcome is recorded with a later tick.
                if source.is_git()
                    && let Some(change) = controller.change_needed()
                {
                    let retry = git_retry.entry(controller.name().to_owned()).or_default();
                    if !retry.in_flight && Instant::now() >= retry.next_at {
                        retry.in_flight = true;
                        let source = source.clone();
                        let shared = shared.clone();
                        let fleet = controller.name().to_owned();
                        tokio::task::spawn_blocking(move || {
                            let result = match source.commit_change(&change) {
                                Ok(Some((commit, branch))) => Ok(match &change.edit {
                                    source::Edit::Revert {
                                        bad_image,
                                        good_image,
                                    } => format!(
                                        "durable rollback committed to {branch}: {commit} ({bad_image} -> {good_image}){}",
                                        trailers(&change.trailers)
                                    ),
                                    source::Edit::Pin { .. } => format!(
                                        "pin committed to {branch}: {commit} ({}){}",
                                        change.describe(),
                                        trailers(&change.trailers)
                                    ),
                                }),
                                Ok(None) => {
                                    Ok(format!("{}: Git already says it", change.describe()))
                                }
                                Err(e) => Err(e.to_string()),
                            };
                            shared.git_results.lock().expect("git lock").push((
                                fleet,
                                change.decision.clone(),
                                result,
                            ));
                            shared.sync.store(true, Ordering::SeqCst);
                            shared.wake.notify_one();
                        });
                    }
                }
            }
            publish(&shared, &controllers);
            if hub_writer.is_some() {
                hub_statuses.send_replace(statuses_of(&controllers));
            }
            let views: Vec<FleetView> = shared
                .views
                .read()
                .expect("views lock")
                .values()
                .map(|v| v.1.clone())
                .collect();
            metrics.reconciled(started.elapsed().as_secs_f64(), &all_audit, &views);
            for entry in all_audit {
                tracing::info!(fleet = %entry.fleet, kind = %entry.kind, cluster = ?entry.cluster, "{}", entry.message);
                let _ = shared.events.send(entry);
            }
            if notified {
                notify_wake.notify_one();
            }
            // The next tick: at its time, for a command, or for an answer that may change a
            // decision (a failing canary loses its traffic at once, not a tick later). Answers
            // bring a tick forward at most once per URGENT_EVERY, so that an outage failing
            // every measurement at once does not turn the loop into a spin.
            // Spaced by the tick's own length too: a tick longer than URGENT_EVERY (a large
            // fleet) leaves the loop idle at least as long as it worked.
            let spacing = URGENT_EVERY.max(started.elapsed());
            let regular = tokio::time::Instant::now() + tick;
            tokio::select! {
                _ = tokio::time::sleep_until(regular) => {}
                _ = shared.wake.notified() => {}
                _ = urgent.notified() => {
                    let earliest =
                        last_urgent.map_or_else(tokio::time::Instant::now, |at| at + spacing);
                    tokio::time::sleep_until(earliest.min(regular)).await;
                    last_urgent = Some(tokio::time::Instant::now());
                }
            }
        }
        #[allow(unreachable_code)]
        Ok::<(), ServeError>(())
    };
    let result = tokio::select! {
        r = control => r,
        _ = shutdown => Ok(()),
    };
    server.abort();
    notifier.abort();
    if let Some(writer) = hub_writer {
        writer.abort();
    }
    result
}

/// Argo Rollouts' notification configuration of a desired state (None: the source has none),
/// its warnings logged; `in_force`: a configuration is in force, which files that cannot be
/// read may hold (`argo_notifications::Config::from_source`).
/// Why every fleet waits while the hub's API server does not answer (its probe, or a write of
/// the state that found no server).
fn hub_waits(why: &str) -> String {
    format!(
        "the hub's API server does not answer ({why}): the fleet waits, nothing is promoted, rolled back or consumed until it does"
    )
}

/// When the hub's API server answers again.
const HUB_ANSWERS: &str = "the hub's API server answers again: the fleet goes on";

/// Imports the redb store at `path` into the hub's state (an upgrade from `hub.state: store`),
/// then renames the file `….imported`, so that it is imported once.
fn import_store_file(store: &hub_store::HubStore, path: &Path) -> Result<(), ServeError> {
    let (local, _) = store::LocalStore::open(path, store::OpenMode::Existing)?;
    let imported = tokio::task::block_in_place(|| store.import(&local))?;
    drop(local);
    let mut done = path.to_owned().into_os_string();
    done.push(".imported");
    std::fs::rename(path, &done).map_err(|e| {
        ServeError::Io(format!(
            "the store {} was imported into the hub but cannot be renamed: {e}",
            path.display()
        ))
    })?;
    tracing::info!(
        store = %path.display(),
        fleets = %imported.join(", "),
        "imported the store into the hub (the file is kept as {})",
        Path::new(&done).display()
    );
    Ok(())
}

fn load_argo_notifications(
    set: &source::DesiredSet,
    secrets: &crate::secrets::Secrets,
    in_force: bool,
) -> Result<Option<argo_notifications::Config>, String> {
    let config = argo_notifications::Config::from_source(
        &set.config_maps,
        &set.unattributed,
        in_force,
        &|key| secrets.read(argo_notifications::SECRET, key),
    )?;
    if let Some(config) = &config {
        tracing::info!(
            "Argo Rollouts notifications: {}",
            argo_notifications::describe(config)
        );
        for warning in &config.warnings {
            tracing::warn!("Argo Rollouts notifications: {}: {warning}", config.file);
        }
    }
    Ok(config)
}

/// The shortest time between two ticks brought forward by answers that may change a decision.
const URGENT_EVERY: Duration = Duration::from_millis(100);

/// The first and the longest wait before committing a durable change again.
const GIT_RETRY_FIRST: Duration = Duration::from_millis(500);
const GIT_RETRY_MAX: Duration = Duration::from_secs(30);

/// Retries of one fleet's durable change.
#[derive(Debug)]
struct GitRetry {
    next_at: Instant,
    delay: Duration,
    attempts: u32,
    in_flight: bool,
}

impl Default for GitRetry {
    fn default() -> GitRetry {
        GitRetry {
            next_at: Instant::now(),
            delay: GIT_RETRY_FIRST / 2,
            attempts: 0,
            in_flight: false,
        }
    }
}

/// A commit's trailers for its audit entry: `; trailers: A: x; B: y` (nothing without any).
fn trailers(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!("; trailers: {}", lines.join("; "))
    }
}

fn publish(shared: &Shared, controllers: &[FleetController]) {
    let mut views = shared.views.write().expect("views lock");
    for c in controllers {
        let rollouts = c
            .plan()
            .clusters
            .keys()
            .filter_map(|name| c.rollout_view(name).map(|v| (name.clone(), v)))
            .collect();
        views.insert(c.name().to_owned(), (c.summary(), c.view(), rollouts));
    }
    for (name, errors) in shared.unrunnable.read().expect("unrunnable lock").iter() {
        let message = "not started: its desired state is invalid and no valid one was ever read";
        let summary = FleetSummary {
            name: name.clone(),
            revision: String::new(),
            image: String::new(),
            phase: INVALID.into(),
            wave: 0,
            waves: 0,
            message: message.into(),
            errors: errors.clone(),
        };
        let view = FleetView {
            name: name.clone(),
            revision: String::new(),
            image: String::new(),
            previous_image: String::new(),
            phase: INVALID.into(),
            message: message.into(),
            wave: 0,
            paused: false,
            git: None,
            waves: Vec::new(),
            errors: errors.clone(),
        };
        views.insert(name.clone(), (summary, view, BTreeMap::new()));
    }
    if let Some(live) = &shared.live {
        let list: Vec<FleetSummary> = views.values().map(|v| v.0.clone()).collect();
        let fleets: Vec<&FleetView> = views.values().map(|v| &v.1).collect();
        live.update(&list, &fleets);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_commits_trailers_join_its_audit_message_on_one_line() {
        assert_eq!(
            super::trailers("Flotilla-Cluster: prod-us-east\nFlotilla-Metric: latency-p95\n"),
            "; trailers: Flotilla-Cluster: prod-us-east; Flotilla-Metric: latency-p95"
        );
        assert_eq!(super::trailers("\n"), "");
    }

    /// The API's token file: made 0600 where none is (or over an empty one, whatever its
    /// mode), read back the same; one open to every user, or not a token, refused by name.
    #[test]
    fn the_token_file_is_made_private_and_an_open_or_bad_one_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let made = dir.path().join("made.token");
        let token = super::token(&made).unwrap();
        assert_eq!(token.len(), 48);
        assert_eq!(mode(&made), 0o600);
        assert_eq!(super::token(&made).unwrap(), token, "read back");

        let empty = dir.path().join("empty.token");
        std::fs::write(&empty, "").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o644)).unwrap();
        super::token(&empty).unwrap();
        assert_eq!(mode(&empty), 0o600, "an empty file's mode is not kept");

        let open = dir.path().join("open.token");
        std::fs::write(&open, "s3cret\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let why = super::token(&open).unwrap_err().to_string();
        assert!(
            why.contains("open.token") && why.contains("open to every user"),
            "{why}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(super::token(&open).unwrap(), "s3cret");
        std::fs::write(&open, "two words\n").unwrap();
        let why = super::token(&open).unwrap_err().to_string();
        assert!(why.contains("cannot carry"), "{why}");
    }
}
