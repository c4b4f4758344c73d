//! etcd client errors mapped into tenure's, retryable or not.

use std::time::Duration;

use etcd_client::Client;
use tenure_core::Error;
use tonic::Code;

pub(crate) const BACKEND: &str = "etcd";

/// Maps an etcd client error: transport trouble, an unavailable or busy
/// cluster, and a token etcd no longer takes (expired, or issued before an
/// auth-store change: [`needs_new_token`]) are retryable; bad arguments and
/// refused credentials are not.
pub(crate) fn map(error: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let retryable = match &error {
        E::IoError(_) | E::TransportError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => true,
        E::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::ResourceExhausted
                    | Code::Unknown
                    | Code::Cancelled
            ) || needs_new_token(&error)
        }
        _ => false,
    };
    Error::from_client(BACKEND, retryable, error)
}

/// Whether the error is etcd saying the lease does not exist (any more).
/// Whether tenure's `error` is etcd's "requested lease not found".
pub(crate) fn is_lease_gone(error: &Error) -> bool {
    match error {
        Error::Backend { source, .. } | Error::Unavailable { source, .. } => source
            .downcast_ref::<etcd_client::Error>()
            .is_some_and(is_lease_not_found),
        _ => false,
    }
}

pub(crate) fn is_lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(s) => s.code() == Code::NotFound,
        // etcd-client's keep-alive stream reports an unknown lease this way.
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

/// The gRPC status behind tenure's `error`, if it is one of etcd's answers.
fn status_of(error: &Error) -> Option<&tonic::Status> {
    match error {
        Error::Backend { source, .. } | Error::Unavailable { source, .. } => {
            match source.downcast_ref::<etcd_client::Error>()? {
                etcd_client::Error::GRpcStatus(status) => Some(status),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether etcd refused a transaction for having more operations than its
/// `--max-txn-ops` allows.
pub(crate) fn is_too_many_ops(error: &Error) -> bool {
    status_of(error).is_some_and(|s| s.message().contains("too many operations in txn request"))
}

/// Whether etcd refused the request for the user's permissions.
pub(crate) fn is_refused(error: &Error) -> bool {
    status_of(error).is_some_and(|s| s.code() == Code::PermissionDenied)
}

/// etcd's answer to a request whose token it no longer takes.
const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";
/// etcd's answer to a request whose token was issued before the auth store
/// last changed (any `user add`, `role grant`, ...): every JWT, and a simple
/// token racing the change, until the client authenticates again.
const AUTH_OLD_REVISION: &str = "etcdserver: revision of auth store is old";

/// Whether etcd refused the request's auth token, expired ("invalid auth
/// token": `Unauthenticated`, or `Unknown` from the election and lock
/// services) or stale ("revision of auth store is old": `InvalidArgument`,
/// which etcd-client's own token refresh does not match): authenticating
/// again and resending is the cure.
pub(crate) fn needs_new_token(error: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = error else {
        return false;
    };
    match status.code() {
        Code::Unauthenticated => true,
        Code::Unknown => status.message() == INVALID_AUTH_TOKEN,
        Code::InvalidArgument => status.message() == AUTH_OLD_REVISION,
        _ => false,
    }
}

/// Runs one unary request with a deadline of its own (never a channel-wide
/// timeout, which would also cut long-lived watches). A request refused for
/// its token ([`needs_new_token`]) is sent once more after authenticating
/// again, within the same deadline.
pub(crate) async fn unary<T, F, Fut>(
    client: &Client,
    operation: &'static str,
    after: Duration,
    route: Route,
    mut request: F,
) -> tenure_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let give_up = tokio::time::Instant::now() + after;
    let attempt = async {
        let mut refreshed = false;
        let mut pause = UNSENT_PAUSE.0;
        loop {
            match request().await {
                Err(error) if needs_new_token(&error) && !refreshed => {
                    tracing::debug!(operation, %error, "etcd refused our auth token; authenticating again");
                    client.refresh_token().await?;
                    refreshed = true;
                }
                Err(error)
                    if route == Route::AnyMember
                        && never_sent(&error)
                        && tokio::time::Instant::now() + pause < give_up =>
                {
                    // etcd-client's channel picked a member it could not
                    // connect to: nothing reached the servers, so the
                    // request goes again (the channel picks afresh) while
                    // this request's deadline allows; the last such error
                    // is the answer (with the member's own words), not a
                    // timeout.
                    tracing::debug!(operation, %error, retry_in = ?pause, "no connection to the member picked; sending again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(UNSENT_PAUSE.1);
                }
                answer => return answer,
            }
        }
    };
    tenure_core::hosted::bounded(operation, after, attempt)
        .await?
        .map_err(map)
}

/// Opens a watch with `open` on the backend's client, opening it again
/// while the member picked could not be connected to (see [`never_sent`]),
/// for at most `within`; the first other answer is the result.
pub(crate) async fn watch_opened<T, F, Fut>(
    route: Route,
    within: Duration,
    mut open: F,
) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let give_up = tokio::time::Instant::now() + within;
    let mut pause = UNSENT_PAUSE.0;
    loop {
        match open().await {
            Err(error)
                if route == Route::AnyMember
                    && never_sent(&error)
                    && tokio::time::Instant::now() + pause < give_up =>
            {
                tracing::debug!(%error, retry_in = ?pause, "no connection to the member picked; opening the watch again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(UNSENT_PAUSE.1);
            }
            answer => return answer,
        }
    }
}

/// Which member a request may go to: what decides whether a request that
/// could not connect is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Whichever member the client's channel picks (the backend's client,
    /// balanced over every endpoint): one that could not connect is sent
    /// again, and the channel picks afresh.
    AnyMember,
    /// The one member of a client of its own (members.rs): one that could
    /// not connect fails at once, and the caller goes to another member.
    ThisMember,
}

/// The first and the longest pause before a request that could not connect
/// goes again: the first is short, since another member is likely up.
const UNSENT_PAUSE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(50));

/// Whether the request failed because no connection could be made to the
/// member etcd-client's channel picked for it, so that nothing was sent.
///
/// The channel balances over every endpoint at random and connects lazily:
/// a member that is down (refusing, unreachable) still looks ready to it,
/// and tonic reports the failed connection as the answer of the request
/// that waited for it (`Unavailable`, with tonic's `ConnectError` in its
/// sources). Go's clientv3 passes such a member over instead; resending
/// does the same here.
pub(crate) fn never_sent(error: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = error else {
        return false;
    };
    if status.code() != Code::Unavailable {
        return false;
    }
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::never_sent;
    use tonic::{ConnectError, Status};

    #[test]
    fn only_a_connection_that_could_not_be_made_means_never_sent() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let unsent = Status::from_error(Box::new(ConnectError(Box::new(refused))));
        assert_eq!(unsent.code(), tonic::Code::Unavailable);
        assert!(never_sent(&etcd_client::Error::GRpcStatus(unsent)));
        // etcd's own "unavailable" answers came from a member: sent.
        let answered = Status::unavailable("etcdserver: leader changed");
        assert!(!never_sent(&etcd_client::Error::GRpcStatus(answered)));
        let broken = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!never_sent(&etcd_client::Error::IoError(broken)));
    }
}
