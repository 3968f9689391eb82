//! The control API's bearer token from the caller's side: what a token may hold (1 to 4096
//! visible ASCII characters, which an HTTP header carries unchanged) and how a token file is
//! read (refused when missing, empty, open to every user or not a header-safe token).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The longest token accepted.
pub const MAX_TOKEN_LEN: usize = 4096;

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the token file {} ({field}) {problem}", path.display())]
pub struct TokenFileError {
    /// The file.
    pub path: PathBuf,
    /// The setting that names it (`control.tokenFile`).
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

/// What is wrong with a token's text (already trimmed), if anything: it must be 1 to 4096
/// visible ASCII characters, which an HTTP header carries unchanged.
pub fn token_problem(token: &str) -> Option<String> {
    if token.is_empty() {
        return Some("is empty".into());
    }
    if token.len() > MAX_TOKEN_LEN {
        return Some(format!("is longer than {MAX_TOKEN_LEN} characters"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Some(
            "holds characters a bearer token cannot carry (only visible ASCII, no spaces)".into(),
        );
    }
    None
}

/// Reads a token file: it must exist, be open to no user but its owner and group (no
/// permission bit for others), and hold one token (surrounding whitespace is ignored). `field`
/// names the setting in errors.
pub fn read_token_file(path: &Path, field: &str) -> Result<String, TokenFileError> {
    let fail = |problem: String| TokenFileError {
        path: path.to_owned(),
        field: field.to_owned(),
        problem,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(fail("is not a file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(fail(format!(
            "is open to every user (mode {mode:03o}); `chmod 600` it"
        )));
    }
    if meta.len() > 2 * MAX_TOKEN_LEN as u64 {
        return Err(fail(format!(
            "is {} bytes; a token is at most {MAX_TOKEN_LEN} characters",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot be read: {e}")))?;
    let token = text.trim();
    if let Some(problem) = token_problem(token) {
        return Err(fail(problem));
    }
    Ok(token.to_owned())
}
