//! The Kubernetes types the manifests use as they are: object metadata, pod templates and label
//! selectors, and the kinds lint reads beside a Rollout (the Services and Ingresses it references).
//!
//! Lint only reads the Services' and Ingresses' selectors and names, and reports the other kinds
//! in a file (VirtualService, ConfigMap, …) as ignored.

/// A Kubernetes Service.
pub type Service = k8s_openapi::api::core::v1::Service;
/// A Kubernetes Ingress.
pub type Ingress = k8s_openapi::api::networking::v1::Ingress;
/// A Kubernetes pod template.
pub type PodTemplateSpec = k8s_openapi::api::core::v1::PodTemplateSpec;
/// Kubernetes object metadata, as every manifest carries it.
pub type ObjectMeta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// A Kubernetes label selector.
pub type LabelSelector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
