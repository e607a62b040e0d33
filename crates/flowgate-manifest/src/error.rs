//! Manifest errors, each with the place it was found.

use std::path::PathBuf;

/// A manifest problem at a file, line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {message}", file.display())]
pub struct ManifestError {
    /// The manifest file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What is wrong.
    pub message: String,
}
