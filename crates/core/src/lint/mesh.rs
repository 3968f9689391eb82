//! The rule that Istio routing never mixes clusters: in a multi-primary (or primary-remote)
//! mesh the same pod template gives the same `rollouts-pod-template-hash` in every cluster, so a
//! DestinationRule subset or a merged Service would select every cluster's canary Pods, and one
//! cluster's canary would take (and be judged on) the others' traffic. For each FleetRollout
//! whose Rollout routes through Istio in more than one Kubernetes cluster, each of them must say
//! its place in the mesh (`endpoint.kubernetes.istio`); subset-based routing needs a distinct
//! mesh cluster id per cluster of a mesh (the subsets then select `topology.istio.io/cluster`),
//! host-based routing needs cluster-local Services in a shared mesh.

use std::collections::{BTreeMap, BTreeSet};

use super::{Index, Sink};

/// A Kubernetes cluster of the fleet in an Istio mesh.
struct Member<'a> {
    /// Its index in the Fleet's `spec.clusters`.
    index: usize,
    name: &'a str,
    /// Its id in the mesh (`topology.istio.io/cluster`).
    id: Option<&'a str>,
    cluster_local: bool,
}

pub(super) fn check(index: &Index<'_>, sink: &mut Sink) {
    for (_, fleet_rollout) in &index.fleet_rollouts {
        let spec = &fleet_rollout.spec;
        let (Some((loaded, fleet)), Some((_, rollout))) = (
            index.fleets.get(spec.fleet.as_str()),
            index.rollouts.get(spec.rollout.as_str()),
        ) else {
            continue;
        };
        let Some(istio) = rollout
            .canary()
            .and_then(|c| c.traffic_routing.as_ref())
            .and_then(|r| r.istio.as_ref())
        else {
            continue;
        };
        let subset_based = istio.destination_rule.is_some();
        let targets: BTreeSet<String> = fleet_rollout
            .waves(&fleet.spec.clusters)
            .into_values()
            .flatten()
            .collect();
        let kube: Vec<(usize, &crate::spec::fleet::Cluster)> = fleet
            .spec
            .clusters
            .iter()
            .enumerate()
            .filter(|(_, c)| targets.contains(&c.name))
            .filter(|(_, c)| c.endpoint.as_ref().is_some_and(|e| e.kubernetes.is_some()))
            .collect();
        if kube.len() < 2 {
            continue;
        }
        let rollout_name = rollout.metadata.name.as_deref().unwrap_or_default();
        let base = |i: usize| format!("spec.clusters[{i}].endpoint.kubernetes.istio");
        let mut meshes: BTreeMap<&str, Vec<Member<'_>>> = BTreeMap::new();
        for &(i, cluster) in &kube {
            let kubernetes = cluster
                .endpoint
                .as_ref()
                .and_then(|e| e.kubernetes.as_ref())
                .expect("filtered on Kubernetes endpoints");
            let Some(member) = &kubernetes.istio else {
                sink.error(
                    loaded,
                    "fleet/istio-multicluster",
                    base(i),
                    format!(
                        "cluster {:?}: Rollout {rollout_name:?} routes through Istio in {} Kubernetes clusters, and this cluster does not say its place in the mesh (istio: {{meshId, cluster}}): in a shared mesh its routing could send one cluster's canary traffic to another's Pods",
                        cluster.name,
                        kube.len()
                    ),
                );
                continue;
            };
            let mesh = member.mesh_id.as_deref().unwrap_or_default();
            meshes.entry(mesh).or_default().push(Member {
                index: i,
                name: cluster.name.as_str(),
                id: member.cluster.as_deref(),
                cluster_local: member.cluster_local,
            });
        }
        for (mesh, members) in meshes {
            if members.len() < 2 {
                continue;
            }
            let names: Vec<&str> = members.iter().map(|m| m.name).collect();
            if subset_based {
                let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
                for &Member {
                    index: i, name, id, ..
                } in &members
                {
                    match id {
                        None => sink.error(
                            loaded,
                            "fleet/istio-multicluster",
                            format!("{}.cluster", base(i)),
                            format!(
                                "cluster {name:?} shares Istio mesh {mesh:?} with {names:?} and has no mesh cluster id: the DestinationRule subsets of Rollout {rollout_name:?} would select every cluster's canary Pods (the pod-template hash is the same everywhere); set istio.cluster to the cluster's topology.istio.io/cluster"
                            ),
                        ),
                        Some(id) => {
                            if let Some(other) = seen.insert(id, name) {
                                sink.error(
                                    loaded,
                                    "fleet/istio-multicluster",
                                    format!("{}.cluster", base(i)),
                                    format!(
                                        "clusters {other:?} and {name:?} of Istio mesh {mesh:?} have the same mesh cluster id {id:?}: their subsets would select each other's Pods"
                                    ),
                                );
                            }
                        }
                    }
                }
            } else {
                for &Member {
                    index: i,
                    name,
                    cluster_local,
                    ..
                } in &members
                {
                    if !cluster_local {
                        sink.error(
                            loaded,
                            "fleet/istio-multicluster",
                            base(i),
                            format!(
                                "cluster {name:?} shares Istio mesh {mesh:?} with {names:?}: Rollout {rollout_name:?} routes by host (canaryService, stableService), and a mesh merges a Service's endpoints across its clusters, so each cluster's canary would take the others' canary traffic; route by DestinationRule subsets (Flotilla adds topology.istio.io/cluster), or make the Services cluster-local in MeshConfig and say so (istio.clusterLocal: true)"
                            ),
                        );
                    }
                }
            }
        }
    }
}
