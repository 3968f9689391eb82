//! The ready endpoints of every subset, and the round robin that picks one of a subset's for
//! each attempt of a request.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwap;

/// The ready endpoints of one subset.
#[derive(Debug, Default)]
struct Endpoints {
    ready: ArcSwap<Vec<SocketAddr>>,
    next: AtomicUsize,
}

impl Endpoints {
    fn pick(&self, skip: &[SocketAddr]) -> Option<SocketAddr> {
        let ready = self.ready.load();
        if ready.is_empty() {
            return None;
        }
        for _ in 0..ready.len() {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
            if !skip.contains(&ready[i]) {
                return Some(ready[i]);
            }
        }
        None
    }
}

/// Every subset's ready endpoints. Read per request, written only when a subset is added: a
/// snapshot, not a lock.
#[derive(Debug)]
pub(super) struct SubsetEndpoints {
    subsets: ArcSwap<BTreeMap<String, Arc<Endpoints>>>,
}

impl SubsetEndpoints {
    /// These subsets, none with an endpoint.
    pub(super) fn new(subsets: &[String]) -> SubsetEndpoints {
        SubsetEndpoints {
            subsets: ArcSwap::from_pointee(
                subsets
                    .iter()
                    .map(|s| (s.clone(), Arc::new(Endpoints::default())))
                    .collect(),
            ),
        }
    }

    /// The subsets' names.
    pub(super) fn names(&self) -> Vec<String> {
        self.subsets.load().keys().cloned().collect()
    }

    /// Whether there is such a subset.
    pub(super) fn contains(&self, subset: &str) -> bool {
        self.subsets.load().contains_key(subset)
    }

    /// Adds a subset with no endpoints if it is new. Additions must not race: the caller
    /// serializes them.
    pub(super) fn add(&self, subset: &str) {
        if !self.contains(subset) {
            let mut map = self.subsets.load().as_ref().clone();
            map.insert(subset.to_owned(), Arc::new(Endpoints::default()));
            self.subsets.store(Arc::new(map));
        }
    }

    /// Replaces the ready endpoints of a subset (nothing when it is unknown).
    pub(super) fn set_ready(&self, subset: &str, ready: Vec<SocketAddr>) {
        if let Some(e) = self.of(subset) {
            e.ready.store(Arc::new(ready));
        }
    }

    /// The ready endpoints of a subset.
    pub(super) fn ready(&self, subset: &str) -> Vec<SocketAddr> {
        self.of(subset)
            .map(|e| e.ready.load().to_vec())
            .unwrap_or_default()
    }

    fn of(&self, subset: &str) -> Option<Arc<Endpoints>> {
        self.subsets.load().get(subset).cloned()
    }

    /// The next endpoint of `subset` not in `skip`; `None` when the subset has none left (or
    /// is unknown).
    pub(super) fn pick(&self, subset: &str, skip: &[SocketAddr]) -> Option<SocketAddr> {
        self.subsets.load().get(subset)?.pick(skip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_skips_endpoints_already_tried() {
        let e = Endpoints::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        e.ready.store(Arc::new(vec![a, b]));
        let picks: Vec<_> = (0..4).map(|_| e.pick(&[]).unwrap()).collect();
        assert_eq!(picks, [a, b, a, b]);
        assert_eq!(e.pick(&[a]), Some(b));
        assert!(e.pick(&[a, b]).is_none());
    }
}
