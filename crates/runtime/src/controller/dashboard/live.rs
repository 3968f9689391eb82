//! The dashboard's live pages: each page's parts (elements with ids) re-rendered from the
//! views at every publish, a sequence number per page bumped when they change, and the changed
//! parts broadcast to the pages' event streams.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::page;
use crate::controller::record::{FleetSummary, FleetView};

/// One live page's parts at its sequence number.
#[derive(Default)]
struct LivePage {
    seq: u64,
    parts: Vec<(String, String)>,
    body: String,
}

/// A change to a live page.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// The page: `""` for the list, else the fleet's name.
    pub page: String,
    /// Its new sequence number.
    pub seq: u64,
    /// The page's parts changed shape: load a snapshot.
    pub layout: bool,
    /// The parts that changed: (element id, outer HTML).
    pub parts: Vec<(String, String)>,
}

/// The live pages and their event channel.
pub struct Live {
    base: String,
    pages: Mutex<BTreeMap<String, LivePage>>,
    events: broadcast::Sender<Arc<LiveEvent>>,
}

impl Live {
    /// Live pages for a dashboard under `base`.
    pub fn new(base: &str) -> Live {
        Live {
            base: base.to_owned(),
            pages: Mutex::new(BTreeMap::new()),
            events: broadcast::channel(256).0,
        }
    }

    /// The path the dashboard is served under.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Re-renders every page from the views just published; sends what changed.
    pub fn update(&self, list: &[FleetSummary], fleets: &[&FleetView]) {
        let mut pages = self.pages.lock().expect("live lock");
        let rows = page::list_rows(&self.base, list);
        let body = page::list_body(&rows);
        self.replace(&mut pages, "", rows, body);
        for view in fleets {
            let parts = page::fleet_parts(&self.base, view);
            let body = page::fleet_body(view, &parts);
            self.replace(&mut pages, &view.name, parts, body);
        }
        pages.retain(|name, _| name.is_empty() || fleets.iter().any(|f| &f.name == name));
    }

    fn replace(
        &self,
        pages: &mut BTreeMap<String, LivePage>,
        name: &str,
        parts: Vec<(String, String)>,
        body: String,
    ) {
        let page = pages.entry(name.to_owned()).or_default();
        if page.body == body {
            return;
        }
        let layout = page.parts.len() != parts.len()
            || page.parts.iter().zip(&parts).any(|(a, b)| a.0 != b.0);
        let changed: Vec<(String, String)> = if layout {
            Vec::new()
        } else {
            parts
                .iter()
                .zip(&page.parts)
                .filter(|(new, old)| new.1 != old.1)
                .map(|(new, _)| new.clone())
                .collect()
        };
        page.seq += 1;
        page.parts = parts;
        page.body = body;
        // Nobody listening is fine.
        let _ = self.events.send(Arc::new(LiveEvent {
            page: name.to_owned(),
            seq: page.seq,
            // A change outside the parts (a wave folding open) reloads too.
            layout: layout || changed.is_empty(),
            parts: changed,
        }));
    }

    /// A page's sequence number and body.
    pub fn snapshot(&self, name: &str) -> Option<(u64, String)> {
        let pages = self.pages.lock().expect("live lock");
        pages.get(name).map(|p| (p.seq, p.body.clone()))
    }

    /// The events, for a stream.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.events.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::record::{ClusterView, WaveView};

    fn view(status: &str, message: &str) -> FleetView {
        FleetView {
            name: "payments".into(),
            revision: "2".into(),
            image: "app:2".into(),
            previous_image: "app:1".into(),
            phase: "Progressing".into(),
            message: message.into(),
            wave: 1,
            paused: false,
            git: None,
            waves: vec![WaveView {
                index: 1,
                started_at: Some(0),
                completed_at: None,
                clusters: ["a", "b"]
                    .iter()
                    .map(|n| ClusterView {
                        name: (*n).into(),
                        status: status.into(),
                        reason: String::new(),
                        reachable: true,
                        rollout_phase: "Progressing".into(),
                        rollout_message: String::new(),
                        step: Some("1/3".into()),
                        weights: Some((20, 80)),
                        desired_weight: Some(20),
                        stable_version: Some("1".into()),
                        current_version: Some("2".into()),
                        failure: None,
                        started_at: Some(0),
                        decided_at: None,
                        analysis: Vec::new(),
                        drift: None,
                        condition: None,
                    })
                    .collect(),
                lockstep: false,
                barrier: None,
            }],
            errors: Vec::new(),
        }
    }

    #[test]
    fn a_change_sends_only_the_parts_that_changed_with_the_next_sequence_number() {
        let live = Live::new("/d");
        let mut events = live.subscribe();
        let first = view("Progressing", "");
        live.update(&[], &[&first]);
        let _list = events.try_recv().unwrap();
        let e = events.try_recv().unwrap();
        assert_eq!((e.seq, e.layout), (1, true));
        // The same views again: nothing.
        live.update(&[], &[&first]);
        assert!(events.try_recv().is_err());
        let mut second = first.clone();
        second.waves[0].clusters[1].status = "Validated".into();
        live.update(&[], &[&second]);
        let e = events.try_recv().unwrap();
        assert_eq!(e.seq, 2);
        assert!(!e.layout);
        let ids: Vec<&str> = e.parts.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(ids, ["w-1", "c-b"]);
        let (seq, body) = live.snapshot("payments").unwrap();
        assert_eq!(seq, 2);
        assert!(body.contains("id=\"c-b\" data-status=\"Validated\""));
        // A fleet that is gone is gone from the pages.
        live.update(&[], &[]);
        assert!(live.snapshot("payments").is_none());
    }
}
