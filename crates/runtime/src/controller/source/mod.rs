//! Where the desired state comes from: manifest files, a Git repository at a branch (polled,
//! and on demand), or a hub cluster's API server (watched: `hub.rs`), with per-cluster overlays (`clusters/<cluster>.yaml`), and the durable
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

mod desired;
mod durable;
pub mod hub;

use std::path::PathBuf;
use std::sync::Mutex;

use flotilla_core::manifest::{self};
use flotilla_git::{Checkout, Identity, Pushed};

use super::ServeError;
use super::config::{GitConfig, SourceConfig};
use crate::files;

use crate::overlays::{is_manifest, overlay_name};
pub use desired::{DesiredSet, Spoke, desired_from, read_secrets, read_secrets_of};
pub(crate) use durable::edit_files;
pub use durable::{Edit, GitChange};

/// The desired state's source.
pub enum Source {
    /// Files on disk, read at start.
    Files(PathBuf),
    /// A Git repository.
    Git(Box<GitSource>),
    /// A hub cluster's API server.
    Hub(Box<hub::HubSource>),
}

/// How often a hub's watched copies are looked at for a change.
const HUB_POLL_MS: u64 = 500;

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

impl Source {
    /// Opens the source (cloning the repository when it is Git; connecting to the hub and
    /// listing it when it is one).
    pub fn open(config: &SourceConfig) -> Result<Source, ServeError> {
        match config {
            SourceConfig::Files(path) => Ok(Source::Files(path.clone())),
            SourceConfig::Hub(hub) => Ok(Source::Hub(Box::new(hub::HubSource::open(hub)?))),
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
                let mut manifests = Vec::new();
                let mut diagnostics = Vec::new();
                let mut config_maps = Vec::new();
                for file in &manifest_files {
                    let bytes = files::read_manifest_file(file)
                        .map_err(|e| ServeError::Invalid(e.to_string()))?;
                    let load = manifest::load_bytes(&file.display().to_string(), &bytes);
                    manifests.extend(load.manifests);
                    diagnostics.extend(load.diagnostics);
                    config_maps.extend(load.config_maps);
                }
                let mut set = desired_from(
                    &manifests,
                    diagnostics,
                    &overlays,
                    &path.display().to_string(),
                );
                set.config_maps = config_maps;
                Ok((set, String::new()))
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
            Source::Hub(hub) => Ok(hub.load()),
        }
    }

    /// For Git: the desired state when the branch moved since the last load; for a hub, when
    /// any object did.
    pub fn poll(&self) -> Option<Result<(DesiredSet, String), ServeError>> {
        let git = match self {
            Source::Git(git) => git,
            Source::Hub(hub) => return hub.poll().map(Ok),
            Source::Files(_) => return None,
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

    /// The poll interval (Git, and a hub's watched copies).
    pub fn interval_ms(&self) -> Option<u64> {
        match self {
            Source::Git(git) => Some(git.interval_ms),
            Source::Hub(_) => Some(HUB_POLL_MS),
            Source::Files(_) => None,
        }
    }

    /// Whether durable changes are committed (a Git source).
    pub fn is_git(&self) -> bool {
        matches!(self, Source::Git(_))
    }

    /// The hub, when the source is one.
    pub fn hub(&self) -> Option<&flotilla_kube::hub::Hub> {
        match self {
            Source::Hub(hub) => Some(hub.hub()),
            _ => None,
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
        let mut config_maps = Vec::new();
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
            config_maps.extend(load.config_maps);
        }
        let mut set = desired_from(
            &manifests,
            diagnostics,
            &overlays,
            &format!("{}@{short}:{}", self.config.url, self.config.path),
        );
        set.config_maps = config_maps;
        Ok(set)
    }
}

#[cfg(test)]
mod tests;
