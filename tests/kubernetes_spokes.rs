//! Spokes from Secrets, end to end on real API servers: a hub (the test environment's cluster 0)
//! holds Argo CD cluster Secrets and a kubeconfig Secret for a spoke (cluster 1), as a hub
//! running Argo CD does; Flotilla lists them by label from the hub, reads each into a client
//! configuration through kube's own kubeconfig loader, and reaches the spoke with it (a
//! namespace that exists only in the spoke proves it is not the hub). Secrets it cannot use are
//! errors naming the Secret and the field. EKS spokes (`awsAuthConfig`) reach an API server
//! whose token webhook checks their natively minted tokens.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use flotilla_kube::eks::{AwsAuth, EksTokens};

use common::k8s::{one_at_a_time, start_env};
use common::runtime;
use flotilla_kube::spokes::{
    ARGOCD_SECRET_TYPE, KUBECONFIG_LABEL, Spoke, SpokePolicy, is_spoke_secret,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

/// The cluster's CA as Argo CD's `caData` holds it (base64 of the PEM), from its kubeconfig.
fn ca_data(kubeconfig_text: &str) -> String {
    kubeconfig_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .unwrap()
        .to_owned()
}

async fn create_namespace(client: &kube::Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

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
        let ca = ca_data(&kubeconfig_text);
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
        // An EKS Secret whose server is not an EKS endpoint: its token (the controller's AWS
        // identity) is not sent there (the test below reaches an allowed one).
        let error = spokes["eks"].as_ref().unwrap_err();
        assert_eq!(
            (error.secret.as_str(), error.field.as_str()),
            ("argocd/eks", "server"),
            "{error}"
        );
        assert!(
            error.message.contains("is not an EKS API server"),
            "{error}"
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

/// The access key the test gives the controller, and the only one its EKS authenticator knows.
const EKS_ACCESS_KEY: &str = "AKIAFLOTILLATEST0001";
const EKS_SECRET_KEY: &str = "c2VjcmV0LW9mLXRoZS1lay10ZXN0LWtleQ/+EKS";

/// The test's EKS authenticator (`tests/fixtures/eks_authenticator.py`), killed when dropped.
struct Authenticator(std::process::Child);

impl Drop for Authenticator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// EKS spokes, offline. Every API server of the environment asks a token webhook about the
/// tokens it does not know, as EKS's API servers ask their authenticator; the webhook
/// (`tests/fixtures/eks_authenticator.py`) checks the presigned STS URL's SigV4 signature
/// itself, in Python, with the one access key the controller was given. It stands in for AWS
/// STS, which these tests never reach. An Argo CD Secret with `awsAuthConfig` read from the hub
/// becomes a client that mints its own tokens from the environment's credentials (in a child
/// process, with an environment of its own) and reaches the cluster; a token for another cluster
/// name or signed with another key is refused by the API server; no region is a clear error.
#[test]
fn an_eks_spoke_is_reached_with_a_token_minted_from_the_environments_credentials() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let log = dir.path().join("authenticator.log");
    let _authenticator = Authenticator(
        std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/eks_authenticator.py"
            ))
            .arg(&port_file)
            .args(["prod-eu-1", EKS_ACCESS_KEY, EKS_SECRET_KEY])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("python3 runs the EKS authenticator"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            break port;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the authenticator did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let webhook = dir.path().join("webhook.kubeconfig");
    std::fs::write(
        &webhook,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: eks-authenticator\n  cluster:\n    server: http://127.0.0.1:{port}/authenticate\nusers:\n- name: apiserver\n  user: {{}}\ncontexts:\n- name: webhook\n  context:\n    cluster: eks-authenticator\n    user: apiserver\ncurrent-context: webhook\n"
        ),
    )
    .unwrap();
    let env = flotilla_testenv::TestEnv::start(&flotilla_testenv::Options {
        clusters: 1,
        token_webhook: Some(webhook),
        ..flotilla_testenv::Options::default()
    })
    .expect("the test environment starts with a token webhook");
    runtime().block_on(async {
        let cluster = env.cluster(0);
        let admin = cluster.client().await.unwrap();
        create_namespace(&admin, "only-in-the-spoke").await;
        create_namespace(&admin, "argocd").await;
        let kubeconfig_text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
        let ca = ca_data(&kubeconfig_text);
        // Argo CD's EKS cluster Secret, as `argocd cluster add` writes it.
        let secrets = Api::<Secret>::namespaced(admin.clone(), "argocd");
        let stored: Secret = serde_json::from_value(json!({
            "metadata": {"name": "eks-prod", "labels": {ARGOCD_SECRET_TYPE: "cluster"}},
            "stringData": {
                "name": "prod-eu-1",
                "server": cluster.server,
                "config": json!({
                    "awsAuthConfig": {"clusterName": "prod-eu-1"},
                    "tlsClientConfig": {"caData": ca}
                }).to_string()
            }
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &stored)
            .await
            .unwrap();
        let read = secrets.get("eks-prod").await.unwrap();
        // The test's API server stands for an EKS endpoint: the admin allows its host.
        let policy = SpokePolicy {
            eks_servers: vec!["127.0.0.1".into()],
            ..SpokePolicy::default()
        };
        let spoke = Spoke::from_secret_with(&read, &policy).unwrap();
        let auth = spoke.aws_auth.clone().expect("awsAuthConfig is kept");
        // The controller's path, in a process of its own: credentials and region from the
        // environment (and no profile files, no instance metadata).
        // `env`: the child's AWS variables, over a clean AWS environment.
        let child_with = |secret: &Secret, env: &[(&str, String)]| {
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "eks_child_reaches_the_cluster",
                "--ignored",
                "--nocapture",
            ])
            .env("FLOTILLA_EKS_SECRET", serde_json::to_string(secret).unwrap())
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("AWS_CONFIG_FILE", dir.path().join("no-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.path().join("no-credentials"),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_ROLE_ARN")
            .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
            .env_remove("AWS_REGION")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
            let out = cmd.output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr)
        };
        let keys = |region: Option<&str>| {
            let mut env = vec![
                ("AWS_ACCESS_KEY_ID", EKS_ACCESS_KEY.to_owned()),
                ("AWS_SECRET_ACCESS_KEY", EKS_SECRET_KEY.to_owned()),
            ];
            env.extend(region.map(|r| ("AWS_REGION", r.to_owned())));
            env
        };
        let reached = child_with(&read, &keys(Some("eu-west-1")));
        assert!(
            reached.contains("eks-child: reached: ") && reached.contains("only-in-the-spoke"),
            "{reached}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let accepted = std::fs::read_to_string(&log).unwrap();
        assert!(
            accepted.contains(&format!(
                "accepted arn:aws:iam::000000000000:user/{EKS_ACCESS_KEY}"
            )),
            "{accepted}"
        );
        let no_region = child_with(&read, &keys(None));
        assert!(
            no_region.contains("eks-child: refused: no AWS region for EKS cluster \"prod-eu-1\""),
            "{no_region}"
        );
        // The Secret's `profile` picks a profile of the controller's shared config: its keys
        // and region mint the token. A profile that would run a program (`credential_process`)
        // runs nothing: that source is not built in, so it gives no credentials.
        let marker = dir.path().join("credential-process-ran");
        let config_file = dir.path().join("aws-config");
        std::fs::write(
            &config_file,
            format!(
                "[profile fleet]\nregion = eu-west-1\naws_access_key_id = {EKS_ACCESS_KEY}\naws_secret_access_key = {EKS_SECRET_KEY}\n\n[profile runs]\nregion = eu-west-1\ncredential_process = /usr/bin/touch {}\n",
                marker.display()
            ),
        )
        .unwrap();
        let with_profile = |profile: &str| -> Secret {
            let mut secret = read.clone();
            let config = json!({
                "awsAuthConfig": {"clusterName": "prod-eu-1", "profile": profile},
                "tlsClientConfig": {"caData": ca}
            });
            secret.data.as_mut().unwrap().insert(
                "config".into(),
                k8s_openapi::ByteString(config.to_string().into_bytes()),
            );
            secret
        };
        let from_file = [("AWS_CONFIG_FILE", config_file.display().to_string())];
        let fleet = child_with(&with_profile("fleet"), &from_file);
        assert!(
            fleet.contains("eks-child: reached: ") && fleet.contains("only-in-the-spoke"),
            "{fleet}"
        );
        let runs = child_with(&with_profile("runs"), &from_file);
        assert!(
            runs.contains("eks-child: failed: ")
                && runs.contains("cannot get AWS credentials for EKS cluster \"prod-eu-1\""),
            "{runs}"
        );
        assert!(!marker.exists(), "a Secret's profile ran a program");
        // Tokens the authenticator must refuse: another cluster's, another key's.
        let client = |auth: &AwsAuth, secret_key: &str| {
            let tokens = EksTokens::new(
                auth,
                "eu-west-1".into(),
                SharedCredentialsProvider::new(Credentials::new(
                    EKS_ACCESS_KEY,
                    secret_key,
                    None,
                    None,
                    "test",
                )),
                Arc::new(SystemTime::now),
            );
            let spoke = spoke.clone();
            async move {
                let config = spoke.config().await.unwrap();
                kube::client::ClientBuilder::try_from(config)
                    .unwrap()
                    .with_layer(&tokens.layer())
                    .build()
            }
        };
        let other_cluster = AwsAuth {
            cluster_name: "prod-us-1".into(),
            ..auth.clone()
        };
        for (what, client) in [
            (
                "a token of another cluster",
                client(&other_cluster, EKS_SECRET_KEY).await,
            ),
            (
                "a token signed with another key",
                client(&auth, "not-the-secret").await,
            ),
        ] {
            match Api::<Namespace>::all(client)
                .list(&ListParams::default())
                .await
            {
                Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{what}: {status:?}"),
                other => panic!("{what} was not refused: {other:?}"),
            }
        }
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains("refused: signature does not match"), "{log}");
    });
}

/// The child process of the test above: reads the Secret from `FLOTILLA_EKS_SECRET`, mints
/// from its own environment and lists the cluster's namespaces. Run only by that test.
#[test]
#[ignore = "run by an_eks_spoke_is_reached_with_a_token_minted_from_the_environments_credentials"]
fn eks_child_reaches_the_cluster() {
    let secret: Secret =
        serde_json::from_str(&std::env::var("FLOTILLA_EKS_SECRET").expect("run by the EKS test"))
            .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    runtime().block_on(async {
        let policy = SpokePolicy {
            eks_servers: vec!["127.0.0.1".into()],
            ..SpokePolicy::default()
        };
        let spoke = Spoke::from_secret_with(&secret, &policy).unwrap();
        let auth = spoke.aws_auth.clone().unwrap();
        let tokens = match EksTokens::from_environment(&auth, Arc::new(SystemTime::now)).await {
            Ok(tokens) => tokens,
            Err(e) => {
                println!("eks-child: refused: {e}");
                return;
            }
        };
        let client = kube::client::ClientBuilder::try_from(spoke.config().await.unwrap())
            .unwrap()
            .with_layer(&tokens.layer())
            .build();
        match Api::<Namespace>::all(client)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                let names: Vec<String> = list
                    .items
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .collect();
                println!("eks-child: reached: {}", names.join(", "));
            }
            Err(e) => println!("eks-child: failed: {e}"),
        }
    });
}
