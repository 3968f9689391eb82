//! The agent: one local cluster's data plane, wiring the router, the workloads, the statistics
//! and the control API, and keeping its last good configuration when handed a bad one.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{ControlToken, TOKEN_ENV, TokenError, TokenOrigin};
use crate::config::{AgentConfig, ConfigError};
use crate::router::{Router, RouterError};
use crate::stats::Stats;
use crate::workload::{Desired, WorkloadError, Workloads};

/// Why the agent cannot start or cannot apply a configuration.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener cannot be bound.
    #[error("cannot listen on {addr} for the {what}: {source}{hint}",
        hint = if source.kind() == std::io::ErrorKind::AddrInUse {
            " (another process holds this port; pick another in the configuration)"
        } else { "" })]
    Listen {
        /// Which listener.
        what: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The routing part of the configuration was refused.
    #[error(transparent)]
    Router(#[from] RouterError),
    /// The workload part of the configuration was refused.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// A new configuration cannot be applied to the running agent.
    #[error("{0}")]
    Reload(String),
    /// Signal handling could not be set up.
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
    /// The router's threads cannot be started.
    #[error("cannot start the router's threads: {0}")]
    Threads(std::io::Error),
    /// The control API's token cannot be read or created.
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// What the control API and the agent share.
pub(crate) struct Shared {
    pub(crate) config: Mutex<AgentConfig>,
    pub(crate) config_path: Option<PathBuf>,
    pub(crate) router: Arc<Router>,
    pub(crate) workloads: Workloads,
    pub(crate) stats: Arc<Stats>,
    /// The bearer token the control API's changes need.
    pub(crate) token: ControlToken,
    /// Serializes reloads.
    reload: Mutex<()>,
}

/// A running agent.
pub struct Agent {
    shared: Arc<Shared>,
    router_addr: SocketAddr,
    control_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    router_task: Mutex<Option<JoinHandle<()>>>,
    control_task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("router", &self.router_addr)
            .field("control", &self.control_addr)
            .finish_non_exhaustive()
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, AgentError> {
    crate::serve::bind(addr).map_err(|source| AgentError::Listen { what, addr, source })
}

impl Agent {
    /// Binds both listeners, starts the workloads and serves. `config_path` is what
    /// [`Agent::reload`] reads again. The control API's token is `FLOTILLA_AGENT_TOKEN`, else
    /// the configuration's `control.tokenFile`, else `<config_path>.token` (created when
    /// missing), else (no file) a random one in memory: see [`ControlToken::resolve`].
    pub async fn start(
        config: AgentConfig,
        config_path: Option<PathBuf>,
    ) -> Result<Agent, AgentError> {
        let token = ControlToken::resolve(
            config.control.token_file.as_deref(),
            config_path.as_deref(),
            std::env::var_os(TOKEN_ENV),
        )?;
        Agent::start_with_token(config, config_path, token).await
    }

    /// [`Agent::start`] with the control API's token given.
    pub async fn start_with_token(
        config: AgentConfig,
        config_path: Option<PathBuf>,
        token: ControlToken,
    ) -> Result<Agent, AgentError> {
        let router_listener = bind("router", config.router.listen).await?;
        let control_listener = bind("control API", config.control.listen).await?;
        let local = |l: &TcpListener, what, addr| {
            l.local_addr()
                .map_err(|source| AgentError::Listen { what, addr, source })
        };
        let router_addr = local(&router_listener, "router", config.router.listen)?;
        let control_addr = local(&control_listener, "control API", config.control.listen)?;

        let subsets: Vec<String> = config.subsets.keys().cloned().collect();
        let stats = Arc::new(Stats::new(subsets.iter().map(String::as_str)));
        let seed = config.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
                ^ u64::from(std::process::id())
        });
        let router = Arc::new(Router::new(
            &subsets,
            config.max_weight,
            config.weights.canary,
            &config.routes,
            &config.mirrors,
            seed,
            stats.clone(),
        )?);
        let workloads = Workloads::new(router.clone());
        let shared = Arc::new(Shared {
            config: Mutex::new(config.clone()),
            config_path,
            router: router.clone(),
            workloads,
            stats,
            token,
            reload: Mutex::new(()),
        });
        shared.apply_workloads(&config, None)?;

        let (shutdown, shutdown_rx) = watch::channel(false);
        let make_handler = move || {
            let router = router.clone();
            let upstreams = crate::router::upstreams();
            move |request| {
                let router = router.clone();
                let upstreams = upstreams.clone();
                async move { router.handle_with(&upstreams, request).await }
            }
        };
        let workers = crate::serve::Workers::start(
            config.router.threads,
            "router",
            Duration::from_secs(10),
            make_handler,
        )
        .map_err(AgentError::Threads)?;
        let router_task = tokio::spawn(workers.accept(router_listener, shutdown_rx.clone()));
        let control_task = tokio::spawn(crate::control::serve(
            shared.clone(),
            control_listener,
            shutdown_rx,
        ));
        Ok(Agent {
            shared,
            router_addr,
            control_addr,
            shutdown,
            router_task: Mutex::new(Some(router_task)),
            control_task: Mutex::new(Some(control_task)),
        })
    }

    /// Where the router listens.
    pub fn router_addr(&self) -> SocketAddr {
        self.router_addr
    }

    /// Where the control API listens.
    pub fn control_addr(&self) -> SocketAddr {
        self.control_addr
    }

    /// The token the control API's changes need (`Authorization: Bearer <token>`).
    pub fn control_token(&self) -> &ControlToken {
        &self.shared.token
    }

    /// The router.
    pub fn router(&self) -> &Arc<Router> {
        &self.shared.router
    }

    /// The workloads.
    pub fn workloads(&self) -> &Workloads {
        &self.shared.workloads
    }

    /// The configuration in effect (the last good one).
    pub fn config(&self) -> AgentConfig {
        self.shared.config.lock().expect("config lock").clone()
    }

    /// Reads the configuration file again and applies it; on any error nothing changes.
    pub fn reload(&self) -> Result<(), AgentError> {
        self.shared.reload()
    }

    /// Applies a new configuration; on any error nothing changes.
    pub fn apply(&self, config: AgentConfig) -> Result<(), AgentError> {
        self.shared.apply(config)
    }

    /// Stops accepting traffic, finishes the requests in flight, stops every replica
    /// gracefully and stops the control API.
    pub async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        let router_task = self.router_task.lock().expect("task lock").take();
        if let Some(task) = router_task {
            let _ = task.await;
        }
        self.shared.workloads.shutdown().await;
        let control_task = self.control_task.lock().expect("task lock").take();
        if let Some(task) = control_task {
            let _ = task.await;
        }
    }
}

impl Shared {
    pub(crate) fn reload(&self) -> Result<(), AgentError> {
        let Some(path) = &self.config_path else {
            return Err(AgentError::Reload(
                "this agent was not started from a configuration file".into(),
            ));
        };
        let config = AgentConfig::load(path)?;
        self.apply(config)
    }

    /// Checks that `new` can replace the configuration in effect, then applies its subsets.
    /// Weights, routes, mirrors and the seed apply at start only: afterwards the control API
    /// owns them.
    pub(crate) fn apply(&self, new: AgentConfig) -> Result<(), AgentError> {
        let _guard = self.reload.lock().expect("reload lock");
        let old = self.config.lock().expect("config lock").clone();
        if new.router != old.router || new.control != old.control {
            return Err(AgentError::Reload(
                "the listen addresses cannot change while the agent runs, nor the router's threads \
                 or the control API's token file; restart it"
                    .into(),
            ));
        }
        if new.max_weight != old.max_weight {
            return Err(AgentError::Reload(format!(
                "maxWeight cannot change while the agent runs (it is {}); restart it",
                old.max_weight
            )));
        }
        if let Some(gone) = old.subsets.keys().find(|s| !new.subsets.contains_key(*s)) {
            return Err(AgentError::Reload(format!(
                "subset {gone:?} cannot be removed while the agent runs; restart it"
            )));
        }
        for name in new.subsets.keys() {
            if !self.router.has_subset(name) {
                self.router.add_subset(name);
                self.stats.ensure(name);
            }
        }
        self.apply_workloads(&new, Some(&old))?;
        *self.config.lock().expect("config lock") = new;
        Ok(())
    }

    /// Applies the subsets of `config`. A subset's version and replica count from the file
    /// win only when they differ from `previous` (the operator edited them); otherwise what the
    /// control API set is kept. Everything is checked before anything changes.
    fn apply_workloads(
        &self,
        config: &AgentConfig,
        previous: Option<&AgentConfig>,
    ) -> Result<(), AgentError> {
        enum Plan {
            Fixed(Vec<SocketAddr>),
            Processes(Desired),
            Nothing,
        }
        let mut plans = Vec::new();
        for (name, subset) in &config.subsets {
            if !subset.endpoints.is_empty() {
                plans.push((name, Plan::Fixed(subset.endpoints.clone())));
                continue;
            }
            let template = config.template_of(name).cloned();
            let live = self.workloads.desired(name);
            let edited = previous
                .and_then(|p| p.subsets.get(name))
                .is_none_or(|old| old.version != subset.version || old.replicas != subset.replicas);
            let (version, replicas) = match live {
                Some(live) if !edited => (live.version, live.replicas),
                _ => (subset.version.clone(), subset.replicas),
            };
            if replicas > 0 && template.is_none() {
                return Err(WorkloadError::NoTemplate(name.clone()).into());
            }
            if template.is_none() && self.workloads.desired(name).is_none() {
                plans.push((name, Plan::Nothing));
            } else {
                plans.push((
                    name,
                    Plan::Processes(Desired {
                        version,
                        replicas,
                        template,
                    }),
                ));
            }
        }
        for (name, plan) in plans {
            match plan {
                Plan::Fixed(endpoints) => self.workloads.set_fixed(name, endpoints),
                Plan::Processes(desired) => {
                    if self.workloads.desired(name).as_ref() != Some(&desired) {
                        self.workloads.set_desired(name, desired)?;
                    }
                }
                // No endpoints and no processes: the subset exists and has nothing ready.
                Plan::Nothing => self.workloads.set_fixed(name, Vec::new()),
            }
        }
        Ok(())
    }
}

/// Runs an agent from a configuration file until SIGTERM or SIGINT; SIGHUP reloads the file.
/// Prints one JSON line on stdout once it listens:
/// `{"event":"listening","cluster":…,"router":"127.0.0.1:…","control":"127.0.0.1:…",
/// "tokenFile":…}` (`tokenFile` is null when the token comes from `FLOTILLA_AGENT_TOKEN`), and
/// on stderr where the control API's token is.
pub async fn run(path: &Path) -> Result<(), AgentError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(AgentError::Signals)?;
    let config = AgentConfig::load(path)?;
    let cluster = config.cluster.clone();
    let agent = Agent::start(config, Some(path.to_owned())).await?;
    let token_file = match agent.control_token().origin() {
        TokenOrigin::Created(file) => {
            eprintln!(
                "flotilla agent: created the control API's token in {} (mode 0600); changes \
                 need `Authorization: Bearer <token>`",
                file.display()
            );
            Some(file.display().to_string())
        }
        TokenOrigin::File(file) => {
            eprintln!(
                "flotilla agent: the control API's token is in {}",
                file.display()
            );
            Some(file.display().to_string())
        }
        TokenOrigin::Environment => {
            eprintln!("flotilla agent: the control API's token is {TOKEN_ENV}");
            None
        }
        TokenOrigin::InMemory => None,
    };
    {
        let line = serde_json::json!({
            "event": "listening",
            "cluster": cluster,
            "router": agent.router_addr().to_string(),
            "control": agent.control_addr().to_string(),
            "tokenFile": token_file,
        });
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => match agent.reload() {
                Ok(()) => eprintln!("flotilla agent: reloaded {}", path.display()),
                Err(e) => eprintln!(
                    "flotilla agent: kept the previous configuration: {e}"
                ),
            },
        }
    }
    agent.shutdown().await;
    Ok(())
}
