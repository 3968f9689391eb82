//! Where the controller's state is kept: [`Store`], one interface over a redb file
//! ([`LocalStore`]) and the hub's API server ([`HubStore`], `hub.state: hub`).

use std::path::Path;

use super::hub_store::HubStore;
use super::record::{AuditEntry, FleetRecord, Notification, QueuedCommand};
use super::store::{LocalStore, OpenMode, StoreError, TickWrite};

/// The controller's store: a redb file, or the hub's API server (`hub.state: hub`).
#[derive(Debug)]
pub enum Store {
    /// A redb file.
    Local(LocalStore),
    /// `FleetRolloutRecord` and `FleetCommand` objects in a hub.
    Hub(Box<HubStore>),
}

impl Store {
    /// Opens the redb store at `path` ([`LocalStore::open`]).
    pub fn open(path: &Path, mode: OpenMode) -> Result<(Store, bool), StoreError> {
        LocalStore::open(path, mode).map(|(store, created)| (Store::Local(store), created))
    }

    /// Keeps the newest `kept` audit entries of a local store (0: every one); a state in the hub
    /// keeps its own bound per fleet.
    pub fn keep_audit(&mut self, kept: u64) {
        if let Store::Local(store) = self {
            store.keep_audit(kept);
        }
    }

    /// The schema version of the state.
    pub fn schema(&self) -> Result<u64, StoreError> {
        match self {
            Store::Local(store) => store.schema(),
            Store::Hub(_) => Ok(super::hub_store::SCHEMA),
        }
    }

    /// Every fleet record.
    pub fn fleets(&self) -> Result<Vec<FleetRecord>, StoreError> {
        match self {
            Store::Local(store) => store.fleets(),
            Store::Hub(store) => store.fleets(),
        }
    }

    /// Queues a command; it is durable when this returns.
    pub fn enqueue(&self, command: QueuedCommand) -> Result<QueuedCommand, StoreError> {
        match self {
            Store::Local(store) => store.enqueue(command),
            Store::Hub(store) => store.enqueue(command),
        }
    }

    /// Commands not yet applied, oldest first.
    pub fn pending_commands(&self) -> Result<Vec<QueuedCommand>, StoreError> {
        match self {
            Store::Local(store) => store.pending_commands(),
            Store::Hub(store) => store.pending_commands(),
        }
    }

    /// Writes one tick atomically ([`Store::commit_ticks`]).
    pub fn commit_tick(&self, tick: TickWrite<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.commit_ticks(vec![tick])?.pop().unwrap_or_default())
    }

    /// Writes the ticks of one pass: in a redb file in one transaction, in a hub each fleet's
    /// atomically. Returns each tick's audit entries with their sequence numbers, in order.
    pub fn commit_ticks(
        &self,
        ticks: Vec<TickWrite<'_>>,
    ) -> Result<Vec<Vec<AuditEntry>>, StoreError> {
        match self {
            Store::Local(store) => store.commit_ticks(ticks),
            Store::Hub(store) => store.commit_ticks(ticks),
        }
    }

    /// The plot histories (none kept in a hub).
    pub fn plots(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        match self {
            Store::Local(store) => store.plots(),
            Store::Hub(_) => Ok(Vec::new()),
        }
    }

    /// The sequence number of the newest audit entry (0: none yet).
    pub fn newest_audit(&self) -> Result<u64, StoreError> {
        match self {
            Store::Local(store) => store.newest_audit(),
            Store::Hub(store) => Ok(store.newest_audit()),
        }
    }

    /// The audit log of a fleet (all fleets with `None`), from sequence `since` on.
    pub fn audit(&self, fleet: Option<&str>, since: u64) -> Result<Vec<AuditEntry>, StoreError> {
        match self {
            Store::Local(store) => store.audit(fleet, since),
            Store::Hub(store) => Ok(store.audit(fleet, since)),
        }
    }

    /// Notifications waiting for delivery, oldest first.
    pub fn outbox(&self) -> Result<Vec<(u64, Notification)>, StoreError> {
        match self {
            Store::Local(store) => store.outbox(),
            Store::Hub(store) => Ok(store.outbox()),
        }
    }

    /// Removes a delivered notification.
    pub fn delivered(&self, id: u64) -> Result<(), StoreError> {
        match self {
            Store::Local(store) => store.delivered(id),
            Store::Hub(store) => store.delivered(id),
        }
    }
}
