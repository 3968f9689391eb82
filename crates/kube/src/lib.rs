//! Flotilla's Kubernetes adapter: Argo-labelled Rollouts driven through a cluster's API server as
//! Argo Rollouts' controller drives them. [`pod_template_hash`] (the core's) is Argo's hash that
//! names a Rollout's ReplicaSets, bit for bit; [`backend`] is the core's cluster-backend port over one
//! cluster ([`KubeBackend`]); [`crds`] are the CustomResourceDefinitions of Flotilla's own kinds;
//! [`spokes`] reads spoke clusters from Argo CD's cluster Secrets and kubeconfig Secrets, and
//! [`eks`] mints the EKS tokens of those that name `awsAuthConfig`; [`hub`]
//! watches a hub's API server for the desired state and the spokes, and writes the fleets'
//! summaries there; [`state`] keeps the controller's state and operators' commands as objects
//! in the hub; [`install`] prints the manifests that install Flotilla in a hub and its
//! spokes.

pub mod backend;
mod chain;
pub mod crds;
pub mod eks;
pub mod hub;
pub mod install;
pub mod spokes;
pub mod state;

pub use backend::KubeBackend;
pub use backend::clients::KubeClients;
pub use flotilla_core::rollout::pod_template_hash::{HashError, go_json, pod_template_hash};
