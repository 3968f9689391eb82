//! The controller's durable state kept by a hub's API server (`hub.state: hub`): each fleet's
//! record as `FleetRolloutRecord` objects, operators' commands as `FleetCommand` objects; the
//! same operations as the redb store, so the daemon cannot tell them apart.
//!
//! # Invariants
//! - A fleet's record is one head object (the fleet's part of the record, the uids of the
//!   commands its ticks consumed, its audit entries and notifications) and one object per
//!   cluster (the fleet machine's state of that cluster), each bounded whatever the fleet's size.
//! - A tick is atomic per fleet: the changed cluster objects are written first, each with the
//!   new generation and the committed state it replaces (`previous`); then the head, at the
//!   `resourceVersion` it was read at, with the new generation. A reader takes a cluster object's
//!   `previous` when its generation is newer than the head's: a crash between the two writes
//!   reads as the tick never happened (it is recomputed), never as half of it.
//! - A `FleetCommand` is applied exactly once: the tick that applies it records its uid in the
//!   head in the same write; its status (`Consumed`) is written after, and a command whose uid is
//!   recorded is never applied again, whether or not its status was written.
//! - Writes happen only on change: an unchanged cluster is not written; the head is written
//!   when the tick changed the record or logged something.
//! - A write that finds no API server is tried again (0.5 s doubling to 5 s) until it lands:
//!   the loop, and so every fleet, waits (its view says so, and its history when it began and
//!   ended: [`HubStore::observe_waits`]). A refused write (a conflict: another controller; too
//!   large; forbidden) is an error that stops the daemon; its restart reads the hub again.
//! - The audit log keeps the latest [`AUDIT_KEPT`] entries per fleet, fewer when the head would
//!   outgrow [`HEAD_BUDGET`] (the oldest go first); the dashboard's plot histories are not kept (a view, rebuilt from a restart on).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use flotilla_kube::state::{HubState, StateError, StoredObject};
use futures::StreamExt;
use serde_json::{Value, json};

use super::record::{AuditEntry, FleetRecord, Notification, OperatorCommand, QueuedCommand};
use super::store::{StoreError, TickWrite};

/// How many audit entries a fleet's head keeps (the oldest go first).
pub const AUDIT_KEPT: usize = 1000;
/// The most a head may hold, under the API server's object limit (1.5 MiB) with room for its
/// metadata: the oldest audit entries go first when it would hold more.
const HEAD_BUDGET: usize = 1024 * 1024;
/// How many consumed command uids a fleet's head keeps (a command's status is written right
/// after the tick that consumed it; these only guard the moment between).
const CONSUMED_KEPT: usize = 256;
/// What a consumed `FleetCommand`'s status says.
const CONSUMED_MESSAGE: &str =
    "consumed by the controller: its answer (applied or refused, and why) is in flotilla history";
/// The head's schema version: as the local store's ([`super::store::SCHEMA`]), it goes up with
/// every release whose records gain a field (1: the first release that kept state in the hub).
pub(crate) const SCHEMA: u64 = 1;
/// How many cluster objects are written at once.
const WRITES_IN_FLIGHT: usize = 16;

/// One fleet's record as last committed.
#[derive(Debug, Default)]
struct Head {
    /// The head's resourceVersion (None: never written).
    version: Option<String>,
    generation: u64,
    /// The record without its clusters' states.
    record: Value,
    /// Each cluster's committed state and the generation its object was written at.
    clusters: BTreeMap<String, (u64, Value)>,
    /// The `resourceVersion` of each cluster's object (also of one written by a tick whose
    /// head never landed): its next write replaces only that version.
    versions: BTreeMap<String, String>,
    consumed: VecDeque<String>,
    audit: VecDeque<AuditEntry>,
    outbox: Vec<(u64, Notification)>,
    /// Clusters whose object is ahead of the head (written by a tick whose head never
    /// landed): written again by the next tick, changed or not, before a newer head could make
    /// that object's `state` read as committed.
    stale: BTreeSet<String>,
}

impl Head {
    fn spec(&self) -> Value {
        json!({
            "schema": SCHEMA,
            "generation": self.generation,
            "record": self.record,
            "clusters": self.clusters.keys().collect::<Vec<_>>(),
            "consumed": self.consumed,
            "audit": self.audit,
            "outbox": self
                .outbox
                .iter()
                .map(|(id, n)| json!({"id": id, "notification": n}))
                .collect::<Vec<_>>(),
        })
    }

    fn assemble(&self) -> Result<FleetRecord, serde_json::Error> {
        let mut record = self.record.clone();
        let clusters: serde_json::Map<String, Value> = self
            .clusters
            .iter()
            .map(|(name, (_, state))| (name.clone(), state.clone()))
            .collect();
        if let Some(state) = record.get_mut("state").and_then(Value::as_object_mut) {
            state.insert("clusters".into(), Value::Object(clusters));
        }
        serde_json::from_value(record)
    }
}

#[derive(Debug, Default)]
struct Inner {
    heads: BTreeMap<String, Head>,
    /// Audit entries of fleets that have no record yet (written with their first one).
    unrecorded: Vec<AuditEntry>,
    audit_seq: u64,
    outbox_seq: u64,
    /// The commands read, by id: (object name, uid).
    commands: BTreeMap<u64, (String, String)>,
}

/// The state in a hub.
pub struct HubStore {
    state: HubState,
    handle: tokio::runtime::Handle,
    inner: Mutex<Inner>,
    observer: Mutex<Option<WaitObserver>>,
    /// Whether a write waits for the API server now (the observer is told once per wait).
    waiting: std::sync::atomic::AtomicBool,
    /// Held across each write of a head (the loop's ticks, the notifier's deliveries): each
    /// is built from, and replaces, the version the other wrote.
    writing: Mutex<()>,
}

impl std::fmt::Debug for HubStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubStore")
            .field("namespace", &self.state.namespace())
            .finish()
    }
}

fn refused(state: &HubState, reason: String) -> StoreError {
    StoreError::Refused {
        path: format!("the hub's namespace {}", state.namespace()),
        reason,
    }
}

fn hub_error(e: StateError) -> StoreError {
    StoreError::Hub(e.to_string())
}

/// Why a fleet cannot be kept in the hub by this name (None: it can): the hub names a fleet's
/// cluster objects `<fleet>.<cluster>`, which, for a name with a `.`, may be the name of another
/// fleet's object (fleet `pay.eu`'s head is fleet `pay`'s cluster `eu`).
pub fn fleet_name_problem(fleet: &str) -> Option<String> {
    fleet.contains('.').then(|| {
        format!(
            "the FleetRollout {fleet:?} cannot be kept in the hub (hub.state: hub): its name holds \
             a '.', and the hub names a fleet's cluster objects <fleet>.<cluster>, which another \
             fleet's could be; name it without '.'"
        )
    })
}

/// A command's id, from its uid: stable across restarts, within JSON's exact integers.
pub fn command_id(uid: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash & ((1 << 53) - 1)).max(1)
}

/// Reads a fleet's record from its objects: the head, and each cluster's state as of the head's
/// generation (`previous` for an object written by a tick whose head never landed).
fn read_fleet(
    fleet: &str,
    head: &StoredObject,
    clusters: &[&StoredObject],
) -> Result<Head, String> {
    let spec = &head.spec;
    let schema = spec.get("schema").and_then(Value::as_u64).unwrap_or(0);
    if schema == 0 || schema > SCHEMA {
        return Err(format!(
            "FleetRolloutRecord {fleet} is of schema {schema}; this release reads 1 to {SCHEMA} \
             (a newer Flotilla wrote it, or not Flotilla)"
        ));
    }
    let generation = spec.get("generation").and_then(Value::as_u64).unwrap_or(0);
    let decode = |field: &str| spec.get(field).cloned().unwrap_or_else(|| json!([]));
    let names: Vec<String> = serde_json::from_value(decode("clusters"))
        .map_err(|e| format!("FleetRolloutRecord {fleet}: spec.clusters: {e}"))?;
    let mut states = BTreeMap::new();
    let mut stale = BTreeSet::new();
    let versions: BTreeMap<String, String> = clusters
        .iter()
        .filter_map(|o| {
            let name = o.spec.get("cluster").and_then(Value::as_str)?;
            Some((name.to_owned(), o.version.clone()))
        })
        .collect();
    for name in names {
        let object = clusters
            .iter()
            .find(|o| o.spec.get("cluster").and_then(Value::as_str) == Some(name.as_str()))
            .ok_or_else(|| {
                format!(
                    "FleetRolloutRecord {fleet} names cluster {name}, whose object ({}) is missing: the record is incomplete",
                    flotilla_kube::state::cluster_object_name(fleet, &name)
                )
            })?;
        let written = object
            .spec
            .get("generation")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let (at, state) = if written <= generation {
            (written, object.spec.get("state").cloned())
        } else {
            stale.insert(name.clone());
            let previous = object.spec.get("previous");
            (
                previous
                    .and_then(|p| p.get("generation"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                previous.and_then(|p| p.get("state")).cloned(),
            )
        };
        let state = state.ok_or_else(|| {
            format!(
                "FleetRolloutRecord {}: no state of generation {generation} or before",
                object.name
            )
        })?;
        states.insert(name, (at, state));
    }
    let outbox: Vec<Value> = serde_json::from_value(decode("outbox"))
        .map_err(|e| format!("FleetRolloutRecord {fleet}: spec.outbox: {e}"))?;
    let mut notifications = Vec::new();
    for entry in outbox {
        let id = entry.get("id").and_then(Value::as_u64).unwrap_or(0);
        let n: Notification =
            serde_json::from_value(entry.get("notification").cloned().unwrap_or_default())
                .map_err(|e| format!("FleetRolloutRecord {fleet}: spec.outbox: {e}"))?;
        notifications.push((id, n));
    }
    Ok(Head {
        version: Some(head.version.clone()),
        generation,
        record: spec.get("record").cloned().unwrap_or(Value::Null),
        clusters: states,
        consumed: serde_json::from_value(decode("consumed"))
            .map_err(|e| format!("FleetRolloutRecord {fleet}: spec.consumed: {e}"))?,
        audit: serde_json::from_value(decode("audit"))
            .map_err(|e| format!("FleetRolloutRecord {fleet}: spec.audit: {e}"))?,
        outbox: notifications,
        stale,
        versions,
    })
}

/// Told when a write waits for the hub's API server (`Some(why)`, at the first failure of a
/// write) and when a write that waited landed (`None`): the daemon shows it on the fleets.
pub type WaitObserver = std::sync::Arc<dyn Fn(Option<&str>) + Send + Sync>;

impl HubStore {
    /// Reads the state the hub holds (nothing: a first start). Must be called from within the
    /// runtime (its calls block on it, from blocking sections).
    pub async fn open(state: HubState) -> Result<HubStore, StoreError> {
        let objects = state.records().await.map_err(|e| match e.code {
            Some(404) => refused(
                &state,
                format!("{e}: the hub does not serve FleetRolloutRecords; apply Flotilla's CRDs (`flotilla crds | kubectl apply -f -`)"),
            ),
            _ => hub_error(e),
        })?;
        let mut inner = Inner::default();
        let mut by_fleet: BTreeMap<&str, (Option<&StoredObject>, Vec<&StoredObject>)> =
            BTreeMap::new();
        for object in &objects {
            let entry = by_fleet.entry(object.fleet.as_str()).or_default();
            match object.part.as_str() {
                "fleet" => entry.0 = Some(object),
                _ => entry.1.push(object),
            }
        }
        for (fleet, (head, clusters)) in by_fleet {
            let Some(head) = head else {
                // Cluster objects of a fleet whose first tick never landed.
                continue;
            };
            let head = read_fleet(fleet, head, &clusters).map_err(|e| refused(&state, e))?;
            inner.audit_seq = inner
                .audit_seq
                .max(head.audit.iter().map(|e| e.seq).max().unwrap_or(0));
            inner.outbox_seq = inner
                .outbox_seq
                .max(head.outbox.iter().map(|(id, _)| *id).max().unwrap_or(0));
            inner.heads.insert(fleet.to_owned(), head);
        }
        Ok(HubStore {
            state,
            handle: tokio::runtime::Handle::current(),
            inner: Mutex::new(inner),
            observer: Mutex::new(None),
            writing: Mutex::new(()),
            waiting: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Sets what is told when writes wait for the hub's API server.
    pub fn observe_waits(&self, observer: WaitObserver) {
        *self.observer.lock().expect("hub store observer lock") = Some(observer);
    }

    /// Runs `write` until it lands, waiting 0.5 s doubling to 5 s after each failure to reach
    /// the API server (the observer is told); a refusal is returned.
    async fn until_written<T, F, Fut>(&self, what: &str, mut write: F) -> Result<T, StateError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StateError>>,
    {
        let mut delay = Duration::from_millis(500);
        let mut waited = false;
        loop {
            match write().await {
                Ok(value) => {
                    if waited
                        && self.waiting.swap(false, Ordering::SeqCst)
                        && let Some(observer) = self.observer.lock().expect("observer lock").clone()
                    {
                        observer(None);
                    }
                    return Ok(value);
                }
                Err(e) if e.transient() => {
                    tracing::warn!(error = %e, "{what}: the hub did not take the write; tried again in {:.1} s", delay.as_secs_f64());
                    if !self.waiting.swap(true, Ordering::SeqCst)
                        && let Some(observer) = self.observer.lock().expect("observer lock").clone()
                    {
                        observer(Some(&e.message));
                    }
                    waited = true;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Imports the state of a redb store (an upgrade from `hub.state: store`): each fleet the hub
    /// has no record of, with its latest audit entries and undelivered notifications, then its
    /// queued commands as `FleetCommand`s (named after their ids: a second import after a crash
    /// creates none twice). Returns the fleets imported.
    pub fn import(&self, local: &super::store::LocalStore) -> Result<Vec<String>, StoreError> {
        let known: BTreeSet<String> = self
            .inner
            .lock()
            .expect("hub store lock")
            .heads
            .keys()
            .cloned()
            .collect();
        let records: Vec<FleetRecord> = local
            .fleets()?
            .into_iter()
            .filter(|r| !known.contains(&r.name))
            .collect();
        if let Some(problem) = records.iter().find_map(|r| fleet_name_problem(&r.name)) {
            return Err(refused(
                &self.state,
                format!("cannot import the store file: {problem}; nothing was imported"),
            ));
        }
        let audit = local.audit(None, 0)?;
        let outbox = local.outbox()?;
        let mut imported = Vec::new();
        for record in &records {
            let mut entries: Vec<AuditEntry> = audit
                .iter()
                .filter(|e| e.fleet == record.name)
                .cloned()
                .collect();
            entries.drain(..entries.len().saturating_sub(AUDIT_KEPT));
            let notifications = outbox
                .iter()
                .filter(|(_, n)| n.fleet == record.name)
                .map(|(_, n)| n.clone())
                .collect();
            self.commit_ticks(vec![TickWrite {
                record: Some(record),
                consumed: Vec::new(),
                audit: entries,
                notifications,
                plots: Vec::new(),
            }])?;
            imported.push(record.name.clone());
        }
        for command in local.pending_commands()? {
            let spec = json!({
                "fleetRollout": command.fleet,
                "command": command.command,
                "operator": command.operator,
                "sentAt": command.accepted_at,
            });
            let name = format!("imported-{}", command.id);
            match self.block_on(self.state.create_command(&command.fleet, Some(&name), spec)) {
                Ok(_) => {}
                Err(e) if e.code == Some(409) => {}
                Err(e) => return Err(hub_error(e)),
            }
        }
        Ok(imported)
    }

    /// Every fleet record.
    pub fn fleets(&self) -> Result<Vec<FleetRecord>, StoreError> {
        let inner = self.inner.lock().expect("hub store lock");
        inner
            .heads
            .iter()
            .filter(|(_, head)| !head.record.is_null())
            .map(|(fleet, head)| {
                head.assemble().map_err(|e| {
                    refused(
                        &self.state,
                        format!("FleetRolloutRecord {fleet}: spec.record: {e}"),
                    )
                })
            })
            .collect()
    }

    /// Queues a command: a `FleetCommand` object, durable when this returns.
    pub fn enqueue(&self, command: QueuedCommand) -> Result<QueuedCommand, StoreError> {
        let spec = json!({
            "fleetRollout": command.fleet,
            "command": command.command,
            "operator": command.operator,
            "sentAt": command.accepted_at,
        });
        let created = self
            .block_on(self.state.create_command(&command.fleet, None, spec))
            .map_err(hub_error)?;
        let id = command_id(&created.uid);
        self.inner
            .lock()
            .expect("hub store lock")
            .commands
            .insert(id, (created.name.clone(), created.uid.clone()));
        Ok(QueuedCommand {
            id,
            uid: Some(created.uid),
            ..command
        })
    }

    /// The `FleetCommand`s not yet applied, oldest first. One already applied whose status was
    /// not written yet (a restart between the two) is marked now, never applied again; one that
    /// is not a command is marked `Refused` with the reason.
    pub fn pending_commands(&self) -> Result<Vec<QueuedCommand>, StoreError> {
        let objects = self.block_on(self.state.commands()).map_err(hub_error)?;
        let consumed: BTreeSet<String> = {
            let inner = self.inner.lock().expect("hub store lock");
            inner
                .heads
                .values()
                .flat_map(|h| h.consumed.iter().cloned())
                .collect()
        };
        let mut out = Vec::new();
        let mut marks = Vec::new();
        for object in objects {
            if consumed.contains(&object.uid) {
                marks.push((object.name, "Consumed", CONSUMED_MESSAGE.to_owned()));
                continue;
            }
            let fleet = object.spec.get("fleetRollout").and_then(Value::as_str);
            let command = object
                .spec
                .get("command")
                .cloned()
                .map(|c| OperatorCommand::strict(&c));
            match (fleet, command) {
                (Some(fleet), Some(Ok(command))) => {
                    let id = command_id(&object.uid);
                    self.inner
                        .lock()
                        .expect("hub store lock")
                        .commands
                        .insert(id, (object.name.clone(), object.uid.clone()));
                    out.push(QueuedCommand {
                        id,
                        fleet: fleet.to_owned(),
                        command,
                        operator: object
                            .spec
                            .get("operator")
                            .and_then(Value::as_str)
                            .filter(|o| !o.is_empty())
                            .unwrap_or("operator")
                            .to_owned(),
                        accepted_at: object.created_ms,
                        uid: Some(object.uid),
                    });
                }
                (None, _) => marks.push((
                    object.name,
                    "Refused",
                    "spec.fleetRollout: missing (the FleetRollout the command is for)".to_owned(),
                )),
                (_, None) => marks.push((object.name, "Refused", "spec.command: missing".into())),
                (_, Some(Err(e))) => {
                    marks.push((object.name, "Refused", format!("spec.command: {e}")))
                }
            }
        }
        for (name, phase, message) in marks {
            if let Err(e) = self.block_on(self.state.consumed(&name, phase, &message)) {
                tracing::warn!(command = %name, error = %e, "cannot write a FleetCommand's status; written again later");
            }
        }
        Ok(out)
    }

    /// Writes one object of a fleet's record at `version` (created when None), trying again
    /// while the API server does not answer. A conflict is another writer, unless the object
    /// holds exactly what was written: an earlier attempt that landed, whose answer was lost.
    async fn write_object(
        &self,
        name: &str,
        fleet: &str,
        part: &str,
        version: Option<&str>,
        spec: &Value,
    ) -> Result<String, StoreError> {
        let written = self
            .until_written("a fleet's record", || {
                self.state.write(name, fleet, part, version, spec.clone())
            })
            .await;
        match written {
            Ok(version) => Ok(version),
            Err(e) if e.code == Some(409) => {
                let mut ours = spec.clone();
                ours["fleet"] = json!(fleet);
                match self.state.get(name).await {
                    Ok(Some((version, stored))) if stored == ours => Ok(version),
                    _ => Err(StoreError::Hub(format!(
                        "{e}: another controller wrote FleetRolloutRecord {}/{name} (only one may run per hub namespace); restart to read it again",
                        self.state.namespace()
                    ))),
                }
            }
            Err(e) => Err(hub_error(e)),
        }
    }

    /// Writes the ticks of one pass, each fleet's atomically (see the invariants); a tick that
    /// changed nothing writes nothing. Returns each tick's audit entries with their sequence
    /// numbers, in order.
    pub fn commit_ticks(
        &self,
        ticks: Vec<TickWrite<'_>>,
    ) -> Result<Vec<Vec<AuditEntry>>, StoreError> {
        let _writing = self.writing.lock().expect("hub store write lock");
        let mut out = Vec::with_capacity(ticks.len());
        let mut consumed_names = Vec::new();
        for tick in ticks {
            let mut inner = self.inner.lock().expect("hub store lock");
            let mut audit = tick.audit;
            for entry in audit.iter_mut() {
                inner.audit_seq += 1;
                entry.seq = inner.audit_seq;
            }
            let fleet = match (tick.record, audit.first()) {
                (Some(record), _) => record.name.clone(),
                (None, Some(entry)) => entry.fleet.clone(),
                (None, None) => {
                    out.push(audit);
                    continue;
                }
            };
            let uids: Vec<String> = tick
                .consumed
                .iter()
                .filter_map(|id| inner.commands.get(id))
                .map(|(name, uid)| {
                    consumed_names.push(name.clone());
                    uid.clone()
                })
                .collect();
            if tick.record.is_none() && !inner.heads.contains_key(&fleet) {
                inner.unrecorded.extend(audit.iter().cloned());
                out.push(audit);
                continue;
            }
            let mut notifications = Vec::new();
            for n in tick.notifications {
                inner.outbox_seq += 1;
                notifications.push((inner.outbox_seq, n));
            }
            let unrecorded: Vec<AuditEntry> = {
                let (mine, others) = std::mem::take(&mut inner.unrecorded)
                    .into_iter()
                    .partition(|e| e.fleet == fleet);
                inner.unrecorded = others;
                mine
            };
            let head = inner.heads.entry(fleet.clone()).or_default();
            // The new head, built aside: the one in memory changes only once written.
            let mut record = head.record.clone();
            let mut changed: Vec<(String, Value)> = Vec::new();
            let mut gone: Vec<String> = Vec::new();
            if let Some(r) = tick.record {
                let mut value = serde_json::to_value(r).map_err(|e| StoreError::Codec {
                    path: format!("the hub's namespace {}", self.state.namespace()),
                    record: format!("FleetRolloutRecord {}", r.name),
                    source: e,
                })?;
                let clusters = value
                    .get_mut("state")
                    .and_then(|s| s.get_mut("clusters"))
                    .map(Value::take)
                    .and_then(|c| match c {
                        Value::Object(map) => Some(map),
                        _ => None,
                    })
                    .unwrap_or_default();
                if let Some(state) = value.get_mut("state").and_then(Value::as_object_mut) {
                    state.insert("clusters".into(), json!({}));
                }
                record = value;
                for (name, state) in &clusters {
                    if head.stale.contains(name)
                        || head.clusters.get(name).map(|(_, s)| s) != Some(state)
                    {
                        changed.push((name.clone(), state.clone()));
                    }
                }
                gone = head
                    .clusters
                    .keys()
                    .filter(|c| !clusters.contains_key(*c))
                    .cloned()
                    .collect();
            }
            let nothing = changed.is_empty()
                && gone.is_empty()
                && record == head.record
                && head.version.is_some()
                && uids.is_empty()
                && audit.is_empty()
                && unrecorded.is_empty()
                && notifications.is_empty();
            if nothing {
                out.push(audit);
                continue;
            }
            let generation = head.generation + u64::from(!changed.is_empty());
            let mut next = Head {
                version: head.version.clone(),
                generation,
                record,
                clusters: head.clusters.clone(),
                versions: head.versions.clone(),
                consumed: head.consumed.clone(),
                audit: head.audit.clone(),
                outbox: head.outbox.clone(),
                stale: if tick.record.is_some() {
                    BTreeSet::new()
                } else {
                    head.stale.clone()
                },
            };
            for (name, state) in &changed {
                next.clusters
                    .insert(name.clone(), (generation, state.clone()));
            }
            for name in &gone {
                next.clusters.remove(name);
            }
            next.consumed.extend(uids);
            while next.consumed.len() > CONSUMED_KEPT {
                next.consumed.pop_front();
            }
            next.audit.extend(unrecorded);
            next.audit.extend(audit.iter().cloned());
            while next.audit.len() > AUDIT_KEPT {
                next.audit.pop_front();
            }
            next.outbox.extend(notifications);
            let mut spec = next.spec();
            while next.audit.len() > 1
                && serde_json::to_vec(&spec).map_or(0, |b| b.len()) > HEAD_BUDGET
            {
                let drop = next.audit.len().div_ceil(10);
                next.audit.drain(..drop);
                spec = next.spec();
            }
            let writes: Vec<(String, Option<String>, Value)> = changed
                .iter()
                .map(|(name, state)| {
                    let previous = head
                        .clusters
                        .get(name)
                        .map(|(at, s)| json!({"generation": at, "state": s}));
                    let mut spec =
                        json!({"cluster": name, "generation": generation, "state": state});
                    if let Some(previous) = previous {
                        spec["previous"] = previous;
                    }
                    (name.clone(), head.versions.get(name).cloned(), spec)
                })
                .collect();
            drop(inner);
            // The clusters first, then the head: see the invariants.
            let versions: Vec<(String, String)> = self.block_on(async {
                let results: Vec<Result<(String, String), StoreError>> =
                    futures::stream::iter(writes.into_iter().map(|(name, version, spec)| {
                        let fleet = fleet.clone();
                        async move {
                            let object = flotilla_kube::state::cluster_object_name(&fleet, &name);
                            self.write_object(&object, &fleet, "cluster", version.as_deref(), &spec)
                                .await
                                .map(|v| (name, v))
                        }
                    }))
                    .buffer_unordered(WRITES_IN_FLIGHT)
                    .collect()
                    .await;
                results.into_iter().collect::<Result<Vec<_>, _>>()
            })?;
            next.versions.extend(versions);
            let version = self.block_on(self.write_object(
                &fleet,
                &fleet,
                "fleet",
                next.version.as_deref(),
                &spec,
            ))?;
            next.version = Some(version);
            for name in &gone {
                let object = flotilla_kube::state::cluster_object_name(&fleet, name);
                match self.block_on(self.state.delete(&object)) {
                    Ok(()) => {
                        next.versions.remove(name);
                    }
                    Err(e) => tracing::warn!(error = %e, "a departed cluster's record stays"),
                }
            }
            self.inner
                .lock()
                .expect("hub store lock")
                .heads
                .insert(fleet, next);
            out.push(audit);
        }
        for name in consumed_names {
            if let Err(e) = self.block_on(self.state.consumed(&name, "Consumed", CONSUMED_MESSAGE))
            {
                tracing::warn!(command = %name, error = %e, "cannot write a FleetCommand's status; written at the next read");
            }
        }
        Ok(out)
    }

    /// The sequence number of the newest audit entry (0: none yet).
    pub fn newest_audit(&self) -> u64 {
        self.inner.lock().expect("hub store lock").audit_seq
    }

    /// The audit log of a fleet (all fleets with `None`), from sequence `since` on.
    pub fn audit(&self, fleet: Option<&str>, since: u64) -> Vec<AuditEntry> {
        let inner = self.inner.lock().expect("hub store lock");
        let mut out: Vec<AuditEntry> = inner
            .heads
            .values()
            .flat_map(|h| h.audit.iter())
            .chain(inner.unrecorded.iter())
            .filter(|e| e.seq >= since && fleet.is_none_or(|f| f == e.fleet))
            .cloned()
            .collect();
        out.sort_by_key(|e| e.seq);
        out
    }

    /// Notifications waiting for delivery, oldest first.
    pub fn outbox(&self) -> Vec<(u64, Notification)> {
        let inner = self.inner.lock().expect("hub store lock");
        let mut out: Vec<(u64, Notification)> = inner
            .heads
            .values()
            .flat_map(|h| h.outbox.iter().cloned())
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Removes a delivered notification (its fleet's head is written).
    pub fn delivered(&self, id: u64) -> Result<(), StoreError> {
        let _writing = self.writing.lock().expect("hub store write lock");
        let (fleet, version, spec) = {
            let mut inner = self.inner.lock().expect("hub store lock");
            let Some((fleet, head)) = inner
                .heads
                .iter_mut()
                .find(|(_, h)| h.outbox.iter().any(|(i, _)| *i == id))
            else {
                return Ok(());
            };
            let mut next = head.outbox.clone();
            next.retain(|(i, _)| *i != id);
            let outbox = std::mem::replace(&mut head.outbox, next);
            let spec = head.spec();
            head.outbox = outbox;
            (fleet.clone(), head.version.clone(), spec)
        };
        let version =
            self.block_on(self.write_object(&fleet, &fleet, "fleet", version.as_deref(), &spec))?;
        let mut inner = self.inner.lock().expect("hub store lock");
        if let Some(head) = inner.heads.get_mut(&fleet) {
            head.outbox.retain(|(i, _)| *i != id);
            head.version = Some(version);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(fleet: &str, part: &str, spec: Value) -> StoredObject {
        StoredObject {
            name: format!("{fleet}.{part}"),
            version: "7".into(),
            fleet: fleet.into(),
            part: part.into(),
            spec,
        }
    }

    /// A fleet whose name holds a '.' could take another fleet's cluster object's name: it is
    /// refused for the hub, by name.
    #[test]
    fn a_fleet_name_with_a_dot_is_refused_for_the_hub() {
        assert_eq!(
            flotilla_kube::state::cluster_object_name("pay", "eu"),
            "pay.eu",
            "the name fleet pay.eu's head would have"
        );
        let why = super::fleet_name_problem("pay.eu").unwrap();
        assert!(
            why.contains("\"pay.eu\"") && why.contains("without '.'"),
            "{why}"
        );
        assert!(super::fleet_name_problem("payments-eu").is_none());
    }

    #[test]
    fn a_cluster_written_by_a_tick_whose_head_never_landed_reads_as_before_it() {
        let head = object(
            "pay",
            "fleet",
            json!({"schema": 1, "generation": 4, "record": {"name": "pay", "state": {"clusters": {}}},
                   "clusters": ["a", "b"], "consumed": ["u1"], "audit": [], "outbox": []}),
        );
        // a: written by generation 3 (committed); b: by generation 5, whose head never landed.
        let a = object(
            "pay",
            "a",
            json!({"cluster": "a", "generation": 3, "state": {"v": "a3"}}),
        );
        let b = object(
            "pay",
            "b",
            json!({"cluster": "b", "generation": 5, "state": {"v": "b5"},
                   "previous": {"generation": 4, "state": {"v": "b4"}}}),
        );
        let read = read_fleet("pay", &head, &[&a, &b]).unwrap();
        assert_eq!(read.generation, 4);
        assert_eq!(read.clusters["a"], (3, json!({"v": "a3"})));
        assert_eq!(read.clusters["b"], (4, json!({"v": "b4"})));
        assert_eq!(read.consumed, ["u1"]);
        assert_eq!(read.stale, BTreeSet::from(["b".to_owned()]));
        let assembled = read.assemble();
        // Not a whole FleetRecord: the shape is what is checked.
        assert!(assembled.is_err());
        // A new cluster whose first object's head never landed has no state of the head's
        // generation: the record names only committed clusters, so it is not read at all.
        let c = object(
            "pay",
            "c",
            json!({"cluster": "c", "generation": 5, "state": {}}),
        );
        assert!(read_fleet("pay", &head, &[&a, &b, &c]).is_ok());
    }

    #[test]
    fn an_incomplete_or_newer_record_is_refused_with_its_name() {
        let head = object(
            "pay",
            "fleet",
            json!({"schema": 1, "generation": 2, "record": {}, "clusters": ["a"]}),
        );
        let error = read_fleet("pay", &head, &[]).err().unwrap();
        assert!(
            error.contains("names cluster a") && error.contains("pay.a"),
            "{error}"
        );
        let newer = object("pay", "fleet", json!({"schema": 9}));
        let error = read_fleet("pay", &newer, &[]).err().unwrap();
        assert!(error.contains("schema 9"), "{error}");
    }

    #[test]
    fn command_ids_are_stable_and_exact_in_json() {
        let id = command_id("5f1c2a0e-3b7d-4c1e-9a43-0d6f3e8b2c11");
        assert_eq!(id, command_id("5f1c2a0e-3b7d-4c1e-9a43-0d6f3e8b2c11"));
        assert!(id < (1 << 53));
        assert_ne!(id, command_id("5f1c2a0e-3b7d-4c1e-9a43-0d6f3e8b2c12"));
    }
}
