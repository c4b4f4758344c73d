//! Turning a URL into a backend inside a candidate process.
//!
//! `memory:` is a private in-process server (one candidate only: useful to
//! test the driver); `memory+tcp://ADDR` is a client of the test process's
//! server through its [front](super::front). Any other backend's candidate
//! is a binary of its own around [`super::candidate::main_with`], with a
//! connector that hands every other URL to the facade's `tenure::connect`
//! (tenure-e2e's `tenure-e2e-candidate`; the bench's).

use std::sync::Arc;

use futures::future::BoxFuture;
use tenure_core::{Error, LeaseBackend, MemoryBackend, Result};

use super::remote::RemoteClient;

/// Makes a backend client from a URL.
pub type Connector = fn(String) -> BoxFuture<'static, Result<Arc<dyn LeaseBackend>>>;

/// The schemes this crate knows: `memory:` and `memory+tcp://`.
pub fn connect(url: String) -> BoxFuture<'static, Result<Arc<dyn LeaseBackend>>> {
    Box::pin(async move {
        match url.split(':').next() {
            Some("memory") => Ok(Arc::new(MemoryBackend::new()) as Arc<dyn LeaseBackend>),
            Some("memory+tcp") => {
                Ok(Arc::new(RemoteClient::connect_url(&url).await?) as Arc<dyn LeaseBackend>)
            }
            _ => Err(Error::invalid(
                "url",
                format!("{url:?}: no backend for this scheme in tenure-candidate"),
            )),
        }
    })
}
