//! Rules for `kind: Scenario`: its clusters' traffic, fault windows and timeline of events,
//! checked against the Fleet it simulates.

use std::collections::BTreeSet;

use super::{Index, Sink};
use crate::manifest::LoadedManifest;
use crate::spec::scenario::{
    EventCommand, FaultTime, RelativeTime, Scenario, ScenarioEvent, VersionProfile,
};

pub(super) fn check_scenario(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    scenario: &Scenario,
) {
    let spec = &scenario.spec;
    // The Fleet simulated: the named FleetRollout's, or the only one's.
    let fleet_rollout = match &spec.fleet_rollout {
        Some(name) => index
            .fleet_rollouts
            .iter()
            .find(|(_, f)| f.metadata.name.as_deref() == Some(name.as_str())),
        None => match index.fleet_rollouts.as_slice() {
            [one] => Some(one),
            _ => None,
        },
    };
    let fleet = fleet_rollout.and_then(|(_, f)| index.fleets.get(f.spec.fleet.as_str()));
    let clusters: Option<BTreeSet<&str>> =
        fleet.map(|(_, f)| f.spec.clusters.iter().map(|c| c.name.as_str()).collect());
    let waves = match (fleet_rollout, fleet) {
        (Some((_, r)), Some((_, f))) => Some(r.waves(&f.spec.clusters).len()),
        _ => None,
    };
    let known = |name: &str| clusters.as_ref().is_none_or(|c| c.contains(name));
    for (i, cluster) in spec.clusters.iter().enumerate() {
        let path = format!("spec.clusters[{i}]");
        if !known(&cluster.name) {
            sink.error(
                loaded,
                "scenario/traffic",
                format!("{path}.name"),
                format!("cluster {:?} is not in the Fleet", cluster.name),
            );
        }
        if !(cluster.requests_per_second.is_finite() && cluster.requests_per_second >= 0.0) {
            sink.error(
                loaded,
                "scenario/traffic",
                format!("{path}.requestsPerSecond"),
                "requestsPerSecond must be a number of at least 0",
            );
        }
        check_profile(sink, loaded, &format!("{path}.stable"), &cluster.stable);
        if cluster.stable.traffic_share.is_some() {
            sink.error(
                loaded,
                "scenario/traffic",
                format!("{path}.stable.trafficShare"),
                "trafficShare is the share of the canary's weight that reaches the canary: set it on `canary`",
            );
        }
        if let Some(canary) = &cluster.canary {
            check_profile(sink, loaded, &format!("{path}.canary"), canary);
            if let Some(share) = canary.traffic_share
                && !(0.0..=1.0).contains(&share)
            {
                sink.error(
                    loaded,
                    "scenario/traffic",
                    format!("{path}.canary.trafficShare"),
                    format!("trafficShare {share} is not within 0 and 1"),
                );
            }
            if canary.traffic_share.is_some() && canary.requests_per_second.is_some() {
                sink.error(
                    loaded,
                    "scenario/traffic",
                    format!("{path}.canary"),
                    "set trafficShare or requestsPerSecond, not both",
                );
            }
        }
        for (image, profile) in &cluster.images {
            let at = format!("{path}.images.{image}");
            check_profile(sink, loaded, &at, profile);
            if profile.traffic_share.is_some() || profile.requests_per_second.is_some() {
                sink.error(
                    loaded,
                    "scenario/traffic",
                    at,
                    "an image's profile is its behaviour only; traffic is set on `stable` and `canary`",
                );
            }
        }
        for (j, fault) in cluster.faults.iter().enumerate() {
            let at = format!("{path}.faults[{j}]");
            if fault.to.is_some() && fault.length.is_some() {
                sink.error(
                    loaded,
                    "scenario/faults",
                    at.clone(),
                    "set `to` or `for`, not both",
                );
            }
            for (field, time) in [("from", Some(&fault.from)), ("to", fault.to.as_ref())] {
                let Some(time) = time else { continue };
                let duration = match time {
                    FaultTime::At(d)
                    | FaultTime::Relative(RelativeTime::AfterClusterStart(d))
                    | FaultTime::Relative(RelativeTime::AfterWaveStart(d)) => d,
                };
                if duration.as_millis().is_none() {
                    sink.error(
                        loaded,
                        "scenario/faults",
                        format!("{at}.{field}"),
                        "a scenario's times take no placeholder",
                    );
                }
            }
            if let (Some(to), from) = (&fault.to, &fault.from)
                && same_anchor(from, to)
                && to.resolve(Some(0), Some(0)) <= from.resolve(Some(0), Some(0))
            {
                sink.error(
                    loaded,
                    "scenario/faults",
                    format!("{at}.to"),
                    "the window ends before it starts",
                );
            }
        }
    }
    let duration = spec.duration.as_ref().and_then(|d| d.as_millis());
    let mut joined: BTreeSet<&str> = BTreeSet::new();
    let mut left: BTreeSet<&str> = BTreeSet::new();
    for (i, event) in spec.events.iter().enumerate() {
        check_event(
            sink,
            loaded,
            &format!("spec.events[{i}]"),
            event,
            duration,
            waves,
            &known,
            (&mut joined, &mut left),
        );
    }
}

fn same_anchor(a: &FaultTime, b: &FaultTime) -> bool {
    matches!(
        (a, b),
        (FaultTime::At(_), FaultTime::At(_))
            | (
                FaultTime::Relative(RelativeTime::AfterClusterStart(_)),
                FaultTime::Relative(RelativeTime::AfterClusterStart(_))
            )
            | (
                FaultTime::Relative(RelativeTime::AfterWaveStart(_)),
                FaultTime::Relative(RelativeTime::AfterWaveStart(_))
            )
    )
}

fn check_profile(sink: &mut Sink, loaded: &LoadedManifest, path: &str, profile: &VersionProfile) {
    if !(0.0..=1.0).contains(&profile.error_rate) {
        sink.error(
            loaded,
            "scenario/traffic",
            format!("{path}.errorRate"),
            format!(
                "errorRate {} is not a fraction within 0 and 1",
                profile.error_rate
            ),
        );
    }
    let latency = &profile.latency;
    if !(latency.p50 > 0.0 && latency.p95 >= latency.p50 && latency.p95.is_finite()) {
        sink.error(
            loaded,
            "scenario/traffic",
            format!("{path}.latency"),
            "latency needs 0 < p50 <= p95 (seconds)",
        );
    }
    if let Some(rps) = profile.requests_per_second
        && !(rps.is_finite() && rps >= 0.0)
    {
        sink.error(
            loaded,
            "scenario/traffic",
            format!("{path}.requestsPerSecond"),
            "requestsPerSecond must be a number of at least 0",
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn check_event<'a>(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    event: &'a ScenarioEvent,
    duration: Option<u64>,
    waves: Option<usize>,
    known: &dyn Fn(&str) -> bool,
    (joined, left): (&mut BTreeSet<&'a str>, &mut BTreeSet<&'a str>),
) {
    match event.at.as_millis() {
        None => sink.error(
            loaded,
            "scenario/events",
            format!("{path}.at"),
            "a scenario's times take no placeholder",
        ),
        Some(at) if duration.is_some_and(|d| at > d) => sink.error(
            loaded,
            "scenario/events",
            format!("{path}.at"),
            format!(
                "the event at {} comes after the scenario's duration ({}): it would never happen",
                event.at,
                crate::spec::common::format_duration(duration.unwrap_or(0))
            ),
        ),
        Some(_) => {}
    }
    let kinds = event.kinds();
    if kinds.len() != 1 {
        sink.error(
            loaded,
            "scenario/events",
            path.to_owned(),
            if kinds.is_empty() {
                "an event needs one of revision, command, join or leave".to_owned()
            } else {
                format!(
                    "an event is one of revision, command, join or leave; this one sets {}",
                    kinds.join(" and ")
                )
            },
        );
        return;
    }
    let command = event.command;
    let takes = |field: &str| {
        matches!(
            (command, field),
            (Some(EventCommand::Promote), "cluster" | "wave" | "full")
                | (Some(EventCommand::Abort), "cluster")
        )
    };
    for (field, set) in [
        ("cluster", event.cluster.is_some()),
        ("wave", event.wave.is_some()),
        ("full", event.full.is_some()),
    ] {
        if set && !takes(field) {
            let what = command.map_or_else(|| kinds[0].to_owned(), |c| c.verb().to_owned());
            sink.error(
                loaded,
                "scenario/events",
                format!("{path}.{field}"),
                format!("{what} takes no {field}"),
            );
        }
    }
    if let Some(cluster) = &event.cluster
        && !known(cluster)
    {
        sink.error(
            loaded,
            "scenario/events",
            format!("{path}.cluster"),
            format!("cluster {cluster:?} is not in the Fleet"),
        );
    }
    if event.cluster.is_some() && event.wave.is_some() {
        sink.error(
            loaded,
            "scenario/events",
            format!("{path}.wave"),
            "promote one cluster or one wave, not both",
        );
    }
    if let (Some(wave), Some(count)) = (event.wave, waves)
        && (wave == 0 || wave > count)
    {
        sink.error(
            loaded,
            "scenario/events",
            format!("{path}.wave"),
            format!("wave {wave} does not exist (the fleet has waves 1 to {count})"),
        );
    }
    if let Some(revision) = &event.revision
        && revision.image.trim().is_empty()
    {
        sink.error(
            loaded,
            "scenario/events",
            format!("{path}.revision.image"),
            "a revision needs an image",
        );
    }
    if let Some(name) = &event.join {
        if !known(name) {
            sink.error(
                loaded,
                "scenario/events",
                format!("{path}.join"),
                format!("cluster {name:?} is not in the Fleet (a joining cluster is declared there, absent until it joins)"),
            );
        } else if !joined.insert(name) {
            sink.error(
                loaded,
                "scenario/events",
                format!("{path}.join"),
                format!("cluster {name:?} joins twice"),
            );
        }
    }
    if let Some(name) = &event.leave {
        if !known(name) {
            sink.error(
                loaded,
                "scenario/events",
                format!("{path}.leave"),
                format!("cluster {name:?} is not in the Fleet"),
            );
        } else if !left.insert(name) {
            sink.error(
                loaded,
                "scenario/events",
                format!("{path}.leave"),
                format!("cluster {name:?} leaves twice"),
            );
        }
    }
}
