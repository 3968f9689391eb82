//! Why the agent cannot start, or cannot apply a configuration: [`AgentError`].

use std::net::SocketAddr;

use flotilla_core::manifest::located::ConfigError;

use crate::auth::TokenError;
use crate::router::RouterError;
use crate::workload::WorkloadError;

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
