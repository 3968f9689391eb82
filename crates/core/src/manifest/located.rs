//! One YAML (or JSON) document read into a type of the caller's with the core's loader, every
//! error located: file, line, column and field path. For configuration files (the agent's, the
//! controller's) rather than manifests; it reads no file: the caller hands it the text.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::manifest::yaml::{Budget, Locations, parse_documents};

/// A document that cannot be used, with where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (empty when the text did not come from a file).
    pub file: String,
    /// 1-based line (0 when unknown).
    pub line: u32,
    /// 1-based column (0 when unknown).
    pub column: u32,
    /// The field path, Argo style (`subsets.canary.replicas`); empty for the whole file.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}:", self.file)?;
        }
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if !self.file.is_empty() || self.line > 0 {
            f.write_str(" ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl ConfigError {
    /// An error about `field`, located in the source.
    pub fn at(file: &str, locations: &Locations, field: &str, message: impl Into<String>) -> Self {
        let at = locations.find(field);
        ConfigError {
            file: file.to_owned(),
            line: at.line,
            column: at.column,
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// Parses one YAML (or JSON) document into `T` with the core's loader, keeping where each field
/// is; every error names the file, line, column and field path. `file` only names the text in
/// messages; `what` names the document ("the agent configuration").
pub fn parse_located<T: DeserializeOwned>(
    text: &str,
    file: &str,
    what: &str,
) -> Result<(T, Locations), ConfigError> {
    let error = |line: u32, column: u32, message: String| ConfigError {
        file: file.to_owned(),
        line,
        column,
        field: String::new(),
        message,
    };
    let mut documents = parse_documents(text, Budget::default())
        .map_err(|e| error(e.location.line, e.location.column, e.message.clone()))?;
    if documents.len() != 1 {
        return Err(error(
            0,
            0,
            format!(
                "{what} must be exactly one YAML document, not {}",
                documents.len()
            ),
        ));
    }
    let document = documents.remove(0);
    let value: T = serde_path_to_error::deserialize(document.value.clone()).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        ConfigError::at(
            file,
            &document.locations,
            &field,
            e.into_inner().to_string(),
        )
    })?;
    Ok((value, document.locations))
}
