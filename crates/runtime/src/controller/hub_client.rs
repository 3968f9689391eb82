//! The CLI's verbs against a hub (`--kubeconfig`), with no HTTP API in between: a command is a
//! `FleetCommand` object the controller consumes once, the history is read from the fleet's
//! `FleetRolloutRecord`, and the fleets' progress from the summaries on their
//! `FleetRollout.status`.

use std::time::{Duration, Instant};

use flotilla_kube::hub::{HubConfig, HubError};
use flotilla_kube::state::{HubState, StateError};
use serde_json::{Value, json};

use super::record::{AuditEntry, FleetSummary, OperatorCommand};

/// Why a verb against the hub failed.
#[derive(Debug, thiserror::Error)]
pub enum HubClientError {
    /// No client could be made.
    #[error(transparent)]
    Config(#[from] HubError),
    /// A read or write was refused or failed.
    #[error(transparent)]
    Api(#[from] StateError),
    /// What the hub holds cannot answer the verb.
    #[error("{0}")]
    Absent(String),
}

/// A hub's namespace, as the CLI reads and writes it.
pub struct HubClient {
    state: HubState,
}

/// What became of a `FleetCommand` the CLI created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The controller consumed it (`Consumed`) or refused it (`Refused`), with its message.
    Done {
        /// `Consumed` or `Refused`.
        phase: String,
        /// The controller's message.
        message: String,
    },
    /// Still waiting for a controller.
    Pending,
}

impl HubClient {
    /// Connects with `kubeconfig` (and `context`) to the hub's `namespace`.
    pub async fn connect(
        kubeconfig: &str,
        context: Option<&str>,
        namespace: &str,
    ) -> Result<HubClient, HubClientError> {
        let client = flotilla_kube::hub::client(&HubConfig {
            kubeconfig: Some(kubeconfig.to_owned()),
            context: context.map(str::to_owned),
            namespace: namespace.to_owned(),
            ..HubConfig::default()
        })
        .await?;
        Ok(HubClient {
            state: HubState::new(client, namespace),
        })
    }

    /// Creates the `FleetCommand` of `command` for FleetRollout `fleet`; returns its name.
    pub async fn command(
        &self,
        fleet: &str,
        command: &OperatorCommand,
        operator: &str,
    ) -> Result<String, HubClientError> {
        let created = self
            .state
            .create_command(
                fleet,
                None,
                json!({"fleetRollout": fleet, "command": command, "operator": operator,
                       "sentAt": crate::clock::wall_clock()}),
            )
            .await?;
        Ok(created.name)
    }

    /// Waits up to `limit` for the controller to consume `FleetCommand` `name`.
    pub async fn wait(&self, name: &str, limit: Duration) -> Result<Outcome, HubClientError> {
        let deadline = Instant::now() + limit;
        loop {
            let Some((status, _)) = self.state.command(name).await? else {
                return Err(HubClientError::Absent(format!(
                    "FleetCommand {}/{name} is gone",
                    self.state.namespace()
                )));
            };
            if let Some(phase) = status.get("phase").and_then(Value::as_str) {
                return Ok(Outcome::Done {
                    phase: phase.to_owned(),
                    message: status
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
            if Instant::now() >= deadline {
                return Ok(Outcome::Pending);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A fleet's audit log as its record keeps it (the latest entries).
    pub async fn history(&self, fleet: &str) -> Result<Vec<AuditEntry>, HubClientError> {
        let Some(head) = self.state.head(fleet).await? else {
            return Err(HubClientError::Absent(format!(
                "no FleetRolloutRecord {}/{fleet}: no controller keeping its state in this hub (hub.state: hub) ran FleetRollout {fleet}",
                self.state.namespace()
            )));
        };
        serde_json::from_value(head.get("audit").cloned().unwrap_or_else(|| json!([]))).map_err(
            |e| {
                HubClientError::Absent(format!(
                    "FleetRolloutRecord {}/{fleet}: spec.audit: {e}",
                    self.state.namespace()
                ))
            },
        )
    }

    /// The summary on FleetRollout `fleet`'s status (Null: none written yet).
    pub async fn status(&self, fleet: &str) -> Result<Value, HubClientError> {
        self.state
            .fleet_rollouts()
            .await?
            .into_iter()
            .find(|(name, _)| name == fleet)
            .map(|(_, status)| status)
            .ok_or_else(|| {
                HubClientError::Absent(format!(
                    "no FleetRollout {}/{fleet} in the hub",
                    self.state.namespace()
                ))
            })
    }

    /// Every FleetRollout, as `list` shows it.
    pub async fn list(&self) -> Result<Vec<FleetSummary>, HubClientError> {
        Ok(self
            .state
            .fleet_rollouts()
            .await?
            .into_iter()
            .map(|(name, status)| summary(name, &status))
            .collect())
    }
}

/// A FleetRollout's summary from its status (blank where none was written yet).
pub fn summary(name: String, status: &Value) -> FleetSummary {
    let text = |field: &str| {
        status
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let wave = text("wave");
    let (wave, waves) = wave
        .split_once('/')
        .map(|(a, b)| (a.parse().unwrap_or(0), b.parse().unwrap_or(0)))
        .unwrap_or((0, 0));
    FleetSummary {
        name,
        revision: text("revision"),
        image: text("image"),
        phase: text("phase"),
        wave,
        waves,
        message: text("message"),
        errors: status
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str().map(str::to_owned))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_read_from_the_status_flotilla_writes() {
        let view = summary(
            "payments".into(),
            &json!({"phase": "Progressing", "wave": "2/3", "image": "p:2", "revision": "ab",
                    "message": "wave 2", "errors": ["x"]}),
        );
        assert_eq!((view.wave, view.waves), (2, 3));
        assert_eq!(view.phase, "Progressing");
        assert_eq!(view.errors, ["x"]);
        let blank = summary("new".into(), &Value::Null);
        assert_eq!((blank.phase.as_str(), blank.wave), ("", 0));
    }
}
