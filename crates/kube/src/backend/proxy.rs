//! The cluster's way in for metric providers that live in it (a Fleet cluster's
//! `metrics.via: apiserver`): an in-cluster Service address reached through the API server's
//! service proxy, `/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/PATH?QUERY`, with the
//! cluster's own client (its credentials, its TLS checks, its bound on requests in flight).
//!
//! The requests go through the cluster's second client (`ClusterClients::proxy`: no retries, no
//! read timeout, a bound of its own). The API server answers for itself when it cannot proxy
//! (no such Service: 404; no endpoints: 503; RBAC: 403); such an answer is a Kubernetes
//! `Status`, told apart from the Service's own and returned as an error naming the cluster, the
//! Service and the API server's words (a 404 as `NoService`, so that the provider may look the
//! name up outside the cluster, as a Pod's resolver would).

use std::pin::Pin;

use flotilla_core::analysis::{ProxyError, ServiceProxy, ServiceRequest, ServiceResponse};
use flotilla_core::spec::common::is_dns_label;
use http_body_util::BodyExt;
use serde_json::Value;

use super::KubeBackend;

/// The API server's path for `request`'s Service, in `namespace` when the address gave none.
pub fn proxy_path(request: &ServiceRequest, namespace: &str) -> Result<String, String> {
    let namespace = request.namespace.as_deref().unwrap_or(namespace);
    for (what, name) in [
        ("Service", request.service.as_str()),
        ("namespace", namespace),
    ] {
        if !is_dns_label(name) {
            return Err(format!(
                "{name:?} is not a {what} name (a DNS label: lower-case letters, digits and '-', at most 63)"
            ));
        }
    }
    if !matches!(request.scheme.as_str(), "http" | "https") {
        return Err(format!("scheme {:?} cannot be proxied", request.scheme));
    }
    if !request.path_and_query.starts_with('/') {
        return Err(format!(
            "path {:?} does not start with '/'",
            request.path_and_query
        ));
    }
    Ok(format!(
        "/api/v1/namespaces/{namespace}/services/{}:{}:{}/proxy{}",
        request.scheme, request.service, request.port, request.path_and_query
    ))
}

/// The API server's own words when `body` is a Kubernetes `Status` (its answer when it could not
/// proxy), else None (the Service answered).
fn api_server_status(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    (value["kind"] == "Status" && value["apiVersion"] == "v1")
        .then(|| value["message"].as_str().unwrap_or("no message").to_owned())
}

/// The RBAC verb of an HTTP method on a subresource, as the API server's request info maps it.
fn verb_of(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "get",
    }
}

impl KubeBackend {
    async fn proxy(&self, request: ServiceRequest) -> Result<ServiceResponse, ProxyError> {
        let cluster = &self.cluster;
        let failed = ProxyError::Failed;
        let path = proxy_path(&request, self.namespace())
            .map_err(|e| failed(format!("cluster {cluster:?}: {e}")))?;
        let client = self
            .clients()
            .await
            .map_err(|e| failed(e.to_string()))?
            .proxy;
        let mut builder = http::Request::builder()
            .method(request.method.as_str())
            .uri(&path);
        for (name, value) in &request.headers {
            if !matches!(name.as_str(), "host" | "authorization" | "content-length") {
                builder = builder.header(name.as_str(), value.as_slice());
            }
        }
        let outgoing = builder
            .body(kube::client::Body::from(request.body))
            .map_err(|e| failed(format!("cluster {cluster:?}: {e}")))?;
        let max = request.max_body;
        let exchange = async {
            let response = client.send(outgoing).await.map_err(|e| {
                format!(
                    "cluster {cluster:?}: the API server's service proxy: {}",
                    crate::chain::error_chain(&e)
                )
            })?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::Limited::new(body, max)
                .collect()
                .await
                .map_err(|e| format!("cluster {cluster:?}: reading the Service's answer: {e}"))?
                .to_bytes()
                .to_vec();
            Ok::<_, String>((parts, body))
        };
        let (parts, body) = tokio::time::timeout(request.timeout, exchange)
            .await
            .map_err(|_| {
                failed(format!(
                    "cluster {cluster:?}: no answer through the API server's service proxy within {}s",
                    request.timeout.as_secs_f64()
                ))
            })?
            .map_err(failed)?;
        let status = parts.status.as_u16();
        if !parts.status.is_success()
            && let Some(message) = api_server_status(&body)
        {
            let namespace = request.namespace.as_deref().unwrap_or(self.namespace());
            let said = format!(
                "cluster {cluster:?}: the API server did not proxy to Service {namespace}/{} port {}: HTTP {status}: {message}",
                request.service, request.port
            );
            return Err(match status {
                404 => ProxyError::NoService(said),
                403 => failed(format!(
                    "{said} (the controller needs `{}` on `services/proxy` named `{}:{}:{}` in namespace {namespace})",
                    verb_of(&request.method),
                    request.scheme,
                    request.service,
                    request.port
                )),
                _ => failed(said),
            });
        }
        Ok(ServiceResponse {
            status,
            headers: parts
                .headers
                .iter()
                .filter(|(name, _)| {
                    !matches!(name.as_str(), "content-length" | "transfer-encoding")
                })
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect(),
            body,
        })
    }
}

impl ServiceProxy for KubeBackend {
    fn send<'a>(
        &'a self,
        request: ServiceRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ServiceResponse, ProxyError>> + Send + 'a>> {
        Box::pin(self.proxy(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(service: &str, namespace: Option<&str>, path: &str) -> ServiceRequest {
        ServiceRequest {
            method: "GET".into(),
            scheme: "http".into(),
            service: service.into(),
            namespace: namespace.map(str::to_owned),
            port: 9090,
            path_and_query: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: std::time::Duration::from_secs(1),
            max_body: 1024,
        }
    }

    #[test]
    fn the_proxy_path_names_the_namespace_service_scheme_and_port() {
        assert_eq!(
            proxy_path(
                &request(
                    "prometheus",
                    Some("monitoring"),
                    "/api/v1/query?query=up%7Bjob%3D%22a%22%7D"
                ),
                "payments"
            )
            .unwrap(),
            "/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy/api/v1/query?query=up%7Bjob%3D%22a%22%7D"
        );
        let mut tls = request("metrics", None, "/");
        tls.scheme = "https".into();
        assert_eq!(
            proxy_path(&tls, "payments").unwrap(),
            "/api/v1/namespaces/payments/services/https:metrics:9090/proxy/"
        );
    }

    #[test]
    fn names_that_could_leave_the_path_are_refused() {
        for (service, namespace) in [
            ("a/b", None),
            ("prometheus", Some("..")),
            ("", None),
            ("Prometheus", None),
            ("-x", None),
            ("x:1", None),
        ] {
            assert!(
                proxy_path(&request(service, namespace, "/"), "default").is_err(),
                "{service:?} {namespace:?}"
            );
        }
        assert!(proxy_path(&request("p", None, "api"), "default").is_err());
    }

    #[test]
    fn the_api_servers_own_answers_are_told_from_the_services() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no endpoints available for service \"prometheus\"","reason":"ServiceUnavailable","code":503}"#;
        assert_eq!(
            api_server_status(status).as_deref(),
            Some("no endpoints available for service \"prometheus\"")
        );
        assert_eq!(
            api_server_status(br#"{"status":"error","error":"x"}"#),
            None
        );
        assert_eq!(api_server_status(b"not json"), None);
        assert_eq!(
            [verb_of("GET"), verb_of("POST"), verb_of("PUT")],
            ["get", "create", "update"]
        );
    }
}
