//! The controller's state kept by a hub's API server: `FleetRolloutRecord` objects (one per
//! fleet, the head, and one per (fleet, cluster)) and operators' `FleetCommand` objects. This
//! module only reads and writes them as JSON; what they hold and the order of writes that makes
//! a tick atomic belong to the runtime's hub store.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::crds::{GROUP, VERSION};

/// The field manager of Flotilla's writes in the hub (statuses and its own objects).
pub const HUB_MANAGER: &str = "flotilla-hub";

/// The label naming a record's FleetRollout.
pub const FLEET_LABEL: &str = "flotilla.dev/fleet-rollout";
/// The label saying which part of a fleet's record an object is: `fleet` (the head) or
/// `cluster`.
pub const PART_LABEL: &str = "flotilla.dev/record";

/// A `FleetRolloutRecord` as read.
#[derive(Debug, Clone)]
pub struct StoredObject {
    /// Its name.
    pub name: String,
    /// Its `resourceVersion` (the head is replaced only at this version).
    pub version: String,
    /// The FleetRollout (label [`FLEET_LABEL`]).
    pub fleet: String,
    /// `fleet` or `cluster` (label [`PART_LABEL`]).
    pub part: String,
    /// Its `spec`.
    pub spec: Value,
}

/// A `FleetCommand` not yet consumed.
#[derive(Debug, Clone)]
pub struct CommandObject {
    /// Its name.
    pub name: String,
    /// Its uid: what the tick that applies it records.
    pub uid: String,
    /// Its creation time, in Unix milliseconds (the API server keeps seconds).
    pub created_ms: i64,
    /// Its `spec`.
    pub spec: Value,
}

/// The hub's API for Flotilla's state in one namespace.
#[derive(Clone)]
pub struct HubState {
    namespace: String,
    records: Api<DynamicObject>,
    commands: Api<DynamicObject>,
    fleet_rollouts: Api<DynamicObject>,
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, kind))
}

/// FNV-1a, 64 bits: stable across releases and platforms.
fn fnv(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A label value for a fleet's name: the name when it fits (63 characters), else its start and
/// a hash (the object's `spec.fleet` keeps the name).
pub fn label_value(fleet: &str) -> String {
    if fleet.len() <= 63 {
        fleet.to_owned()
    } else {
        format!(
            "{}-{:016x}",
            &fleet[..40].trim_end_matches(['-', '.']),
            fnv(fleet)
        )
    }
}

/// A DNS-1123 subdomain name for a fleet's cluster object: `<fleet>.<cluster>` when the cluster's
/// name is one already, else `<fleet>.c-<hash of the name>` (the object's `spec.cluster` keeps
/// the name).
pub fn cluster_object_name(fleet: &str, cluster: &str) -> String {
    let valid = !cluster.is_empty()
        && cluster.len() <= 63
        && cluster
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !cluster.starts_with('-')
        && !cluster.ends_with('-');
    if valid && fleet.len() + 1 + cluster.len() <= 253 {
        format!("{fleet}.{cluster}")
    } else if fleet.len() + 19 <= 253 {
        format!("{fleet}.c-{:016x}", fnv(cluster))
    } else {
        format!(
            "{}.c-{:016x}",
            &fleet[..200].trim_end_matches(['-', '.']),
            fnv(&format!("{fleet}\0{cluster}"))
        )
    }
}

/// Why a read or write of the state failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the hub: {verb} {resource}: {message}")]
pub struct StateError {
    /// The verb (`update`).
    pub verb: String,
    /// `fleetrolloutrecords flotilla/payments`.
    pub resource: String,
    /// The API server's status code, when it answered.
    pub code: Option<u16>,
    /// Why.
    pub message: String,
}

impl StateError {
    /// Whether trying again may succeed: no answer, one that says the server could not (5xx,
    /// 429), or an authentication or authorization refusal (401, 403): an API server that has
    /// just restarted refuses until its authorizer has read RBAC again, and an admin's fix of a
    /// Role is taken at the next attempt. A conflict, an invalid or too large object is not.
    pub fn transient(&self) -> bool {
        self.code
            .is_none_or(|c| c >= 500 || matches!(c, 429 | 401 | 403))
    }
}

fn failed(verb: &str, what: String, e: kube::Error) -> StateError {
    StateError {
        verb: verb.to_owned(),
        resource: what,
        code: match &e {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        message: e.to_string(),
    }
}

fn invalid(verb: &str, what: String, e: serde_json::Error) -> StateError {
    StateError {
        verb: verb.to_owned(),
        resource: what,
        code: Some(422),
        message: e.to_string(),
    }
}

impl HubState {
    /// The state of namespace `namespace` in the hub `client` reaches.
    pub fn new(client: kube::Client, namespace: &str) -> HubState {
        HubState {
            namespace: namespace.to_owned(),
            records: Api::namespaced_with(
                client.clone(),
                namespace,
                &resource("FleetRolloutRecord"),
            ),
            commands: Api::namespaced_with(client.clone(), namespace, &resource("FleetCommand")),
            fleet_rollouts: Api::namespaced_with(client, namespace, &resource("FleetRollout")),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn what(&self, plural: &str, name: &str) -> String {
        format!("{plural} {}/{name}", self.namespace)
    }

    /// Every `FleetRolloutRecord` of the namespace.
    pub async fn records(&self) -> Result<Vec<StoredObject>, StateError> {
        let list = self
            .records
            .list(&ListParams::default())
            .await
            .map_err(|e| failed("list", self.what("fleetrolloutrecords", ""), e))?;
        Ok(list
            .items
            .into_iter()
            .map(|object| {
                let label = |key: &str| {
                    object
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(key))
                        .cloned()
                        .unwrap_or_default()
                };
                let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
                StoredObject {
                    name: object.metadata.name.clone().unwrap_or_default(),
                    version: object.metadata.resource_version.clone().unwrap_or_default(),
                    fleet: spec
                        .get("fleet")
                        .and_then(Value::as_str)
                        .map_or_else(|| label(FLEET_LABEL), str::to_owned),
                    part: label(PART_LABEL),
                    spec,
                }
            })
            .collect())
    }

    fn object(&self, name: &str, fleet: &str, part: &str, mut spec: Value) -> Value {
        spec["fleet"] = json!(fleet);
        json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "FleetRolloutRecord",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {FLEET_LABEL: label_value(fleet), PART_LABEL: part},
            },
            "spec": spec,
        })
    }

    /// Writes an object of `fleet`'s record (`part`: `fleet` or `cluster`): created when
    /// `version` is None, else replaced only at that `resourceVersion` (a conflict means another
    /// writer, or an earlier attempt of this write that landed). Returns the new version.
    pub async fn write(
        &self,
        name: &str,
        fleet: &str,
        part: &str,
        version: Option<&str>,
        spec: Value,
    ) -> Result<String, StateError> {
        let mut object = self.object(name, fleet, part, spec);
        let what = self.what("fleetrolloutrecords", name);
        let params = PostParams {
            field_manager: Some(HUB_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let written = match version {
            None => {
                let object: DynamicObject = serde_json::from_value(object)
                    .map_err(|e| invalid("create", what.clone(), e))?;
                self.records
                    .create(&params, &object)
                    .await
                    .map_err(|e| failed("create", what, e))?
            }
            Some(version) => {
                object["metadata"]["resourceVersion"] = json!(version);
                let object: DynamicObject = serde_json::from_value(object)
                    .map_err(|e| invalid("update", what.clone(), e))?;
                self.records
                    .replace(name, &params, &object)
                    .await
                    .map_err(|e| failed("update", what, e))?
            }
        };
        Ok(written.metadata.resource_version.unwrap_or_default())
    }

    /// An object of a record as stored: its `resourceVersion` and `spec` (None: absent).
    pub async fn get(&self, name: &str) -> Result<Option<(String, Value)>, StateError> {
        self.records
            .get_opt(name)
            .await
            .map(|o| {
                o.map(|o| {
                    (
                        o.metadata.resource_version.clone().unwrap_or_default(),
                        o.data.get("spec").cloned().unwrap_or(Value::Null),
                    )
                })
            })
            .map_err(|e| failed("get", self.what("fleetrolloutrecords", name), e))
    }

    /// Deletes an object of a fleet's record (gone already is done).
    pub async fn delete(&self, name: &str) -> Result<(), StateError> {
        match self.records.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(failed("delete", self.what("fleetrolloutrecords", name), e)),
        }
    }

    /// The `FleetCommand`s whose status says nothing yet (not consumed), oldest first.
    pub async fn commands(&self) -> Result<Vec<CommandObject>, StateError> {
        let list = self
            .commands
            .list(&ListParams::default())
            .await
            .map_err(|e| failed("list", self.what("fleetcommands", ""), e))?;
        let mut out: Vec<CommandObject> = list
            .items
            .into_iter()
            .filter(|o| {
                o.data
                    .get("status")
                    .and_then(|s| s.get("phase"))
                    .is_none_or(Value::is_null)
            })
            .map(|o| CommandObject {
                name: o.metadata.name.clone().unwrap_or_default(),
                uid: o.metadata.uid.clone().unwrap_or_default(),
                created_ms: o
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_millisecond()),
                spec: o.data.get("spec").cloned().unwrap_or(Value::Null),
            })
            .collect();
        // Seconds first, then the sender's `spec.sentAt` (milliseconds): two commands sent in
        // one second keep their order.
        let sent = |c: &CommandObject| c.spec.get("sentAt").and_then(Value::as_i64).unwrap_or(0);
        out.sort_by(|a, b| (a.created_ms, sent(a), &a.name).cmp(&(b.created_ms, sent(b), &b.name)));
        Ok(out)
    }

    /// Creates a `FleetCommand` (named `name`, or `generateName` from the fleet); returns it as
    /// read back.
    pub async fn create_command(
        &self,
        fleet: &str,
        name: Option<&str>,
        spec: Value,
    ) -> Result<CommandObject, StateError> {
        let what = self.what("fleetcommands", fleet);
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "FleetCommand",
            "metadata": match name {
                Some(name) => json!({"name": name, "namespace": self.namespace}),
                None => json!({"generateName": format!("{fleet}-"), "namespace": self.namespace}),
            },
            "spec": spec,
        }))
        .map_err(|e| invalid("create", what.clone(), e))?;
        let created = self
            .commands
            .create(
                &PostParams {
                    field_manager: Some(HUB_MANAGER.to_owned()),
                    ..PostParams::default()
                },
                &object,
            )
            .await
            .map_err(|e| failed("create", what, e))?;
        Ok(CommandObject {
            name: created.metadata.name.clone().unwrap_or_default(),
            uid: created.metadata.uid.clone().unwrap_or_default(),
            created_ms: created
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_millisecond()),
            spec: created.data.get("spec").cloned().unwrap_or(Value::Null),
        })
    }

    /// The `spec` of a fleet's head record (None: no controller recorded the fleet yet).
    pub async fn head(&self, fleet: &str) -> Result<Option<Value>, StateError> {
        self.records
            .get_opt(fleet)
            .await
            .map(|o| o.and_then(|o| o.data.get("spec").cloned()))
            .map_err(|e| failed("get", self.what("fleetrolloutrecords", fleet), e))
    }

    /// The `status` of a `FleetCommand` (None: gone), and its `spec`.
    pub async fn command(&self, name: &str) -> Result<Option<(Value, Value)>, StateError> {
        self.commands
            .get_opt(name)
            .await
            .map(|o| {
                o.map(|o| {
                    let field = |f: &str| o.data.get(f).cloned().unwrap_or(Value::Null);
                    (field("status"), field("spec"))
                })
            })
            .map_err(|e| failed("get", self.what("fleetcommands", name), e))
    }

    /// Each FleetRollout's name and the `status` the controller wrote on it (its summary).
    pub async fn fleet_rollouts(&self) -> Result<Vec<(String, Value)>, StateError> {
        let list = self
            .fleet_rollouts
            .list(&ListParams::default())
            .await
            .map_err(|e| failed("list", self.what("fleetrollouts", ""), e))?;
        Ok(list
            .items
            .into_iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap_or_default(),
                    o.data.get("status").cloned().unwrap_or(Value::Null),
                )
            })
            .collect())
    }

    /// Marks a `FleetCommand` consumed (its status subresource): `phase`, and the message.
    pub async fn consumed(&self, name: &str, phase: &str, message: &str) -> Result<(), StateError> {
        match self
            .commands
            .patch_status(
                name,
                &PatchParams {
                    field_manager: Some(HUB_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({"status": {"phase": phase, "message": message}})),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Deleted by its author meanwhile: nothing to mark.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(failed("patch", self.what("fleetcommands/status", name), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarting_api_servers_refusals_are_waited_out_conflicts_are_not() {
        let error = |code: Option<u16>| StateError {
            verb: "update".into(),
            resource: "fleetrolloutrecords".into(),
            code,
            message: String::new(),
        };
        for code in [None, Some(500), Some(503), Some(429), Some(401), Some(403)] {
            assert!(error(code).transient(), "{code:?}");
        }
        for code in [Some(409), Some(422), Some(413), Some(400)] {
            assert!(!error(code).transient(), "{code:?}");
        }
    }

    #[test]
    fn cluster_objects_are_named_within_dns_rules() {
        assert_eq!(cluster_object_name("pay", "eu-1"), "pay.eu-1");
        let odd = cluster_object_name("pay", "EU_West/1");
        assert!(odd.starts_with("pay.c-"), "{odd}");
        assert_eq!(odd, cluster_object_name("pay", "EU_West/1"));
        assert_ne!(odd, cluster_object_name("pay", "EU_West/2"));
        assert_eq!(odd.len(), "pay.c-".len() + 16);
        let long = "f".repeat(250);
        assert!(cluster_object_name(&long, "eu-1").len() <= 253);
        assert_eq!(label_value("pay"), "pay");
        assert!(label_value(&long).len() <= 63);
    }
}
