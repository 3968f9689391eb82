//! Smoke test of the Kubernetes test environment: three real clusters on loopback each run a
//! Deployment of 3 replicas to 3 Ready Pods (controller-manager, scheduler and kwok at work),
//! read back with kube-rs.

use std::time::{Duration, Instant};

use flotilla_testenv::{Options, TestEnv};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};

fn deployment() -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "smoke"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "smoke"}},
            "template": {
                "metadata": {"labels": {"app": "smoke"}},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/smoke:1"}]}
            }
        }
    }))
    .expect("a valid Deployment")
}

/// Whether a Pod is what a kubelet reports for a started container: Running, Ready, with an IP,
/// on a node.
fn ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    status.phase.as_deref() == Some("Running")
        && ready
        && status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
}

#[tokio::test(flavor = "current_thread")]
async fn three_clusters_each_run_a_deployment_of_three_ready_pods() {
    let options = Options {
        clusters: 3,
        ..Options::default()
    };
    let env = TestEnv::start(&options).expect("the environment starts");
    eprintln!("k8s-testenv: 3 clusters ready in {:?}", env.startup());

    let mut clients = Vec::new();
    for cluster in env.clusters() {
        let client = cluster.client().await.expect("a kube client");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        deployments
            .create(&PostParams::default(), &deployment())
            .await
            .unwrap_or_else(|e| panic!("creating the Deployment in {}: {e}", cluster.name));
        clients.push((cluster.name.clone(), client));
    }

    let deadline = Instant::now() + Duration::from_secs(120);
    for (name, client) in &clients {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        loop {
            let list = pods
                .list(&ListParams::default().labels("app=smoke"))
                .await
                .expect("listing Pods");
            let ready_pods: Vec<&Pod> = list.items.iter().filter(|p| ready(p)).collect();
            let ready_replicas = deployments
                .get("smoke")
                .await
                .expect("reading the Deployment")
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            if ready_pods.len() == 3 && list.items.len() == 3 && ready_replicas == 3 {
                let ips: Vec<_> = ready_pods
                    .iter()
                    .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                    .collect();
                eprintln!("{name}: 3 Ready Pods, IPs {ips:?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: {} Pods, {} Ready, Deployment readyReplicas {ready_replicas} after 120 s; logs in {}",
                list.items.len(),
                ready_pods.len(),
                env.dir().join("logs").display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
