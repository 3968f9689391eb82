//! Where the desired state comes from: manifest files, or a Git repository at a branch (polled,
//! and on demand), and the durable rollback the controller commits back to Git.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use flotilla_core::diagnostic::{Diagnostic, Severity};
use flotilla_core::lint::{self, Options};
use flotilla_core::manifest::{self, LoadedManifest};
use flotilla_core::spec::Manifest;
use flotilla_git::{Checkout, Identity, Pushed};

use super::ServeError;
use super::config::{GitConfig, SourceConfig};
use super::fleet::Desired;
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

/// A durable rollback to commit: the Rollout's image back to the previous one.
#[derive(Debug, Clone)]
pub struct Revert {
    /// The Rollout's name.
    pub rollout: String,
    /// The image to replace.
    pub bad_image: String,
    /// The image to restore.
    pub good_image: String,
    /// The commit message (with trailers).
    pub message: String,
    /// A branch name for proposals.
    pub proposal_branch: String,
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
    pub fn load(&self) -> Result<(Vec<Desired>, String), ServeError> {
        match self {
            Source::Files(path) => {
                let expanded = files::expand_paths(std::slice::from_ref(path))
                    .map_err(|e| ServeError::Invalid(e.to_string()))?;
                let (manifests, diagnostics) =
                    files::load_files(&expanded).map_err(|e| ServeError::Invalid(e.to_string()))?;
                Ok((
                    desired_from(&manifests, diagnostics, &path.display().to_string())?,
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
    pub fn poll(&self) -> Option<Result<(Vec<Desired>, String), ServeError>> {
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

    /// Commits a durable rollback (Git only): the Rollout's image back to the good one, on the
    /// watched branch or, with `proposeOnly`, on a branch of its own. Returns the commit and the
    /// branch, or None when Git already says it.
    pub fn commit_revert(&self, revert: &Revert) -> Result<Option<(String, String)>, ServeError> {
        let Source::Git(git) = self else {
            return Ok(None);
        };
        let branch = if git.config.propose_only {
            revert.proposal_branch.clone()
        } else {
            git.config.branch.clone()
        };
        let prefix = git.config.path.trim_matches('/').to_owned();
        let checkout = git.checkout.lock().expect("checkout lock");
        let pushed = checkout
            .push_change(&branch, &git.identity, &revert.message, |files| {
                Ok(revert_files(files, &prefix, revert))
            })
            .map_err(|e| ServeError::Io(e.to_string()))?;
        Ok(match pushed {
            Pushed::Commit { id, .. } => Some((id, branch)),
            Pushed::NothingToDo => None,
        })
    }
}

impl GitSource {
    fn load_at(&self, checkout: &Checkout, head: &str) -> Result<Vec<Desired>, ServeError> {
        let files = checkout
            .files(head, &self.config.path)
            .map_err(|e| ServeError::Invalid(e.to_string()))?;
        let short = &head[..head.len().min(12)];
        let mut manifests = Vec::new();
        let mut diagnostics = Vec::new();
        for (path, bytes) in files.iter().filter(|(p, _)| is_manifest(p)) {
            let load = manifest::load_bytes(&format!("{path}@{short}"), bytes);
            manifests.extend(load.manifests);
            diagnostics.extend(load.diagnostics);
        }
        desired_from(
            &manifests,
            diagnostics,
            &format!("{}@{short}:{}", self.config.url, self.config.path),
        )
    }
}

fn is_manifest(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml") || path.ends_with(".json")
}

/// The edit of a durable rollback, applied to the files at the branch's head (again on a new
/// head after a non-fast-forward): in each manifest under `prefix` that holds the Rollout with
/// the bad image, the bad image becomes the good one. Returns whether anything changed.
fn revert_files(files: &mut BTreeMap<String, Vec<u8>>, prefix: &str, revert: &Revert) -> bool {
    let mut changed = false;
    for (path, bytes) in files.iter_mut() {
        let inside = prefix.is_empty() || path.starts_with(&format!("{prefix}/"));
        if !inside || !is_manifest(path) {
            continue;
        }
        let holds = manifest::load_bytes(path, bytes).manifests.iter().any(|m| {
            matches!(&m.manifest, Manifest::Rollout(r)
                if r.metadata.name.as_deref() == Some(revert.rollout.as_str())
                    && r.spec.template.as_ref().and_then(|t| t.spec.as_ref())
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.as_deref()) == Some(revert.bad_image.as_str()))
        });
        if !holds {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes.clone()) else {
            continue;
        };
        let edited = text.replace(&revert.bad_image, &revert.good_image);
        if edited != text {
            *bytes = edited.into_bytes();
            changed = true;
        }
    }
    changed
}

/// Every FleetRollout of a set of manifests with its Fleet, Rollout and templates. Lint errors
/// refuse the whole set (file, line, field path), as do clusters the daemon cannot drive.
pub fn desired_from(
    manifests: &[LoadedManifest],
    mut diagnostics: Vec<Diagnostic>,
    origin: &str,
) -> Result<Vec<Desired>, ServeError> {
    diagnostics.extend(lint::lint(manifests, Options::default()));
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
                fleets.push(f.as_ref().clone());
            }
            Manifest::FleetRollout(f) => fleet_rollouts.push(f.as_ref().clone()),
            Manifest::Rollout(r) => rollouts.push(r.as_ref().clone()),
            Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                templates.push(t.as_ref().clone())
            }
            _ => {}
        }
    }
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    if !errors.is_empty() {
        return Err(ServeError::Invalid(format!(
            "the manifests are invalid; nothing was started:\n{}",
            errors.join("\n")
        )));
    }
    if fleet_rollouts.is_empty() {
        return Err(ServeError::Invalid(format!(
            "{origin}: no FleetRollout to drive"
        )));
    }
    let mut desired = Vec::new();
    for fleet_rollout in fleet_rollouts {
        let name = |m: &Option<String>| m.clone().unwrap_or_default();
        let fleet = fleets
            .iter()
            .find(|f| name(&f.metadata.name) == fleet_rollout.spec.fleet)
            .cloned();
        let rollout = rollouts
            .iter()
            .find(|r| name(&r.metadata.name) == fleet_rollout.spec.rollout)
            .cloned();
        // Lint has already reported missing references as errors.
        if let (Some(fleet), Some(rollout)) = (fleet, rollout) {
            desired.push(Desired {
                fleet,
                fleet_rollout,
                rollout,
                templates: templates.clone(),
            });
        }
    }
    Ok(desired)
}
