//! Fleet-level operator commands, and how each reads (the cluster it names, the command in
//! words).

use serde::{Deserialize, Serialize};

/// Fleet-level operator commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FleetCommand {
    /// Start no new cluster or wave.
    Pause,
    /// Resume.
    Resume,
    /// Skip the current bake and promote the wave's paused clusters (or one cluster's).
    Promote {
        /// A 1-based wave number, or the current one.
        wave: Option<usize>,
        /// Skip every remaining step of the clusters promoted.
        #[serde(default)]
        full: bool,
        /// Only this cluster (of any wave).
        #[serde(default)]
        cluster: Option<String>,
    },
    /// Abort the fleet, or one cluster.
    Abort {
        /// One cluster, or all.
        cluster: Option<String>,
    },
    /// Retry the failed clusters (lifting their rejection for this revision).
    Retry,
    /// Pause one cluster's update where it stands (its step, weights and analysis stay), as
    /// Argo's `spec.paused`.
    PauseCluster {
        /// The cluster.
        cluster: String,
    },
    /// Resume one cluster's update paused by [`FleetCommand::PauseCluster`].
    ResumeCluster {
        /// The cluster.
        cluster: String,
    },
}

/// The cluster a command names, if one.
pub(super) fn command_cluster(command: &FleetCommand) -> Option<&str> {
    match command {
        FleetCommand::Promote { cluster, .. } | FleetCommand::Abort { cluster } => {
            cluster.as_deref()
        }
        FleetCommand::PauseCluster { cluster } | FleetCommand::ResumeCluster { cluster } => {
            Some(cluster)
        }
        _ => None,
    }
}

/// A command in words.
pub(super) fn describe(command: &FleetCommand) -> String {
    match command {
        FleetCommand::Pause => "pause".into(),
        FleetCommand::Resume => "resume".into(),
        FleetCommand::Retry => "retry".into(),
        FleetCommand::Abort { cluster: None } => "abort".into(),
        FleetCommand::Abort { cluster: Some(c) } => format!("abort {c}"),
        FleetCommand::PauseCluster { cluster } => format!("pause {cluster}"),
        FleetCommand::ResumeCluster { cluster } => format!("resume {cluster}"),
        FleetCommand::Promote {
            wave,
            full,
            cluster,
        } => format!(
            "promote{}{}{}",
            wave.map(|w| format!(" wave {w}")).unwrap_or_default(),
            cluster
                .as_ref()
                .map(|c| format!(" {c}"))
                .unwrap_or_default(),
            if *full { " --full" } else { "" }
        ),
    }
}
