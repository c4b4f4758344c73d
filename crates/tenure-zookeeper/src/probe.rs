//! Before a session opens: what each server would give it.
//!
//! Every server of the connect string is asked, separately and at once, for
//! a throwaway session of the timeout tenure asks for; its answer is noted
//! and the session closed again (both are transactions, committed before
//! the backend's own session opens; a server that answers only after the
//! probe stopped waiting has its session closed when it does, so that none
//! is left to expire). A server that would give anything else
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
use tokio::sync::oneshot;
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
///
/// The throwaway session is opened on the heartbeat runtime and closed there
/// whenever the server answers, even after `patience`: a server that is
/// slow to answer (a loaded ensemble committing many sessions at once) still
/// creates the session, and a client that gave up on the handshake could
/// not close it, so it would linger until the server expired it, a session
/// timeout later. So that task waits up to a session timeout for the
/// handshake, where the caller waits `patience`.
async fn ask(server: &str, options: &ZooKeeperOptions, patience: Duration) -> Option<Duration> {
    let session_timeout = options.session_timeout;
    let mut connector = Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(session_timeout)
        .with_fail_eagerly();
    if let Some((scheme, auth)) = &options.auth {
        connector = connector.with_auth(scheme, auth);
    }
    let (answer, answered) = oneshot::channel();
    let (close, closed_notice) = oneshot::channel::<()>();
    let server_name = server.to_owned();
    let task = async move {
        let client = match connector.connect(&server_name).await {
            Ok(client) => client,
            Err(error) => {
                tracing::debug!(backend = BACKEND, server = %server_name, %error, "probe failed");
                return;
            }
        };
        let _ = answer.send(client.session_timeout());
        let mut state = client.state_watcher();
        // Dropping the last handle sends the session's close.
        drop(client);
        let closed = async {
            while !state.state().is_terminated() {
                state.changed().await;
            }
        };
        if tokio::time::timeout(session_timeout, closed).await.is_err() {
            tracing::debug!(
                backend = BACKEND,
                server = %server_name,
                "a probe's session was not closed within its timeout; the server expires it"
            );
        }
        let _ = close.send(());
    };
    tenure_core::heartbeat_runtime().spawn(task);
    let negotiated = match tokio::time::timeout(patience, answered).await {
        Ok(Ok(negotiated)) => negotiated,
        Ok(Err(_)) | Err(_) => return None,
    };
    let _ = tokio::time::timeout(patience, closed_notice).await;
    Some(negotiated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use std::sync::atomic::{AtomicBool, Ordering};

    /// ZooKeeper's opcode for closing a session.
    const CLOSE_SESSION: i32 = -11;

    async fn read_frame(conn: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        let len = conn.read_i32().await?;
        let mut frame = vec![0; usize::try_from(len).expect("a frame length")];
        conn.read_exact(&mut frame).await?;
        Ok(frame)
    }

    async fn write_frame(conn: &mut TcpStream, frame: &[u8]) -> std::io::Result<()> {
        conn.write_i32(i32::try_from(frame.len()).expect("a short frame"))
            .await?;
        conn.write_all(frame).await
    }

    /// A server that answers a session's handshake only `late`, grants
    /// `timeout`, then reports whether the session was closed over the same
    /// connection (answering its requests) before the connection ended,
    /// and sets `closing` when the close arrives, before answering it.
    async fn late_server(
        listener: TcpListener,
        late: Duration,
        timeout: Duration,
        closing: Arc<AtomicBool>,
    ) -> bool {
        let (mut conn, _) = listener.accept().await.expect("the probe connects");
        read_frame(&mut conn).await.expect("a connect request");
        tokio::time::sleep(late).await;
        // ConnectResponse: protocolVersion, timeOut, sessionId, passwd, readOnly.
        let mut answer = Vec::new();
        answer.extend_from_slice(&0i32.to_be_bytes());
        answer.extend_from_slice(&i32::try_from(timeout.as_millis()).unwrap().to_be_bytes());
        answer.extend_from_slice(&0x2au64.to_be_bytes());
        answer.extend_from_slice(&16i32.to_be_bytes());
        answer.extend_from_slice(&[7; 16]);
        answer.push(0);
        if write_frame(&mut conn, &answer).await.is_err() {
            return false;
        }
        let mut zxid = 0i64;
        while let Ok(request) = read_frame(&mut conn).await {
            // RequestHeader: xid, type. ReplyHeader: xid, zxid, err.
            let xid = i32::from_be_bytes(request[0..4].try_into().unwrap());
            let op = i32::from_be_bytes(request[4..8].try_into().unwrap());
            zxid += 1;
            if op == CLOSE_SESSION {
                closing.store(true, Ordering::SeqCst);
            }
            let mut reply = Vec::new();
            reply.extend_from_slice(&xid.to_be_bytes());
            reply.extend_from_slice(&zxid.to_be_bytes());
            reply.extend_from_slice(&0i32.to_be_bytes());
            let _ = write_frame(&mut conn, &reply).await;
            if op == CLOSE_SESSION {
                return true;
            }
        }
        false
    }

    /// A server slow to answer a probe's handshake still creates the
    /// session; the probe stops waiting for it, but must still close it, or
    /// the server keeps it until it expires (a write the servers pay for
    /// every probe a loaded ensemble answers late).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_session_granted_after_the_probe_gave_up_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap().to_string();
        let timeout = Duration::from_secs(1);
        let patience = Duration::from_millis(100);
        let closed = tokio::spawn(late_server(listener, patience * 3, timeout, Arc::default()));
        let options = ZooKeeperOptions::default().with_session_timeout(timeout);
        let started = tokio::time::Instant::now();
        assert_eq!(ask(&server, &options, patience).await, None);
        assert!(
            started.elapsed() < patience * 2,
            "the probe waited {:?} for a late server (patience {patience:?})",
            started.elapsed()
        );
        let closed = tokio::time::timeout(timeout * 2, closed)
            .await
            .expect("the late server's connection ends")
            .unwrap();
        assert!(
            closed,
            "the session the server granted late was never closed"
        );
    }

    /// A server that answers in time is heard, and its session closed
    /// before the probe returns.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_prompt_server_is_heard_and_its_session_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap().to_string();
        let patience = Duration::from_millis(500);
        let closing = Arc::new(AtomicBool::new(false));
        let closed = tokio::spawn(late_server(
            listener,
            Duration::ZERO,
            Duration::from_millis(1200),
            closing.clone(),
        ));
        let options = ZooKeeperOptions::default().with_session_timeout(Duration::from_secs(1));
        assert_eq!(
            ask(&server, &options, patience).await,
            Some(Duration::from_millis(1200))
        );
        assert!(
            closing.load(Ordering::SeqCst),
            "the probe returned before its session's close was sent"
        );
        assert!(closed.await.unwrap());
    }
}
