//! Spokes from Secrets, the conventions a hub already has: Argo CD's cluster Secrets (label
//! `argocd.argoproj.io/secret-type: cluster`; `name`, `server` and a `config` JSON with a bearer
//! token, basic auth or client certificates, and `tlsClientConfig`) and kubeconfig Secrets
//! (label `flotilla.dev/cluster`, key `kubeconfig`). Each becomes a [`Spoke`]: the cluster's
//! name, its labels (the Secret's labels and annotations, as an ApplicationSet cluster
//! generator sees them) and a kubeconfig of one context that kube's own loader turns into a
//! client configuration. A Secret that cannot be used is an error naming it and the field,
//! never skipped.
//!
//! Whoever may write a spoke Secret must not be able to make the controller run a program or
//! send one of its own files: exec credential plugins run only when their command is on the
//! admin's allowlist (`hub.execAllowlist`), and a kubeconfig Secret may not name files of the
//! controller's machine (`tokenFile`, `client-certificate`, `client-key`,
//! `certificate-authority`) nor an `auth-provider`. An Argo CD Secret's `awsAuthConfig` (EKS)
//! is kept as [`crate::eks::AwsAuth`]: its token is minted natively with the controller's own
//! AWS credentials, so it runs no program either; since that token carries the controller's
//! AWS identity, it is sent only to the API servers of [`SpokePolicy::eks_servers`] (EKS's
//! endpoints by default), over a checked TLS connection.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use serde::Deserialize;

/// The label of Argo CD's cluster Secrets.
pub const ARGOCD_SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";
/// The label of Flotilla's kubeconfig Secrets (its value is the cluster's name).
pub const KUBECONFIG_LABEL: &str = "flotilla.dev/cluster";

/// A spoke cluster read from a Secret.
#[derive(Debug, Clone)]
pub struct Spoke {
    /// The cluster's name (Argo CD's `name`, else the server; the kubeconfig Secret's label).
    pub name: String,
    /// The API server's URL.
    pub server: String,
    /// The Secret's labels and annotations.
    pub labels: BTreeMap<String, String>,
    /// The namespaces Argo CD may manage there (`namespaces`, empty: all).
    pub namespaces: Vec<String>,
    /// `namespace/name` of the Secret it came from.
    pub secret: String,
    /// Argo CD's `awsAuthConfig`: the client authenticates with EKS tokens
    /// ([`crate::eks::EksTokens`]), the kubeconfig's user has no credentials.
    pub aws_auth: Option<crate::eks::AwsAuth>,
    kubeconfig: Kubeconfig,
}

/// Why a Secret is not a usable spoke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Secret {secret}: {field}: {message}")]
pub struct SpokeError {
    /// `namespace/name`.
    pub secret: String,
    /// The key or JSON path at fault (`config.tlsClientConfig.caData`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// Argo CD's `execProviderConfig`: a credential plugin to run.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArgoExec {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    install_hint: Option<String>,
}

/// Environment variables a Secret may not set for a plugin: they would change which program
/// runs (`PATH`, the dynamic loader's), where it reads its files (`HOME`) or where its requests
/// go (proxies).
fn forbidden_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "PATH"
        || upper == "HOME"
        || upper.starts_with("LD_")
        || upper.starts_with("DYLD_")
        || upper.contains("PROXY")
}

/// Whether an exec credential plugin may run: its command on `allowlist`, and no variable of
/// [`forbidden_env`] set by the Secret; else why not.
fn allowed_exec<'a>(
    command: &str,
    env: impl IntoIterator<Item = &'a str>,
    allowlist: &[String],
) -> Result<(), String> {
    if let Some(name) = env.into_iter().find(|n| forbidden_env(n)) {
        return Err(format!(
            "the credential plugin's env sets {name}, which a Secret may not set (PATH, HOME, LD_*, DYLD_*, proxies)"
        ));
    }
    if allowlist.iter().any(|allowed| allowed == command) {
        Ok(())
    } else if allowlist.is_empty() {
        Err(format!(
            "the credential plugin {command:?} is not run: no command is on the exec allowlist (hub.execAllowlist)"
        ))
    } else {
        Err(format!(
            "the credential plugin {command:?} is not on the exec allowlist (hub.execAllowlist: {})",
            allowlist.join(", ")
        ))
    }
}

/// Argo CD's `config` (`ClusterConfig`), the fields Flotilla reads; others are ignored as
/// Argo CD ignores fields it does not know.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArgoConfig {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    bearer_token: Option<String>,
    #[serde(default)]
    tls_client_config: TlsClientConfig,
    #[serde(default)]
    aws_auth_config: Option<serde_json::Value>,
    #[serde(default)]
    exec_provider_config: Option<serde_json::Value>,
    #[serde(default)]
    proxy_url: Option<String>,
    #[serde(default)]
    disable_compression: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlsClientConfig {
    #[serde(default)]
    insecure: bool,
    #[serde(default)]
    server_name: Option<String>,
    /// Base64 of PEM.
    #[serde(default)]
    ca_data: Option<String>,
    #[serde(default)]
    cert_data: Option<String>,
    #[serde(default)]
    key_data: Option<String>,
}

/// Whether a Secret is one of the two kinds of spoke Secrets.
pub fn is_spoke_secret(secret: &Secret) -> bool {
    let labels = secret.metadata.labels.as_ref();
    labels.is_some_and(|l| {
        l.get(ARGOCD_SECRET_TYPE).is_some_and(|v| v == "cluster")
            || l.contains_key(KUBECONFIG_LABEL)
    })
}

/// A Secret's own labels, and its labels and annotations together (the cluster's labels; the
/// labels win a clash).
fn labels_of(secret: &Secret) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    let mut all: BTreeMap<String, String> = secret
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        // kubectl's record of the last apply is not a label.
        .filter(|(k, _)| k != "kubectl.kubernetes.io/last-applied-configuration")
        .collect();
    all.extend(labels.clone());
    (labels, all)
}

/// A spoke Secret's cluster name and labels, read even when the rest of it cannot be used (so an
/// unusable Secret is still a cluster, with a condition naming it): the kubeconfig Secret's
/// label, else Argo CD's `name`, else its `server`, else the Secret's own name; the labels are
/// its labels and annotations.
pub fn identity(secret: &Secret) -> (String, BTreeMap<String, String>) {
    let (labels, all) = labels_of(secret);
    let text = |key: &str| -> Option<String> {
        secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(key).cloned())
            .or_else(|| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok())
            })
            .filter(|t| !t.trim().is_empty())
    };
    let name = labels
        .get(KUBECONFIG_LABEL)
        .cloned()
        .or_else(|| text("name"))
        .or_else(|| text("server"))
        .unwrap_or_else(|| secret.metadata.name.clone().unwrap_or_default());
    (name, all)
}

/// The API servers an EKS token goes to by default (`hub.eksServers`): EKS's endpoints, in
/// AWS's partitions and China's.
pub const EKS_SERVERS: [&str; 2] = [".eks.amazonaws.com", ".eks.amazonaws.com.cn"];

/// What the admin lets spoke Secrets do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpokePolicy {
    /// The exec credential plugins a Secret may run, by command exactly as it names them.
    pub exec_allowlist: Vec<String>,
    /// The API server hosts an EKS token may be sent to: `.suffix` for the hosts under it, or
    /// a host exactly. An EKS token carries the controller's AWS identity, so a Secret may not
    /// send one to a server of its writer's choosing.
    pub eks_servers: Vec<String>,
}

impl Default for SpokePolicy {
    fn default() -> Self {
        SpokePolicy {
            exec_allowlist: Vec::new(),
            eks_servers: EKS_SERVERS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl SpokePolicy {
    /// Whether an EKS token may be sent to `host`.
    pub fn allows_eks_server(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.eks_servers.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            if allowed.starts_with('.') {
                host.ends_with(&allowed) && host.len() > allowed.len()
            } else {
                host == allowed
            }
        })
    }
}

impl Spoke {
    /// Reads a spoke from an Argo CD cluster Secret or a kubeconfig Secret, running no
    /// credential plugin.
    pub fn from_secret(secret: &Secret) -> Result<Spoke, SpokeError> {
        Spoke::from_secret_with(secret, &SpokePolicy::default())
    }

    /// Reads a spoke from an Argo CD cluster Secret or a kubeconfig Secret; an exec credential
    /// plugin is run only when its command is on `exec_allowlist` (exactly as the Secret names
    /// it).
    pub fn from_secret_allowing(
        secret: &Secret,
        exec_allowlist: &[String],
    ) -> Result<Spoke, SpokeError> {
        Spoke::from_secret_with(
            secret,
            &SpokePolicy {
                exec_allowlist: exec_allowlist.to_vec(),
                ..SpokePolicy::default()
            },
        )
    }

    /// Reads a spoke from an Argo CD cluster Secret or a kubeconfig Secret under `policy`.
    pub fn from_secret_with(secret: &Secret, policy: &SpokePolicy) -> Result<Spoke, SpokeError> {
        let exec_allowlist = policy.exec_allowlist.as_slice();
        let id = format!(
            "{}/{}",
            secret.metadata.namespace.as_deref().unwrap_or(""),
            secret.metadata.name.as_deref().unwrap_or("")
        );
        let fail = |field: &str, message: String| SpokeError {
            secret: id.clone(),
            field: field.to_owned(),
            message,
        };
        let (labels, all) = labels_of(secret);
        let text = |key: &str| -> Result<Option<String>, SpokeError> {
            if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
                return Ok(Some(v.clone()));
            }
            match secret.data.as_ref().and_then(|d| d.get(key)) {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes.0.clone())
                    .map(Some)
                    .map_err(|_| fail(key, "is not UTF-8 text".into())),
            }
        };
        if let Some(name) = labels.get(KUBECONFIG_LABEL) {
            let yaml = text("kubeconfig")?.ok_or_else(|| {
                fail(
                    "kubeconfig",
                    "missing: a kubeconfig Secret holds one".into(),
                )
            })?;
            let mut kubeconfig = Kubeconfig::from_yaml(&yaml)
                .map_err(|e| fail("kubeconfig", format!("not a kubeconfig: {e}")))?;
            let context = kubeconfig
                .current_context
                .clone()
                .ok_or_else(|| fail("kubeconfig", "has no current-context".into()))?;
            let cluster = kubeconfig
                .contexts
                .iter()
                .find(|c| c.name == context)
                .and_then(|c| c.context.as_ref())
                .map(|c| c.cluster.clone())
                .ok_or_else(|| fail("kubeconfig", format!("context {context:?} is not in it")))?;
            let server = kubeconfig
                .clusters
                .iter()
                .find(|c| c.name == cluster)
                .and_then(|c| c.cluster.as_ref())
                .and_then(|c| c.server.clone())
                .ok_or_else(|| fail("kubeconfig", format!("cluster {cluster:?} has no server")))?;
            let (user, named_cluster) = {
                let context = kubeconfig
                    .contexts
                    .iter()
                    .find(|c| c.name == context)
                    .and_then(|c| c.context.as_ref());
                let user = context.and_then(|c| c.user.clone());
                let auth = user.as_ref().and_then(|user| {
                    kubeconfig
                        .auth_infos
                        .iter()
                        .find(|a| &a.name == user)
                        .and_then(|a| a.auth_info.as_ref())
                });
                let named = kubeconfig
                    .clusters
                    .iter()
                    .find(|c| c.name == cluster)
                    .and_then(|c| c.cluster.as_ref());
                ((user.unwrap_or_default(), auth), named)
            };
            if let Some(path) = named_cluster.and_then(|c| c.certificate_authority.as_deref()) {
                return Err(fail(
                    &format!("kubeconfig: clusters[{cluster}].cluster.certificate-authority"),
                    format!(
                        "{path:?} is a file of the controller's machine: put the CA in certificate-authority-data"
                    ),
                ));
            }
            let (name_of_user, auth) = user;
            if let Some(auth) = auth {
                let field = |key: &str| format!("kubeconfig: users[{name_of_user}].user.{key}");
                for (key, path, instead) in [
                    ("tokenFile", &auth.token_file, "token"),
                    (
                        "client-certificate",
                        &auth.client_certificate,
                        "client-certificate-data",
                    ),
                    ("client-key", &auth.client_key, "client-key-data"),
                ] {
                    if let Some(path) = path {
                        return Err(fail(
                            &field(key),
                            format!(
                                "{path:?} is a file of the controller's machine, never read for a Secret: put the credential in {instead}"
                            ),
                        ));
                    }
                }
                if auth.auth_provider.is_some() {
                    return Err(fail(
                        &field("auth-provider"),
                        "auth providers are not run: use a token, a client certificate or an allowed exec plugin".into(),
                    ));
                }
                if let Some(exec) = &auth.exec {
                    let command = exec.command.clone().unwrap_or_default();
                    let names = exec
                        .env
                        .iter()
                        .flatten()
                        .filter_map(|pair| pair.get("name").map(String::as_str));
                    allowed_exec(&command, names, exec_allowlist)
                        .map_err(|message| fail(&field("exec"), message))?;
                }
            }
            // A plugin never runs interactively: the controller has no terminal to lend it.
            for named in &mut kubeconfig.auth_infos {
                if let Some(exec) = named.auth_info.as_mut().and_then(|a| a.exec.as_mut()) {
                    exec.interactive_mode = Some(kube::config::ExecInteractiveMode::Never);
                }
            }
            return Ok(Spoke {
                name: name.clone(),
                server,
                labels: all,
                namespaces: Vec::new(),
                secret: id.clone(),
                aws_auth: None,
                kubeconfig,
            });
        }
        if labels.get(ARGOCD_SECRET_TYPE).map(String::as_str) != Some("cluster") {
            return Err(fail(
                "metadata.labels",
                format!(
                    "neither `{ARGOCD_SECRET_TYPE}: cluster` (Argo CD) nor `{KUBECONFIG_LABEL}` (a kubeconfig)"
                ),
            ));
        }
        let server = text("server")?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| fail("server", "missing: the API server's URL".into()))?;
        let name = text("name")?
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| server.clone());
        let config: ArgoConfig = match text("config")? {
            None => ArgoConfig::default(),
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| fail("config", format!("not Argo CD's cluster config JSON: {e}")))?,
        };
        let aws_auth = match &config.aws_auth_config {
            None => None,
            Some(value) => {
                let mut auth: crate::eks::AwsAuth =
                    serde_json::from_value(value.clone()).map_err(|e| {
                        fail(
                            "config.awsAuthConfig",
                            format!("not Argo CD's awsAuthConfig: {e}"),
                        )
                    })?;
                // Argo CD writes empty strings for unset fields.
                auth.role_arn = auth.role_arn.filter(|s| !s.trim().is_empty());
                auth.profile = auth.profile.filter(|s| !s.trim().is_empty());
                if auth.cluster_name.trim().is_empty() {
                    return Err(fail(
                        "config.awsAuthConfig.clusterName",
                        "missing: the EKS cluster's name, signed into its token".into(),
                    ));
                }
                if config.exec_provider_config.is_some()
                    || config.bearer_token.is_some()
                    || config.username.is_some()
                    || config.password.is_some()
                {
                    return Err(fail(
                        "config.awsAuthConfig",
                        "goes alone: not with bearerToken, username and password, nor execProviderConfig".into(),
                    ));
                }
                // The token carries the controller's AWS identity: it goes to EKS only, over
                // a checked TLS connection.
                if config.tls_client_config.insecure {
                    return Err(fail(
                        "config.tlsClientConfig.insecure",
                        "an EKS token is never sent to a server whose certificate is not checked"
                            .into(),
                    ));
                }
                let host = server
                    .parse::<http::Uri>()
                    .ok()
                    .and_then(|uri| uri.host().map(str::to_owned))
                    .unwrap_or_default();
                if !policy.allows_eks_server(&host) {
                    return Err(fail(
                        "server",
                        format!(
                            "{host:?} is not an EKS API server of hub.eksServers ({}): an EKS token carries the controller's AWS identity and is sent to those only",
                            policy.eks_servers.join(", ")
                        ),
                    ));
                }
                Some(auth)
            }
        };
        let exec = match &config.exec_provider_config {
            None => None,
            Some(value) => {
                let exec: ArgoExec = serde_json::from_value(value.clone()).map_err(|e| {
                    fail(
                        "config.execProviderConfig",
                        format!("not Argo CD's exec provider config: {e}"),
                    )
                })?;
                allowed_exec(
                    &exec.command,
                    exec.env.keys().map(String::as_str),
                    exec_allowlist,
                )
                .map_err(|message| fail("config.execProviderConfig", message))?;
                Some(kube::config::ExecConfig {
                    api_version: Some(
                        exec.api_version
                            .unwrap_or_else(|| "client.authentication.k8s.io/v1beta1".into()),
                    ),
                    command: Some(exec.command),
                    args: Some(exec.args),
                    env: (!exec.env.is_empty()).then(|| {
                        exec.env
                            .into_iter()
                            .map(|(name, value)| {
                                [("name".to_owned(), name), ("value".to_owned(), value)]
                                    .into_iter()
                                    .collect()
                            })
                            .collect()
                    }),
                    install_hint: exec.install_hint,
                    interactive_mode: Some(kube::config::ExecInteractiveMode::Never),
                    ..Default::default()
                })
            }
        };
        let tls = &config.tls_client_config;
        // Argo CD's caData, certData and keyData are base64 of PEM, as a kubeconfig's *-data.
        let base64 = |field: &str, value: &Option<String>| -> Result<Option<String>, SpokeError> {
            match value {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| fail(field, format!("not base64: {e}")))?;
                    Ok(Some(v.trim().to_owned()))
                }
            }
        };
        let ca = base64("config.tlsClientConfig.caData", &tls.ca_data)?;
        let cert = base64("config.tlsClientConfig.certData", &tls.cert_data)?;
        let key = base64("config.tlsClientConfig.keyData", &tls.key_data)?;
        if cert.is_some() != key.is_some() {
            return Err(fail(
                "config.tlsClientConfig",
                "certData and keyData go together".into(),
            ));
        }
        let has_auth = config.bearer_token.is_some()
            || cert.is_some()
            || config.username.is_some()
            || exec.is_some()
            || aws_auth.is_some();
        if !has_auth {
            return Err(fail(
                "config",
                "no credentials: bearerToken, username and password, certData and keyData, awsAuthConfig or execProviderConfig"
                    .into(),
            ));
        }
        let cluster = Cluster {
            server: Some(server.clone()),
            insecure_skip_tls_verify: Some(tls.insecure),
            certificate_authority_data: ca,
            tls_server_name: tls.server_name.clone(),
            proxy_url: config.proxy_url.clone(),
            disable_compression: Some(config.disable_compression),
            ..Cluster::default()
        };
        let auth = AuthInfo {
            token: config.bearer_token.clone().map(Into::into),
            username: config.username.clone(),
            password: config.password.clone().map(Into::into),
            client_certificate_data: cert,
            client_key_data: key.map(Into::into),
            exec,
            ..AuthInfo::default()
        };
        let kubeconfig = Kubeconfig {
            clusters: vec![NamedCluster {
                name: name.clone(),
                cluster: Some(cluster),
                other: BTreeMap::new(),
            }],
            auth_infos: vec![NamedAuthInfo {
                name: name.clone(),
                auth_info: Some(auth),
                other: BTreeMap::new(),
            }],
            contexts: vec![NamedContext {
                name: name.clone(),
                context: Some(Context {
                    cluster: name.clone(),
                    user: Some(name.clone()),
                    ..Context::default()
                }),
                other: BTreeMap::new(),
            }],
            current_context: Some(name.clone()),
            ..Kubeconfig::default()
        };
        let namespaces = text("namespaces")?
            .map(|n| {
                n.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Spoke {
            name,
            server,
            labels: all,
            namespaces,
            secret: id,
            aws_auth,
            kubeconfig,
        })
    }

    /// The client configuration, through kube's own kubeconfig loader.
    pub async fn config(&self) -> Result<kube::Config, SpokeError> {
        kube::Config::from_custom_kubeconfig(self.kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(|e| SpokeError {
                secret: self.secret.clone(),
                field: "config".into(),
                message: format!("cannot make a client of it: {e}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(labels: serde_json::Value, data: serde_json::Value) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "eu-1", "namespace": "argocd", "labels": labels,
                "annotations": {"team": "payments"}
            },
            "stringData": data,
        }))
        .unwrap()
    }

    fn argo(config: serde_json::Value) -> Secret {
        secret(
            serde_json::json!({ARGOCD_SECRET_TYPE: "cluster", "region": "eu-west"}),
            serde_json::json!({
                "name": "prod-eu-1", "server": "https://10.0.0.1:6443",
                "namespaces": "shop, payments", "config": config.to_string()
            }),
        )
    }

    #[tokio::test]
    async fn an_argo_cd_cluster_secret_is_a_spoke_with_its_labels_and_a_client_config() {
        let spoke = Spoke::from_secret(&argo(serde_json::json!({
            "bearerToken": "t0ken",
            "tlsClientConfig": {"insecure": true, "serverName": "api.eu-1"}
        })))
        .unwrap();
        assert_eq!(spoke.name, "prod-eu-1");
        assert_eq!(spoke.server, "https://10.0.0.1:6443");
        assert_eq!(spoke.namespaces, ["shop", "payments"]);
        assert_eq!(spoke.labels["region"], "eu-west");
        assert_eq!(spoke.labels["team"], "payments");
        assert_eq!(spoke.secret, "argocd/eu-1");
        assert!(is_spoke_secret(&argo(serde_json::json!({}))));
        let config = spoke.config().await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert!(config.accept_invalid_certs);
        assert_eq!(config.tls_server_name.as_deref(), Some("api.eu-1"));
    }

    #[test]
    fn an_exec_plugin_runs_only_from_the_allowlist() {
        let exec = argo(serde_json::json!({
            "execProviderConfig": {
                "command": "argocd-k8s-auth", "args": ["aws", "--cluster-name", "eu-1"],
                "env": {"AWS_REGION": "eu-west-1"}, "apiVersion": "client.authentication.k8s.io/v1beta1"
            },
            "tlsClientConfig": {"insecure": true}
        }));
        let refused = Spoke::from_secret(&exec).unwrap_err();
        assert_eq!(refused.field, "config.execProviderConfig");
        assert!(refused.message.contains("hub.execAllowlist"), "{refused}");
        let other = Spoke::from_secret_allowing(&exec, &["/usr/bin/true".into()]).unwrap_err();
        assert!(other.message.contains("/usr/bin/true"), "{other}");
        let spoke = Spoke::from_secret_allowing(&exec, &["argocd-k8s-auth".into()]).unwrap();
        let auth = spoke.kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        let plugin = auth.exec.as_ref().unwrap();
        assert_eq!(plugin.command.as_deref(), Some("argocd-k8s-auth"));
        assert_eq!(plugin.args.as_ref().unwrap()[2], "eu-1");
        assert_eq!(plugin.env.as_ref().unwrap()[0]["name"], "AWS_REGION");
        assert_eq!(plugin.env.as_ref().unwrap()[0]["value"], "eu-west-1");
        assert!(auth.token.is_none());
        // The Secret may not change which program runs or where it sends its requests.
        for name in ["PATH", "LD_PRELOAD", "https_proxy", "HOME"] {
            let bad = argo(serde_json::json!({
                "execProviderConfig": {"command": "argocd-k8s-auth", "env": {name: "x"}},
                "tlsClientConfig": {"insecure": true}
            }));
            let error = Spoke::from_secret_allowing(&bad, &["argocd-k8s-auth".into()]).unwrap_err();
            assert!(error.message.contains(name), "{error}");
        }
    }

    /// A kubeconfig Secret that names files of the controller's machine (its own ServiceAccount
    /// token, say, sent to the Secret's server) or a plugin not on the allowlist is refused.
    #[test]
    fn a_kubeconfig_secret_names_no_file_and_runs_no_unlisted_plugin() {
        let kubeconfig = |user: &str, cluster: &str| {
            secret(
                serde_json::json!({KUBECONFIG_LABEL: "edge"}),
                serde_json::json!({"kubeconfig": format!(
                    r#"apiVersion: v1
kind: Config
current-context: c
contexts: [{{name: c, context: {{cluster: k, user: u}}}}]
clusters: [{{name: k, cluster: {{server: "https://10.0.0.9"{cluster}}}}}]
users: [{{name: u, user: {{{user}}}}}]
"#
                )}),
            )
        };
        for (user, cluster, field) in [
            (
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "",
                "kubeconfig: users[u].user.tokenFile",
            ),
            (
                "client-certificate: /etc/x.crt, client-key: /etc/x.key",
                "",
                "kubeconfig: users[u].user.client-certificate",
            ),
            (
                "token: t",
                ", certificate-authority: /etc/ca.crt",
                "kubeconfig: clusters[k].cluster.certificate-authority",
            ),
            (
                "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}",
                "",
                "kubeconfig: users[u].user.exec",
            ),
            (
                "auth-provider: {name: oidc}",
                "",
                "kubeconfig: users[u].user.auth-provider",
            ),
        ] {
            let error = Spoke::from_secret(&kubeconfig(user, cluster)).unwrap_err();
            assert_eq!(error.field, field, "{error}");
        }
        let exec = kubeconfig(
            "exec: {apiVersion: client.authentication.k8s.io/v1, command: /usr/local/bin/auth}",
            "",
        );
        let spoke = Spoke::from_secret_allowing(&exec, &["/usr/local/bin/auth".into()]).unwrap();
        let plugin = spoke.kubeconfig.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert!(matches!(
            plugin.interactive_mode,
            Some(kube::config::ExecInteractiveMode::Never)
        ));
        assert!(Spoke::from_secret(&kubeconfig("token: t", "")).is_ok());
    }

    /// Argo CD's EKS Secret: the cluster's name, a role and a profile are kept for the token
    /// minter, and the client configuration has no credentials of its own.
    #[tokio::test]
    async fn an_eks_secret_is_a_spoke_whose_tokens_are_minted() {
        let eks = |server: &str, config: serde_json::Value| {
            secret(
                serde_json::json!({ARGOCD_SECRET_TYPE: "cluster"}),
                serde_json::json!({"name": "prod-eu-1", "server": server, "config": config.to_string()}),
            )
        };
        let config = serde_json::json!({
            "awsAuthConfig": {
                "clusterName": "prod-eu-1",
                "roleARN": "arn:aws:iam::123456789012:role/flotilla",
                "profile": "fleet"
            },
            "tlsClientConfig": {"caData": "QQ=="}
        });
        let endpoint = "https://0123456789ABCDEF0123456789ABCDEF.gr7.eu-west-1.eks.amazonaws.com";
        let spoke = Spoke::from_secret(&eks(endpoint, config.clone())).unwrap();
        assert_eq!(
            spoke.aws_auth,
            Some(crate::eks::AwsAuth {
                cluster_name: "prod-eu-1".into(),
                role_arn: Some("arn:aws:iam::123456789012:role/flotilla".into()),
                profile: Some("fleet".into()),
            })
        );
        let client_config = spoke.config().await.unwrap();
        assert!(client_config.auth_info.token.is_none() && client_config.auth_info.exec.is_none());
        // The token goes to EKS's endpoints only, unless the admin names more servers; never
        // over an unchecked connection.
        let elsewhere =
            Spoke::from_secret(&eks("https://collector.example:443", config.clone())).unwrap_err();
        assert_eq!(elsewhere.field, "server", "{elsewhere}");
        assert!(
            elsewhere
                .message
                .contains("\"collector.example\" is not an EKS API server")
        );
        assert!(
            Spoke::from_secret(&eks(
                "https://eks.amazonaws.com.evil.example",
                config.clone()
            ))
            .is_err()
        );
        let policy = SpokePolicy {
            eks_servers: vec!["127.0.0.1".into()],
            ..SpokePolicy::default()
        };
        assert!(
            Spoke::from_secret_with(&eks("https://127.0.0.1:6443", config.clone()), &policy)
                .is_ok()
        );
        assert!(Spoke::from_secret_with(&eks(endpoint, config.clone()), &policy).is_err());
        let mut insecure = config.clone();
        insecure["tlsClientConfig"] = serde_json::json!({"insecure": true});
        assert_eq!(
            Spoke::from_secret(&eks(endpoint, insecure))
                .unwrap_err()
                .field,
            "config.tlsClientConfig.insecure"
        );
        let mut basic = config;
        basic["username"] = serde_json::json!("admin");
        assert_eq!(
            Spoke::from_secret(&eks(endpoint, basic)).unwrap_err().field,
            "config.awsAuthConfig"
        );
        assert!(
            Spoke::from_secret(&argo(serde_json::json!({"bearerToken": "t"})))
                .unwrap()
                .aws_auth
                .is_none()
        );
    }

    #[test]
    fn a_secret_that_cannot_be_used_names_itself_and_the_field() {
        let field = |s: &Secret| Spoke::from_secret(s).unwrap_err().field;
        assert_eq!(
            field(&argo(
                serde_json::json!({"awsAuthConfig": {"clusterName": " "}})
            )),
            "config.awsAuthConfig.clusterName"
        );
        assert_eq!(
            field(&argo(
                serde_json::json!({"awsAuthConfig": {"roleARN": "x"}})
            )),
            "config.awsAuthConfig"
        );
        assert_eq!(
            field(&argo(serde_json::json!({
                "awsAuthConfig": {"clusterName": "x"}, "bearerToken": "t"
            }))),
            "config.awsAuthConfig"
        );
        assert_eq!(
            field(&argo(
                serde_json::json!({"execProviderConfig": {"command": "x"}})
            )),
            "config.execProviderConfig"
        );
        assert_eq!(
            field(&argo(
                serde_json::json!({"execProviderConfig": {"args": []}})
            )),
            "config.execProviderConfig"
        );
        assert_eq!(field(&argo(serde_json::json!({}))), "config");
        assert_eq!(
            field(&argo(serde_json::json!({
                "bearerToken": "t", "tlsClientConfig": {"caData": "not base64!"}
            }))),
            "config.tlsClientConfig.caData"
        );
        assert_eq!(
            field(&argo(serde_json::json!({
                "tlsClientConfig": {"certData": "QQ=="}
            }))),
            "config.tlsClientConfig"
        );
        let garbled = secret(
            serde_json::json!({ARGOCD_SECRET_TYPE: "cluster"}),
            serde_json::json!({"server": "https://x", "config": "{not json"}),
        );
        let error = Spoke::from_secret(&garbled).unwrap_err();
        assert_eq!(error.field, "config");
        assert!(
            error
                .to_string()
                .starts_with("Secret argocd/eu-1: config: "),
            "{error}"
        );
        let serverless = secret(
            serde_json::json!({ARGOCD_SECRET_TYPE: "cluster"}),
            serde_json::json!({"name": "x", "config": "{}"}),
        );
        assert_eq!(field(&serverless), "server");
        let other = secret(serde_json::json!({"app": "x"}), serde_json::json!({}));
        assert!(!is_spoke_secret(&other));
        assert_eq!(field(&other), "metadata.labels");
    }

    #[test]
    fn a_kubeconfig_secret_is_a_spoke_named_by_its_label() {
        let kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster: {server: \"https://10.0.0.2:6443\", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n";
        let s = secret(
            serde_json::json!({KUBECONFIG_LABEL: "prod-us-1"}),
            serde_json::json!({ "kubeconfig": kubeconfig }),
        );
        let spoke = Spoke::from_secret(&s).unwrap();
        assert_eq!(spoke.name, "prod-us-1");
        assert_eq!(spoke.server, "https://10.0.0.2:6443");
        // Read from `data` (bytes) as the API server answers, not only `stringData`.
        let mut stored = s.clone();
        stored.data = Some(BTreeMap::from([(
            "kubeconfig".to_owned(),
            k8s_openapi::ByteString(kubeconfig.as_bytes().to_vec()),
        )]));
        stored.string_data = None;
        assert_eq!(Spoke::from_secret(&stored).unwrap().server, spoke.server);
        let empty = secret(
            serde_json::json!({KUBECONFIG_LABEL: "x"}),
            serde_json::json!({"kubeconfig": "apiVersion: v1\nkind: Config\n"}),
        );
        assert_eq!(Spoke::from_secret(&empty).unwrap_err().field, "kubeconfig");
    }
}
