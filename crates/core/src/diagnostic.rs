//! Diagnostics: what parsing and lint report about a manifest, and where.

use serde::Serialize;
use std::fmt;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Information that changes nothing (an ignored kind, a Flotilla extension in use).
    Note,
    /// Probably wrong, or unsafe in a fleet; an error under `--strict`.
    Warning,
    /// The manifest is invalid; nothing may be applied from it.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding about one place in one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error, warning or note.
    pub severity: Severity,
    /// The rule's stable identifier, e.g. `argo/max-surge-unavailable` or `yaml`.
    pub rule: &'static str,
    /// The file, as the user named it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The manifest's kind, when known.
    pub kind: String,
    /// The manifest's `metadata.name`, when known.
    pub name: String,
    /// The field path in Argo's style, e.g. `spec.strategy.canary.steps[2].setWeight`.
    pub path: String,
    /// What is wrong and, where it helps, what to do.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}[{}]",
            self.file, self.line, self.column, self.severity, self.rule
        )?;
        if !self.kind.is_empty() {
            write!(f, " {}", self.kind)?;
            if !self.name.is_empty() {
                write!(f, "/{}", self.name)?;
            }
        }
        if !self.path.is_empty() {
            write!(f, " {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}
