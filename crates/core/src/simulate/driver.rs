//! The timeline of one simulated run: the scenario's events (revisions, operator commands,
//! clusters joining and leaving), its faults and its synthetic traffic, around the real fleet
//! machine, on virtual time.

use std::collections::{BTreeMap, BTreeSet};

use super::traffic::{self, Bucket};
use super::{
    BarrierReport, ClusterReport, EventCommand, EventReport, FailureReport, FaultKind, Inputs,
    Report, ScenarioCluster, ScenarioEvent, SimulationError, VersionProfile, WaveReport,
    builtin_read, reach,
};
use crate::analysis::Outcome;
use crate::fleet::{
    ClusterMeasurement, ClusterObservation, ClusterOutcome, ClusterOverlay, ClusterStatus,
    Decision, FleetCommand, FleetEvent, FleetMachine, FleetPhase, FleetPlan, FleetSpecs,
    FleetState,
};
use crate::rng::Rng;
use crate::rollout::{Action, Observed, ReplicaCounts, RevisionNumber, Weights, template_hash};
use crate::spec::rollout::Rollout;
use crate::time::{Millis, seconds};

/// History kept beyond the longest reference a metric reads (runs older than this read a
/// truncated history).
const REFERENCE_HISTORY_MS: u64 = 2 * 3_600_000;

/// What one tick of a run showed: tests check the machine's invariants with it, benchmarks
/// time ticks with it (the core itself reads no clock).
pub struct TickView<'a> {
    /// Virtual time (ms).
    pub now: Millis,
    /// The actions the machine decided at this tick, per cluster, in order.
    pub actions: &'a [(String, Action)],
    /// The fleet's state after the tick.
    pub state: &'a FleetState,
    /// The plan (it changes when a cluster joins or leaves).
    pub plan: &'a FleetPlan,
    /// The image of every pod-template hash the run has known.
    pub images: &'a BTreeMap<String, String>,
    /// The pod-template hash of the fleet revision in flight.
    pub revision_hash: &'a str,
    /// The events applied at this tick (before the machine's tick).
    pub events: &'a [EventReport],
    /// The decisions the machine made at this tick.
    pub decisions: &'a [FleetEvent],
}

/// One simulated cluster (what it reports lives in the observations, kept from tick to tick).
struct World<'a> {
    profile: &'a ScenarioCluster,
    rng: Rng,
    weights: Weights,
    stable_revision: Option<RevisionNumber>,
    /// The pod-template hash of each revision the cluster was asked to run.
    hashes: BTreeMap<RevisionNumber, String>,
    buckets: traffic::Series,
    bad_requests: f64,
    new_requests: f64,
}

impl<'a> World<'a> {
    fn new(profile: &'a ScenarioCluster, seed: u64, index: usize, keep: usize) -> World<'a> {
        World {
            profile,
            rng: Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (index as u64 + 1)),
            weights: Weights {
                canary: 0,
                stable: 100,
            },
            stable_revision: None,
            hashes: BTreeMap::new(),
            buckets: traffic::Series::new(keep),
            bad_requests: 0.0,
            new_requests: 0.0,
        }
    }

    /// The image its stable runs.
    fn stable_image(&self, images: &BTreeMap<String, String>, previous_image: &str) -> String {
        self.image_of(self.stable_revision, images, previous_image)
            .to_owned()
    }

    /// The image of a revision (the previous image for one the run does not know).
    fn image_of<'i>(
        &self,
        revision: Option<RevisionNumber>,
        images: &'i BTreeMap<String, String>,
        previous_image: &'i str,
    ) -> &'i str {
        revision
            .and_then(|r| self.hashes.get(&r))
            .and_then(|h| images.get(h))
            .map_or(previous_image, String::as_str)
    }
}

/// How `image` behaves in `cluster`: the previous image as the stable, an image the cluster
/// lists under `images` as listed, any other as the canary (the new version).
fn behaviour<'p>(
    cluster: &'p ScenarioCluster,
    image: &str,
    previous_image: &str,
) -> &'p VersionProfile {
    if image == previous_image {
        return &cluster.stable;
    }
    cluster
        .images
        .get(image)
        .or(cluster.canary.as_ref())
        .unwrap_or(&cluster.stable)
}

/// The first container's image of a spec.
fn image(rollout: &Rollout) -> String {
    rollout.first_image().unwrap_or_default().to_owned()
}

/// The plan of the clusters present: the Fleet's clusters and the FleetRollout's list entries of
/// the others are left out.
fn plan_of(inputs: &Inputs, present: &BTreeSet<String>) -> Result<FleetPlan, SimulationError> {
    let mut fleet = inputs.fleet.clone();
    fleet.spec.clusters.retain(|c| present.contains(&c.name));
    let mut fleet_rollout = inputs.fleet_rollout.clone();
    if let Some(list) = fleet_rollout.spec.waves.list.as_mut() {
        list.retain(|e| present.contains(&e.cluster));
    }
    FleetPlan::resolve(&fleet, &fleet_rollout, &inputs.templates).map_err(|e| SimulationError(e.0))
}

/// Runs one simulation with a seed, calling `observe` after every tick. With `keep_decisions`
/// false each tick's decisions are shown to `observe` and dropped, as the daemon hands them to
/// its audit log: the report's `decisions` hold only those made after the last tick (its
/// lockstep barriers are still reported).
pub(super) fn simulate(
    inputs: &Inputs,
    seed: u64,
    keep_decisions: bool,
    observe: &mut dyn FnMut(&TickView<'_>),
) -> Result<Report, SimulationError> {
    let spec = &inputs.scenario.spec;
    let mut previous = inputs.rollout.clone();
    let container = previous
        .spec
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .and_then(|s| s.containers.first_mut())
        .ok_or_else(|| SimulationError("the Rollout has no container".into()))?;
    container.image = Some(spec.previous_image.clone());
    let previous_image = spec.previous_image.as_str();
    let tick = spec
        .tick
        .as_ref()
        .and_then(|d| d.as_millis())
        .unwrap_or(10_000)
        .max(1000) as Millis;
    let duration = spec
        .duration
        .as_ref()
        .and_then(|d| d.as_millis())
        .unwrap_or(12 * 3_600_000) as Millis;
    let profiles: BTreeMap<&str, &ScenarioCluster> =
        spec.clusters.iter().map(|c| (c.name.as_str(), c)).collect();
    // Every cluster that is ever in the plan needs traffic.
    let everyone: BTreeSet<String> = inputs
        .fleet
        .spec
        .clusters
        .iter()
        .map(|c| c.name.clone())
        .collect();
    for name in plan_of(inputs, &everyone)?.clusters.keys() {
        if !profiles.contains_key(name.as_str()) {
            return Err(SimulationError(format!(
                "the scenario gives no traffic for cluster {name:?}"
            )));
        }
    }
    // The timeline, in time order (events at the same time in file order).
    let mut events: Vec<(Millis, &ScenarioEvent)> = spec
        .events
        .iter()
        .map(|e| (e.at.as_millis().unwrap_or(0) as Millis, e))
        .collect();
    events.sort_by_key(|(at, _)| *at);
    let joining: BTreeSet<&str> = events
        .iter()
        .filter_map(|(_, e)| e.join.as_deref())
        .collect();
    let mut present: BTreeSet<String> = everyone
        .iter()
        .filter(|c| !joining.contains(c.as_str()))
        .cloned()
        .collect();
    let plan = plan_of(inputs, &present)?;
    // Every spec the run knows, by pod-template hash (what a revision number runs).
    let mut images: BTreeMap<String, String> = BTreeMap::new();
    images.insert(template_hash(&previous), image(&previous));
    images.insert(template_hash(&inputs.rollout), image(&inputs.rollout));
    let mut specs = FleetSpecs {
        previous: previous.clone(),
        next: inputs.rollout.clone(),
        history: Vec::new(),
    };
    let mut next_hash: String;
    // The decisions, as the machine made them; the durable change Git would get, taken as
    // committed at once (the revision, and the clusters pinned then).
    let mut decisions: Vec<FleetEvent> = Vec::new();
    let mut committed: (Option<String>, BTreeSet<String>) = (None, BTreeSet::new());
    // The longest window any metric reads bounds the traffic history kept; a metric that reads
    // before its run's start (a reference window, a sequential test) keeps two hours more, and
    // the traffic before the rollout is simulated for that long.
    let (window, reference) = reach(&inputs.templates);
    let (window, warmup) = if reference > 0 {
        let history = window.max(reference) + REFERENCE_HISTORY_MS;
        (history, window.max(reference) as Millis)
    } else {
        (window, 0)
    };
    let keep = (window as Millis / tick + 2) as usize;
    let mut machine = FleetMachine::new(plan, &specs.revisions(), None);
    // A cluster's generator is seeded from its place among all the Fleet's clusters, so that
    // one joining later does not change the others' traffic.
    let seed_index: BTreeMap<&str, usize> = everyone
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut worlds: BTreeMap<String, World> = present
        .iter()
        .map(|name| {
            (
                name.clone(),
                World::new(
                    profiles[name.as_str()],
                    seed,
                    seed_index[name.as_str()],
                    keep,
                ),
            )
        })
        .collect();
    let observation_of = |world: &World| ClusterObservation {
        reachable: true,
        observed: Observed {
            replicas: BTreeMap::new(),
            weights: Some(world.weights),
            analysis: BTreeMap::new(),
            spec_replicas: None,
        },
        diverged: false,
    };
    // What each cluster reports, updated in place as actions apply (never rebuilt).
    let mut observations: BTreeMap<String, ClusterObservation> = worlds
        .iter()
        .map(|(name, world)| (name.clone(), observation_of(world)))
        .collect();
    // The stable version's traffic before the rollout, for the metrics that read a reference.
    let mut at = -warmup;
    while at < 0 {
        for world in worlds.values_mut() {
            let profile = world.profile;
            let total = profile.requests_per_second * tick as f64 / 1000.0;
            let noise = profile.noise.unwrap_or(0.05);
            let stable = Bucket::generate(total, &profile.stable, noise, &mut world.rng);
            world.buckets.push(at, stable, Bucket::default());
        }
        at += tick;
    }
    let mut pending: Vec<ClusterMeasurement> = Vec::new();
    let mut reports: Vec<EventReport> = Vec::new();
    let mut departed: Vec<ClusterReport> = Vec::new();
    let mut next_event = 0;
    let mut first_starts: BTreeMap<String, (String, Millis)> = BTreeMap::new();
    let mut now: Millis = 0;
    loop {
        // The events due, before this tick's reconcile.
        let first_report = reports.len();
        let mut commands = Vec::new();
        while let Some((at, event)) = events.get(next_event).copied()
            && at <= now
        {
            next_event += 1;
            let (kind, message) = if let Some(revision) = &event.revision {
                let overlay = ClusterOverlay {
                    args: revision.args.clone(),
                    env: revision.env.clone(),
                    ..ClusterOverlay::default()
                };
                let spec = overlay.apply(&specs.next, Some(&revision.image));
                images.insert(template_hash(&spec), revision.image.clone());
                let (old, phase) = (machine.state.revision.clone(), machine.state.phase);
                let message = if machine.change_spec(&mut specs, spec) {
                    format!(
                        "revision {} ({}) supersedes {old} ({})",
                        machine.state.revision,
                        revision.image,
                        format!("{phase:?}").to_lowercase()
                    )
                } else {
                    format!(
                        "{} is the revision in flight: nothing changes",
                        revision.image
                    )
                };
                ("revision", message)
            } else if let Some(command) = event.command {
                let mut message = command.verb().to_owned();
                match command {
                    EventCommand::Promote => commands.push(FleetCommand::Promote {
                        wave: event.wave,
                        full: event.full.unwrap_or(false),
                        cluster: event.cluster.clone(),
                    }),
                    EventCommand::Abort => commands.push(FleetCommand::Abort {
                        cluster: event.cluster.clone(),
                    }),
                    EventCommand::Retry => commands.push(FleetCommand::Retry),
                    EventCommand::Pause => commands.push(FleetCommand::Pause),
                    EventCommand::Resume => commands.push(FleetCommand::Resume),
                    EventCommand::Undo => {
                        let target = specs.undo_target(None).expect("a previous spec");
                        let back_to = image(&target);
                        message = if machine.change_spec(&mut specs, target) {
                            format!("undo: revision {} ({back_to})", machine.state.revision)
                        } else {
                            "undo: nothing to undo".into()
                        };
                    }
                }
                if let Some(wave) = event.wave {
                    message.push_str(&format!(" wave {wave}"));
                }
                if let Some(cluster) = &event.cluster {
                    message.push_str(&format!(" {cluster}"));
                }
                if event.full == Some(true) {
                    message.push_str(" --full");
                }
                ("command", message)
            } else if let Some(name) = &event.join {
                present.insert(name.clone());
                machine.replan(plan_of(inputs, &present)?);
                // It runs what every cluster ran before the rollout: adopted from it.
                machine.adopt(
                    name,
                    &previous,
                    format!("{name} joins running {previous_image}: adopted on it"),
                );
                let world = World::new(
                    profiles[name.as_str()],
                    seed,
                    seed_index[name.as_str()],
                    keep,
                );
                observations.insert(name.clone(), observation_of(&world));
                worlds.insert(name.clone(), world);
                let wave = machine.plan.wave_of(name).map_or(0, |w| w + 1);
                ("join", format!("{name} joins the Fleet (wave {wave})"))
            } else if let Some(name) = &event.leave {
                let was = machine.state.clusters.get(name).map(|c| c.status);
                if let (Some(world), Some(state)) =
                    (worlds.remove(name), machine.state.clusters.get(name))
                {
                    departed.push(ClusterReport {
                        name: name.clone(),
                        wave: machine.plan.wave_of(name).map_or(0, |w| w + 1),
                        outcome: "Left".into(),
                        started_at: seconds(state.started_at),
                        decided_at: seconds(Some(now)),
                        reason: format!("left the Fleet ({:?})", state.status),
                        failure: None,
                        bad_requests: world.bad_requests.round() as u64,
                        new_requests: world.new_requests.round() as u64,
                        image: Some(world.stable_image(&images, previous_image)),
                    });
                }
                observations.remove(name);
                present.remove(name);
                machine.replan(plan_of(inputs, &present)?);
                (
                    "leave",
                    format!(
                        "{name} leaves the Fleet{}",
                        was.map_or(String::new(), |s| format!(" ({s:?})"))
                    ),
                )
            } else {
                ("none", "an event of no kind (lint rejects it)".to_owned())
            };
            reports.push(EventReport {
                at: at as f64 / 1000.0,
                applied_at: now as f64 / 1000.0,
                kind: kind.into(),
                message,
            });
        }
        // When a cluster's fault windows are open: its own start and its wave's, on the
        // revision in flight.
        // A cluster's fault anchor is when it first started the revision in flight: a retry
        // restarts it, but does not replay its faults.
        let revision = &machine.state.revision;
        for (name, cluster) in &machine.state.clusters {
            if let Some(at) = cluster.started_at {
                match first_starts.get_mut(name) {
                    Some((anchored, _)) if anchored == revision => {}
                    Some(anchor) => *anchor = (revision.clone(), at),
                    None => {
                        first_starts.insert(name.clone(), (revision.clone(), at));
                    }
                }
            }
        }
        let fault_active = |machine: &FleetMachine, name: &str, kind: FaultKind| {
            let Some(profile) = profiles.get(name) else {
                return false;
            };
            // Most clusters have no fault of this kind: nothing to anchor.
            if !profile.faults.iter().any(|f| f.kind == kind) {
                return false;
            }
            let cluster_start = first_starts
                .get(name)
                .filter(|(revision, _)| *revision == machine.state.revision)
                .map(|(_, at)| *at);
            let wave_start = machine
                .plan
                .wave_of(name)
                .and_then(|w| machine.state.wave_started_at.get(w).copied().flatten());
            profile
                .faults
                .iter()
                .any(|f| f.kind == kind && f.active(now, cluster_start, wave_start))
        };
        // Answer last tick's measurements from the traffic seen since.
        let outcomes: Vec<ClusterOutcome> = std::mem::take(&mut pending)
            .into_iter()
            .filter(|m| m.wave().is_some() || worlds.contains_key(&m.cluster))
            .map(|m| {
                // A cluster's run reads its own traffic; a wave-level analysis reads the wave's
                // validated clusters' traffic as one.
                let members: Vec<&str> = match m.wave() {
                    Some(wave) => machine
                        .plan
                        .waves
                        .get(wave)
                        .into_iter()
                        .flatten()
                        .filter(|c| {
                            machine.state.clusters.get(c.as_str()).map(|s| s.status)
                                == Some(ClusterStatus::Validated)
                                && worlds.contains_key(*c)
                        })
                        .map(String::as_str)
                        .collect(),
                    None => vec![m.cluster.as_str()],
                };
                let outage = members
                    .iter()
                    .find(|c| fault_active(&machine, c, FaultKind::MetricsOutage));
                let outcome = if let Some(cluster) = outage {
                    Outcome::Error(format!(
                        "metrics provider of {cluster} unreachable (simulated outage)"
                    ))
                } else {
                    // Answered one tick after it was asked: a read of "now" reads the traffic
                    // seen since; a read of a past window (a reference) reads that window.
                    let shift = now - m.request.at;
                    let answer = |read: &crate::analysis::MeasureRequest| {
                        let at = if read.at == m.request.at {
                            read.at + shift
                        } else {
                            read.at
                        };
                        builtin_read(read, at, members.iter().map(|c| &worlds[*c].buckets))
                    };
                    crate::analysis::compare::measure_with(&m.request, answer)
                };
                ClusterOutcome {
                    cluster: m.cluster,
                    run: m.run,
                    metric_index: m.request.metric_index,
                    outcome,
                }
            })
            .collect();
        for (name, observation) in observations.iter_mut() {
            observation.reachable = !fault_active(&machine, name, FaultKind::Unreachable);
        }
        next_hash = template_hash(&specs.next);
        let mut output = machine.tick(&specs.revisions(), &observations, outcomes, &commands, now);
        if let Some(change) = machine.durable_change(&specs, committed.0.as_deref(), &committed.1) {
            if committed.0.as_deref() != Some(change.revision.as_str()) {
                committed.1.clear();
            }
            committed.0 = Some(change.revision.clone());
            committed
                .1
                .extend(change.failed.iter().map(|f| f.name.clone()));
            machine.record_durable(&change);
        }
        for (cluster, action) in &output.actions {
            let observation = observations.get_mut(cluster).expect("known cluster");
            if !observation.reachable {
                continue;
            }
            let world = worlds.get_mut(cluster).expect("known cluster");
            let observed = &mut observation.observed;
            match action {
                Action::Scale {
                    revision,
                    hash,
                    replicas,
                } => {
                    let counts = ReplicaCounts {
                        replicas: *replicas,
                        ready: *replicas,
                        available: *replicas,
                    };
                    observed.replicas.insert(*revision, counts);
                    world.hashes.insert(*revision, hash.clone());
                }
                Action::SetWeight { canary, stable } => {
                    world.weights = Weights {
                        canary: *canary,
                        stable: *stable,
                    };
                    observed.weights = Some(world.weights);
                }
                Action::MarkStable { revision } => world.stable_revision = Some(*revision),
                _ => {}
            }
        }
        pending = output.measurements;
        // Traffic for the next bucket.
        // The same clusters in the same (name) order: walked together, not looked up.
        debug_assert!(worlds.keys().eq(observations.keys()));
        for (world, observation) in worlds.values_mut().zip(observations.values()) {
            let profile = world.profile;
            // The canary subset runs the newest revision with replicas that is not the stable.
            let canary_revision = observation
                .observed
                .replicas
                .iter()
                .rev()
                .find(|(r, c)| c.replicas > 0 && Some(**r) != world.stable_revision)
                .map(|(r, _)| *r);
            let stable_image = world.image_of(world.stable_revision, &images, previous_image);
            let canary_image = match canary_revision {
                Some(r) => world.image_of(Some(r), &images, previous_image),
                None => stable_image,
            };
            let weights = world.weights;
            let share =
                f64::from(weights.canary) / f64::from((weights.canary + weights.stable).max(1));
            let total = profile.requests_per_second * tick as f64 / 1000.0;
            let per_tick = |rps: f64| rps * tick as f64 / 1000.0;
            let canary_traffic = profile.canary.as_ref();
            let canary_requests = match canary_traffic.and_then(|c| c.requests_per_second) {
                Some(rps) if weights.canary > 0 => per_tick(rps),
                Some(_) => 0.0,
                None => total * share * canary_traffic.and_then(|c| c.traffic_share).unwrap_or(1.0),
            };
            let stable_requests = match profile.stable.requests_per_second {
                Some(rps) if weights.stable > 0 => per_tick(rps),
                Some(_) => 0.0,
                // Its share, and what the canary's route lost.
                None => {
                    let routed = total * share;
                    let lost = if canary_traffic.and_then(|c| c.requests_per_second).is_some() {
                        routed
                    } else {
                        routed * (1.0 - canary_traffic.and_then(|c| c.traffic_share).unwrap_or(1.0))
                    };
                    total * (1.0 - share) + lost
                }
            };
            let objective = profile.latency_objective.or(spec.latency_objective);
            let noise = profile.noise.unwrap_or(0.05);
            let stable_behaviour = *behaviour(profile, stable_image, previous_image);
            let canary_behaviour = *behaviour(profile, canary_image, previous_image);
            let rng = &mut world.rng;
            let stable_bucket = Bucket::generate(stable_requests, &stable_behaviour, noise, rng);
            let canary_bucket = Bucket::generate(canary_requests, &canary_behaviour, noise, rng);
            // Bad requests of the new version: wherever it serves traffic.
            for (bucket, image) in [
                (&stable_bucket, stable_image),
                (&canary_bucket, canary_image),
            ] {
                if image != previous_image {
                    world.bad_requests += bucket.bad_requests(objective);
                    world.new_requests += f64::from(bucket.requests);
                }
            }
            world.buckets.push(now, stable_bucket, canary_bucket);
        }
        observe(&TickView {
            now,
            actions: &output.actions,
            state: &machine.state,
            plan: &machine.plan,
            images: &images,
            revision_hash: &next_hash,
            events: &reports[first_report..],
            decisions: &output.events,
        });
        keep_tick(&mut decisions, &mut output.events, keep_decisions);
        // Done when the timeline is over, the fleet reached a final phase and nothing is still
        // moving toward it (a rolled-back cluster's traffic is back on its stable; paused
        // clusters stay as they are).
        let finished = next_event == events.len()
            && matches!(
                machine.state.phase,
                FleetPhase::Completed | FleetPhase::Halted | FleetPhase::Aborted
            )
            && machine
                .state
                .clusters
                .values()
                .all(|c| c.status != ClusterStatus::Progressing)
            && machine.state.clusters.iter().all(|(name, c)| {
                c.status != ClusterStatus::RolledBack || worlds[name].weights.canary == 0
            });
        if finished || now >= duration {
            break;
        }
        now += tick;
    }
    // Those made after the last tick (a durable change recorded as the run ends) were shown to
    // no observer: the report keeps them either way.
    let flushed = machine.flush_events(now);
    let after_last_tick = flushed.len();
    decisions.extend(flushed);
    let state = &machine.state;
    let plan = &machine.plan;
    let outcome = match state.phase {
        FleetPhase::Completed | FleetPhase::Halted | FleetPhase::Aborted => state.outcome(),
        _ => "Incomplete".to_owned(),
    };
    let waves = plan
        .waves
        .iter()
        .enumerate()
        .map(|(i, clusters)| WaveReport {
            index: i + 1,
            clusters: clusters.clone(),
            started_at: seconds(state.wave_started_at[i]),
            completed_at: seconds(state.wave_completed_at[i]),
            lockstep: plan.lockstep.get(i).copied().unwrap_or(false),
            barriers: barriers_of(&decisions, i + 1),
        })
        .collect();
    let mut clusters: Vec<ClusterReport> = plan
        .waves
        .iter()
        .enumerate()
        .flat_map(|(i, members)| members.iter().map(move |c| (i, c)))
        .map(|(wave, name)| {
            let cluster = &state.clusters[name];
            let world = &worlds[name];
            let outcome = match cluster.status {
                ClusterStatus::Validated => "Promoted",
                ClusterStatus::RolledBack => "RolledBack",
                ClusterStatus::Paused | ClusterStatus::Progressing => "Paused",
                ClusterStatus::Held => "Held",
                ClusterStatus::NotStarted => "NotStarted",
                ClusterStatus::Skipped => "Skipped",
                ClusterStatus::Pinned => "Pinned",
            };
            ClusterReport {
                name: name.clone(),
                wave: wave + 1,
                outcome: outcome.into(),
                started_at: seconds(cluster.started_at),
                decided_at: seconds(cluster.decided_at),
                reason: cluster.reason.clone(),
                failure: cluster.failure.as_ref().map(|f| FailureReport {
                    metric: f.metric.clone(),
                    value: f.value.clone(),
                    message: f.message.clone(),
                }),
                bad_requests: world.bad_requests.round() as u64,
                new_requests: world.new_requests.round() as u64,
                image: Some(world.stable_image(&images, previous_image)),
            }
        })
        .collect();
    clusters.extend(departed);
    Ok(Report {
        outcome: outcome.clone(),
        message: if outcome == "Incomplete" {
            format!("the simulated time ({} s) ran out first", duration / 1000)
        } else {
            state.message.clone()
        },
        waves,
        clusters,
        events: reports,
        decisions: if keep_decisions {
            decisions
        } else {
            let streamed = decisions.len() - after_last_tick;
            decisions.split_off(streamed)
        },
    })
}

/// Moves a tick's decisions to the run's: all of them, or (`all` false) only the lockstep
/// barriers the report names.
fn keep_tick(decisions: &mut Vec<FleetEvent>, tick: &mut Vec<FleetEvent>, all: bool) {
    if all {
        decisions.append(tick);
    } else {
        decisions.extend(
            tick.drain(..)
                .filter(|e| matches!(e.decision, Decision::BarrierPassed { .. })),
        );
    }
}

/// The lockstep barriers wave `wave` (1-based) passed, from the machine's decisions.
fn barriers_of(decisions: &[FleetEvent], wave: usize) -> Vec<BarrierReport> {
    decisions
        .iter()
        .filter_map(|event| match &event.decision {
            Decision::BarrierPassed {
                wave: w,
                step,
                steps,
                last_arrived,
                last_arrived_at,
                released,
                not_there,
            } if *w == wave => Some(BarrierReport {
                step: *step,
                steps: *steps,
                passed_at: seconds(Some(event.at)).unwrap_or_default(),
                last_arrived: last_arrived.clone(),
                last_arrived_at: seconds(*last_arrived_at),
                released: released.clone(),
                not_there: not_there.clone(),
            }),
            _ => None,
        })
        .collect()
}
