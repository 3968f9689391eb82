//! Reading a configuration file: bounded in size, parsed with the core's located loader, then
//! validated, every error naming the file, line, column and field path.

use std::path::Path;

use flotilla_core::manifest::located::{ConfigError, parse_located};
use flotilla_core::manifest::yaml::Locations;

use super::schema::AgentConfig;
use super::validate::validate;

/// The largest configuration file the agent reads.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

impl AgentConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let file = path.display().to_string();
        let whole = |message: String| ConfigError {
            file: file.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| whole(format!("cannot read the agent configuration: {e}")))?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(whole(format!(
                "the agent configuration is {} bytes; the limit is {MAX_CONFIG_BYTES}",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| whole(format!("cannot read the agent configuration: {e}")))?;
        AgentConfig::parse(&text, &file)
    }

    /// Parses and validates configuration text; `file` only names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<AgentConfig, ConfigError> {
        let (config, locations): (AgentConfig, Locations) =
            parse_located(text, file, "the agent configuration")?;
        if let Err(p) = validate(&config) {
            return Err(ConfigError::at(file, &locations, &p.field, p.message));
        }
        Ok(config)
    }
}
