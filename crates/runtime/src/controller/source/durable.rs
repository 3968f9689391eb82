//! The durable changes the controller commits to Git: a whole-fleet revert of the Rollout's
//! image, or pins of the failed clusters in their overlays, applied to the files at the branch's
//! head (again on a new head after a non-fast-forward).

use std::collections::BTreeMap;

use flotilla_core::manifest::located::parse_located;
use flotilla_core::manifest::{self};
use flotilla_core::spec::Manifest;

use crate::overlays::{OverlayFile, is_manifest};

/// A durable change to commit to Git.
#[derive(Debug, Clone)]
pub struct GitChange {
    /// The Rollout's name.
    pub rollout: String,
    /// The fleet revision it answers.
    pub revision: String,
    /// What it changes.
    pub edit: Edit,
    /// The commit message's subject and body (the controller's identity and the trailers are
    /// added when it is committed).
    pub body: String,
    /// The trailers (`Flotilla-Cluster: …`, `Flotilla-Metric: …`, `Flotilla-Revision: …`).
    pub trailers: String,
    /// A branch name for proposals.
    pub proposal_branch: String,
    /// The core's decision it carries out (recorded when it reached Git).
    pub decision: flotilla_core::fleet::DurableChange,
}

/// The edit of a [`GitChange`].
#[derive(Debug, Clone)]
pub enum Edit {
    /// The whole fleet's Rollout back to the previous image.
    Revert {
        /// The image to replace.
        bad_image: String,
        /// The image to restore.
        good_image: String,
    },
    /// Pins of the failed clusters in their overlays: (cluster, the image it stays on).
    Pin {
        /// The clusters and their images.
        clusters: Vec<(String, String)>,
    },
}

impl GitChange {
    /// What it does, in a few words (for the audit log).
    pub fn describe(&self) -> String {
        match &self.edit {
            Edit::Revert {
                bad_image,
                good_image,
            } => format!("durable rollback {bad_image} -> {good_image}"),
            Edit::Pin { clusters } => format!(
                "pin of {} (revision {})",
                clusters
                    .iter()
                    .map(|(c, i)| format!("{c} to {i}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.revision
            ),
        }
    }
}

/// The edit of a durable change, applied to the files at the branch's head (again on a new
/// head after a non-fast-forward). Returns whether anything changed.
pub(crate) fn edit_files(
    files: &mut BTreeMap<String, Vec<u8>>,
    prefix: &str,
    change: &GitChange,
) -> Result<bool, String> {
    match &change.edit {
        Edit::Revert {
            bad_image,
            good_image,
        } => Ok(revert_files(
            files,
            prefix,
            &change.rollout,
            bad_image,
            good_image,
        )),
        Edit::Pin { clusters } => {
            let mut changed = false;
            for (cluster, image) in clusters {
                // The Rollout's overlay for the cluster as it exists (`.yaml` or `.yml`;
                // `clusters/<cluster>` unless that is another Rollout's, then
                // `clusters/<rollout>/<cluster>`), else a new `.yaml` where it is free.
                let at = |dir: Option<&str>, ext: &str| {
                    let name = match dir {
                        Some(dir) => format!("clusters/{dir}/{cluster}.{ext}"),
                        None => format!("clusters/{cluster}.{ext}"),
                    };
                    if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    }
                };
                let existing = |dir: Option<&str>| {
                    ["yaml", "yml"]
                        .map(|ext| at(dir, ext))
                        .into_iter()
                        .find(|p| files.contains_key(p))
                };
                let nested = Some(change.rollout.as_str());
                let path = match (existing(None), existing(nested)) {
                    (_, Some(own)) => own,
                    (Some(flat), None)
                        if overlay_rollout(&files[&flat]).is_some_and(|r| r != change.rollout) =>
                    {
                        at(nested, "yaml")
                    }
                    (Some(flat), None) => flat,
                    (None, None) => at(None, "yaml"),
                };
                let before = files.get(&path).cloned();
                let text = match &before {
                    Some(bytes) => String::from_utf8(bytes.clone())
                        .map_err(|_| format!("{path} is not UTF-8"))?,
                    None => String::new(),
                };
                let edited = pin_overlay(&text, &path, &change.rollout, &change.revision, image)?;
                if Some(edited.as_bytes()) != before.as_deref() {
                    files.insert(path, edited.into_bytes());
                    changed = true;
                }
            }
            Ok(changed)
        }
    }
}

/// The Rollout an overlay file names, if it parses.
pub(crate) fn overlay_rollout(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    parse_located::<OverlayFile>(text, "overlay", "an overlay")
        .ok()
        .map(|(file, _)| file.rollout)
}

/// An overlay's text with the controller's pin (one line, `pin: {rejects, image}`) in place of
/// any earlier one; everything else the file says is kept as written. A new file names the
/// Rollout; an existing file for another Rollout is refused.
pub(crate) fn pin_overlay(
    text: &str,
    path: &str,
    rollout: &str,
    revision: &str,
    image: &str,
) -> Result<String, String> {
    let pin = format!("pin: {{rejects: \"{revision}\", image: \"{image}\"}}\n");
    if text.trim().is_empty() {
        return Ok(format!("rollout: {rollout}\n{pin}"));
    }
    let (file, _) = parse_located::<OverlayFile>(text, path, "an overlay")
        .map_err(|e| format!("cannot pin in {path}: {e}"))?;
    if file.rollout != rollout {
        return Err(format!(
            "cannot pin in {path}: it is the overlay of Rollout {:?}, not {rollout:?}",
            file.rollout
        ));
    }
    // Drop a top-level `pin:` entry (its line and the more-indented lines under it).
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        let top_level = !line.starts_with([' ', '\t']) && !line.trim().is_empty();
        if top_level {
            skipping = line.starts_with("pin:");
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(format!("{out}{pin}"))
}

/// In each manifest under `prefix` that holds the Rollout with the bad image, the bad image
/// becomes the good one: exactly the Rollout's first container image, where the loader located
/// it (another document using the same image, or a longer tag such as `1.9.0-debug`, is left
/// alone). Returns whether anything changed.
pub(crate) fn revert_files(
    files: &mut BTreeMap<String, Vec<u8>>,
    prefix: &str,
    rollout: &str,
    bad_image: &str,
    good_image: &str,
) -> bool {
    const IMAGE: &str = "spec.template.spec.containers[0].image";
    let mut changed = false;
    for (path, bytes) in files.iter_mut() {
        let inside = prefix.is_empty() || path.starts_with(&format!("{prefix}/"));
        if !inside || !is_manifest(path) {
            continue;
        }
        let lines: Vec<usize> = manifest::load_bytes(path, bytes)
            .manifests
            .iter()
            .filter(|m| {
                matches!(&m.manifest, Manifest::Rollout(r)
                    if r.metadata.name.as_deref() == Some(rollout)
                        && r.first_image() == Some(bad_image))
            })
            .filter_map(|m| m.locations.get(IMAGE).map(|l| l.line as usize))
            .collect();
        if lines.is_empty() {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes.clone()) else {
            continue;
        };
        let mut edited = String::with_capacity(text.len());
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if lines.contains(&(i + 1)) {
                edited.push_str(&replace_image(line, bad_image, good_image));
            } else {
                edited.push_str(line);
            }
        }
        if edited != text {
            *bytes = edited.into_bytes();
            changed = true;
        }
    }
    changed
}

/// `line` with each whole occurrence of `image` (not part of a longer reference such as
/// `registry/app:1.9.0-debug`) replaced by `by`.
pub(crate) fn replace_image(line: &str, image: &str, by: &str) -> String {
    let joined = |c: char| c.is_ascii_alphanumeric() || "._-/@".contains(c);
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(image) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + image.len()..].chars().next();
        let whole = !before.is_some_and(joined) && !after.is_some_and(|c| joined(c) || c == ':');
        out.push_str(&rest[..at]);
        out.push_str(if whole { by } else { image });
        rest = &rest[at + image.len()..];
    }
    out.push_str(rest);
    out
}
