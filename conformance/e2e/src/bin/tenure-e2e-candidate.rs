//! A leader-election candidate driven over stdin/stdout (one JSON object
//! per line), for the conformance suite's process-level cases on every
//! backend: `tenure-e2e-candidate URL KEY IDENTITY TTL_MS`. The backend
//! comes from `tenure::connect(URL)`; `memory+tcp://` and `memory:` as the
//! conformance crate's own `tenure-candidate` reads them. See
//! `tenure_conformance::process::protocol`.

use std::sync::Arc;

use futures::future::BoxFuture;
use tenure::LeaseBackend;

fn main() {
    tenure_conformance::process::candidate::main_with(connect);
}

fn connect(url: String) -> BoxFuture<'static, tenure::Result<Arc<dyn LeaseBackend>>> {
    if url.starts_with("memory") {
        return tenure_conformance::process::connect::connect(url);
    }
    Box::pin(async move { tenure::connect(&url).await })
}
