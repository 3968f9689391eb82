//! Where the desired state comes from: manifest files, or a Git repository at a branch (polled,
//! and on demand), with per-cluster overlays (`clusters/<cluster>.yaml`), and the durable
//! changes the controller commits back to Git (a whole-fleet revert, or pins of the failed
//! clusters).
//!
//! An overlay file, `clusters/<cluster>.yaml` under the manifests' directory:
//!
//! ```yaml
//! rollout: payment-api            # the Rollout it changes for this cluster (required)
//! image: payment-api:1.8.3        # holds the cluster on this image while the fleet moves on
//! args: ["--region=us-east"]      # replaces the first container's args
//! env: {DB_POOL: "32"}            # set in the first container's env
//! pin: {rejects: 5e1f…, image: payment-api:1.8.3}   # written by the controller
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

use flotilla_core::diagnostic::{Diagnostic, Severity};
use flotilla_core::fleet::{ClusterOverlay, Pin};
use flotilla_core::lint::{self, Options};
use flotilla_core::manifest::located::{ConfigError, parse_located};
use flotilla_core::manifest::{self, LoadedManifest};
use flotilla_core::spec::Manifest;
use flotilla_core::spec::analysis::AnalysisTemplate;
use flotilla_core::spec::fleet::{Fleet, FleetRollout};
use flotilla_core::spec::rollout::Rollout;
use flotilla_git::{Checkout, Identity, Pushed};

use super::ServeError;
use super::config::{GitConfig, SourceConfig};
use super::record::Desired;
use crate::files;

/// The desired state's source.
pub enum Source {
    /// Files on disk, read at start.
    Files(PathBuf),
    /// A Git repository.
    Git(Box<GitSource>),
}

/// A Git repository at a branch.
pub struct GitSource {
    checkout: Mutex<Checkout>,
    /// The settings.
    pub config: GitConfig,
    /// How often to poll, ms.
    pub interval_ms: u64,
    identity: Identity,
    last_head: Mutex<Option<String>>,
}

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

impl Source {
    /// Opens the source (cloning the repository when it is Git).
    pub fn open(config: &SourceConfig) -> Result<Source, ServeError> {
        match config {
            SourceConfig::Files(path) => Ok(Source::Files(path.clone())),
            SourceConfig::Git {
                git,
                interval_ms,
                cache,
            } => {
                let checkout = Checkout::open(&git.url, &git.branch, cache)
                    .map_err(|e| ServeError::Invalid(e.to_string()))?;
                let identity = git.identity.as_ref().map_or_else(
                    || Identity {
                        name: "flotilla-controller".into(),
                        email: "flotilla@localhost".into(),
                    },
                    |i| Identity {
                        name: i.name.clone(),
                        email: i.email.clone(),
                    },
                );
                Ok(Source::Git(Box::new(GitSource {
                    checkout: Mutex::new(checkout),
                    config: git.clone(),
                    interval_ms: *interval_ms,
                    identity,
                    last_head: Mutex::new(None),
                })))
            }
        }
    }

    /// The desired state now, and the commit it came from (empty for files).
    pub fn load(&self) -> Result<(DesiredSet, String), ServeError> {
        match self {
            Source::Files(path) => {
                let (manifest_files, overlays) = files::split_overlays(std::slice::from_ref(path))
                    .map_err(|e| ServeError::Invalid(e.to_string()))?;
                let (manifests, diagnostics) = files::load_files(&manifest_files)
                    .map_err(|e| ServeError::Invalid(e.to_string()))?;
                Ok((
                    desired_from(
                        &manifests,
                        diagnostics,
                        &overlays,
                        &path.display().to_string(),
                    ),
                    String::new(),
                ))
            }
            Source::Git(git) => {
                let checkout = git.checkout.lock().expect("checkout lock");
                let head = checkout
                    .fetch()
                    .map_err(|e| ServeError::Invalid(e.to_string()))?;
                let desired = git.load_at(&checkout, &head)?;
                *git.last_head.lock().expect("head lock") = Some(head.clone());
                Ok((desired, head))
            }
        }
    }

    /// For Git: the desired state when the branch moved since the last load.
    pub fn poll(&self) -> Option<Result<(DesiredSet, String), ServeError>> {
        let Source::Git(git) = self else {
            return None;
        };
        let checkout = git.checkout.lock().expect("checkout lock");
        let head = match checkout.fetch() {
            Ok(h) => h,
            Err(e) => return Some(Err(ServeError::Io(e.to_string()))),
        };
        let mut last = git.last_head.lock().expect("head lock");
        if last.as_deref() == Some(head.as_str()) {
            return None;
        }
        let result = git.load_at(&checkout, &head).map(|d| (d, head.clone()));
        *last = Some(head);
        Some(result)
    }

    /// The poll interval (Git only).
    pub fn interval_ms(&self) -> Option<u64> {
        match self {
            Source::Git(git) => Some(git.interval_ms),
            Source::Files(_) => None,
        }
    }

    /// Commits a durable change (Git only) on the watched branch or, with `proposeOnly`, on a
    /// branch of its own, as the controller's identity, never forced (re-applied on a moved
    /// head). Returns the commit and the branch, or None when Git already says it.
    pub fn commit_change(
        &self,
        change: &GitChange,
    ) -> Result<Option<(String, String)>, ServeError> {
        let Source::Git(git) = self else {
            return Ok(None);
        };
        let branch = if git.config.propose_only {
            change.proposal_branch.clone()
        } else {
            git.config.branch.clone()
        };
        let prefix = git.config.path.trim_matches('/').to_owned();
        let message = format!(
            "{}\n\nCommitted by the Flotilla controller {} <{}>.\n\n{}",
            change.body.trim_end(),
            git.identity.name,
            git.identity.email,
            change.trailers
        );
        let checkout = git.checkout.lock().expect("checkout lock");
        let pushed = checkout
            .push_change(&branch, &git.identity, &message, |files| {
                edit_files(files, &prefix, change)
            })
            .map_err(|e| ServeError::Io(e.to_string()))?;
        Ok(match pushed {
            Pushed::Commit { id, .. } => Some((id, branch)),
            Pushed::NothingToDo => None,
        })
    }
}

impl GitSource {
    fn load_at(&self, checkout: &Checkout, head: &str) -> Result<DesiredSet, ServeError> {
        let files = checkout
            .files(head, &self.config.path)
            .map_err(|e| ServeError::Invalid(e.to_string()))?;
        let short = &head[..head.len().min(12)];
        let prefix = self.config.path.trim_matches('/');
        let mut manifests = Vec::new();
        let mut diagnostics = Vec::new();
        let mut overlays = Vec::new();
        for (path, bytes) in files.iter().filter(|(p, _)| is_manifest(p)) {
            let inner = path
                .strip_prefix(prefix)
                .map_or(path.as_str(), |p| p.trim_start_matches('/'));
            if let Some((cluster, dir)) = overlay_name(inner) {
                overlays.push((format!("{path}@{short}"), cluster, dir, bytes.clone()));
                continue;
            }
            let load = manifest::load_bytes(&format!("{path}@{short}"), bytes);
            manifests.extend(load.manifests);
            diagnostics.extend(load.diagnostics);
        }
        Ok(desired_from(
            &manifests,
            diagnostics,
            &overlays,
            &format!("{}@{short}:{}", self.config.url, self.config.path),
        ))
    }
}

fn is_manifest(path: &str) -> bool {
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
struct OverlayFile {
    rollout: String,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pin: Option<PinFile>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PinFile {
    rejects: String,
    image: String,
}

/// The edit of a durable change, applied to the files at the branch's head (again on a new
/// head after a non-fast-forward). Returns whether anything changed.
fn edit_files(
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
fn overlay_rollout(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    parse_located::<OverlayFile>(text, "overlay", "an overlay")
        .ok()
        .map(|(file, _)| file.rollout)
}

/// An overlay's text with the controller's pin (one line, `pin: {rejects, image}`) in place of
/// any earlier one; everything else the file says is kept as written. A new file names the
/// Rollout; an existing file for another Rollout is refused.
fn pin_overlay(
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
fn revert_files(
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
fn replace_image(line: &str, image: &str, by: &str) -> String {
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

/// An overlay as read: (file, cluster, Rollout, overlay).
pub type ParsedOverlay = (String, String, String, ClusterOverlay);

/// Parses the overlay files: (display path, cluster, bytes) → (cluster, Rollout, overlay), or
/// errors naming file, line and field path.
fn parse_overlays(files: &[OverlaySource]) -> (Vec<ParsedOverlay>, Vec<ConfigError>) {
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
fn whole_file(path: &str, message: String) -> ConfigError {
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

/// The desired state as read from the source, fleet by fleet: one fleet's broken input never
/// stops another (per-fleet isolation).
#[derive(Debug, Clone, Default)]
pub struct DesiredSet {
    /// The FleetRollouts whose every input is present and valid.
    pub desired: Vec<Desired>,
    /// The FleetRollouts whose inputs have errors (file:line:column: field: message), by name.
    pub invalid: BTreeMap<String, Vec<String>>,
    /// Errors in files no FleetRollout's input came from (a document too broken to tell what it
    /// was): reported, and they keep every fleet that is not in `desired` on its last valid
    /// state, since such a fleet's inputs may be in them.
    pub unattributed: Vec<String>,
}

impl DesiredSet {
    /// Whether nothing was refused.
    pub fn is_clean(&self) -> bool {
        self.invalid.is_empty() && self.unattributed.is_empty()
    }

    /// Every error, one a line (fleet errors prefixed with the fleet).
    pub fn errors(&self) -> Vec<String> {
        let mut out = self.unattributed.clone();
        for (fleet, errors) in &self.invalid {
            out.extend(
                errors
                    .iter()
                    .map(|e| format!("FleetRollout {fleet:?}: {e}")),
            );
        }
        out
    }

    /// The errors that concern fleet `name`: its own, then those no fleet could be blamed for.
    pub fn errors_of(&self, name: &str) -> Vec<String> {
        let mut out = self.invalid.get(name).cloned().unwrap_or_default();
        out.extend(self.unattributed.iter().cloned());
        out
    }
}

/// Reads the secrets each desired state's templates name (`valueFrom.secretKeyRef`); a fleet
/// with a secret that cannot be read becomes invalid (the error names the environment variable
/// and the file it was looked for in), since its analysis could not run.
pub fn read_secrets(set: &mut DesiredSet, secrets: &crate::analysis::Secrets) {
    let mut valid = Vec::new();
    for mut desired in std::mem::take(&mut set.desired) {
        match read_secrets_of(&mut desired, secrets) {
            Ok(()) => valid.push(desired),
            Err(errors) => {
                let name = desired.fleet_rollout.metadata.name.clone();
                set.invalid
                    .entry(name.unwrap_or_default())
                    .or_default()
                    .extend(errors);
            }
        }
    }
    set.desired = valid;
}

/// [`read_secrets`] for one fleet's desired state: fills its `secrets`, or says which could not
/// be read.
pub fn read_secrets_of(
    desired: &mut Desired,
    secrets: &crate::analysis::Secrets,
) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let used = templates_run(
        Some(&desired.rollout),
        &desired.fleet_rollout,
        desired.templates.iter(),
    );
    for template in desired
        .templates
        .iter()
        .filter(|t| used.contains(t.metadata.name.as_deref().unwrap_or_default()))
    {
        for (i, arg) in template.spec.args.iter().enumerate() {
            let Some(secret) = arg.secret_key_ref() else {
                continue;
            };
            match secrets.read(&secret.name, &secret.key) {
                Ok(value) => {
                    desired
                        .secrets
                        .insert((secret.name.clone(), secret.key.clone()), value);
                }
                Err(e) => errors.push(format!(
                    "AnalysisTemplate {:?} spec.args[{i}].valueFrom.secretKeyRef: {e}",
                    template.metadata.name.clone().unwrap_or_default()
                )),
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The names of the templates a FleetRollout runs: those its Rollout and its `waveAnalysis`
/// name, and those they include (among `templates`).
fn templates_run<'a>(
    rollout: Option<&Rollout>,
    fleet_rollout: &FleetRollout,
    templates: impl Iterator<Item = &'a AnalysisTemplate> + Clone,
) -> BTreeSet<String> {
    let mut wanted: Vec<String> = rollout
        .map(Rollout::analysis_template_refs)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.template_name)
        .chain(
            fleet_rollout
                .spec
                .wave_analysis
                .iter()
                .flat_map(|w| w.templates.iter().map(|t| t.template_name.clone())),
        )
        .collect();
    let mut used = BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if used.insert(name.clone()) {
            for t in templates
                .clone()
                .filter(|t| t.metadata.name.as_deref() == Some(name.as_str()))
            {
                wanted.extend(t.spec.templates.iter().map(|r| r.template_name.clone()));
            }
        }
    }
    used
}

/// The manifests (kind, name) and files one FleetRollout's desired state is made of.
struct Inputs {
    names: BTreeSet<(&'static str, String)>,
    files: BTreeSet<String>,
    clusters: BTreeSet<String>,
}

/// Turns loaded manifests into the desired state of each FleetRollout. Every error (lint, an
/// overlay, a template the Rollout names that is not there, a cluster without an agent) is
/// attributed to the FleetRollouts whose inputs it concerns: by manifest (kind and name) when the
/// error names one, else by file; an overlay's error by the cluster it is for. `serve` needs
/// every template it runs, so a missing one is an error here, not lint's warning.
pub fn desired_from(
    manifests: &[LoadedManifest],
    mut diagnostics: Vec<Diagnostic>,
    overlay_files: &[OverlaySource],
    origin: &str,
) -> DesiredSet {
    diagnostics.extend(lint::lint(manifests, Options::default()));
    for d in &mut diagnostics {
        if d.rule == "ref/template-not-found" {
            d.severity = Severity::Error;
            d.message = format!(
                "{} (`flotilla serve` runs only templates it has: an analysis that cannot be planned would let the canary go on unjudged)",
                d.message
                    .split(" (it may exist")
                    .next()
                    .unwrap_or(&d.message)
            );
        }
    }
    let mut fleets = Vec::new();
    let mut fleet_rollouts = Vec::new();
    let mut rollouts = Vec::new();
    let mut templates = Vec::new();
    for loaded in manifests {
        match &loaded.manifest {
            Manifest::Fleet(f) => {
                for (i, cluster) in f.spec.clusters.iter().enumerate() {
                    if cluster
                        .endpoint
                        .as_ref()
                        .and_then(|e| e.agent.as_ref())
                        .is_none()
                    {
                        diagnostics.push(loaded.diagnostic(
                            Severity::Error,
                            "serve/no-agent",
                            format!("spec.clusters[{i}].endpoint"),
                            format!(
                                "cluster {:?} has no agent endpoint; `flotilla serve` drives only agents",
                                cluster.name
                            ),
                        ));
                    }
                }
                fleets.push((loaded, f.as_ref().clone()));
            }
            Manifest::FleetRollout(f) => fleet_rollouts.push((loaded, f.as_ref().clone())),
            Manifest::Rollout(r) => rollouts.push((loaded, r.as_ref().clone())),
            Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                templates.push((loaded, t.as_ref().clone()))
            }
            _ => {}
        }
    }
    let (overlays, overlay_errors) = check_overlays(manifests, overlay_files);
    let name = |m: &Option<String>| m.clone().unwrap_or_default();
    // Each FleetRollout's inputs.
    let mut inputs: BTreeMap<String, Inputs> = BTreeMap::new();
    for (loaded, fleet_rollout) in &fleet_rollouts {
        let mut input = Inputs {
            names: BTreeSet::new(),
            files: BTreeSet::new(),
            clusters: BTreeSet::new(),
        };
        let fr_name = name(&fleet_rollout.metadata.name);
        input.names.insert(("FleetRollout", fr_name.clone()));
        input.files.insert(loaded.file.clone());
        input
            .names
            .insert(("Fleet", fleet_rollout.spec.fleet.clone()));
        input
            .names
            .insert(("Rollout", fleet_rollout.spec.rollout.clone()));
        for (l, f) in &fleets {
            if name(&f.metadata.name) == fleet_rollout.spec.fleet {
                input.files.insert(l.file.clone());
                input
                    .clusters
                    .extend(f.spec.clusters.iter().map(|c| c.name.clone()));
            }
        }
        let rollout = rollouts
            .iter()
            .find(|(_, r)| name(&r.metadata.name) == fleet_rollout.spec.rollout);
        if let Some((l, _)) = rollout {
            input.files.insert(l.file.clone());
        }
        let used = templates_run(
            rollout.map(|(_, r)| r),
            fleet_rollout,
            templates.iter().map(|(_, t)| t),
        );
        for t in used {
            for (l, template) in &templates {
                if name(&template.metadata.name) == t {
                    input.files.insert(l.file.clone());
                }
            }
            input.names.insert(("AnalysisTemplate", t.clone()));
            input.names.insert(("ClusterAnalysisTemplate", t));
        }
        inputs.insert(fr_name, input);
    }
    let mut set = DesiredSet::default();
    for d in diagnostics.iter().filter(|d| d.severity == Severity::Error) {
        let by_name: Vec<&String> = inputs
            .iter()
            .filter(|(_, i)| {
                !d.kind.is_empty()
                    && !d.name.is_empty()
                    && i.names.iter().any(|(k, n)| *k == d.kind && *n == d.name)
            })
            .map(|(f, _)| f)
            .collect();
        let own = (d.kind == "FleetRollout" && !d.name.is_empty()).then(|| d.name.clone());
        let concerned: Vec<&String> = if !by_name.is_empty() {
            by_name
        } else if let Some(name) = &own {
            // A FleetRollout too broken to load: refused under its own name.
            vec![name]
        } else if d.kind.is_empty() || d.name.is_empty() {
            inputs
                .iter()
                .filter(|(_, i)| i.files.contains(&d.file))
                .map(|(f, _)| f)
                .collect()
        } else {
            // A manifest no FleetRollout uses: reported, but it holds no fleet back.
            Vec::new()
        };
        if concerned.is_empty() {
            set.unattributed.push(d.to_string());
        }
        for fleet in concerned {
            set.invalid
                .entry(fleet.clone())
                .or_default()
                .push(d.to_string());
        }
    }
    for error in &overlay_errors {
        let cluster = overlay_files
            .iter()
            .find(|(path, ..)| *path == error.file)
            .map(|(_, cluster, ..)| cluster.clone());
        let concerned: Vec<&String> = inputs
            .iter()
            .filter(|(_, i)| cluster.as_ref().is_none_or(|c| i.clusters.contains(c)))
            .map(|(f, _)| f)
            .collect();
        if concerned.is_empty() {
            set.unattributed.push(error.to_string());
        }
        for fleet in concerned {
            set.invalid
                .entry(fleet.clone())
                .or_default()
                .push(error.to_string());
        }
    }
    if fleet_rollouts.is_empty() && set.unattributed.is_empty() {
        set.unattributed
            .push(format!("{origin}: no FleetRollout to drive"));
    }
    let all_templates: Vec<AnalysisTemplate> = templates.iter().map(|(_, t)| t.clone()).collect();
    for (_, fleet_rollout) in fleet_rollouts {
        let fr_name = name(&fleet_rollout.metadata.name);
        if set.invalid.contains_key(&fr_name) {
            continue;
        }
        let fleet = fleets
            .iter()
            .find(|(_, f)| name(&f.metadata.name) == fleet_rollout.spec.fleet)
            .map(|(_, f)| f.clone());
        let rollout = rollouts
            .iter()
            .find(|(_, r)| name(&r.metadata.name) == fleet_rollout.spec.rollout)
            .map(|(_, r)| r.clone());
        // Lint has already reported missing references as errors of this FleetRollout.
        if let (Some(fleet), Some(rollout)) = (fleet, rollout) {
            let overlays = overlays
                .iter()
                .filter(|(_, _, r, _)| *r == fleet_rollout.spec.rollout)
                .map(|(_, c, _, o)| (c.clone(), o.clone()))
                .collect();
            set.desired.push(Desired {
                fleet,
                fleet_rollout,
                rollout,
                templates: all_templates.clone(),
                overlays,
                secrets: BTreeMap::new(),
            });
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::controller::config::SourceConfig;

    fn sh(dir: &Path, args: &[&str]) -> String {
        flotilla_git::cli::git(
            dir,
            args,
            &flotilla_git::Identity::new("Dev", "dev@example.test"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The errors of a polled desired state that was refused (nothing of it may be desired).
    fn refused(polled: Option<Result<(DesiredSet, String), ServeError>>) -> String {
        let (set, _) = polled.expect("the branch moved").expect("Git was read");
        assert!(set.desired.is_empty(), "{:?}", set.desired.len());
        set.errors().join("\n")
    }

    fn manifests() -> String {
        let controls: Vec<String> = (0..4)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect();
        crate::demo::manifests(&controls, 1.0)
    }

    /// Two fleets in two files: the second's FleetRollout is broken, a template the first names
    /// is gone, then a secret is missing: each refusal concerns only its fleet.
    #[test]
    fn one_fleets_broken_input_never_holds_another_back() {
        let load = |files: &[(&str, String)]| {
            let mut manifests = Vec::new();
            let mut diagnostics = Vec::new();
            for (name, text) in files {
                let load = manifest::load_bytes(name, text.as_bytes());
                manifests.extend(load.manifests);
                diagnostics.extend(load.diagnostics);
            }
            desired_from(&manifests, diagnostics, &[], "test")
        };
        let payments = manifests();
        // The second fleet: its own FleetRollout and Rollout, on the same Fleet and templates.
        let second = |text: &str| {
            text.split("---\n")
                .filter(|doc| doc.contains("kind: FleetRollout") || doc.contains("kind: Rollout"))
                .map(|doc| {
                    doc.replace("name: payment-api", "name: ledger")
                        .replace("rollout: payment-api", "rollout: ledger")
                })
                .collect::<Vec<_>>()
                .join("---\n")
        };
        let ledger = second(&payments);
        assert!(ledger.contains("kind: FleetRollout"), "{ledger}");
        let clean = load(&[
            ("payments.yaml", payments.clone()),
            ("ledger.yaml", ledger.clone()),
        ]);
        assert!(clean.is_clean(), "{:?}", clean.errors());
        assert_eq!(clean.desired.len(), 2);
        // A typo in the second fleet's FleetRollout: the first is untouched.
        let broken = ledger.replacen("bakeTime:", "bakeTme:", 1);
        assert_ne!(broken, ledger);
        let set = load(&[("payments.yaml", payments.clone()), ("ledger.yaml", broken)]);
        let names: Vec<_> = set
            .desired
            .iter()
            .map(|d| d.fleet_rollout.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["payment-api"], "{:?}", set.errors());
        let errors = &set.invalid["ledger"];
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("ledger.yaml:") && e.contains("bakeTme")),
            "{errors:?}"
        );
        // A document too broken to tell what it was: the clean fleets still run.
        let set = load(&[
            ("payments.yaml", payments.clone()),
            ("ledger.yaml", ledger.clone()),
            ("junk.yaml", "kind: [unclosed\n".into()),
        ]);
        assert_eq!(set.desired.len(), 2, "{:?}", set.errors());
        assert!(
            set.unattributed.iter().any(|e| e.starts_with("junk.yaml:")),
            "{:?}",
            set.unattributed
        );
        // The second fleet names a template nobody has: an error for it alone.
        let missing = ledger.replacen("templateName: ", "templateName: gone-", 1);
        let set = load(&[
            ("payments.yaml", payments.clone()),
            ("ledger.yaml", missing),
        ]);
        assert_eq!(set.desired.len(), 1, "{:?}", set.errors());
        assert!(
            set.invalid["ledger"]
                .iter()
                .any(|e| e.contains("ref/template-not-found") && e.contains("error")),
            "{:?}",
            set.invalid
        );
    }

    #[test]
    fn a_missing_secret_refuses_only_the_fleet_whose_analysis_reads_it() {
        let text = manifests();
        let load = manifest::load_bytes("m.yaml", text.as_bytes());
        let mut set = desired_from(&load.manifests, load.diagnostics, &[], "test");
        assert_eq!(set.desired.len(), 1);
        // Add a secret argument to every template the fleet runs.
        for t in &mut set.desired[0].templates {
            t.spec.args.push(
                serde_json::from_value(serde_json::json!({
                    "name": "api-token",
                    "valueFrom": {"secretKeyRef": {"name": "flotilla-test-absent", "key": "token"}}
                }))
                .unwrap(),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let secrets = crate::analysis::Secrets {
            dir: Some(dir.path().to_path_buf()),
        };
        let mut missing = set.clone();
        read_secrets(&mut missing, &secrets);
        assert!(missing.desired.is_empty());
        let errors = &missing.invalid["payment-api"];
        assert!(
            errors[0].contains("secretKeyRef")
                && errors[0].contains("FLOTILLA_SECRET_FLOTILLA_TEST_ABSENT_TOKEN"),
            "{errors:?}"
        );
        std::fs::create_dir_all(dir.path().join("flotilla-test-absent")).unwrap();
        std::fs::write(dir.path().join("flotilla-test-absent/token"), "hunter2\n").unwrap();
        read_secrets(&mut set, &secrets);
        assert_eq!(set.desired.len(), 1, "{:?}", set.errors());
        assert_eq!(
            set.desired[0].secrets[&("flotilla-test-absent".to_owned(), "token".to_owned())],
            "hunter2"
        );
    }

    #[test]
    fn a_revert_changes_exactly_the_rollouts_image() {
        let released = manifests().replace(
            "image: \"payment-api:1.8.3\"}]",
            "image: \"payment-api:1.9.0\"}]  # was payment-api:1.9.0-rc1",
        );
        let text = format!(
            "{released}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: notes}}\ndata: {{image: payment-api:1.9.0, debug: payment-api:1.9.0-debug}}\n"
        );
        let mut files = BTreeMap::from([(
            "fleets/payments/all.yaml".to_owned(),
            text.clone().into_bytes(),
        )]);
        assert!(revert_files(
            &mut files,
            "fleets/payments",
            "payment-api",
            "payment-api:1.9.0",
            "payment-api:1.8.3"
        ));
        let reverted =
            String::from_utf8(files.remove("fleets/payments/all.yaml").unwrap()).unwrap();
        let expected = text.replace(
            "image: \"payment-api:1.9.0\"}]",
            "image: \"payment-api:1.8.3\"}]",
        );
        assert_eq!(reverted, expected);
        assert!(reverted.contains("# was payment-api:1.9.0-rc1"));
        assert!(
            reverted.contains("data: {image: payment-api:1.9.0, debug: payment-api:1.9.0-debug}")
        );
        assert_eq!(
            replace_image(
                "x: \"reg/app:1\", y: app:1, z: app:10, w: app:1@sha",
                "app:1",
                "app:0"
            ),
            "x: \"reg/app:1\", y: app:0, z: app:10, w: app:1@sha"
        );
    }

    /// A bare remote with the demo fleet under fleets/payments/ (plus `extra` files), and a
    /// developer's clone of it.
    fn repository(root: &Path, extra: &[(&str, &str)]) -> (std::path::PathBuf, std::path::PathBuf) {
        let work = root.join("work");
        std::fs::create_dir_all(work.join("fleets/payments/clusters")).unwrap();
        std::fs::write(work.join("fleets/payments/manifests.yaml"), manifests()).unwrap();
        for (path, text) in extra {
            std::fs::write(work.join(path), text).unwrap();
        }
        sh(&work, &["init", "-q", "-b", "main"]);
        sh(&work, &["add", "."]);
        sh(&work, &["commit", "-q", "-m", "payments fleet"]);
        sh(root, &["init", "-q", "--bare", "-b", "main", "fleet.git"]);
        sh(&work, &["push", "-q", "../fleet.git", "main"]);
        sh(&work, &["remote", "add", "origin", "../fleet.git"]);
        (root.join("fleet.git"), work)
    }

    fn open(root: &Path, bare: &Path, propose_only: bool) -> Source {
        Source::open(&SourceConfig::Git {
            git: GitConfig {
                url: bare.display().to_string(),
                branch: "main".into(),
                path: "fleets/payments".into(),
                interval: None,
                propose_only,
                identity: None,
                correct_drift: false,
            },
            interval_ms: 1000,
            cache: root.join("cache"),
        })
        .unwrap()
    }

    fn pin_change(revision: &str) -> GitChange {
        GitChange {
            rollout: "payment-api".into(),
            revision: revision.into(),
            edit: Edit::Pin {
                clusters: vec![("prod-us-east".into(), "payment-api:1.8.3".into())],
            },
            body: "flotilla: pin prod-us-east of payment-api to payment-api:1.8.3".into(),
            trailers: "Flotilla-Cluster: prod-us-east\nFlotilla-Metric: latency-p95=[0.31]\n"
                .into(),
            proposal_branch: format!("flotilla/pin-payment-api-{revision}"),
            decision: flotilla_core::fleet::DurableChange {
                revision: revision.into(),
                edit: flotilla_core::fleet::DurableEdit::Pin,
                bad_image: "payment-api:1.9.0".into(),
                good_image: "payment-api:1.8.3".into(),
                failed: Vec::new(),
                validated: Vec::new(),
            },
        }
    }

    #[test]
    fn overlays_are_read_per_cluster_and_bad_ones_name_file_line_and_field() {
        let root = tempfile::tempdir().unwrap();
        let good = "rollout: payment-api\nimage: payment-api:1.8.2\nenv: {DB_POOL: \"32\"}\n";
        let (bare, work) = repository(
            root.path(),
            &[("fleets/payments/clusters/prod-ap-south.yaml", good)],
        );
        let source = open(root.path(), &bare, false);
        let desired = source.load().unwrap().0.desired;
        let overlay = &desired[0].overlays["prod-ap-south"];
        assert_eq!(overlay.image.as_deref(), Some("payment-api:1.8.2"));
        assert_eq!(overlay.env["DB_POOL"], "32");
        // A misspelt field: refused with file, line and field; nothing applied.
        let path = work.join("fleets/payments/clusters/prod-ap-south.yaml");
        std::fs::write(
            &path,
            "rollout: payment-api\nenv: {DB_POOL: \"32\"}\nimgae: x\n",
        )
        .unwrap();
        sh(&work, &["commit", "-q", "-am", "typo"]);
        sh(&work, &["push", "-q", "origin", "main"]);
        let error = refused(source.poll());
        assert!(
            error.contains("fleets/payments/clusters/prod-ap-south.yaml@")
                && error.contains(":3:")
                && error.contains("imgae"),
            "{error}"
        );
        // A cluster no Fleet has, and a value of the wrong type.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(
            work.join("fleets/payments/clusters/prod-mars.yaml"),
            "rollout: payment-api\nimage: payment-api:1.8.2\n",
        )
        .unwrap();
        std::fs::write(
            work.join("fleets/payments/clusters/prod-us-east.yaml"),
            "rollout: payment-api\nargs: [\"--x\"]\nenv: {A: [1]}\n",
        )
        .unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-q", "-m", "more"]);
        sh(&work, &["push", "-q", "origin", "main"]);
        let error = refused(source.poll());
        assert!(
            error.contains("prod-mars.yaml@") && error.contains("cluster \"prod-mars\""),
            "{error}"
        );
        assert!(
            error.contains("prod-us-east.yaml@")
                && error.contains(":3:")
                && error.contains("env.A"),
            "{error}"
        );
        // Two overlays for one cluster, and a JSON overlay: refused by name.
        std::fs::remove_file(work.join("fleets/payments/clusters/prod-mars.yaml")).unwrap();
        std::fs::write(
            work.join("fleets/payments/clusters/prod-us-east.yaml"),
            "rollout: payment-api\nargs: [\"--x\"]\n",
        )
        .unwrap();
        std::fs::write(
            work.join("fleets/payments/clusters/prod-us-east.yml"),
            "rollout: payment-api\nenv: {A: \"1\"}\n",
        )
        .unwrap();
        std::fs::write(
            work.join("fleets/payments/clusters/prod-eu-west.json"),
            "{\"rollout\": \"payment-api\"}\n",
        )
        .unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-q", "-m", "two and json"]);
        sh(&work, &["push", "-q", "origin", "main"]);
        let error = refused(source.poll());
        assert!(
            error.contains(
                "a second overlay of Rollout \"payment-api\" for cluster \"prod-us-east\""
            ),
            "{error}"
        );
        assert!(
            error.contains("prod-eu-west.json@") && error.contains("overlays are YAML"),
            "{error}"
        );
        // A pin the controller left for a cluster since removed from the Fleet is inert.
        sh(
            &work,
            &["rm", "-q", "fleets/payments/clusters/prod-us-east.yml"],
        );
        sh(
            &work,
            &["rm", "-q", "fleets/payments/clusters/prod-eu-west.json"],
        );
        std::fs::write(
            work.join("fleets/payments/clusters/prod-mars.yaml"),
            "rollout: payment-api\npin: {rejects: \"abc\", image: \"payment-api:1.8.3\"}\n",
        )
        .unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-q", "-m", "mars decommissioned"]);
        sh(&work, &["push", "-q", "origin", "main"]);
        let desired = source.poll().unwrap().unwrap().0.desired;
        assert_eq!(
            desired[0].overlays["prod-us-east"].args.as_deref(),
            Some(&["--x".to_owned()][..])
        );
    }

    /// Two FleetRollouts of one directory share prod-us-east: the first keeps its overlay at
    /// `clusters/prod-us-east.yaml`, the second's pin goes to `clusters/checkout-api/…`.
    #[test]
    fn a_cluster_shared_by_two_rollouts_gets_each_ones_pin_apart() {
        let root = tempfile::tempdir().unwrap();
        let checkout: String = manifests()
            .split("\n---\n")
            .filter(|d| d.contains("kind: FleetRollout") || d.contains("kind: Rollout"))
            .map(|d| d.replace("payment-api", "checkout-api"))
            .collect::<Vec<_>>()
            .join("\n---\n");
        let (bare, work) = repository(
            root.path(),
            &[
                ("fleets/payments/checkout.yaml", checkout.as_str()),
                (
                    "fleets/payments/clusters/prod-us-east.yaml",
                    "rollout: payment-api\nenv: {DB_REGION: us-east-1}\n",
                ),
            ],
        );
        let source = open(root.path(), &bare, false);
        let mut change = pin_change("abc123");
        change.rollout = "checkout-api".into();
        source.commit_change(&change).unwrap().unwrap();
        let text = sh(
            &bare,
            &[
                "show",
                "main:fleets/payments/clusters/checkout-api/prod-us-east.yaml",
            ],
        );
        assert!(
            text.starts_with("rollout: checkout-api\n") && text.contains("abc123"),
            "{text}"
        );
        let desired = source.load().unwrap().0.desired;
        let of = |rollout: &str| {
            desired
                .iter()
                .find(|d| d.fleet_rollout.spec.rollout == rollout)
                .unwrap()
                .overlays["prod-us-east"]
                .clone()
        };
        assert_eq!(
            of("checkout-api").pinned_image("abc123"),
            Some("payment-api:1.8.3")
        );
        assert_eq!(of("payment-api").env["DB_REGION"], "us-east-1");
        assert_eq!(of("payment-api").pin, None);
        // A file under another Rollout's directory is refused by name.
        let mut bad = pin_change("def456");
        bad.rollout = "checkout-api".into();
        let mut files = BTreeMap::from([(
            "fleets/payments/clusters/checkout-api/prod-us-east.yaml".to_owned(),
            b"rollout: payment-api\n".to_vec(),
        )]);
        let error = edit_files(&mut files, "fleets/payments", &bad).unwrap_err();
        assert!(error.contains("not \"checkout-api\""), "{error}");
        sh(&work, &["pull", "-q", "--no-rebase", "origin", "main"]);
        std::fs::write(
            work.join("fleets/payments/clusters/checkout-api/prod-eu-west.yaml"),
            "rollout: payment-api\n",
        )
        .unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "-q", "-m", "misplaced"]);
        sh(&work, &["push", "-q", "origin", "main"]);
        let error = refused(source.poll());
        assert!(
            error.contains("checkout-api/prod-eu-west.yaml@")
                && error.contains("is under clusters/checkout-api/"),
            "{error}"
        );
    }

    #[test]
    fn a_pin_goes_into_the_clusters_existing_yml_overlay() {
        let root = tempfile::tempdir().unwrap();
        let (bare, _work) = repository(
            root.path(),
            &[(
                "fleets/payments/clusters/prod-us-east.yml",
                "rollout: payment-api\nenv: {DB_REGION: us-east-1}\n",
            )],
        );
        let source = open(root.path(), &bare, false);
        source
            .commit_change(&pin_change("abc123"))
            .unwrap()
            .unwrap();
        let text = sh(
            &bare,
            &["show", "main:fleets/payments/clusters/prod-us-east.yml"],
        );
        assert!(
            text.contains("DB_REGION") && text.contains("abc123"),
            "{text}"
        );
        let listed = sh(&bare, &["ls-tree", "-r", "--name-only", "main"]);
        assert!(!listed.contains("prod-us-east.yaml"), "{listed}");
        let desired = source.load().unwrap().0.desired;
        let overlay = &desired[0].overlays["prod-us-east"];
        assert_eq!(overlay.pinned_image("abc123"), Some("payment-api:1.8.3"));
        assert_eq!(overlay.env["DB_REGION"], "us-east-1");
    }

    #[test]
    fn a_pin_follows_a_human_commit_landing_between_fetch_and_push_and_keeps_it() {
        let root = tempfile::tempdir().unwrap();
        let human = "rollout: payment-api\nenv: {DB_POOL: \"16\"}\n";
        let (bare, work) = repository(
            root.path(),
            &[("fleets/payments/clusters/prod-us-east.yaml", human)],
        );
        let source = open(root.path(), &bare, false);
        let Source::Git(git) = &source else {
            unreachable!()
        };
        let change = pin_change("abc123");
        let mut calls = 0;
        let checkout = git.checkout.lock().unwrap();
        checkout
            .push_change("main", &git.identity, "pin", |files| {
                calls += 1;
                if calls == 1 {
                    // A teammate edits the same overlay after our fetch.
                    std::fs::write(
                        work.join("fleets/payments/clusters/prod-us-east.yaml"),
                        "rollout: payment-api\nenv: {DB_POOL: \"24\"}\n# tuned by hand\n",
                    )
                    .unwrap();
                    sh(&work, &["commit", "-q", "-am", "a teammate's tuning"]);
                    sh(&work, &["push", "-q", "origin", "main"]);
                }
                edit_files(files, "fleets/payments", &change)
            })
            .unwrap();
        drop(checkout);
        assert_eq!(calls, 2, "the pin was applied again on the new head");
        assert_eq!(
            sh(&bare, &["log", "-1", "--format=%s", "main~1"]),
            "a teammate's tuning"
        );
        let text = sh(
            &bare,
            &["show", "main:fleets/payments/clusters/prod-us-east.yaml"],
        );
        assert_eq!(
            text,
            "rollout: payment-api\nenv: {DB_POOL: \"24\"}\n# tuned by hand\npin: {rejects: \"abc123\", image: \"payment-api:1.8.3\"}"
        );
        let desired = source.load().unwrap().0.desired;
        let overlay = &desired[0].overlays["prod-us-east"];
        assert_eq!(overlay.env["DB_POOL"], "24");
        assert_eq!(overlay.pinned_image("abc123"), Some("payment-api:1.8.3"));
        assert_eq!(overlay.pinned_image("fixed"), None);
        // Pinning again replaces the pin, never duplicates it.
        source
            .commit_change(&pin_change("def456"))
            .unwrap()
            .unwrap();
        let text = sh(
            &bare,
            &["show", "main:fleets/payments/clusters/prod-us-east.yaml"],
        );
        assert_eq!(text.matches("pin:").count(), 1, "{text}");
        assert!(text.contains("def456"), "{text}");
    }

    #[test]
    fn propose_only_writes_the_pin_to_a_branch_and_an_unreachable_remote_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let (bare, _work) = repository(root.path(), &[]);
        let source = open(root.path(), &bare, true);
        let main = sh(&bare, &["rev-parse", "main"]);
        let (commit, branch) = source
            .commit_change(&pin_change("abc123"))
            .unwrap()
            .unwrap();
        assert_eq!(branch, "flotilla/pin-payment-api-abc123");
        assert_eq!(sh(&bare, &["rev-parse", "main"]), main, "main untouched");
        assert_eq!(sh(&bare, &["rev-parse", &branch]), commit);
        let message = sh(&bare, &["log", "-1", "--format=%B", &branch]);
        assert!(
            message.contains("Committed by the Flotilla controller flotilla-controller")
                && message.ends_with("Flotilla-Metric: latency-p95=[0.31]"),
            "{message}"
        );
        assert!(
            sh(
                &bare,
                &[
                    "show",
                    &format!("{branch}:fleets/payments/clusters/prod-us-east.yaml")
                ]
            )
            .starts_with("rollout: payment-api\npin: ")
        );
        // The remote goes away: a clear error, nothing pushed; back again: pushed.
        let away = root.path().join("away.git");
        std::fs::rename(&bare, &away).unwrap();
        let error = source
            .commit_change(&pin_change("def456"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("fleet.git"), "{error}");
        std::fs::rename(&away, &bare).unwrap();
        assert!(
            source
                .commit_change(&pin_change("def456"))
                .unwrap()
                .is_some()
        );
    }
}
