//! Per-cluster overlays: `clusters/<cluster>.yaml` (or `clusters/<rollout>/<cluster>.yaml`)
//! under the manifests' directory, read and checked against the Fleets and Rollouts they name,
//! with errors naming file, line and field path.

use std::collections::BTreeMap;

use flotilla_core::fleet::{ClusterOverlay, Pin};
use flotilla_core::manifest::LoadedManifest;
use flotilla_core::manifest::located::{ConfigError, parse_located};
use flotilla_core::spec::Manifest;
use flotilla_core::spec::fleet::{Fleet, FleetRollout};

pub(crate) fn is_manifest(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml") || path.ends_with(".json")
}

/// The cluster an overlay file is for, and the Rollout directory it is under if any:
/// `clusters/<cluster>.yaml` (or `.yml`; a `.json` one is recognised so that it can be refused
/// by name), or `clusters/<rollout>/<cluster>.yaml` for FleetRollouts of one directory that share
/// a cluster, under the manifests' directory.
pub(crate) fn overlay_name(inner: &str) -> Option<(String, Option<String>)> {
    let name = inner.strip_prefix("clusters/")?;
    let (dir, file) = match name.split_once('/') {
        Some((dir, file)) => (Some(dir), file),
        None => (None, name),
    };
    if file.contains('/') || !is_manifest(file) || dir.is_some_and(str::is_empty) {
        return None;
    }
    let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
    (!stem.is_empty()).then(|| (stem.to_owned(), dir.map(str::to_owned)))
}

/// An overlay file as found: (display path, cluster, Rollout directory, bytes).
pub type OverlaySource = (String, String, Option<String>, Vec<u8>);

/// An overlay file as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct OverlayFile {
    pub(crate) rollout: String,
    #[serde(default)]
    pub(crate) image: Option<String>,
    #[serde(default)]
    pub(crate) args: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) pin: Option<PinFile>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PinFile {
    rejects: String,
    image: String,
}

/// An overlay as read: (file, cluster, Rollout, overlay).
pub type ParsedOverlay = (String, String, String, ClusterOverlay);

/// Parses the overlay files: (display path, cluster, bytes) → (cluster, Rollout, overlay), or
/// errors naming file, line and field path.
pub(crate) fn parse_overlays(files: &[OverlaySource]) -> (Vec<ParsedOverlay>, Vec<ConfigError>) {
    let mut overlays = Vec::new();
    let mut errors = Vec::new();
    for (path, cluster, dir, bytes) in files {
        let Ok(text) = std::str::from_utf8(bytes) else {
            errors.push(whole_file(path, "an overlay must be UTF-8".into()));
            continue;
        };
        match parse_located::<OverlayFile>(text, path, "an overlay") {
            Ok((file, locations)) => {
                let at = |field: &str, message: String| {
                    ConfigError::at(path, &locations, field, message)
                };
                if let Some(dir) = dir
                    && *dir != file.rollout
                {
                    errors.push(at(
                        "rollout",
                        format!(
                            "the file is under clusters/{dir}/, so it is an overlay of Rollout {dir:?}, not {:?}",
                            file.rollout
                        ),
                    ));
                    continue;
                }
                if file.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
                    errors.push(at("image", "the image is empty".into()));
                    continue;
                }
                if let Some(pin) = &file.pin
                    && (pin.image.trim().is_empty() || pin.rejects.trim().is_empty())
                {
                    errors.push(at("pin", "a pin needs `rejects` and `image`".into()));
                    continue;
                }
                let overlay = ClusterOverlay {
                    image: file.image,
                    args: file.args,
                    env: file.env,
                    pin: file.pin.map(|p| Pin {
                        rejects: p.rejects,
                        image: p.image,
                    }),
                };
                overlays.push((path.clone(), cluster.clone(), file.rollout, overlay));
            }
            Err(e) => errors.push(e),
        }
    }
    (overlays, errors)
}

/// An error about a whole overlay file (its first line).
pub(crate) fn whole_file(path: &str, message: String) -> ConfigError {
    ConfigError {
        file: path.to_owned(),
        line: 1,
        column: 1,
        field: String::new(),
        message,
    }
}

/// Reads and checks overlay files against the manifests, as the daemon does: each names a
/// Rollout some FleetRollout drives, on a cluster of that FleetRollout's Fleet; one file per
/// cluster and Rollout; YAML only. Returns the overlays (file, cluster, Rollout, overlay) and
/// every error with its file, line and field. Lint reports the same errors.
pub fn check_overlays(
    manifests: &[LoadedManifest],
    overlay_files: &[OverlaySource],
) -> (Vec<ParsedOverlay>, Vec<ConfigError>) {
    let fleets: Vec<&Fleet> = manifests
        .iter()
        .filter_map(|m| match &m.manifest {
            Manifest::Fleet(f) => Some(f.as_ref()),
            _ => None,
        })
        .collect();
    let fleet_rollouts: Vec<&FleetRollout> = manifests
        .iter()
        .filter_map(|m| match &m.manifest {
            Manifest::FleetRollout(f) => Some(f.as_ref()),
            _ => None,
        })
        .collect();
    let (overlays, mut errors) = parse_overlays(overlay_files);
    let mut first_overlay: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for (path, cluster, rollout, overlay) in &overlays {
        // A Git path is shown as `<path>@<commit>`.
        let file = path
            .rsplit_once('@')
            .map_or(path.as_str(), |(file, _)| file);
        if path.ends_with(".json") || file.ends_with(".json") {
            errors.push(whole_file(
                path,
                format!(
                    "overlays are YAML (clusters/{cluster}.yaml or .yml): the controller writes its pins into them"
                ),
            ));
            continue;
        }
        if let Some(first) = first_overlay.insert((cluster, rollout), path) {
            errors.push(whole_file(
                path,
                format!(
                    "a second overlay of Rollout {rollout:?} for cluster {cluster:?}, beside {first}; keep one file per cluster and Rollout"
                ),
            ));
            continue;
        }
        // A pin the controller wrote for a cluster since removed from its Fleet holds nothing
        // (the cluster is gone): inert, like a lapsed pin, rather than a refusal of every commit.
        let pin_only = overlay.pin.is_some()
            && overlay.image.is_none()
            && overlay.args.is_none()
            && overlay.env.is_empty();
        let driven: Vec<&&FleetRollout> = fleet_rollouts
            .iter()
            .filter(|f| &f.spec.rollout == rollout)
            .collect();
        if driven.is_empty() {
            errors.push(ConfigError {
                field: "rollout".into(),
                ..whole_file(
                    path,
                    format!("no FleetRollout drives a Rollout named {rollout:?}"),
                )
            });
            continue;
        }
        let known = driven.iter().any(|f| {
            fleets.iter().any(|fleet| {
                fleet.metadata.name.as_deref() == Some(f.spec.fleet.as_str())
                    && fleet.spec.clusters.iter().any(|c| &c.name == cluster)
            })
        });
        if !known && !pin_only {
            errors.push(whole_file(
                path,
                format!(
                    "the file names cluster {cluster:?}, which is in no Fleet of Rollout {rollout:?} (overlays are clusters/<cluster>.yaml)"
                ),
            ));
        }
    }
    (overlays, errors)
}
