//! Flotilla's Git adapter: a repository at a branch as the desired state, and changes to it
//! committed and pushed without ever forcing.
//!
//! A [`Checkout`] is a local clone (with a work tree) of one remote branch, kept in a cache
//! directory the controller owns. [`Checkout::fetch`] brings the remote branch's head;
//! [`Checkout::files`] reads the manifests under a directory at a commit;
//! [`Checkout::push_change`] applies an edit to the files at the remote head, commits it with
//! the controller's identity, and pushes it as a fast-forward. When the remote moved meanwhile
//! (a non-fast-forward), it fetches, resets to the new head, applies the **edit function again
//! on the new files** (never a textual rebase of a stale diff) and retries.
//!
//! Transports: local paths, `file://` and `git://` (libgit2's own transports). https and ssh are
//! not built (they would need OpenSSL and libssh2).

pub mod cli;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use git2::{
    FetchOptions, IndexAddOption, PushOptions, RemoteCallbacks, Repository, ResetType, Signature,
};

/// Why a Git operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// libgit2 failed.
    #[error("git {operation} of {url}: {message}")]
    Git {
        /// What was being done.
        operation: &'static str,
        /// The remote.
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// The work tree could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The edit refused to apply.
    #[error("the change cannot be applied: {0}")]
    Edit(String),
    /// The `git` command line failed (see [`cli`]).
    #[error("git {command} in {dir}: {message}")]
    Cli {
        /// The arguments.
        command: String,
        /// Where it ran.
        dir: String,
        /// git's message.
        message: String,
    },
    /// The remote kept moving.
    #[error("the push to {url} was rejected {attempts} times as the branch kept moving")]
    Contended {
        /// The remote.
        url: String,
        /// Attempts made.
        attempts: u32,
    },
}

/// Who commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name.
    pub name: String,
    /// The email.
    pub email: String,
}

impl Identity {
    /// An identity of a name and an email.
    pub fn new(name: impl Into<String>, email: impl Into<String>) -> Identity {
        Identity {
            name: name.into(),
            email: email.into(),
        }
    }
}

/// A commit as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Its id.
    pub id: String,
    /// Its whole message.
    pub message: String,
}

/// What [`Checkout::push_change`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// A commit was pushed.
    Commit {
        /// The commit.
        id: String,
        /// Attempts it took (more than 1 when the branch moved meanwhile).
        attempts: u32,
    },
    /// The files already said what the edit wanted: nothing to commit.
    NothingToDo,
}

/// The most attempts at pushing when the branch keeps moving.
const MAX_ATTEMPTS: u32 = 5;

/// A local clone of one remote branch.
pub struct Checkout {
    repo: Repository,
    url: String,
    branch: String,
    dir: PathBuf,
}

impl std::fmt::Debug for Checkout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkout")
            .field("url", &self.url)
            .field("branch", &self.branch)
            .field("dir", &self.dir)
            .finish()
    }
}

fn git<'a>(operation: &'static str, url: &'a str) -> impl Fn(git2::Error) -> GitError + 'a {
    move |e| GitError::Git {
        operation,
        url: url.to_owned(),
        message: e.message().to_owned(),
    }
}

impl Checkout {
    /// Opens the clone in `dir`, or clones `url` there first.
    pub fn open(url: &str, branch: &str, dir: &Path) -> Result<Checkout, GitError> {
        let repo = match Repository::open(dir) {
            Ok(repo) => repo,
            Err(_) => {
                std::fs::create_dir_all(dir).map_err(|e| GitError::Io {
                    path: dir.display().to_string(),
                    message: e.to_string(),
                })?;
                let repo = Repository::init(dir).map_err(git("init", url))?;
                repo.remote("origin", url).map_err(git("remote", url))?;
                repo
            }
        };
        let checkout = Checkout {
            repo,
            url: url.to_owned(),
            branch: branch.to_owned(),
            dir: dir.to_path_buf(),
        };
        checkout.fetch()?;
        Ok(checkout)
    }

    /// The remote branch's head after fetching it.
    pub fn fetch(&self) -> Result<String, GitError> {
        let mut remote = self
            .repo
            .find_remote("origin")
            .map_err(git("fetch", &self.url))?;
        let refspec = format!("+refs/heads/{0}:refs/remotes/origin/{0}", self.branch);
        let mut options = FetchOptions::new();
        options.download_tags(git2::AutotagOption::None);
        remote
            .fetch(&[refspec.as_str()], Some(&mut options), None)
            .map_err(git("fetch", &self.url))?;
        self.head()
    }

    /// The last fetched head of the remote branch.
    pub fn head(&self) -> Result<String, GitError> {
        let reference = self
            .repo
            .find_reference(&format!("refs/remotes/origin/{}", self.branch))
            .map_err(git("read the branch", &self.url))?;
        let commit = reference
            .peel_to_commit()
            .map_err(git("read the branch", &self.url))?;
        Ok(commit.id().to_string())
    }

    /// The files under `dir` (recursively) at `commit`: path relative to the repository → bytes.
    pub fn files(&self, commit: &str, dir: &str) -> Result<BTreeMap<String, Vec<u8>>, GitError> {
        let oid = git2::Oid::from_str(commit).map_err(git("read a commit", &self.url))?;
        let tree = self
            .repo
            .find_commit(oid)
            .and_then(|c| c.tree())
            .map_err(git("read a commit", &self.url))?;
        let prefix = dir.trim_matches('/');
        let mut files = BTreeMap::new();
        let mut failure = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            let path = format!("{root}{}", entry.name().unwrap_or_default());
            let inside =
                prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"));
            if inside {
                match self.repo.find_blob(entry.id()) {
                    Ok(blob) => {
                        files.insert(path, blob.content().to_vec());
                    }
                    Err(e) => {
                        failure = Some(e);
                        return git2::TreeWalkResult::Abort;
                    }
                }
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(git("read a tree", &self.url))?;
        if let Some(e) = failure {
            return Err(git("read a blob", &self.url)(e));
        }
        Ok(files)
    }

    /// The last `n` commits of the fetched branch, newest first.
    pub fn log(&self, n: usize) -> Result<Vec<CommitInfo>, GitError> {
        let head = git2::Oid::from_str(&self.head()?).map_err(git("log", &self.url))?;
        let mut walk = self.repo.revwalk().map_err(git("log", &self.url))?;
        walk.push(head).map_err(git("log", &self.url))?;
        let mut out = Vec::new();
        for oid in walk.take(n) {
            let oid = oid.map_err(git("log", &self.url))?;
            let commit = self.repo.find_commit(oid).map_err(git("log", &self.url))?;
            out.push(CommitInfo {
                id: oid.to_string(),
                message: commit.message().unwrap_or_default().to_owned(),
            });
        }
        Ok(out)
    }

    /// Applies `edit` to the files at the remote head of `branch` (the checkout's branch, or a
    /// side branch for a proposal, created from the checkout's branch when absent), commits,
    /// and pushes without force. `edit` gets every file of the repository (path → bytes) and
    /// returns whether it changed anything; it is called again on the new head after a
    /// non-fast-forward.
    pub fn push_change(
        &self,
        branch: &str,
        identity: &Identity,
        message: &str,
        mut edit: impl FnMut(&mut BTreeMap<String, Vec<u8>>) -> Result<bool, String>,
    ) -> Result<Pushed, GitError> {
        for attempt in 1..=MAX_ATTEMPTS {
            self.fetch()?;
            let base = self.fetch_branch(branch)?;
            let base_oid = git2::Oid::from_str(&base).map_err(git("commit", &self.url))?;
            let base_commit = self
                .repo
                .find_commit(base_oid)
                .map_err(git("commit", &self.url))?;
            self.repo
                .reset(base_commit.as_object(), ResetType::Hard, None)
                .map_err(git("reset", &self.url))?;
            let mut files = self.files(&base, "")?;
            let before = files.clone();
            if !edit(&mut files).map_err(GitError::Edit)? || files == before {
                return Ok(Pushed::NothingToDo);
            }
            for (path, bytes) in &files {
                if before.get(path) != Some(bytes) {
                    let full = self.dir.join(path);
                    if let Some(parent) = full.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| GitError::Io {
                            path: parent.display().to_string(),
                            message: e.to_string(),
                        })?;
                    }
                    std::fs::write(&full, bytes).map_err(|e| GitError::Io {
                        path: full.display().to_string(),
                        message: e.to_string(),
                    })?;
                }
            }
            for path in before.keys().filter(|p| !files.contains_key(*p)) {
                let full = self.dir.join(path);
                std::fs::remove_file(&full).map_err(|e| GitError::Io {
                    path: full.display().to_string(),
                    message: e.to_string(),
                })?;
            }
            let mut index = self.repo.index().map_err(git("commit", &self.url))?;
            index
                .add_all(["*"], IndexAddOption::DEFAULT, None)
                .map_err(git("commit", &self.url))?;
            index
                .update_all(["*"], None)
                .map_err(git("commit", &self.url))?;
            index.write().map_err(git("commit", &self.url))?;
            let tree_id = index.write_tree().map_err(git("commit", &self.url))?;
            let tree = self
                .repo
                .find_tree(tree_id)
                .map_err(git("commit", &self.url))?;
            let signature = Signature::now(&identity.name, &identity.email)
                .map_err(git("commit", &self.url))?;
            let commit = self
                .repo
                .commit(
                    None,
                    &signature,
                    &signature,
                    message,
                    &tree,
                    &[&base_commit],
                )
                .map_err(git("commit", &self.url))?;
            match self.push(commit, branch) {
                Ok(()) => {
                    return Ok(Pushed::Commit {
                        id: commit.to_string(),
                        attempts: attempt,
                    });
                }
                Err(PushFailure::Rejected) => continue,
                Err(PushFailure::Other(e)) => return Err(e),
            }
        }
        Err(GitError::Contended {
            url: self.url.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }

    /// The head of `branch` on the remote (fetched), or the checkout's branch head when the
    /// remote has no such branch yet (a new proposal branch starts there).
    fn fetch_branch(&self, branch: &str) -> Result<String, GitError> {
        if branch == self.branch {
            return self.head();
        }
        let mut remote = self
            .repo
            .find_remote("origin")
            .map_err(git("fetch", &self.url))?;
        let refspec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
        if remote.fetch(&[refspec.as_str()], None, None).is_ok()
            && let Ok(reference) = self
                .repo
                .find_reference(&format!("refs/remotes/origin/{branch}"))
            && let Ok(commit) = reference.peel_to_commit()
        {
            return Ok(commit.id().to_string());
        }
        self.head()
    }

    fn push(&self, commit: git2::Oid, branch: &str) -> Result<(), PushFailure> {
        let mut remote = self
            .repo
            .find_remote("origin")
            .map_err(|e| PushFailure::Other(git("push", &self.url)(e)))?;
        let rejected = std::cell::RefCell::new(None::<String>);
        let mut callbacks = RemoteCallbacks::new();
        callbacks.push_update_reference(|_, status| {
            if let Some(message) = status {
                *rejected.borrow_mut() = Some(message.to_owned());
            }
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        // No leading `+`: a push that is not a fast-forward is refused, never forced.
        let refspec = format!("{commit}:refs/heads/{branch}");
        match remote.push(&[refspec.as_str()], Some(&mut options)) {
            Ok(()) => {}
            Err(e) if is_rejection(e.message()) => return Err(PushFailure::Rejected),
            Err(e) => return Err(PushFailure::Other(git("push", &self.url)(e))),
        }
        drop(options);
        match rejected.into_inner() {
            None => Ok(()),
            Some(message) if is_rejection(&message) => Err(PushFailure::Rejected),
            Some(message) => Err(PushFailure::Other(GitError::Git {
                operation: "push",
                url: self.url.clone(),
                message,
            })),
        }
    }
}

enum PushFailure {
    Rejected,
    Other(GitError),
}

fn is_rejection(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("fast-forward")
        || m.contains("fastforward")
        || m.contains("non-fast")
        || m.contains("fetch first")
        || m.contains("rejected")
        || m.contains("not present locally")
}

/// Git trailers (`Key: value` lines at the end of a message) of a commit message.
pub fn trailers(message: &str) -> Vec<(String, String)> {
    let paragraphs: Vec<&str> = message.trim_end().split("\n\n").collect();
    let Some(last) = paragraphs.last() else {
        return Vec::new();
    };
    last.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(": ")?;
            (!key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
                .then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests;
