//! Rules for Fleets and FleetRollouts: structure, references, and the multi-cluster
//! anti-patterns of the seed articles (ungated waves, one big wave, one global threshold).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use regex::Regex;

use super::{Index, Sink, placeholders};
use crate::manifest::LoadedManifest;
use crate::spec::fleet::{Cluster, Fleet, FleetRollout, SelectorOperator};
use crate::spec::rollout::Rollout;

fn check_url(sink: &mut Sink, loaded: &LoadedManifest, path: String, url: &str) {
    // The authority runs from `://` to the first `/`, `?` or `#`; the host is what remains
    // after any `user:pass@`, before an optional `:port` (IPv6 hosts are bracketed).
    let valid = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .is_some_and(|rest| {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host_port = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host_port)| host_port);
            let (host, port) = match host_port.strip_prefix('[') {
                Some(bracketed) => match bracketed.split_once(']') {
                    Some((host, "")) => (host, None),
                    Some((host, after)) => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return false,
                    },
                    None => return false,
                },
                None => match host_port.split_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (host_port, None),
                },
            };
            let port_ok = port.is_none_or(|port| {
                port.bytes().all(|b| b.is_ascii_digit())
                    && port.parse::<u16>().is_ok_and(|port| port >= 1)
            });
            !host.is_empty() && port_ok
        });
    if !valid {
        sink.error(
            loaded,
            "fleet/endpoint-url",
            path,
            format!("{url:?} is not an http:// or https:// URL with a host"),
        );
    }
}

pub(super) fn check_fleet(sink: &mut Sink, loaded: &LoadedManifest, fleet: &Fleet) {
    let mut seen = BTreeSet::new();
    if fleet.spec.clusters.is_empty() {
        sink.error(
            loaded,
            "fleet/clusters",
            "spec.clusters",
            "a Fleet needs at least one cluster",
        );
    }
    for (i, cluster) in fleet.spec.clusters.iter().enumerate() {
        let path = format!("spec.clusters[{i}]");
        if cluster.name.trim().is_empty() {
            sink.error(
                loaded,
                "fleet/clusters",
                format!("{path}.name"),
                "a cluster needs a name",
            );
        } else if !seen.insert(cluster.name.as_str()) {
            sink.error(
                loaded,
                "fleet/clusters",
                format!("{path}.name"),
                format!("cluster name {:?} is used twice", cluster.name),
            );
        }
        match &cluster.endpoint {
            None => sink.warn(
                loaded,
                "fleet/endpoint",
                format!("{path}.endpoint"),
                format!(
                    "cluster {:?} has no endpoint: the controller cannot drive it",
                    cluster.name
                ),
            ),
            Some(endpoint) => match (&endpoint.agent, &endpoint.kubernetes) {
                (Some(_), Some(_)) => sink.error(
                    loaded,
                    "fleet/endpoint",
                    format!("{path}.endpoint"),
                    "set exactly one of agent and kubernetes",
                ),
                (None, None) => sink.error(
                    loaded,
                    "fleet/endpoint",
                    format!("{path}.endpoint"),
                    "set exactly one of agent and kubernetes",
                ),
                (Some(agent), None) => {
                    check_url(sink, loaded, format!("{path}.endpoint.agent"), agent)
                }
                (None, Some(kubernetes)) => {
                    if let Some(server) = &kubernetes.server {
                        check_url(
                            sink,
                            loaded,
                            format!("{path}.endpoint.kubernetes.server"),
                            server,
                        );
                    }
                }
            },
        }
        let kubernetes = cluster
            .endpoint
            .as_ref()
            .is_some_and(|e| e.agent.is_none() && e.kubernetes.is_some());
        let metrics = cluster.metrics.as_ref();
        if let Some(address) = metrics.and_then(|m| m.address.as_deref()) {
            check_url(sink, loaded, format!("{path}.metrics.address"), address);
        }
        if let Some(metrics) = metrics
            && metrics.address.is_none()
            && metrics.via.is_none()
        {
            sink.error(
                loaded,
                "fleet/kubernetes-metrics",
                format!("{path}.metrics"),
                format!(
                    "cluster {:?}: metrics sets neither address nor via; set metrics.address, or metrics.via: apiserver on a Kubernetes cluster, or remove the block",
                    cluster.name
                ),
            );
        } else if metrics.is_some_and(|m| m.via_apiserver()) && !kubernetes {
            sink.error(
                loaded,
                "fleet/kubernetes-metrics",
                format!("{path}.metrics.via"),
                format!(
                    "cluster {:?}: metrics.via: apiserver goes through a Kubernetes API server's service proxy, and this cluster has no kubernetes endpoint",
                    cluster.name
                ),
            );
        } else if metrics.is_none() && kubernetes {
            sink.warn(
                loaded,
                "fleet/kubernetes-metrics",
                path.clone(),
                format!(
                    "Kubernetes cluster {:?} has no metrics.address and no metrics.via: the controller runs its analysis from outside the cluster, where an in-cluster address written in a template (http://prometheus.monitoring:9090) cannot be reached; set metrics.address to an address the controller reaches (it replaces a Prometheus metric's address in the template), or metrics.via: apiserver to reach the template's in-cluster addresses through the cluster's API server",
                    cluster.name
                ),
            );
        }
    }
}

/// The waves a FleetRollout forms over a fleet: [`FleetRollout::waves`], kept at this path for
/// its callers.
pub fn waves_of(fleet_rollout: &FleetRollout, clusters: &[Cluster]) -> BTreeMap<u32, Vec<String>> {
    fleet_rollout.waves(clusters)
}

pub(super) fn check_fleet_rollout(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    fleet_rollout: &FleetRollout,
) {
    let spec = &fleet_rollout.spec;
    let fleet = index.fleets.get(spec.fleet.as_str()).map(|(_, f)| *f);
    if fleet.is_none() {
        sink.warn(
            loaded,
            "ref/fleet-not-found",
            "spec.fleet",
            format!(
                "Fleet {:?} is not among the linted files; cluster references cannot be checked",
                spec.fleet
            ),
        );
    }
    let rollout = index.rollouts.get(spec.rollout.as_str()).map(|(_, r)| *r);
    if rollout.is_none() {
        sink.warn(
            loaded,
            "ref/rollout-not-found",
            "spec.rollout",
            format!("Rollout {:?} is not among the linted files", spec.rollout),
        );
    }
    let clusters: &[Cluster] = fleet.map_or(&[], |f| f.spec.clusters.as_slice());
    let known: BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();

    match (&spec.waves.list, &spec.waves.steps) {
        (Some(_), Some(_)) | (None, None) => {
            sink.error(
                loaded,
                "fleet/waves",
                "spec.waves",
                "set exactly one of waves.list and waves.steps",
            );
        }
        (Some(list), None) => {
            if list.is_empty() {
                sink.error(
                    loaded,
                    "fleet/waves",
                    "spec.waves.list",
                    "the wave list is empty",
                );
            }
            let mut seen = BTreeSet::new();
            for (i, element) in list.iter().enumerate() {
                let path = format!("spec.waves.list[{i}]");
                if element.wave == 0 {
                    sink.error(
                        loaded,
                        "fleet/waves",
                        format!("{path}.wave"),
                        "waves are numbered from 1",
                    );
                }
                if !seen.insert(element.cluster.as_str()) {
                    sink.error(
                        loaded,
                        "fleet/waves",
                        format!("{path}.cluster"),
                        format!("cluster {:?} is listed twice", element.cluster),
                    );
                }
                if fleet.is_some() && !known.contains(element.cluster.as_str()) {
                    sink.error(
                        loaded,
                        "fleet/unknown-cluster",
                        format!("{path}.cluster"),
                        format!(
                            "cluster {:?} is not in Fleet {:?}",
                            element.cluster, spec.fleet
                        ),
                    );
                }
            }
            for cluster in clusters {
                if !seen.contains(cluster.name.as_str()) {
                    sink.warn(
                        loaded,
                        "fleet/untargeted-cluster",
                        "spec.waves.list",
                        format!(
                            "cluster {:?} is in no wave: it never receives this rollout",
                            cluster.name
                        ),
                    );
                }
            }
        }
        (None, Some(steps)) => {
            if steps.is_empty() {
                sink.error(
                    loaded,
                    "fleet/waves",
                    "spec.waves.steps",
                    "there are no wave steps",
                );
            }
            let mut taken = BTreeSet::new();
            for (i, step) in steps.iter().enumerate() {
                let path = format!("spec.waves.steps[{i}]");
                if step.max_update.is_some_and(|m| m.is_zero()) {
                    sink.error(
                        loaded,
                        "fleet/max-update",
                        format!("{path}.maxUpdate"),
                        "maxUpdate 0 would never update a cluster",
                    );
                }
                for (r, requirement) in step.match_expressions.iter().enumerate() {
                    let needs_values = matches!(
                        requirement.operator,
                        SelectorOperator::In | SelectorOperator::NotIn
                    );
                    if needs_values == requirement.values.is_empty() {
                        sink.error(
                            loaded,
                            "fleet/selector",
                            format!("{path}.matchExpressions[{r}].values"),
                            if needs_values {
                                "In and NotIn need at least one value"
                            } else {
                                "Exists and DoesNotExist take no values"
                            },
                        );
                    }
                }
                if fleet.is_some() {
                    let selected: Vec<&Cluster> = clusters
                        .iter()
                        .filter(|c| !taken.contains(c.name.as_str()) && step.matches(&c.labels))
                        .collect();
                    if selected.is_empty() {
                        sink.warn(
                            loaded,
                            "fleet/empty-wave",
                            path.clone(),
                            format!(
                                "wave {} selects no cluster (that an earlier wave did not take)",
                                i + 1
                            ),
                        );
                    }
                    taken.extend(selected.iter().map(|c| c.name.as_str()));
                }
            }
            for cluster in clusters {
                if !taken.contains(cluster.name.as_str()) {
                    sink.warn(
                        loaded,
                        "fleet/untargeted-cluster",
                        "spec.waves.steps",
                        format!(
                            "cluster {:?} is selected by no step: it never receives this rollout",
                            cluster.name
                        ),
                    );
                }
            }
        }
    }

    let mut overridden = BTreeSet::new();
    for (i, cluster_override) in spec.cluster_overrides.iter().enumerate() {
        let path = format!("spec.clusterOverrides[{i}].cluster");
        if !overridden.insert(cluster_override.cluster.as_str()) {
            sink.error(
                loaded,
                "fleet/overrides",
                path.clone(),
                format!("cluster {:?} is overridden twice", cluster_override.cluster),
            );
        }
        if fleet.is_some() && !known.contains(cluster_override.cluster.as_str()) {
            sink.error(
                loaded,
                "fleet/unknown-cluster",
                path,
                format!(
                    "cluster {:?} is not in Fleet {:?}",
                    cluster_override.cluster, spec.fleet
                ),
            );
        }
    }

    for (field, duration) in [
        ("bakeTime", &spec.bake_time),
        (
            "failurePolicy.unreachable.timeout",
            &spec
                .failure_policy
                .as_ref()
                .and_then(|p| p.unreachable.as_ref())
                .and_then(|u| u.timeout.clone()),
        ),
    ] {
        if let Some(crate::spec::Duration::Templated(text)) = duration {
            sink.error(loaded, "fleet/duration", format!("spec.{field}"), format!("{text:?} is not a duration: placeholders are only substituted inside analysis templates"));
        }
    }

    check_lockstep(
        sink,
        loaded,
        fleet_rollout,
        rollout,
        fleet.map(|_| clusters),
    );

    // Anti-patterns, which need the fleet's layout.
    let waves = fleet_rollout.waves(clusters);
    let targeted: Vec<&str> = waves.values().flatten().map(|s| s.as_str()).collect();
    if fleet.is_some() && waves.len() == 1 && targeted.len() > 1 {
        sink.warn(
            loaded,
            "fleet/single-wave",
            "spec.waves",
            format!("all {} clusters are in one wave: the release reaches the whole fleet at once, which a multi-cluster canary exists to prevent; put a low-impact cluster in a first wave", targeted.len()),
        );
    }
    if let Some(rollout) = rollout {
        let gated = !rollout.analysis_template_refs().is_empty() || spec.wave_analysis.is_some();
        if !gated {
            sink.warn(
                loaded,
                "fleet/wave-without-gate",
                "spec.waves",
                format!("Rollout {:?} has no analysis and there is no waveAnalysis: a wave would advance on Ready pods alone, a disguised parallel rollout; add an analysis step or background analysis", spec.rollout),
            );
        }
        check_global_thresholds(index, sink, fleet_rollout, rollout, clusters, &targeted);
        check_injected_args(index, sink, loaded, rollout, clusters, &targeted);
    }
}

/// Lockstep waves: `maxUpdate` is ignored in one, a wave of one cluster has nothing to wait
/// for, and a canary without steps has no barrier. `clusters`: the Fleet's, when it is among
/// the linted files.
fn check_lockstep(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    fleet_rollout: &FleetRollout,
    rollout: Option<&Rollout>,
    clusters: Option<&[Cluster]>,
) {
    let spec = &fleet_rollout.spec;
    let layout = clusters.map(|c| fleet_rollout.waves(c));
    let size = |number: u32| layout.as_ref().map(|l| l.get(&number).map_or(0, Vec::len));
    let mut any = false;
    for (i, step) in spec.waves.steps.iter().flatten().enumerate() {
        let number = i as u32 + 1;
        if !fleet_rollout.lockstep(number) {
            continue;
        }
        any = true;
        let path = format!("spec.waves.steps[{i}]");
        if step.max_update.is_some() {
            sink.warn(
                loaded,
                "fleet/lockstep-max-update",
                format!("{path}.maxUpdate"),
                format!("wave {number} moves in lockstep: every cluster of it starts together, so maxUpdate is ignored"),
            );
        }
        if step.lockstep == Some(true)
            && let Some(n) = size(number)
            && n == 1
        {
            sink.warn(
                loaded,
                "fleet/lockstep-single-cluster",
                format!("{path}.lockstep"),
                format!("wave {number} has a single cluster: a lockstep barrier has no other cluster to wait for"),
            );
        }
    }
    if spec.waves.list.is_some() && spec.waves.lockstep == Some(true) {
        any = true;
        if let Some(layout) = &layout
            && !layout.is_empty()
            && layout.values().all(|w| w.len() <= 1)
        {
            sink.warn(
                loaded,
                "fleet/lockstep-single-cluster",
                "spec.waves.lockstep",
                "every wave has a single cluster: a lockstep barrier has no other cluster to wait for",
            );
        }
    }
    if any
        && let Some(rollout) = rollout
        && rollout.canary().is_some_and(|c| c.steps.is_empty())
    {
        sink.warn(
            loaded,
            "fleet/lockstep-no-steps",
            if spec.waves.lockstep == Some(true) {
                "spec.waves.lockstep"
            } else {
                "spec.waves.steps"
            },
            format!("Rollout {:?} is a canary without steps: there is no barrier to pass together, and each cluster is promoted on its own", spec.rollout),
        );
    }
}

/// The injected arguments a cluster cannot supply: `region` without a region, `metrics-address`
/// without a metrics endpoint.
fn check_injected_args(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    rollout: &Rollout,
    clusters: &[Cluster],
    targeted: &[&str],
) {
    let mut used = BTreeSet::new();
    for reference in &rollout.analysis_template_refs() {
        if let Some((_, template)) =
            index.template(&reference.template_name, reference.is_cluster_scope())
        {
            let text = serde_json::to_string(&template.spec.metrics).unwrap_or_default();
            used.extend(placeholders(&text).into_iter().map(str::to_owned));
        }
    }
    for cluster in clusters
        .iter()
        .filter(|c| targeted.contains(&c.name.as_str()))
    {
        for (arg, missing) in [
            ("region", cluster.region.is_none()),
            (
                "metrics-address",
                cluster.metrics.as_ref().is_none_or(|m| m.address.is_none()),
            ),
        ] {
            if missing && used.contains(arg) {
                sink.error(
                    loaded,
                    "fleet/injected-arg",
                    "spec.fleet",
                    format!("the Rollout's analysis uses {{{{args.{arg}}}}}, but cluster {:?} has no {}", cluster.name, if arg == "region" { "region" } else { "metrics.address" }),
                );
            }
        }
    }
}

/// Whether a condition compares against a literal, non-zero number (an absolute threshold).
fn absolute_threshold(condition: &str) -> Option<String> {
    static COMPARISON: OnceLock<Regex> = OnceLock::new();
    static NOISE: OnceLock<Regex> = OnceLock::new();
    let noise = NOISE.get_or_init(|| {
        Regex::new(r"len\([^)]*\)\s*[<>=!]=?\s*\d+|\[\s*\d+\s*\]").expect("valid regex")
    });
    let comparison = COMPARISON.get_or_init(|| {
        Regex::new(r"(?:[<>]=?|[=!]=)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(-?\d+(?:\.\d+)?)\s*(?:[<>]=?|[=!]=)").expect("valid regex")
    });
    let cleaned = noise.replace_all(condition, "");
    comparison.captures_iter(&cleaned).find_map(|captures| {
        let number = captures.get(1).or_else(|| captures.get(2))?.as_str();
        let value: f64 = number.parse().ok()?;
        (value != 0.0).then(|| number.to_owned())
    })
}

fn check_global_thresholds(
    index: &Index<'_>,
    sink: &mut Sink,
    fleet_rollout: &FleetRollout,
    rollout: &Rollout,
    clusters: &[Cluster],
    targeted: &[&str],
) {
    let regions: BTreeSet<&str> = clusters
        .iter()
        .filter(|c| targeted.contains(&c.name.as_str()))
        .filter_map(|c| c.region.as_deref())
        .collect();
    if regions.len() < 2 {
        return;
    }
    let regions_text = regions.iter().copied().collect::<Vec<_>>().join(", ");
    // An argument is set per cluster only when every targeted cluster overrides it.
    let overridden: BTreeSet<&str> = fleet_rollout
        .spec
        .cluster_overrides
        .iter()
        .flat_map(|o| o.args.iter().map(|a| a.name.as_str()))
        .filter(|name| {
            targeted.iter().all(|cluster| {
                fleet_rollout
                    .spec
                    .cluster_overrides
                    .iter()
                    .any(|o| o.cluster == *cluster && o.args.iter().any(|a| a.name == *name))
            })
        })
        .collect();
    let mut reported = BTreeSet::new();
    for reference in &rollout.analysis_template_refs() {
        let Some((template_loaded, template)) =
            index.template(&reference.template_name, reference.is_cluster_scope())
        else {
            continue;
        };
        for (i, metric) in template.spec.metrics.iter().enumerate() {
            for (field, condition) in [
                ("successCondition", &metric.success_condition),
                ("failureCondition", &metric.failure_condition),
            ] {
                let Some(condition) = condition else { continue };
                let path = format!("spec.metrics[{i}].{field}");
                if !reported.insert((
                    template_loaded.file.clone(),
                    template_loaded.index,
                    path.clone(),
                )) {
                    continue;
                }
                let fleet_rollout_name = fleet_rollout.metadata.name.as_deref().unwrap_or_default();
                if let Some(number) = absolute_threshold(condition) {
                    sink.warn(
                        template_loaded,
                        "fleet/global-threshold",
                        path.clone(),
                        format!(
                            "metric {:?} judges clusters in regions {regions_text} (FleetRollout {fleet_rollout_name:?}) against one absolute threshold ({number}): too loose near a dependency or too strict far from it. Pass the threshold as an argument set per cluster in clusterOverrides, or compare against the cluster's own reference",
                            metric.name
                        ),
                    );
                    continue;
                }
                let shared: Vec<&str> = placeholders(condition)
                    .into_iter()
                    .filter(|name| {
                        !overridden.contains(name) && !super::INJECTED_ARGS.contains(name)
                    })
                    .collect();
                if !shared.is_empty() {
                    sink.warn(
                        template_loaded,
                        "fleet/global-threshold",
                        path,
                        format!(
                            "metric {:?} takes its threshold from args {} that no clusterOverride sets, so clusters in regions {regions_text} (FleetRollout {fleet_rollout_name:?}) share one value; set it per cluster in clusterOverrides",
                            metric.name,
                            shared.join(", ")
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::absolute_threshold;

    #[test]
    fn absolute_thresholds_are_told_apart_from_guards_and_indices() {
        assert_eq!(
            absolute_threshold("result[0] < 0.01").as_deref(),
            Some("0.01")
        );
        assert_eq!(
            absolute_threshold("0.95 <= result[0]").as_deref(),
            Some("0.95")
        );
        assert_eq!(
            absolute_threshold("len(result) > 0 && result[0] < 300").as_deref(),
            Some("300")
        );
        assert_eq!(
            absolute_threshold("len(result) > 0 && result[0] <= {{args.max-p95}}"),
            None
        );
        assert_eq!(absolute_threshold("result[0] > 0"), None);
    }
}
