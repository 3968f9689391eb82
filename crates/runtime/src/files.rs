//! Reading manifest files and directories from disk, and linting them as one set.

use std::path::{Path, PathBuf};

use flotilla_core::diagnostic::{Diagnostic, Severity};
use flotilla_core::lint::{self, Options};
use flotilla_core::manifest::{self, LoadedManifest, MAX_FILE_BYTES};

use crate::overlays::{OverlaySource, check_overlays, overlay_name};

/// Why a path could not be read at all (as opposed to content that is wrong).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path does not exist or cannot be opened.
    #[error("{path}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A directory held no manifest file.
    #[error("{path}: directory holds no .yaml, .yml or .json file")]
    EmptyDirectory {
        /// The directory as given.
        path: String,
    },
}

/// The result of linting a set of files.
#[derive(Debug, Default)]
pub struct LintReport {
    /// Every finding, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// How many manifests were decoded.
    pub manifests: usize,
    /// How many files were read.
    pub files: usize,
}

impl LintReport {
    /// Whether any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

/// Expands directories (recursively, sorted) into the manifest files they hold.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut files = Vec::new();
    for path in paths {
        let metadata = std::fs::metadata(path).map_err(|source| ReadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        if metadata.is_dir() {
            let before = files.len();
            collect_dir(path, &mut files)?;
            if files.len() == before {
                return Err(ReadError::EmptyDirectory {
                    path: path.display().to_string(),
                });
            }
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn collect_dir(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let io = |source| ReadError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for entry in entries {
        // Symbolic links to directories are not followed: a link cycle would never end.
        let is_link = entry
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        if entry.is_dir() && !is_link {
            collect_dir(&entry, files)?;
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(entry);
        }
    }
    Ok(())
}

/// Reads one file, refusing to read more than the manifest size limit into memory.
pub fn read_manifest_file(path: &Path) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let io = |source| ReadError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    // Read one byte past the limit so an oversized file is reported as such, not truncated.
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(bytes)
}

/// Loads every manifest of the given files; content problems become diagnostics.
pub fn load_files(files: &[PathBuf]) -> Result<(Vec<LoadedManifest>, Vec<Diagnostic>), ReadError> {
    let mut manifests = Vec::new();
    let mut diagnostics = Vec::new();
    for path in files {
        let bytes = read_manifest_file(path)?;
        let load = manifest::load_bytes(&path.display().to_string(), &bytes);
        manifests.extend(load.manifests);
        diagnostics.extend(load.diagnostics);
    }
    Ok((manifests, diagnostics))
}

/// Expands paths into manifest files and per-cluster overlay files: a file at
/// `clusters/<cluster>.yaml` (or `clusters/<rollout>/<cluster>.yaml`) under a directory argument
/// is an overlay (docs/controller.md), read as bytes; every other file is a manifest.
pub fn split_overlays(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<OverlaySource>), ReadError> {
    let mut manifests = Vec::new();
    let mut overlays = Vec::new();
    for path in paths {
        for file in expand_paths(std::slice::from_ref(path))? {
            let overlay = file
                .strip_prefix(path)
                .ok()
                .and_then(|p| p.to_str())
                .and_then(overlay_name);
            match overlay {
                Some((cluster, dir)) => {
                    let bytes = read_manifest_file(&file)?;
                    overlays.push((file.display().to_string(), cluster, dir, bytes));
                }
                None => manifests.push(file),
            }
        }
    }
    Ok((manifests, overlays))
}

/// Reads and lints files and directories as one set, so references across files resolve.
/// Overlay files under a directory are checked as the daemon reads them (rule `overlay`).
pub fn lint_paths(paths: &[PathBuf], options: Options) -> Result<LintReport, ReadError> {
    lint_loaded(paths, options).map(|(report, _)| report)
}

/// `flotilla lint --live`: [`lint_paths`], then the Rollouts that the Kubernetes clusters of each
/// linted Fleet hold (`rolloutSource: cluster`) read there and checked against the FleetRollouts
/// that deploy them ([`lint::lint_held`]).
pub async fn lint_paths_live(paths: &[PathBuf], options: Options) -> Result<LintReport, ReadError> {
    let (mut report, manifests) = lint_loaded(paths, options)?;
    let held = crate::controller::backends::held_rollouts(&manifests).await;
    report
        .diagnostics
        .extend(lint::lint_held(&manifests, &held, options.strict));
    lint::sort(&mut report.diagnostics);
    Ok(report)
}

fn lint_loaded(
    paths: &[PathBuf],
    options: Options,
) -> Result<(LintReport, Vec<LoadedManifest>), ReadError> {
    let (files, overlays) = split_overlays(paths)?;
    let (manifests, mut diagnostics) = load_files(&files)?;
    diagnostics.extend(lint::lint(&manifests, options));
    let (_, errors) = check_overlays(&manifests, &overlays);
    diagnostics.extend(errors.into_iter().map(|e| Diagnostic {
        severity: Severity::Error,
        rule: "overlay",
        file: e.file,
        line: e.line.max(1),
        column: e.column.max(1),
        kind: String::new(),
        name: String::new(),
        path: e.field,
        message: e.message,
    }));
    lint::sort(&mut diagnostics);
    let report = LintReport {
        diagnostics,
        manifests: manifests.len(),
        files: files.len() + overlays.len(),
    };
    Ok((report, manifests))
}
