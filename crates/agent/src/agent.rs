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

use crate::auth::{ControlToken, TOKEN_ENV, TokenOrigin};
use crate::config::AgentConfig;
use crate::error::AgentError;
use crate::router::Router;
use crate::shared::Shared;
use crate::stats::Stats;
use crate::workload::Workloads;

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
        let threads = config.router.threads;
        let shared = Arc::new(Shared::start(
            config,
            config_path,
            router.clone(),
            stats,
            token,
        )?);

        let (shutdown, shutdown_rx) = watch::channel(false);
        let make_handler = move || {
            // Made on each router thread: its lane, and one count of the router that this
            // thread alone touches per request (not the shared router's, whose count would
            // move between the cores at every request).
            let thread = Arc::new((router.clone(), crate::router::lane()));
            move |request| {
                let thread = thread.clone();
                async move {
                    let (router, lane) = &*thread;
                    router.handle(lane, request).await
                }
            }
        };
        let workers =
            crate::serve::Workers::start(threads, "router", Duration::from_secs(10), make_handler)
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
