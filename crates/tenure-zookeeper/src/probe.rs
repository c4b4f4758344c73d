//! Before a session opens: what each server would give it.
//!
//! Every server of the connect string is asked, separately and at once, for
//! a throwaway session of the timeout tenure asks for; its answer is noted
//! and the session closed again (both are transactions, committed before
//! the backend's own session opens). A server that would give anything else
//! refuses the connect with an error naming it, before anything is written:
//! a session that reconnects to it later would be given that timeout, and
//! expire sooner than tenure counts its leases (or later than a standby
//! waits for a crashed leader). A server out of reach now is not checked
//! here; should the session meet it later and be given less, the
//! [relay](crate::relay) ends the session's leases.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tenure_core::{Error, Result};
use zookeeper_client::Client;

use crate::error::BACKEND;
use crate::ZooKeeperOptions;

/// Asks every one of `servers` what it would give a session of
/// `options.session_timeout`: `InvalidArgument` naming `session_timeout`
/// (and the server) unless each that answers within `patience` gives
/// exactly that.
pub(crate) async fn check(
    servers: &[Arc<str>],
    options: &ZooKeeperOptions,
    patience: Duration,
) -> Result<()> {
    let requested = options.session_timeout;
    let answers = join_all(servers.iter().map(|s| ask(s, options, patience))).await;
    for (server, answer) in servers.iter().zip(answers) {
        match answer {
            Some(negotiated) if negotiated != requested => {
                return Err(refusal(server, negotiated, requested))
            }
            Some(_) => {}
            None => tracing::debug!(
                backend = BACKEND,
                %server,
                "a ZooKeeper server did not answer the session timeout probe; not checked"
            ),
        }
    }
    Ok(())
}

/// The error for a server that gives a session `negotiated` when asked for
/// `requested`.
pub(crate) fn refusal(server: &str, negotiated: Duration, requested: Duration) -> Error {
    let consequence = if negotiated < requested {
        "a session that reconnects to it would expire sooner than tenure counts its leases"
    } else {
        "a session that reconnects to it would outlive its leases, and standbys would wait \
         longer for a crashed leader"
    };
    Error::invalid(
        "session_timeout",
        format!(
            "ZooKeeper server {server} negotiated {negotiated:?} for the requested \
             {requested:?}: {consequence}. Every server of the ensemble must allow the \
             timeout asked for within its minSessionTimeout..=maxSessionTimeout (by default \
             2x..=20x its tickTime); ask for one within every server's bounds, or make the \
             servers agree"
        ),
    )
}

/// What `server` gives a new session that asks for the configured timeout,
/// `None` if it does not answer within `patience`. The session is closed
/// again before this returns (within `patience` more).
async fn ask(server: &str, options: &ZooKeeperOptions, patience: Duration) -> Option<Duration> {
    let mut connector = Client::connector()
        .with_session_timeout(options.session_timeout)
        .with_connection_timeout(patience)
        .with_fail_eagerly();
    if let Some((scheme, auth)) = &options.auth {
        connector = connector.with_auth(scheme, auth);
    }
    let client = match tokio::time::timeout(patience, connector.connect(server)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => {
            tracing::debug!(backend = BACKEND, server, %error, "probe failed");
            return None;
        }
        Err(_) => return None,
    };
    let negotiated = client.session_timeout();
    let mut state = client.state_watcher();
    drop(client);
    let closed = async {
        while !state.state().is_terminated() {
            state.changed().await;
        }
    };
    let _ = tokio::time::timeout(patience, closed).await;
    Some(negotiated)
}
