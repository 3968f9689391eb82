//! The control API's bearer token from the agent's side: where it comes from (the
//! environment's `FLOTILLA_AGENT_TOKEN`, the configuration's `control.tokenFile`, or
//! `<config file>.token` created with mode 0600 at first start), and the constant-time
//! comparison the API checks a request's token with. A token file is read, and a token checked,
//! by the rules callers share ([`flotilla_agent_backend::token`]).

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_agent_backend::token::{TokenFileError, read_token_file, token_problem};

/// The environment variable whose token overrides any token file.
pub const TOKEN_ENV: &str = "FLOTILLA_AGENT_TOKEN";

/// Why a token cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The environment variable is set but holds no usable token.
    #[error("{TOKEN_ENV} is set but {problem}; unset it to use the token file, or give a token")]
    Environment {
        /// What is wrong with it.
        problem: String,
    },
    /// A token file cannot be used.
    #[error(transparent)]
    File(#[from] TokenFileError),
    /// A token given in code is not usable.
    #[error("the control API token {0}")]
    Given(String),
}

/// Whether two byte strings are equal, in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `<config file>.token`: where an agent keeps the token it creates.
pub fn default_token_file(config_path: &Path) -> PathBuf {
    let mut name = config_path.as_os_str().to_owned();
    name.push(".token");
    PathBuf::from(name)
}

/// 32 random bytes from the kernel, as 64 hex digits.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `path` (mode 0600, refusing to replace anything) holding a new random token.
/// Ok(None) when another process created it first.
fn create_token_file(path: &Path) -> Result<Option<String>, TokenError> {
    let fail = |problem: String| {
        TokenError::File(TokenFileError {
            path: path.to_owned(),
            field: "the default token file".into(),
            problem,
        })
    };
    let token = random_token().map_err(|e| {
        fail(format!(
            "cannot be created: /dev/urandom cannot be read: {e}"
        ))
    })?;
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(fail(format!("cannot be created: {e}"))),
    };
    // The mode given at creation is masked by the umask; make it exactly 0600.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(format!("{token}\n").as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| fail(format!("cannot be written: {e}")))?;
    Ok(Some(token))
}

/// Where a control token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `FLOTILLA_AGENT_TOKEN`.
    Environment,
    /// A token file that existed.
    File(PathBuf),
    /// A token file this agent created at start.
    Created(PathBuf),
    /// Given in code, or generated in memory for an agent started without a configuration file
    /// (read it with [`ControlToken::secret`]).
    InMemory,
}

/// The bearer token the control API's mutating calls need. Its `Debug` does not show it.
#[derive(Clone)]
pub struct ControlToken {
    secret: Arc<str>,
    origin: TokenOrigin,
}

impl fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlToken")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl ControlToken {
    /// A token given in code.
    pub fn new(secret: impl Into<String>) -> Result<ControlToken, TokenError> {
        let secret = secret.into();
        if let Some(problem) = token_problem(&secret) {
            return Err(TokenError::Given(problem));
        }
        Ok(ControlToken {
            secret: secret.into(),
            origin: TokenOrigin::InMemory,
        })
    }

    /// A random token held in memory only.
    pub fn generate() -> Result<ControlToken, TokenError> {
        let secret = random_token()
            .map_err(|e| TokenError::Given(format!("cannot be generated: /dev/urandom: {e}")))?;
        Ok(ControlToken {
            secret: secret.into(),
            origin: TokenOrigin::InMemory,
        })
    }

    /// The token an agent uses, in order: `env` (the value of `FLOTILLA_AGENT_TOKEN`, when set),
    /// the configured `token_file` (relative to the configuration file's directory), the
    /// default `<config file>.token` (created with a random token when missing), and, for an
    /// agent without a configuration file, a random token in memory.
    pub fn resolve(
        token_file: Option<&Path>,
        config_path: Option<&Path>,
        env: Option<OsString>,
    ) -> Result<ControlToken, TokenError> {
        if let Some(value) = env {
            let value = value.into_string().map_err(|_| TokenError::Environment {
                problem: "is not UTF-8".into(),
            })?;
            let value = value.trim();
            if let Some(problem) = token_problem(value) {
                return Err(TokenError::Environment { problem });
            }
            return Ok(ControlToken {
                secret: value.into(),
                origin: TokenOrigin::Environment,
            });
        }
        if let Some(file) = token_file {
            let path = match config_path.and_then(Path::parent) {
                Some(dir) if file.is_relative() => dir.join(file),
                _ => file.to_owned(),
            };
            let secret = read_token_file(&path, "control.tokenFile")?;
            return Ok(ControlToken {
                secret: secret.into(),
                origin: TokenOrigin::File(path),
            });
        }
        let Some(config_path) = config_path else {
            return ControlToken::generate();
        };
        let path = default_token_file(config_path);
        if !path.exists()
            && let Some(secret) = create_token_file(&path)?
        {
            return Ok(ControlToken {
                secret: secret.into(),
                origin: TokenOrigin::Created(path),
            });
        }
        let secret = read_token_file(&path, "the default token file")?;
        Ok(ControlToken {
            secret: secret.into(),
            origin: TokenOrigin::File(path),
        })
    }

    /// The token itself.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Where it came from.
    pub fn origin(&self) -> &TokenOrigin {
        &self.origin
    }

    /// Whether `given` is this token (constant time).
    pub fn matches(&self, given: &str) -> bool {
        constant_time_eq(given.as_bytes(), self.secret.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn the_default_file_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("agent.yaml");
        let first = ControlToken::resolve(None, Some(&config), None).unwrap();
        let path = dir.path().join("agent.yaml.token");
        assert_eq!(first.origin(), &TokenOrigin::Created(path.clone()));
        assert_eq!(first.secret().len(), 64);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // The next start reads it.
        let again = ControlToken::resolve(None, Some(&config), None).unwrap();
        assert_eq!(again.secret(), first.secret());
        assert_eq!(again.origin(), &TokenOrigin::File(path));
        assert!(!format!("{again:?}").contains(first.secret()));
    }

    #[test]
    fn the_environment_wins_and_files_resolve_against_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("agent.yaml");
        write(&dir.path().join("shared.token"), "s3cret-token\n", 0o600);
        let from_file =
            ControlToken::resolve(Some(Path::new("shared.token")), Some(&config), None).unwrap();
        assert_eq!(from_file.secret(), "s3cret-token");
        let from_env = ControlToken::resolve(
            Some(Path::new("shared.token")),
            Some(&config),
            Some("from-env".into()),
        )
        .unwrap();
        assert_eq!(
            (from_env.secret(), from_env.origin()),
            ("from-env", &TokenOrigin::Environment)
        );
        assert!(from_env.matches("from-env") && !from_env.matches("from-enw"));
        let error = ControlToken::resolve(None, Some(&config), Some(" ".into())).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("FLOTILLA_AGENT_TOKEN is set but is empty")
        );
        // Without a configuration file: a token in memory, nothing written.
        let memory = ControlToken::resolve(None, None, None).unwrap();
        assert_eq!(memory.origin(), &TokenOrigin::InMemory);
        assert_eq!(memory.secret().len(), 64);
    }

    #[test]
    fn unusable_token_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("agent.yaml");
        let path = dir.path().join("t");
        let refused = |needle: &str| {
            let error = ControlToken::resolve(Some(Path::new("t")), Some(&config), None)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(&path.display().to_string())
                    && error.contains("control.tokenFile")
                    && error.contains(needle),
                "{needle}: {error}"
            );
        };
        refused("cannot be read");
        write(&path, "\n", 0o600);
        refused("is empty");
        write(&path, "abc", 0o644);
        refused("open to every user (mode 644)");
        write(&path, "two words", 0o600);
        refused("only visible ASCII");
        // The default file too: an empty one is not replaced.
        write(&dir.path().join("agent.yaml.token"), "", 0o600);
        let error = ControlToken::resolve(None, Some(&config), None).unwrap_err();
        assert!(error.to_string().contains("is empty"), "{error}");
    }
}
