//! Spokes from Secrets, end to end on real API servers: a hub (the test environment's cluster 0)
//! holds Argo CD cluster Secrets and a kubeconfig Secret for a spoke (cluster 1), as a hub
//! running Argo CD does; Flotilla lists them by label from the hub, reads each into a client
//! configuration through kube's own kubeconfig loader, and reaches the spoke with it (a
//! namespace that exists only in the spoke proves it is not the hub). Secrets it cannot use are
//! errors naming the Secret and the field.

mod common;

use std::collections::BTreeMap;

use common::k8s::{one_at_a_time, start_env};
use common::runtime;
use flotilla_kube::spokes::{ARGOCD_SECRET_TYPE, KUBECONFIG_LABEL, Spoke, is_spoke_secret};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[test]
fn spokes_are_read_from_argo_cd_and_kubeconfig_secrets_in_the_hub_and_reached() {
    let _one = one_at_a_time();
    let env = start_env(2);
    runtime().block_on(async {
        let hub = env.cluster(0).client().await.unwrap();
        let spoke = env.cluster(1);
        let spoke_client = spoke.client().await.unwrap();
        // A namespace only the spoke has.
        Api::<Namespace>::all(spoke_client)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "only-in-the-spoke"}}))
                    .unwrap(),
            )
            .await
            .unwrap();
        let namespaces = Api::<Namespace>::all(hub.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "argocd"}})).unwrap(),
            )
            .await
            .unwrap();
        // The spoke's CA, as Argo CD's `caData` holds it (base64 of the PEM).
        let kubeconfig_text = std::fs::read_to_string(&spoke.kubeconfig).unwrap();
        let ca = kubeconfig_text
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
            .unwrap()
            .to_owned();
        let argo = |name: &str, config: serde_json::Value| -> Secret {
            serde_json::from_value(json!({
                "metadata": {
                    "name": name,
                    "labels": {ARGOCD_SECRET_TYPE: "cluster", "region": "eu-west"},
                    "annotations": {"team": "payments"}
                },
                "type": "Opaque",
                "stringData": {
                    "name": format!("argo-{name}"),
                    "server": spoke.server,
                    "config": config.to_string()
                }
            }))
            .unwrap()
        };
        let secrets = Api::<Secret>::namespaced(hub.clone(), "argocd");
        let wanted: Vec<Secret> = vec![
            argo(
                "verified",
                json!({"bearerToken": spoke.token, "tlsClientConfig": {"caData": ca}}),
            ),
            argo(
                "insecure",
                json!({"bearerToken": spoke.token, "tlsClientConfig": {"insecure": true}}),
            ),
            argo("garbled", json!("{not json")),
            argo("eks", json!({"awsAuthConfig": {"clusterName": "prod"}})),
            serde_json::from_value(json!({
                "metadata": {"name": "kubeconfig", "labels": {KUBECONFIG_LABEL: "prod-us-1"}},
                "stringData": {"kubeconfig": kubeconfig_text}
            }))
            .unwrap(),
            // Not a spoke: left alone.
            serde_json::from_value(json!({
                "metadata": {"name": "unrelated"}, "stringData": {"password": "x"}
            }))
            .unwrap(),
        ];
        for s in &wanted {
            secrets.create(&PostParams::default(), s).await.unwrap();
        }
        // What a hub reads back: data as bytes.
        let listed = secrets.list(&ListParams::default()).await.unwrap().items;
        let spokes: BTreeMap<String, Result<Spoke, _>> = listed
            .iter()
            .filter(|s| is_spoke_secret(s))
            .map(|s| (s.metadata.name.clone().unwrap(), Spoke::from_secret(s)))
            .collect();
        assert_eq!(
            spokes.keys().collect::<Vec<_>>(),
            ["eks", "garbled", "insecure", "kubeconfig", "verified"]
        );
        let error = spokes["eks"].as_ref().unwrap_err();
        assert_eq!(
            (error.secret.as_str(), error.field.as_str()),
            ("argocd/eks", "config.awsAuthConfig")
        );
        let error = spokes["garbled"].as_ref().unwrap_err();
        assert_eq!(error.field, "config", "{error}");
        for (secret, name) in [
            ("verified", "argo-verified"),
            ("insecure", "argo-insecure"),
            ("kubeconfig", "prod-us-1"),
        ] {
            let s = spokes[secret].as_ref().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.name, name);
            assert_eq!(s.server, spoke.server);
            if secret != "kubeconfig" {
                assert_eq!(s.labels["region"], "eu-west");
                assert_eq!(s.labels["team"], "payments");
            }
            let client = kube::Client::try_from(s.config().await.unwrap()).unwrap();
            let names: Vec<String> = Api::<Namespace>::all(client)
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| panic!("{secret}: {e}"))
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect();
            assert!(
                names.iter().any(|n| n == "only-in-the-spoke"),
                "{secret} reached another cluster: {names:?}"
            );
        }
        // A CA that is not the spoke's (a fresh one, from openssl): the TLS check refuses the
        // connection.
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "key.pem",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=another-ca",
                "-days",
                "1",
            ])
            .current_dir(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let other_ca = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .encode(std::fs::read(dir.path().join("ca.pem")).unwrap())
        };
        let wrong_ca = argo(
            "wrong-ca",
            json!({"bearerToken": spoke.token, "tlsClientConfig": {"caData": other_ca}}),
        );
        let s = Spoke::from_secret(&wrong_ca).unwrap();
        let refused = match s.config().await {
            Err(e) => e.to_string(),
            Ok(config) => match kube::Client::try_from(config) {
                Err(e) => e.to_string(),
                Ok(client) => match Api::<Namespace>::all(client)
                    .list(&ListParams::default())
                    .await
                {
                    Err(e) => {
                        // The whole chain: the TLS error is under the connect error.
                        let mut text = e.to_string();
                        let mut source = std::error::Error::source(&e);
                        while let Some(s) = source {
                            text.push_str(&format!(": {s}"));
                            source = s.source();
                        }
                        text
                    }
                    Ok(_) => "reached the spoke with another CA".into(),
                },
            },
        };
        assert!(
            !refused.contains("reached the spoke")
                && refused.to_lowercase().contains("certificate"),
            "a spoke must be verified against its own CA: {refused}"
        );
    });
}
