//! Per-cluster overlays: what one cluster's desired spec changes in the fleet's Rollout (the
//! version, the first container's args and env), and the controller's pins, which hold a
//! cluster on a known-good image while one fleet revision is rejected for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use serde::{Deserialize, Serialize};

use crate::spec::rollout::Rollout;

/// One cluster's overlay on a fleet rollout's Rollout.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverlay {
    /// Pins the cluster to this image: it stays there while the fleet moves on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Replaces the first container's args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Set in the first container's env (a name already there takes this value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The controller's pin, active only while the fleet's revision is the one it rejects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Pin>,
}

/// A controller-written pin: the cluster stays on `image` while the fleet's desired revision is
/// `rejects`; any other revision (a fix-forward) lifts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// The fleet revision rejected for this cluster.
    pub rejects: String,
    /// The image the cluster stays on meanwhile.
    pub image: String,
}

impl ClusterOverlay {
    /// The image the cluster is held to while the fleet's revision is `revision`: the overlay's
    /// own `image`, else an active pin's.
    pub fn pinned_image(&self, revision: &str) -> Option<&str> {
        self.image.as_deref().or_else(|| {
            self.pin
                .as_ref()
                .filter(|p| p.rejects == revision)
                .map(|p| p.image.as_str())
        })
    }

    /// Whether the overlay changes the spec beyond the image (args or env).
    pub fn edits_spec(&self) -> bool {
        self.args.is_some() || !self.env.is_empty()
    }

    /// `rollout` with this overlay's args and env applied, and `image` (when given) as the first
    /// container's image. A Rollout without a container is returned as is.
    pub fn apply(&self, rollout: &Rollout, image: Option<&str>) -> Rollout {
        let mut next = rollout.clone();
        let Some(container) = next
            .spec
            .template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .and_then(|s| s.containers.first_mut())
        else {
            return next;
        };
        if let Some(image) = image {
            container.image = Some(image.to_owned());
        }
        if let Some(args) = &self.args {
            container.args = Some(args.clone());
        }
        if !self.env.is_empty() {
            let env = container.env.get_or_insert_with(Vec::new);
            for (name, value) in &self.env {
                match env.iter_mut().find(|e| &e.name == name) {
                    Some(e) => {
                        e.value = Some(value.clone());
                        e.value_from = None;
                    }
                    None => env.push(EnvVar {
                        name: name.clone(),
                        value: Some(value.clone()),
                        value_from: None,
                    }),
                }
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout() -> Rollout {
        serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "a"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [
                {"name": "a", "image": "a:1", "env": [{"name": "MODE", "value": "x"}]}]}},
            "strategy": {"canary": {"steps": [{"setWeight": 20}]}}
        }}))
        .unwrap()
    }

    #[test]
    fn an_overlay_sets_image_args_and_env_of_the_first_container() {
        let overlay = ClusterOverlay {
            args: Some(vec!["--fast".into()]),
            env: [("MODE".into(), "y".into()), ("NEW".into(), "1".into())].into(),
            ..ClusterOverlay::default()
        };
        let out = overlay.apply(&rollout(), Some("a:2"));
        let c = &out.spec.template.unwrap().spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("a:2"));
        assert_eq!(c.args, Some(vec!["--fast".to_owned()]));
        let env: Vec<(String, Option<String>)> = c
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect();
        assert_eq!(
            env,
            vec![
                ("MODE".into(), Some("y".into())),
                ("NEW".into(), Some("1".into()))
            ]
        );
    }

    #[test]
    fn a_pin_holds_only_while_the_revision_it_rejects_is_desired() {
        let overlay = ClusterOverlay {
            pin: Some(Pin {
                rejects: "bad".into(),
                image: "a:1".into(),
            }),
            ..ClusterOverlay::default()
        };
        assert_eq!(overlay.pinned_image("bad"), Some("a:1"));
        assert_eq!(overlay.pinned_image("fixed"), None);
        let own = ClusterOverlay {
            image: Some("a:0".into()),
            ..overlay
        };
        assert_eq!(own.pinned_image("fixed"), Some("a:0"));
    }
}
