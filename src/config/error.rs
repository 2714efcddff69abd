//! Config errors: every one names the file, line and column, and a path inside the file such
//! as `descriptors[2].rate_limit.unit`.

use std::fmt;

/// One problem in one rule file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (or other origin name) the error is in.
    pub origin: String,
    /// 1-based line; 0 when the error is about the whole file.
    pub line: u64,
    /// 1-based column; 0 when unknown.
    pub column: u64,
    /// Where in the document, e.g. `descriptors[0].rate_limit.unit`; empty for the root.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All the problems found in a load (never just the first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, err) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}
