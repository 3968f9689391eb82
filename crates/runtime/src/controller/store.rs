//! The controller's durable state in one redb file: fleet records, the operator command queue,
//! the audit log and the notification outbox.
//!
//! # Invariants
//! - A tick's new fleet record, the commands it consumed, its audit entries and its
//!   notifications are written in one transaction ([`Store::commit_tick`]), before any of its
//!   actions run: a crash either loses the whole tick (it is recomputed) or none of it.
//! - An accepted command is committed before the API answers, and deleted only with the tick
//!   that applied it: exactly once.
//! - Notifications leave the outbox only once delivered (or given up on): at least once.
//!
//! redb was chosen for an ACID, single-file, pure-Rust store with no server and crash-safe
//! commits (copy-on-write B-trees with a checksummed commit slot).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::record::{AuditEntry, FleetRecord, Notification, QueuedCommand};

const FLEETS: TableDefinition<&str, &[u8]> = TableDefinition::new("fleets");
const COMMANDS: TableDefinition<u64, &[u8]> = TableDefinition::new("commands");
const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
const SEQUENCES: TableDefinition<&str, u64> = TableDefinition::new("sequences");

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
    #[error("store {path}: corrupt record: {source}")]
    Codec {
        /// The store file.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// The controller's store.
pub struct Store {
    db: Database,
    path: String,
}

impl std::fmt::Debug for Store {
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
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        let db = Database::create(path).map_err(|e| StoreError::Database {
            path: name.clone(),
            source: e.into(),
        })?;
        let store = Store { db, path: name };
        store.write(|txn| {
            txn.open_table(FLEETS)?;
            txn.open_table(COMMANDS)?;
            txn.open_table(AUDIT)?;
            txn.open_table(OUTBOX)?;
            txn.open_table(SEQUENCES)?;
            Ok(())
        })?;
        Ok(store)
    }

    fn db_error(&self, source: impl Into<redb::Error>) -> StoreError {
        StoreError::Database {
            path: self.path.clone(),
            source: source.into(),
        }
    }

    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(value).map_err(|source| StoreError::Codec {
            path: self.path.clone(),
            source,
        })
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, StoreError> {
        serde_json::from_slice(bytes).map_err(|source| StoreError::Codec {
            path: self.path.clone(),
            source,
        })
    }

    fn write<T>(
        &self,
        body: impl FnOnce(&redb::WriteTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.db_error(e))?;
        let value = body(&txn).map_err(|e| self.db_error(e))?;
        txn.commit().map_err(|e| self.db_error(e))?;
        Ok(value)
    }

    /// Every fleet record.
    pub fn fleets(&self) -> Result<Vec<FleetRecord>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
        let table = txn.open_table(FLEETS).map_err(|e| self.db_error(e))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.db_error(e))? {
            let (_, value) = entry.map_err(|e| self.db_error(e))?;
            out.push(self.decode(value.value())?);
        }
        Ok(out)
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
        let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
        let table = txn.open_table(COMMANDS).map_err(|e| self.db_error(e))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.db_error(e))? {
            let (_, value) = entry.map_err(|e| self.db_error(e))?;
            out.push(self.decode(value.value())?);
        }
        Ok(out)
    }

    /// Writes one tick atomically: the record, the consumed commands, audit and notifications.
    /// Returns the audit entries with their sequence numbers.
    pub fn commit_tick(&self, tick: TickWrite<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        let record = tick.record.map(|r| self.encode(r)).transpose()?;
        let mut audit = tick.audit;
        let notifications: Vec<Vec<u8>> = tick
            .notifications
            .iter()
            .map(|n| self.encode(n))
            .collect::<Result<_, _>>()?;
        let mut encoded_audit = Vec::new();
        let audit = self.write(|txn| {
            if let (Some(bytes), Some(r)) = (&record, tick.record) {
                txn.open_table(FLEETS)?
                    .insert(r.name.as_str(), bytes.as_slice())?;
            }
            {
                let mut commands = txn.open_table(COMMANDS)?;
                for id in &tick.consumed {
                    commands.remove(*id)?;
                }
            }
            for entry in audit.iter_mut() {
                entry.seq = next_sequence(txn, "audit")?;
                // Plain data with string keys: serializing cannot fail.
                let bytes = serde_json::to_vec(entry).expect("an audit entry serializes");
                encoded_audit.push((entry.seq, bytes));
            }
            {
                let mut table = txn.open_table(AUDIT)?;
                for (seq, bytes) in &encoded_audit {
                    table.insert(*seq, bytes.as_slice())?;
                }
            }
            {
                let mut outbox = txn.open_table(OUTBOX)?;
                for bytes in &notifications {
                    let id = next_sequence(txn, "outbox")?;
                    outbox.insert(id, bytes.as_slice())?;
                }
            }
            Ok(audit)
        })?;
        Ok(audit)
    }

    /// The audit log of a fleet (all fleets with `None`), from sequence `since` on.
    pub fn audit(&self, fleet: Option<&str>, since: u64) -> Result<Vec<AuditEntry>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
        let table = txn.open_table(AUDIT).map_err(|e| self.db_error(e))?;
        let mut out = Vec::new();
        for entry in table.range(since..).map_err(|e| self.db_error(e))? {
            let (_, value) = entry.map_err(|e| self.db_error(e))?;
            let entry: AuditEntry = self.decode(value.value())?;
            if fleet.is_none_or(|f| f == entry.fleet) {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Notifications waiting for delivery, oldest first.
    pub fn outbox(&self) -> Result<Vec<(u64, Notification)>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.db_error(e))?;
        let table = txn.open_table(OUTBOX).map_err(|e| self.db_error(e))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.db_error(e))? {
            let (key, value) = entry.map_err(|e| self.db_error(e))?;
            out.push((key.value(), self.decode(value.value())?));
        }
        Ok(out)
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
    use crate::controller::record::OperatorCommand;

    fn command(fleet: &str) -> QueuedCommand {
        QueuedCommand {
            id: 0,
            fleet: fleet.into(),
            command: OperatorCommand::Abort { cluster: None },
            operator: "test".into(),
            accepted_at: 1,
        }
    }

    #[test]
    fn commands_survive_reopening_until_a_tick_consumes_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let id = {
            let store = Store::open(&path).unwrap();
            store.enqueue(command("payments")).unwrap().id
        };
        let store = Store::open(&path).unwrap();
        let pending = store.pending_commands().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, id);
        store
            .commit_tick(TickWrite {
                consumed: vec![id],
                audit: vec![AuditEntry {
                    seq: 0,
                    time: 5,
                    fleet: "payments".into(),
                    revision: "r".into(),
                    kind: "command".into(),
                    cluster: None,
                    message: "abort".into(),
                    evidence: vec![],
                    operator: Some("test".into()),
                }],
                ..TickWrite::default()
            })
            .unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert!(store.pending_commands().unwrap().is_empty());
        let audit = store.audit(Some("payments"), 0).unwrap();
        assert_eq!(audit.len(), 1);
        assert_eq!(audit[0].seq, 1);
        assert!(store.audit(Some("other"), 0).unwrap().is_empty());
    }

    #[test]
    fn the_outbox_keeps_notifications_until_delivered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb")).unwrap();
        let n = Notification {
            event: "fleet-halted".into(),
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
}
