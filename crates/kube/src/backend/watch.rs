//! What the backend reads of a cluster between calls: the Argo-labelled Rollouts and the
//! Rollouts' ReplicaSets of one namespace, kept by watches (one per kind and namespace, shared by
//! every Rollout driven there), and Flotilla's own writes laid over them until the watch has
//! seen each.
//!
//! A watch's copy is used only while the watch is live (listed, and no error since); otherwise
//! the backend reads the API server directly, so a cluster whose API server is gone is
//! unreachable at once, never judged on a stale copy. A write's result is used over the copy
//! while the copy is older than it (resourceVersions compared as the integers kube-apiserver's
//! etcd storage issues), so Flotilla's own status write is never read back as its absence, which
//! would look like an operator's patch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector as reflect};

use super::objects::{HASH_LABEL, INSTANCE, INSTANCE_LABEL};

/// How long a write is laid over a watch that has not shown it: past this the watch is taken
/// as it is (an object deleted meanwhile is not kept alive by an old write).
const LAID_FOR: Duration = Duration::from_secs(10);

/// How long the API server keeps one watch request open (seconds): below the client's read
/// timeout (15 s), so that a quiet watch is never cut as a dead connection.
const WATCH_FOR: u32 = 10;

/// One kind's watch: its store, and whether it is live.
struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    live: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Watched<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watches of one namespace of one cluster.
pub struct Watches {
    namespace: String,
    rollouts: Watched<DynamicObject>,
    replica_sets: Watched<ReplicaSet>,
}

/// Starts the watch of `api` (objects matching `labels`), kept in a store; `strip` drops each
/// object's `managedFields` (the Rollouts keep theirs: commands read who patched the status).
fn start<K>(
    api: Api<K>,
    labels: &str,
    dyntype: K::DynamicType,
    strip: bool,
    what: String,
) -> Watched<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = Writer::new(dyntype);
    let store = writer.as_reader();
    let live = Arc::new(AtomicBool::new(false));
    // The API server ends each watch within WATCH_FOR (the watcher then resumes from the last
    // resourceVersion, not a new list), inside the client's read timeout: a watch that stays
    // silent longer than that is taken as lost, never as a quiet cluster.
    let config = watcher::Config::default().labels(labels).timeout(WATCH_FOR);
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .modify(move |object: &mut K| {
            if strip {
                object.meta_mut().managed_fields = None;
            }
        });
    let flag = live.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(reflect(writer, stream));
        let mut said = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => flag.store(false, Ordering::SeqCst),
                Ok(Event::InitApply(_)) => {}
                Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                    flag.store(true, Ordering::SeqCst);
                    said = false;
                }
                Err(error) => {
                    flag.store(false, Ordering::SeqCst);
                    if !said {
                        tracing::debug!(watch = %what, %error, "a watch failed; read directly until it is back");
                        said = true;
                    }
                }
            }
        }
    });
    Watched { store, live, task }
}

impl Watches {
    /// Starts the watches of `namespace` through `client` (in the background: until they have
    /// listed, reads go to the API server); `cluster` names them in the logs.
    pub fn start(client: &kube::Client, namespace: &str, cluster: &str) -> Watches {
        let resource = super::rollout_resource();
        let rollouts = start(
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource),
            &format!("{INSTANCE_LABEL}={INSTANCE}"),
            resource,
            false,
            format!("{cluster}/{namespace}/rollouts"),
        );
        let replica_sets = start(
            Api::<ReplicaSet>::namespaced(client.clone(), namespace),
            HASH_LABEL,
            (),
            true,
            format!("{cluster}/{namespace}/replicasets"),
        );
        Watches {
            namespace: namespace.to_owned(),
            rollouts,
            replica_sets,
        }
    }

    /// The Rollout `name` as the watch has it; None when the watch is not live or has no such
    /// Rollout (then it is read directly: not labelled, or just made).
    pub fn rollout(&self, name: &str) -> Option<Arc<DynamicObject>> {
        if !self.rollouts.live.load(Ordering::SeqCst) {
            return None;
        }
        let key = ObjectRef::new_with(name, super::rollout_resource()).within(&self.namespace);
        self.rollouts.store.get(&key)
    }

    /// Whether the Rollouts' watch is live (then a Rollout it does not have is either absent or
    /// not shown yet).
    pub fn rollouts_live(&self) -> bool {
        self.rollouts.live.load(Ordering::SeqCst)
    }

    /// The ReplicaSets a controller reference to `uid` owns, as the watch has them; None when
    /// the watch is not live.
    pub fn replica_sets(&self, uid: &str) -> Option<Vec<Arc<ReplicaSet>>> {
        if !self.replica_sets.live.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.replica_sets.store.state_filter(|rs| owned_by(rs, uid)))
    }
}

/// Whether `rs` is controlled by the object of `uid`.
pub fn owned_by(rs: &ReplicaSet, uid: &str) -> bool {
    rs.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

/// An object's resourceVersion as the integer kube-apiserver issues (None: absent or not one).
fn version(meta: &kube::core::ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// Whether the `written` copy is newer than the `watched` one (a copy without an integer
/// resourceVersion is never taken over the watch).
fn newer(written: &kube::core::ObjectMeta, watched: Option<&kube::core::ObjectMeta>) -> bool {
    match (version(written), watched) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(w), Some(seen)) => version(seen).is_none_or(|s| s < w),
    }
}

/// Flotilla's writes not yet seen by the watches: the Rollout's last, and each ReplicaSet's.
#[derive(Default)]
pub struct Laid {
    rollout: Option<(Instant, DynamicObject)>,
    replica_sets: BTreeMap<String, (Instant, ReplicaSet)>,
}

impl Laid {
    /// Lays the Rollout as a write returned it.
    pub fn rollout_written(&mut self, rollout: DynamicObject) {
        self.rollout = Some((Instant::now(), rollout));
    }

    /// Lays a ReplicaSet as a write returned it.
    pub fn replica_set_written(&mut self, rs: ReplicaSet) {
        if let Some(name) = rs.metadata.name.clone() {
            self.replica_sets.insert(name, (Instant::now(), rs));
        }
    }

    /// The Rollout as Flotilla last wrote it, when that was within the last [`LAID_FOR`]: read
    /// while the watch has not shown it yet (one Flotilla just made).
    pub fn unseen_rollout(&self) -> Option<DynamicObject> {
        self.rollout
            .as_ref()
            .filter(|(at, _)| at.elapsed() < LAID_FOR)
            .map(|(_, written)| written.clone())
    }

    /// Forgets the Rollout's write (a direct read is newer than any).
    pub fn forget_rollout(&mut self) {
        self.rollout = None;
    }

    /// The Rollout: `watched` unless Flotilla wrote a newer one not yet seen.
    pub fn rollout(&mut self, watched: Arc<DynamicObject>) -> DynamicObject {
        match self.rollout.take() {
            Some((at, written))
                if at.elapsed() < LAID_FOR && newer(&written.metadata, Some(&watched.metadata)) =>
            {
                self.rollout = Some((at, written.clone()));
                written
            }
            _ => (*watched).clone(),
        }
    }

    /// The ReplicaSets of the Rollout of `uid`: `watched`, each replaced by a newer write not
    /// yet seen, and those written but not yet seen at all.
    pub fn replica_sets(&mut self, watched: Vec<Arc<ReplicaSet>>, uid: &str) -> Vec<ReplicaSet> {
        self.replica_sets
            .retain(|_, (at, rs)| at.elapsed() < LAID_FOR && owned_by(rs, uid));
        let mut out: BTreeMap<String, ReplicaSet> = BTreeMap::new();
        for rs in watched {
            let name = rs.metadata.name.clone().unwrap_or_default();
            match self.replica_sets.get(&name) {
                Some((_, written)) if newer(&written.metadata, Some(&rs.metadata)) => {
                    out.insert(name, written.clone());
                }
                Some(_) => {
                    self.replica_sets.remove(&name);
                    out.insert(name, (*rs).clone());
                }
                None => {
                    out.insert(name, (*rs).clone());
                }
            }
        }
        for (name, (_, written)) in &self.replica_sets {
            out.entry(name.clone()).or_insert_with(|| written.clone());
        }
        out.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn rs(name: &str, version: &str, replicas: i32) -> ReplicaSet {
        let mut rs = ReplicaSet::default();
        rs.metadata.name = Some(name.to_owned());
        rs.metadata.resource_version = Some(version.to_owned());
        rs.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        rs.spec = Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
            replicas: Some(replicas),
            ..Default::default()
        });
        rs
    }

    fn rollout(version: &str, step: i64) -> DynamicObject {
        let mut object = DynamicObject::new("r", &super::super::rollout_resource());
        object.metadata.resource_version = Some(version.to_owned());
        object.data = serde_json::json!({"status": {"currentStepIndex": step}});
        object
    }

    fn replicas(sets: &[ReplicaSet], name: &str) -> Option<i32> {
        sets.iter()
            .find(|rs| rs.metadata.name.as_deref() == Some(name))
            .and_then(|rs| rs.spec.as_ref()?.replicas)
    }

    #[test]
    fn a_write_is_read_back_until_the_watch_has_seen_it() {
        let mut laid = Laid::default();
        laid.rollout_written(rollout("12", 2));
        // The watch is behind: the write is read.
        let read = laid.rollout(Arc::new(rollout("10", 1)));
        assert_eq!(read.data["status"]["currentStepIndex"], 2);
        // The watch caught up, or went past (another writer): the watch is read.
        assert_eq!(
            laid.rollout(Arc::new(rollout("12", 2))).data["status"]["currentStepIndex"],
            2
        );
        assert_eq!(
            laid.rollout(Arc::new(rollout("10", 1))).data["status"]["currentStepIndex"],
            1,
            "once seen, the write is forgotten"
        );
        laid.rollout_written(rollout("20", 3));
        assert_eq!(
            laid.rollout(Arc::new(rollout("25", 0))).data["status"]["currentStepIndex"],
            0,
            "a newer change by someone else wins"
        );
    }

    #[test]
    fn a_rollout_just_made_is_read_back_before_the_watch_shows_it() {
        let mut laid = Laid::default();
        assert!(laid.unseen_rollout().is_none());
        laid.rollout_written(rollout("7", 0));
        assert_eq!(
            laid.unseen_rollout().map(|r| r.metadata.resource_version),
            Some(Some("7".to_owned()))
        );
        laid.forget_rollout();
        assert!(laid.unseen_rollout().is_none(), "a direct read replaces it");
    }

    #[test]
    fn replica_sets_made_or_scaled_are_read_back_until_seen() {
        let mut laid = Laid::default();
        laid.replica_set_written(rs("r-new", "31", 1));
        laid.replica_set_written(rs("r-old", "30", 0));
        let watched = vec![Arc::new(rs("r-old", "29", 1))];
        let sets = laid.replica_sets(watched, "u1");
        assert_eq!(replicas(&sets, "r-new"), Some(1), "made, not yet watched");
        assert_eq!(
            replicas(&sets, "r-old"),
            Some(0),
            "scaled, the watch behind"
        );
        let watched = vec![
            Arc::new(rs("r-old", "30", 0)),
            Arc::new(rs("r-new", "33", 1)),
        ];
        let sets = laid.replica_sets(watched, "u1");
        assert_eq!(sets.len(), 2);
        assert!(laid.replica_sets.is_empty(), "both seen, both forgotten");
        // Another Rollout's ReplicaSets are not this one's.
        laid.replica_set_written(rs("r-new", "40", 2));
        assert!(laid.replica_sets(Vec::new(), "u2").is_empty());
    }

    #[test]
    fn a_version_that_is_not_an_integer_leaves_the_watch_in_charge() {
        let mut laid = Laid::default();
        laid.rollout_written(rollout("abc", 2));
        assert_eq!(
            laid.rollout(Arc::new(rollout("10", 1))).data["status"]["currentStepIndex"],
            1
        );
    }
}
