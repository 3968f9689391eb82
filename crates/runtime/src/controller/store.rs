//! The controller's durable state in one redb file ([`LocalStore`]; `durable::Store` is it or
//! the hub's API server, `hub_store`): fleet records, the operator command queue, the audit log
//! and the notification outbox; and what both kinds share ([`StoreError`], [`TickWrite`]).
//!
//! # Invariants
//! - A tick's new fleet record, the commands it consumed, its audit entries and its
//!   notifications are written in one transaction ([`LocalStore::commit_ticks`], with those of every
//!   fleet of the same pass), before any of its actions run: a crash either loses the whole
//!   pass (it is recomputed) or none of it.
//! - An accepted command is committed before the API answers, and deleted only with the tick
//!   that applied it: exactly once.
//! - Notifications leave the outbox only once delivered (or given up on): at least once.
//!
//! - A store is created only where none is: the file absent (first start), or `--init-store`
//!   over an empty file. A file that exists but is empty, truncated, garbled, of another program
//!   or of a newer schema is refused with the reason, before anything runs: an empty store must
//!   never look like a fleet with no history (that would deploy the manifests everywhere at
//!   once).
//! - Every call into redb is guarded: a panic inside it (a corrupt page) is an error that names
//!   the file, never an abort.
//! - The store carries its schema version ([`SCHEMA`], in the `meta` table); a store of the
//!   release before versioning (no `meta` table, the same tables) is schema 1; an earlier
//!   version is upgraded in place at open, a newer one refused.
//!
//! redb was chosen for an ACID, single-file, pure-Rust store with no server and crash-safe
//! commits (copy-on-write B-trees with a checksummed commit slot).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::record::{AuditEntry, FleetRecord, Notification, QueuedCommand};

const FLEETS: TableDefinition<&str, &[u8]> = TableDefinition::new("fleets");
const COMMANDS: TableDefinition<u64, &[u8]> = TableDefinition::new("commands");
const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
const SEQUENCES: TableDefinition<&str, u64> = TableDefinition::new("sequences");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The dashboard's plot history: `fleet\0cluster` → JSON (`plots::ClusterPlots`). A view,
/// not state a decision reads; a store without it (an earlier release's) reads as empty.
const PLOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("plots");

/// The store's schema version: what this release writes, and the newest it reads. Records
/// change only by adding fields, so a store of an earlier version decodes with the new fields'
/// defaults and is stamped with this version at open; the version goes up with every release
/// whose records gain a field, because an earlier release would rewrite each record without it
/// (a downgrade that loses state silently) where it must refuse the store instead.
/// - 1: the release before versioning (no `meta` table) and the first versioned one (f38e965).
/// - 2: fleet records carry the decisions' sequence (`eventSeq`: the notifications' ids), the
///   commands already heard from clusters (`heard`) and a lockstep wave's barrier; a release of
///   schema 1 would drop them, then repeat notification ids and apply cluster commands again.
pub const SCHEMA: u64 = 2;

/// How [`LocalStore::open`] may treat the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpenMode {
    /// Open the store; create it only when the file is absent (a first start).
    #[default]
    Existing,
    /// `--init-store`: create a new store, also over an existing empty file; a store that holds
    /// state is never replaced.
    Init,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("store {path}: {source}")]
    Database {
        /// The store file.
        path: String,
        /// Why.
        source: redb::Error,
    },
    /// A record could not be encoded or decoded.
    #[error("store {path}: corrupt record {record}: {source}")]
    Codec {
        /// The store file.
        path: String,
        /// The record: its table and key (`fleets/payments`, `audit/42`), and the field path
        /// where decoding failed.
        record: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The file is not a store this release can use (empty, truncated, garbled, another
    /// program's, a newer schema); nothing was changed.
    #[error("store {path}: {reason}")]
    Refused {
        /// The store file.
        path: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The hub's API server refused a read or write of the state, or its objects cannot be
    /// read (`hub.state: hub`).
    #[error("store in the hub: {0}")]
    Hub(String),
    /// redb panicked (a corrupt page); the panic was caught.
    #[error(
        "store {path}: the database failed while {what}: {message} (the file may be corrupt; restore it from a backup)"
    )]
    Panicked {
        /// The store file.
        path: String,
        /// What the store was doing.
        what: &'static str,
        /// The panic's message.
        message: String,
    },
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Runs `body`, turning a panic inside redb into [`StoreError::Panicked`].
fn guarded<T>(
    path: &str,
    what: &'static str,
    body: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        Err(StoreError::Panicked {
            path: path.to_owned(),
            what,
            message: panic_message(payload.as_ref()),
        })
    })
}

/// The controller's store in a redb file.
pub struct LocalStore {
    db: Database,
    path: String,
    /// How many audit entries are kept, the oldest dropped at each commit (0: every one).
    audit_kept: u64,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// What one tick writes.
#[derive(Debug, Default)]
pub struct TickWrite<'a> {
    /// The fleet's new record.
    pub record: Option<&'a FleetRecord>,
    /// Commands applied by the tick.
    pub consumed: Vec<u64>,
    /// Decisions to log.
    pub audit: Vec<AuditEntry>,
    /// Notifications to deliver.
    pub notifications: Vec<Notification>,
    /// Plot histories that changed: (`plots::key`, JSON).
    pub plots: Vec<(String, Vec<u8>)>,
}

impl LocalStore {
    /// Opens the store at `path`; creates it only when the file is absent, or, with
    /// [`OpenMode::Init`], over an empty file. Returns the store and whether it was created.
    pub fn open(path: &Path, mode: OpenMode) -> Result<(LocalStore, bool), StoreError> {
        let name = path.display().to_string();
        let refused = |reason: String| StoreError::Refused {
            path: name.clone(),
            reason,
        };
        let size = match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => Some(meta.len()),
            Ok(_) => return Err(refused("is not a regular file".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(refused(format!("cannot be read: {e}"))),
        };
        let create = match (size, mode) {
            (None, _) => true,
            (Some(0), OpenMode::Init) => true,
            (Some(0), OpenMode::Existing) => {
                return Err(refused(
                    "exists but is empty (0 bytes), so it holds no state this controller can \
                     resume from; a new store is created only where the file is absent, or with \
                     --init-store (nothing was started)"
                        .into(),
                ));
            }
            (Some(_), _) => false,
        };
        let db = guarded(&name, "opening the file", || {
            let opened = if create {
                Database::create(path)
            } else {
                Database::open(path)
            };
            opened.map_err(|e| {
                refused(if create {
                    format!("cannot be created: {e}")
                } else {
                    format!(
                        "is not a readable Flotilla store (truncated, garbled or not a redb \
                         file): {e}; restore it from a backup, or move it away to start afresh \
                         (nothing was started)"
                    )
                })
            })
        })?;
        let mut store = LocalStore {
            audit_kept: 0,
            db,
            path: name.clone(),
        };
        if !create {
            let intact = guarded(&store.path.clone(), "checking its integrity", || {
                store.db.check_integrity().map_err(|e| store.db_error(e))
            })?;
            if !intact {
                return Err(refused(
                    "failed redb's integrity check and was repaired from its last commit; \
                     start again to use the repaired store"
                        .into(),
                ));
            }
        }
        let path_name = store.path.clone();
        guarded(&path_name, "reading its schema", || {
            store.check_schema(create, mode)
        })?;
        Ok((store, create))
    }

    /// Checks (and on creation writes) the schema version and the tables.
    fn check_schema(&self, create: bool, mode: OpenMode) -> Result<(), StoreError> {
        let refused = |reason: String| StoreError::Refused {
            path: self.path.clone(),
            reason,
        };
        if !create {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let tables: Vec<String> = txn
                .list_tables()
                .map_err(|e| self.db_error(e))?
                .map(|t| t.name().to_owned())
                .collect();
            let ours = ["fleets", "commands", "audit", "outbox", "sequences"];
            if !ours.iter().all(|t| tables.iter().any(|have| have == t)) {
                return Err(refused(format!(
                    "is a redb database but not a Flotilla store (its tables: {}); nothing was \
                     started",
                    if tables.is_empty() {
                        "none".to_owned()
                    } else {
                        tables.join(", ")
                    }
                )));
            }
            let schema = if tables.iter().any(|t| t == "meta") {
                let meta = txn.open_table(META).map_err(|e| self.db_error(e))?;
                meta.get("schema")
                    .map_err(|e| self.db_error(e))?
                    .map_or(1, |v| v.value())
            } else {
                1
            };
            if schema > SCHEMA {
                return Err(refused(format!(
                    "was written by a newer Flotilla (schema {schema}; this release reads up to \
                     {SCHEMA}); nothing was started"
                )));
            }
            if mode == OpenMode::Init {
                let fleets = txn
                    .open_table(FLEETS)
                    .map_err(|e| self.db_error(e))?
                    .len()
                    .map_err(|e| self.db_error(e))?;
                return Err(refused(format!(
                    "already holds state ({fleets} fleet records); --init-store only creates a \
                     store where none is, and never replaces one"
                )));
            }
        }
        self.write(|txn| {
            txn.open_table(FLEETS)?;
            txn.open_table(COMMANDS)?;
            txn.open_table(AUDIT)?;
            txn.open_table(OUTBOX)?;
            txn.open_table(SEQUENCES)?;
            txn.open_table(META)?.insert("schema", SCHEMA)?;
            Ok(())
        })
    }

    /// Keeps the newest `kept` audit entries from the next commit on, the oldest dropped (0:
    /// every one, the default).
    pub fn keep_audit(&mut self, kept: u64) {
        self.audit_kept = kept;
    }

    /// The schema version the store carries.
    pub fn schema(&self) -> Result<u64, StoreError> {
        self.number("reading its schema", META, "schema", 1)
    }

    /// The number `key` of `table`, or `absent`.
    fn number(
        &self,
        what: &'static str,
        table: TableDefinition<&str, u64>,
        key: &str,
        absent: u64,
    ) -> Result<u64, StoreError> {
        self.guard(what, || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = txn.open_table(table).map_err(|e| self.db_error(e))?;
            Ok(table
                .get(key)
                .map_err(|e| self.db_error(e))?
                .map_or(absent, |v| v.value()))
        })
    }

    fn guard<T>(
        &self,
        what: &'static str,
        body: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        guarded(&self.path, what, body)
    }

    fn db_error(&self, source: impl Into<redb::Error>) -> StoreError {
        StoreError::Database {
            path: self.path.clone(),
            source: source.into(),
        }
    }

    fn encode<T: Serialize>(&self, record: &str, value: &T) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(value).map_err(|source| StoreError::Codec {
            path: self.path.clone(),
            record: record.to_owned(),
            source,
        })
    }

    /// Decodes the record `table/key`; an error names it and the field that failed.
    fn decode<T: DeserializeOwned>(
        &self,
        table: &str,
        key: impl std::fmt::Display,
        bytes: &[u8],
    ) -> Result<T, StoreError> {
        let mut json = serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let field = e.path().to_string();
            StoreError::Codec {
                path: self.path.clone(),
                record: if field == "." {
                    format!("{table}/{key}")
                } else {
                    format!("{table}/{key} at {field}")
                },
                source: e.into_inner(),
            }
        })
    }

    fn write<T>(
        &self,
        body: impl FnOnce(&redb::WriteTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        self.guard("writing", || {
            let txn = self.db.begin_write().map_err(|e| self.db_error(e))?;
            let value = body(&txn).map_err(|e| self.db_error(e))?;
            txn.commit().map_err(|e| self.db_error(e))?;
            Ok(value)
        })
    }

    /// Every fleet record.
    pub fn fleets(&self) -> Result<Vec<FleetRecord>, StoreError> {
        self.guard("reading the fleet records", || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = txn.open_table(FLEETS).map_err(|e| self.db_error(e))?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(|e| self.db_error(e))? {
                let (key, value) = entry.map_err(|e| self.db_error(e))?;
                out.push(self.decode("fleets", key.value(), value.value())?);
            }
            Ok(out)
        })
    }

    /// Queues a command; it is durable when this returns.
    pub fn enqueue(&self, command: QueuedCommand) -> Result<QueuedCommand, StoreError> {
        self.write(|txn| {
            let mut command = command;
            command.id = next_sequence(txn, "commands")?;
            // Plain data with string keys: serializing cannot fail.
            let bytes = serde_json::to_vec(&command).expect("a command serializes");
            txn.open_table(COMMANDS)?
                .insert(command.id, bytes.as_slice())?;
            Ok(command)
        })
    }

    /// Commands not yet applied, oldest first.
    pub fn pending_commands(&self) -> Result<Vec<QueuedCommand>, StoreError> {
        self.guard("reading the command queue", || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = txn.open_table(COMMANDS).map_err(|e| self.db_error(e))?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(|e| self.db_error(e))? {
                let (key, value) = entry.map_err(|e| self.db_error(e))?;
                out.push(self.decode("commands", key.value(), value.value())?);
            }
            Ok(out)
        })
    }

    /// Writes the ticks of one pass over the fleets in one transaction (one sync to disk for
    /// the pass, not one per fleet): all of them or none. Returns each tick's audit entries with
    /// their sequence numbers, in order.
    pub fn commit_ticks(
        &self,
        ticks: Vec<TickWrite<'_>>,
    ) -> Result<Vec<Vec<AuditEntry>>, StoreError> {
        struct Encoded<'a> {
            record: Option<(&'a str, Vec<u8>)>,
            consumed: Vec<u64>,
            audit: Vec<AuditEntry>,
            notifications: Vec<Vec<u8>>,
            plots: Vec<(String, Vec<u8>)>,
        }
        let mut encoded = Vec::with_capacity(ticks.len());
        for tick in ticks {
            encoded.push(Encoded {
                record: tick
                    .record
                    .map(|r| {
                        Ok::<_, StoreError>((
                            r.name.as_str(),
                            self.encode(&format!("fleets/{}", r.name), r)?,
                        ))
                    })
                    .transpose()?,
                consumed: tick.consumed,
                audit: tick.audit,
                notifications: tick
                    .notifications
                    .iter()
                    .map(|n| self.encode("outbox", n))
                    .collect::<Result<_, _>>()?,
                plots: tick.plots,
            });
        }
        self.write(|txn| {
            let mut out = Vec::with_capacity(encoded.len());
            for tick in encoded {
                if let Some((name, bytes)) = &tick.record {
                    txn.open_table(FLEETS)?.insert(*name, bytes.as_slice())?;
                }
                {
                    let mut commands = txn.open_table(COMMANDS)?;
                    for id in &tick.consumed {
                        commands.remove(*id)?;
                    }
                }
                let mut audit = tick.audit;
                {
                    let mut encoded_audit = Vec::with_capacity(audit.len());
                    for entry in audit.iter_mut() {
                        entry.seq = next_sequence(txn, "audit")?;
                        // Plain data with string keys: serializing cannot fail.
                        let bytes = serde_json::to_vec(entry).expect("an audit entry serializes");
                        encoded_audit.push((entry.seq, bytes));
                    }
                    let mut table = txn.open_table(AUDIT)?;
                    for (seq, bytes) in &encoded_audit {
                        table.insert(*seq, bytes.as_slice())?;
                    }
                    if let Some((newest, _)) = encoded_audit.last()
                        && self.audit_kept > 0
                        && *newest > self.audit_kept
                    {
                        table.retain_in(..=newest - self.audit_kept, |_, _| false)?;
                    }
                }
                {
                    let mut outbox = txn.open_table(OUTBOX)?;
                    for bytes in &tick.notifications {
                        let id = next_sequence(txn, "outbox")?;
                        outbox.insert(id, bytes.as_slice())?;
                    }
                }
                if !tick.plots.is_empty() {
                    let mut plots = txn.open_table(PLOTS)?;
                    for (key, bytes) in &tick.plots {
                        plots.insert(key.as_str(), bytes.as_slice())?;
                    }
                }
                out.push(audit);
            }
            Ok(out)
        })
    }

    /// The plot histories, as (`plots::key`, JSON); none in a store that has no `plots`
    /// table yet.
    pub fn plots(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.guard("reading the plot histories", || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = match txn.open_table(PLOTS) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(self.db_error(e)),
            };
            let mut out = Vec::new();
            for row in table.iter().map_err(|e| self.db_error(e))? {
                let (key, value) = row.map_err(|e| self.db_error(e))?;
                out.push((key.value().to_owned(), value.value().to_vec()));
            }
            Ok(out)
        })
    }

    /// The sequence number of the newest audit entry (0: none yet).
    pub fn newest_audit(&self) -> Result<u64, StoreError> {
        self.number("reading the audit log's sequence", SEQUENCES, "audit", 0)
    }

    /// The audit log of a fleet (all fleets with `None`), from sequence `since` on.
    pub fn audit(&self, fleet: Option<&str>, since: u64) -> Result<Vec<AuditEntry>, StoreError> {
        self.guard("reading the audit log", || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = txn.open_table(AUDIT).map_err(|e| self.db_error(e))?;
            let mut out = Vec::new();
            for entry in table.range(since..).map_err(|e| self.db_error(e))? {
                let (key, value) = entry.map_err(|e| self.db_error(e))?;
                let entry: AuditEntry = self.decode("audit", key.value(), value.value())?;
                if fleet.is_none_or(|f| f == entry.fleet) {
                    out.push(entry);
                }
            }
            Ok(out)
        })
    }

    /// Notifications waiting for delivery, oldest first.
    pub fn outbox(&self) -> Result<Vec<(u64, Notification)>, StoreError> {
        self.guard("reading the outbox", || {
            let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
            let table = txn.open_table(OUTBOX).map_err(|e| self.db_error(e))?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(|e| self.db_error(e))? {
                let (key, value) = entry.map_err(|e| self.db_error(e))?;
                out.push((
                    key.value(),
                    self.decode("outbox", key.value(), value.value())?,
                ));
            }
            Ok(out)
        })
    }

    /// Removes a delivered notification.
    pub fn delivered(&self, id: u64) -> Result<(), StoreError> {
        self.write(|txn| {
            txn.open_table(OUTBOX)?.remove(id)?;
            Ok(())
        })
    }
}

fn next_sequence(txn: &redb::WriteTransaction, name: &str) -> Result<u64, redb::Error> {
    let mut table = txn.open_table(SEQUENCES)?;
    let next = table.get(name)?.map_or(1, |v| v.value() + 1);
    table.insert(name, next)?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl LocalStore {
        /// One tick, as `durable::Store::commit_tick` writes it.
        fn commit_tick(&self, tick: TickWrite<'_>) -> Result<Vec<AuditEntry>, StoreError> {
            Ok(self.commit_ticks(vec![tick])?.pop().unwrap_or_default())
        }
    }
    use crate::controller::record::{AuditKind, OperatorCommand};

    fn command(fleet: &str) -> QueuedCommand {
        QueuedCommand {
            id: 0,
            fleet: fleet.into(),
            command: OperatorCommand::Abort { cluster: None },
            operator: "test".into(),
            accepted_at: 1,
            uid: None,
        }
    }

    #[test]
    fn commands_survive_reopening_until_a_tick_consumes_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let id = {
            let store = LocalStore::open(&path, OpenMode::Existing).unwrap().0;
            store.enqueue(command("payments")).unwrap().id
        };
        let store = LocalStore::open(&path, OpenMode::Existing).unwrap().0;
        let pending = store.pending_commands().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, id);
        store
            .commit_tick(TickWrite {
                consumed: vec![id],
                audit: vec![AuditEntry {
                    operator: Some("test".into()),
                    ..AuditEntry::new(5, "payments", "r", AuditKind::Command, None, "abort".into())
                }],
                ..TickWrite::default()
            })
            .unwrap();
        drop(store);
        let store = LocalStore::open(&path, OpenMode::Existing).unwrap().0;
        assert!(store.pending_commands().unwrap().is_empty());
        let audit = store.audit(Some("payments"), 0).unwrap();
        assert_eq!(audit.len(), 1);
        assert_eq!(audit[0].seq, 1);
        assert!(store.audit(Some("other"), 0).unwrap().is_empty());
    }

    #[test]
    fn the_ticks_of_a_pass_are_written_together_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(&dir.path().join("s.redb"), OpenMode::Existing)
            .unwrap()
            .0;
        let entry = |fleet: &str| {
            AuditEntry::new(
                5,
                fleet,
                "r",
                AuditKind::Command,
                None,
                format!("{fleet} ticked"),
            )
        };
        let audits = store
            .commit_ticks(vec![
                TickWrite {
                    audit: vec![entry("a"), entry("a")],
                    ..TickWrite::default()
                },
                TickWrite::default(),
                TickWrite {
                    audit: vec![entry("b")],
                    ..TickWrite::default()
                },
            ])
            .unwrap();
        let seqs: Vec<Vec<u64>> = audits
            .iter()
            .map(|a| a.iter().map(|e| e.seq).collect())
            .collect();
        assert_eq!(seqs, vec![vec![1, 2], vec![], vec![3]]);
        let logged: Vec<String> = store
            .audit(None, 0)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect();
        assert_eq!(logged, ["a ticked", "a ticked", "b ticked"]);
    }

    #[test]
    fn plot_histories_are_written_with_the_tick_and_read_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let store = LocalStore::open(&path, OpenMode::Existing).unwrap().0;
            // A store that never had one reads as empty.
            assert!(store.plots().unwrap().is_empty());
            store
                .commit_tick(TickWrite {
                    plots: vec![("payments\u{0}eu".into(), b"{\"weight\":[]}".to_vec())],
                    ..TickWrite::default()
                })
                .unwrap();
        }
        let store = LocalStore::open(&path, OpenMode::Existing).unwrap().0;
        assert_eq!(
            store.plots().unwrap(),
            vec![("payments\u{0}eu".to_owned(), b"{\"weight\":[]}".to_vec())]
        );
    }

    #[test]
    fn the_outbox_keeps_notifications_until_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(&dir.path().join("s.redb"), OpenMode::Existing)
            .unwrap()
            .0;
        let n = Notification {
            event: "fleet-halted".into(),
            id: String::new(),
            fleet: "f".into(),
            revision: "r".into(),
            cluster: None,
            metric: None,
            value: None,
            message: "m".into(),
            time: 0,
        };
        store
            .commit_tick(TickWrite {
                notifications: vec![n.clone(), n],
                ..TickWrite::default()
            })
            .unwrap();
        let outbox = store.outbox().unwrap();
        assert_eq!(outbox.len(), 2);
        store.delivered(outbox[0].0).unwrap();
        assert_eq!(store.outbox().unwrap().len(), 1);
    }

    fn refusal(path: &Path, mode: OpenMode) -> String {
        match LocalStore::open(path, mode) {
            Ok(_) => panic!("{} was opened", path.display()),
            Err(e @ StoreError::Refused { .. }) => e.to_string(),
            Err(other) => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn an_absent_store_is_created_and_an_empty_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (_, created) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        assert!(created, "absent: a first start creates it");
        let (_, created) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        assert!(!created);
        let empty = dir.path().join("empty.redb");
        std::fs::write(&empty, b"").unwrap();
        let why = refusal(&empty, OpenMode::Existing);
        assert!(
            why.contains("empty (0 bytes)") && why.contains("--init-store"),
            "{why}"
        );
        assert_eq!(
            std::fs::metadata(&empty).unwrap().len(),
            0,
            "nothing written"
        );
        let (store, created) = LocalStore::open(&empty, OpenMode::Init).unwrap();
        assert!(created);
        assert_eq!(store.schema().unwrap(), SCHEMA);
    }

    /// A record that cannot be decoded is an error naming its table, key and field.
    #[test]
    fn a_corrupt_record_is_named_with_its_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (store, _) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        store.enqueue(command("payments")).unwrap();
        store
            .write(|txn| {
                txn.open_table(COMMANDS)?
                    .insert(2, br#"{"id": 2, "fleet": 7}"#.as_slice())?;
                Ok(())
            })
            .unwrap();
        let why = store.pending_commands().unwrap_err().to_string();
        assert!(
            why.contains("state.redb: corrupt record commands/2 at fleet: invalid type"),
            "{why}"
        );
    }

    #[test]
    fn init_never_replaces_a_store_that_holds_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (store, _) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        store.enqueue(command("payments")).unwrap();
        drop(store);
        let why = refusal(&path, OpenMode::Init);
        assert!(why.contains("already holds state"), "{why}");
        let (store, _) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        assert_eq!(
            store.pending_commands().unwrap().len(),
            1,
            "the state is intact"
        );
    }

    #[test]
    fn truncated_garbled_and_foreign_files_are_refused_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let (store, _) = LocalStore::open(&path, OpenMode::Existing).unwrap();
        for _ in 0..20 {
            store.enqueue(command("payments")).unwrap();
        }
        drop(store);
        let whole = std::fs::read(&path).unwrap();
        for (name, bytes) in [
            ("truncated-header", whole[..100].to_vec()),
            ("truncated-half", whole[..whole.len() / 2].to_vec()),
            ("garbled", {
                let mut b = whole.clone();
                for (i, x) in b.iter_mut().enumerate().skip(64) {
                    *x ^= (i as u8).wrapping_mul(31) | 1;
                }
                b
            }),
            ("text", b"fleets: []\n".to_vec()),
        ] {
            let bad = dir.path().join(format!("{name}.redb"));
            std::fs::write(&bad, &bytes).unwrap();
            match LocalStore::open(&bad, OpenMode::Existing) {
                // A file redb can still read (its last good commit) is not refused, but must
                // then answer without panicking.
                Ok((store, created)) => {
                    assert!(!created, "{name}");
                    let _ = store.fleets();
                    let _ = store.pending_commands();
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(text.contains(&bad.display().to_string()), "{name}: {text}");
                }
            }
        }
        let text = dir.path().join("text.redb");
        assert!(refusal(&text, OpenMode::Existing).contains("not a readable Flotilla store"));
        let foreign = dir.path().join("foreign.redb");
        {
            let db = Database::create(&foreign).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(TableDefinition::<&str, u64>::new("other"))
                .unwrap()
                .insert("x", 1)
                .unwrap();
            txn.commit().unwrap();
        }
        let why = refusal(&foreign, OpenMode::Existing);
        assert!(
            why.contains("not a Flotilla store") && why.contains("other"),
            "{why}"
        );
    }

    #[test]
    fn a_store_of_the_release_before_versioning_is_upgraded_at_open_and_a_newer_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.redb");
        {
            let db = Database::create(&old).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(FLEETS).unwrap();
            txn.open_table(COMMANDS).unwrap();
            txn.open_table(AUDIT).unwrap();
            txn.open_table(OUTBOX).unwrap();
            txn.open_table(SEQUENCES).unwrap();
            txn.commit().unwrap();
        }
        let (store, created) = LocalStore::open(&old, OpenMode::Existing).unwrap();
        assert!(!created);
        assert_eq!(
            store.schema().unwrap(),
            SCHEMA,
            "stamped with this release's version"
        );
        store
            .write(|txn| {
                txn.open_table(META)?.insert("schema", SCHEMA + 1)?;
                Ok(())
            })
            .unwrap();
        drop(store);
        let why = refusal(&old, OpenMode::Existing);
        assert!(why.contains("newer Flotilla"), "{why}");
    }
}
