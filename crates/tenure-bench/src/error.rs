//! The bench's errors.

use tenure::BoxError;

/// `Result` with the bench's error.
pub type BenchResult<T> = Result<T, BenchError>;

/// What stopped the bench.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A step failed: what was being done, and why.
    #[error("{step}: {source}")]
    Step {
        /// What was being done.
        step: String,
        /// The error it met.
        source: BoxError,
    },
    /// Something the bench itself found wrong (a peer that misbehaved, a
    /// measure that could not be taken).
    #[error("{0}")]
    Failed(String),
}

impl From<String> for BenchError {
    fn from(why: String) -> Self {
        BenchError::Failed(why)
    }
}

impl From<&str> for BenchError {
    fn from(why: &str) -> Self {
        BenchError::Failed(why.to_owned())
    }
}

/// Names the step an error came from.
pub fn ctx<T, E: Into<BoxError>>(step: &str, r: Result<T, E>) -> BenchResult<T> {
    r.map_err(|e| BenchError::Step {
        step: step.to_owned(),
        source: e.into(),
    })
}
