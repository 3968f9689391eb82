//! The manifests that install Flotilla (`flotilla install`), printed for `kubectl apply -f -`,
//! never applied here. In the hub: the namespace, Flotilla's CRDs, the ServiceAccount and the
//! least-privilege RBAC of docs/kubernetes-hub-rbac.yaml, the daemon's configuration (a hub
//! source keeping its state in the hub, its API beyond loopback with reads behind the token), its
//! Deployment and Service. In a spoke (`--spoke`): the ServiceAccount, Role and RoleBinding of
//! docs/kubernetes-rbac.yaml for the Rollouts' namespace there.

use serde_json::{Value, json};

/// The hub's RBAC as documented (the hub's end-to-end test runs the controller with it).
const HUB_RBAC: &str = include_str!("../../../docs/kubernetes-hub-rbac.yaml");
/// A spoke's RBAC as documented (the fleet's end-to-end tests run the backend with it).
const SPOKE_RBAC: &str = include_str!("../../../docs/kubernetes-rbac.yaml");

/// The daemon's scratch directory in its Pod (the API's token; the state is in the hub).
pub const STATE_DIR: &str = "/var/lib/flotilla";
/// Where its secrets directory is (`secretsDir`: Argo Rollouts' notification Secret).
pub const SECRETS_DIR: &str = "/var/run/flotilla/secrets";
/// Where its configuration is mounted.
pub const CONFIG_DIR: &str = "/etc/flotilla";
/// Its API's port.
pub const PORT: u16 = 7070;

/// What to install in the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubInstall {
    /// Flotilla's namespace: the daemon and the desired state (Fleets, FleetRollouts, Rollouts,
    /// AnalysisTemplates).
    pub namespace: String,
    /// The namespace of the spoke Secrets (Argo CD's `argocd`, or one of Flotilla's own).
    pub spoke_namespace: String,
    /// The container image with the `flotilla` binary on its `PATH`.
    pub image: String,
    /// The exec credential plugins spoke Secrets may run (`hub.execAllowlist`).
    pub exec_allowlist: Vec<String>,
}

/// An option that cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option} {value:?}: {why}")]
pub struct InstallError {
    /// The option (`--namespace`).
    pub option: String,
    /// Its value.
    pub value: String,
    /// Why.
    pub why: String,
}

fn invalid(option: &str, value: &str, why: &str) -> InstallError {
    InstallError {
        option: option.into(),
        value: value.into(),
        why: why.into(),
    }
}

/// A namespace's name: a DNS label (RFC 1123), as the API server requires.
fn namespace_name(option: &str, value: &str) -> Result<(), InstallError> {
    let ok = (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            option,
            value,
            "not a namespace name (lower-case letters, digits and '-', at most 63)",
        ))
    }
}

/// An object's name: a DNS subdomain (RFC 1123).
fn object_name(value: &str) -> bool {
    (1..=253).contains(&value.len())
        && value.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The documented RBAC with its namespaces replaced (`from` → `to`, line by line, so its
/// comments stay).
fn renamespaced(yaml: &str, replacements: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let replaced = replacements.iter().find_map(|(from, to)| {
            (trimmed == format!("namespace: {from}")).then(|| format!("{indent}namespace: {to}"))
        });
        out.push_str(replaced.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

fn document(out: &mut String, object: &Value) {
    out.push_str("---\n");
    out.push_str(&serde_saphyr::to_string(object).expect("a JSON value serializes as YAML"));
}

/// The daemon's configuration in the hub (`serve.yaml` of its ConfigMap).
pub fn serve_config(options: &HubInstall) -> String {
    let hub = json!({
        "namespace": options.namespace,
        "spokeNamespace": options.spoke_namespace,
        "execAllowlist": options.exec_allowlist,
        "state": "hub",
    });
    format!(
        "# flotilla serve in the hub: the in-cluster configuration of its Pod.\nlisten: \"0.0.0.0:{PORT}\"\n# Beyond loopback: reads need the token too ({STATE_DIR}/state.redb.token, made at each start).\nreadsNeedToken: true\n# The state is in the hub (hub.state); only the API's token is written here.\nstore: {STATE_DIR}/state.redb\n# Argo Rollouts' notification Secret, mounted from the namespace.\nsecretsDir: {SECRETS_DIR}\nhub: {hub}\n"
    )
}

/// The hub's manifests.
pub fn hub(options: &HubInstall) -> Result<String, InstallError> {
    namespace_name("--namespace", &options.namespace)?;
    namespace_name("--spoke-namespace", &options.spoke_namespace)?;
    if options.image.trim().is_empty() || options.image.contains(char::is_whitespace) {
        return Err(invalid(
            "--image",
            &options.image,
            "not a container image reference",
        ));
    }
    if let Some(bad) = options.exec_allowlist.iter().find(|c| !c.starts_with('/')) {
        return Err(invalid(
            "--allow-exec",
            bad,
            "not an absolute path: a plugin is allowed by where it is",
        ));
    }
    let ns = options.namespace.as_str();
    let labels =
        json!({"app.kubernetes.io/name": "flotilla", "app.kubernetes.io/component": "controller"});
    let mut out = String::new();
    document(
        &mut out,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    );
    if options.spoke_namespace != ns && options.spoke_namespace != "argocd" {
        document(
            &mut out,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.spoke_namespace}}),
        );
    }
    out.push_str(&crate::crds::yaml());
    out.push_str("---\n");
    // The cluster-scoped objects are named after the namespace, so that two installs never
    // share (and take over) one binding.
    let rbac = renamespaced(
        HUB_RBAC,
        &[("flotilla", ns), ("argocd", &options.spoke_namespace)],
    );
    out.push_str(&if ns == "flotilla" {
        rbac
    } else {
        rbac.replace(
            "name: flotilla-hub\n",
            &format!("name: flotilla-hub-{ns}\n"),
        )
    });
    document(
        &mut out,
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "flotilla", "namespace": ns, "labels": labels},
            "data": {"serve.yaml": serve_config(options)}
        }),
    );
    // The state lives in the hub's API server (`hub.state: hub`): the Pod keeps nothing that
    // must outlive it (its scratch volume holds the API's token, made at each start). One
    // writer: replicas 1, Recreate.
    let probe = json!({"httpGet": {"path": "/healthz", "port": "api"}});
    // The first lists of the hub's kinds may take up to 30 s each: alive is asked only after.
    let startup = json!({"httpGet": {"path": "/healthz", "port": "api"}, "periodSeconds": 5, "failureThreshold": 60});
    document(
        &mut out,
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "flotilla", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "flotilla",
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532},
                        "containers": [{
                            "name": "flotilla",
                            "image": options.image,
                            "command": ["flotilla"],
                            "args": ["serve", "--config", format!("{CONFIG_DIR}/serve.yaml")],
                            "ports": [{"name": "api", "containerPort": PORT}],
                            "startupProbe": startup,
                            "readinessProbe": probe,
                            "livenessProbe": probe,
                            // A credential plugin may keep files in its home: a scratch volume.
                            "env": [{"name": "HOME", "value": "/tmp"}],
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]}
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": true},
                                {"name": "state", "mountPath": STATE_DIR},
                                {"name": "notification-secret", "mountPath": format!("{SECRETS_DIR}/argo-rollouts-notification-secret"), "readOnly": true},
                                {"name": "tmp", "mountPath": "/tmp"}
                            ]
                        }],
                        "volumes": [
                            {"name": "config", "configMap": {"name": "flotilla"}},
                            {"name": "state", "emptyDir": {}},
                            // Argo Rollouts' notification Secret, where the daemon's secrets
                            // directory reads it; optional: none until there is one.
                            {"name": "notification-secret", "secret": {"secretName": "argo-rollouts-notification-secret", "optional": true}},
                            {"name": "tmp", "emptyDir": {}}
                        ]
                    }
                }
            }
        }),
    );
    document(
        &mut out,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "flotilla", "namespace": ns, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "api", "port": PORT, "targetPort": "api"}]}
        }),
    );
    Ok(out)
}

/// A spoke's manifests: the ServiceAccount, Role and RoleBinding of docs/kubernetes-rbac.yaml in
/// `namespace` (the Rollouts' namespace there), the Secrets the templates read by `secrets`
/// (none: no Secret may be read; RBAC would read an empty list as every Secret).
pub fn spoke(namespace: &str, secrets: &[String]) -> Result<String, InstallError> {
    namespace_name("--namespace", namespace)?;
    let mut yaml = renamespaced(SPOKE_RBAC, &[("default", namespace)]);
    let rule = "    resourceNames: [\"metrics-api\"]\n";
    assert!(
        yaml.contains(rule),
        "docs/kubernetes-rbac.yaml names its example Secret"
    );
    if secrets.is_empty() {
        // Drop the whole Secrets rule: its comment, its four lines.
        let start = yaml
            .find("  # get: secrets")
            .expect("docs/kubernetes-rbac.yaml's Secrets rule");
        let end = yaml[start..]
            .find("    verbs: [\"get\"]\n")
            .map(|i| start + i + "    verbs: [\"get\"]\n".len())
            .expect("the Secrets rule's verbs");
        yaml.replace_range(start..end, "");
    } else {
        if let Some(bad) = secrets.iter().find(|s| !object_name(s)) {
            return Err(invalid(
                "--secret",
                bad,
                "not a Secret's name (a DNS subdomain)",
            ));
        }
        let names: Vec<String> = secrets.iter().map(|s| format!("{s:?}")).collect();
        yaml = yaml.replace(
            rule,
            &format!("    resourceNames: [{}]\n", names.join(", ")),
        );
    }
    Ok(format!("---\n{yaml}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> HubInstall {
        HubInstall {
            namespace: "delivery".into(),
            spoke_namespace: "argocd".into(),
            image: "registry.example/flotilla:0.1.0".into(),
            exec_allowlist: vec!["/usr/local/bin/argocd-k8s-auth".into()],
        }
    }

    fn documents(yaml: &str) -> Vec<Value> {
        serde_saphyr::from_multiple::<Value>(yaml)
            .unwrap()
            .into_iter()
            .filter(|d| !d.is_null())
            .collect()
    }

    #[test]
    fn the_hub_gets_the_documented_rbac_in_its_namespace_and_one_writer_of_the_store() {
        let docs = documents(&hub(&options()).unwrap());
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "Deployment",
                "Service"
            ]
        );
        for doc in &docs {
            let namespace = doc["metadata"]["namespace"].as_str();
            let kind = doc["kind"].as_str().unwrap();
            match (kind, doc["metadata"]["name"].as_str().unwrap()) {
                ("Role" | "RoleBinding", "flotilla-spokes") => {
                    assert_eq!(namespace, Some("argocd"))
                }
                (
                    "Namespace" | "CustomResourceDefinition" | "ClusterRole" | "ClusterRoleBinding",
                    _,
                ) => {
                    assert_eq!(namespace, None)
                }
                _ => assert_eq!(namespace, Some("delivery"), "{doc}"),
            }
            for subject in doc["subjects"].as_array().into_iter().flatten() {
                assert_eq!(subject["namespace"], "delivery");
            }
        }
        let deployment = &docs[13];
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "flotilla");
        assert_eq!(
            pod["containers"][0]["image"],
            "registry.example/flotilla:0.1.0"
        );
        let serve = docs[12]["data"]["serve.yaml"].as_str().unwrap();
        assert!(serve.contains("\"state\":\"hub\""), "{serve}");
        assert!(serve.contains("readsNeedToken: true"), "{serve}");
        assert!(serve.contains("/usr/local/bin/argocd-k8s-auth"), "{serve}");
        // A namespace of Flotilla's own for the spoke Secrets is made too.
        let own = HubInstall {
            spoke_namespace: "spokes".into(),
            ..options()
        };
        let docs = documents(&hub(&own).unwrap());
        assert_eq!(docs[1]["kind"], "Namespace");
        assert_eq!(docs[1]["metadata"]["name"], "spokes");
    }

    #[test]
    fn bad_options_are_named_and_print_nothing() {
        for (options, option) in [
            (
                HubInstall {
                    namespace: "Flotilla".into(),
                    ..options()
                },
                "--namespace",
            ),
            (
                HubInstall {
                    spoke_namespace: "a b".into(),
                    ..options()
                },
                "--spoke-namespace",
            ),
            (
                HubInstall {
                    image: " ".into(),
                    ..options()
                },
                "--image",
            ),
            (
                HubInstall {
                    exec_allowlist: vec![String::new()],
                    ..options()
                },
                "--allow-exec",
            ),
        ] {
            assert_eq!(hub(&options).unwrap_err().option, option);
        }
        assert_eq!(
            spoke("default", &["Bad_Name".into()]).unwrap_err().option,
            "--secret"
        );
    }

    #[test]
    fn a_spoke_gets_the_documented_role_with_its_secrets_or_none() {
        // The documented example, unchanged.
        assert_eq!(
            spoke("default", &["metrics-api".into()]).unwrap(),
            format!("---\n{SPOKE_RBAC}")
        );
        let rules = |yaml: &str| -> Vec<Value> {
            documents(yaml)
                .into_iter()
                .find(|d| d["kind"] == "Role")
                .unwrap()["rules"]
                .as_array()
                .unwrap()
                .clone()
        };
        let with = rules(&spoke("payments", &["datadog".into(), "prom-auth".into()]).unwrap());
        let secrets: Vec<&Value> = with
            .iter()
            .filter(|r| r["resources"][0] == "secrets")
            .collect();
        assert_eq!(secrets.len(), 1);
        assert_eq!(secrets[0]["resourceNames"], json!(["datadog", "prom-auth"]));
        // No Secret named: no Secret rule at all (an empty resourceNames grants every Secret).
        let without = spoke("payments", &[]).unwrap();
        assert!(
            !rules(&without)
                .iter()
                .any(|r| r["resources"][0] == "secrets")
        );
        assert_eq!(rules(&without).len(), with.len() - 1);
        for doc in documents(&without) {
            assert_eq!(doc["metadata"]["namespace"], "payments");
        }
    }
}
