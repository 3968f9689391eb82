//! Secrets that analysis arguments name (`valueFrom.secretKeyRef`): from the environment, or a
//! secrets directory.

use std::path::PathBuf;

/// Where secrets live: `secretKeyRef {name, key}` reads the environment variable
/// `FLOTILLA_SECRET_<NAME>_<KEY>` (upper case, other characters as `_`), else the file
/// `<dir>/<name>/<key>` when a secrets directory is given.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    /// The secrets directory, if any.
    pub dir: Option<PathBuf>,
}

impl Secrets {
    /// The environment variable a secret key is read from.
    pub fn env_name(name: &str, key: &str) -> String {
        let clean = |s: &str| {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        };
        format!("FLOTILLA_SECRET_{}_{}", clean(name), clean(key))
    }

    /// Reads one secret value.
    pub fn read(&self, name: &str, key: &str) -> Result<String, String> {
        let env = Self::env_name(name, key);
        if let Ok(value) = std::env::var(&env) {
            return Ok(value);
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(name).join(key);
            if let Ok(value) = std::fs::read_to_string(&path) {
                return Ok(value.trim_end_matches('\n').to_owned());
            }
            return Err(format!(
                "secret {name}/{key} not found: set {env} or create {}",
                path.display()
            ));
        }
        Err(format!("secret {name}/{key} not found: set {env}"))
    }
}

impl flotilla_core::analysis::SecretStore for Secrets {
    fn read(&self, name: &str, key: &str) -> Result<String, String> {
        Secrets::read(self, name, key)
    }
}
