//! kube client errors mapped into tenure's, retryable or not.

use tenure_core::Error;

pub(crate) const BACKEND: &str = "kube";

/// What a write's answer means for an election.
pub(crate) enum Refused {
    /// 409: the resourceVersion we wrote against is stale, or the name exists.
    Conflict,
    /// 404: the Lease is gone.
    NotFound,
    /// Anything else.
    Other(Error),
}

/// Maps a kube error: transport trouble, 5xx and 429 are retryable; other
/// API errors (403, 422, ...) are not.
pub(crate) fn map(error: kube::Error) -> Error {
    let retryable = match &error {
        kube::Error::Api(response) => response.code >= 500 || response.code == 429,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) | kube::Error::InferConfig(_) => {
            false
        }
        _ => true,
    };
    Error::from_client(BACKEND, retryable, error)
}

pub(crate) fn refused(error: kube::Error) -> Refused {
    match &error {
        kube::Error::Api(r) if r.code == 409 => Refused::Conflict,
        kube::Error::Api(r) if r.code == 404 => Refused::NotFound,
        _ => Refused::Other(map(error)),
    }
}
