//! The Kubernetes kinds lint reads beside a Rollout: Services and Ingresses it references.
//!
//! These use k8s-openapi's types as they are: lint only reads their selectors and names, and
//! reports the other kinds in a file (VirtualService, ConfigMap, …) as ignored.

/// A Kubernetes Service.
pub type Service = k8s_openapi::api::core::v1::Service;
/// A Kubernetes Ingress.
pub type Ingress = k8s_openapi::api::networking::v1::Ingress;
/// A Kubernetes pod template.
pub type PodTemplateSpec = k8s_openapi::api::core::v1::PodTemplateSpec;
/// A Kubernetes label selector.
pub type LabelSelector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
