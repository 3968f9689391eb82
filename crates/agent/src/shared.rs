//! What the agent and its control API share: the configuration in effect, the router, the
//! workloads, the statistics and the token; and how a new configuration is checked against the
//! running agent and applied (or refused, changing nothing).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::auth::ControlToken;
use crate::config::AgentConfig;
use crate::error::AgentError;
use crate::router::Router;
use crate::stats::Stats;
use crate::workload::{Desired, WorkloadError, Workloads};

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

impl Shared {
    /// The state of an agent that starts with `config` (read from `config_path`, when it was),
    /// its subsets' workloads started as `config` asks.
    pub(crate) fn start(
        config: AgentConfig,
        config_path: Option<PathBuf>,
        router: Arc<Router>,
        stats: Arc<Stats>,
        token: ControlToken,
    ) -> Result<Shared, AgentError> {
        let shared = Shared {
            config: Mutex::new(config.clone()),
            config_path,
            workloads: Workloads::new(router.clone()),
            router,
            stats,
            token,
            reload: Mutex::new(()),
        };
        shared.apply_workloads(&config, None)?;
        Ok(shared)
    }
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
