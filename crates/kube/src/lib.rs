//! Flotilla's Kubernetes adapter: what Argo Rollouts' controller computes for a Rollout, bit for
//! bit, so that Flotilla can drive Argo-labelled Rollouts beside it. So far: the pod-template
//! hash that names a Rollout's ReplicaSets ([`pod_template_hash`]).

pub mod pod_template_hash;

pub use pod_template_hash::{HashError, go_json, pod_template_hash};
