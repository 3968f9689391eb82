//! The `git` command line, run as a named person: how a human creates, commits to and inspects a
//! repository (the demo's developer, and tests that play a developer against the controller).
//! The controller itself never shells out; it goes through [`crate::Checkout`].

use std::path::Path;
use std::process::Command;

use crate::{GitError, Identity};

/// Runs `git ARGS` in `dir` as `who` (author and committer); returns its trimmed standard
/// output, or an error naming the command, the directory and git's own message.
pub fn git(dir: &Path, args: &[&str], who: &Identity) -> Result<String, GitError> {
    let failed = |message: String| GitError::Cli {
        command: args.join(" "),
        dir: dir.display().to_string(),
        message,
    };
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", &who.name)
        .env("GIT_AUTHOR_EMAIL", &who.email)
        .env("GIT_COMMITTER_NAME", &who.name)
        .env("GIT_COMMITTER_EMAIL", &who.email)
        .output()
        .map_err(|e| failed(format!("cannot run git (is it installed?): {e}")))?;
    if !output.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
