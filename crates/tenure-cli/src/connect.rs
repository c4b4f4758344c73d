//! Reaching the backend: a client from the URL, an elector on the key, and a
//! first look at the key, all bounded by `--connect-timeout`.

use std::sync::Arc;
use std::time::Duration;

use tenure::{Elector, Error, LeaderInfo, LeaseBackend, DEFAULT_TTL};
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::args::{Backend, Candidate};
use crate::failure::{chain, Failure};
use crate::signals::Signals;

/// Pause between two looks at an unreachable backend.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// A client for `--backend` (or `--backend-file`, or `TENURE_BACKEND`), and
/// its URL. A bad or unknown URL fails at once; a client that cannot
/// connect within `--connect-timeout` fails then.
pub async fn backend(place: &Backend) -> Result<(Arc<dyn LeaseBackend>, String), Failure> {
    let url = place.url()?;
    let limit = place.connect_timeout;
    match tokio::time::timeout(limit, tenure::connect(&url)).await {
        Ok(Ok(backend)) => Ok((backend, url)),
        // Bad URLs name `url` (and the cargo feature, for a backend left out).
        Ok(Err(error @ Error::InvalidArgument { .. })) => Err(error.into()),
        Ok(Err(error)) => Err(Failure::new(format!(
            "cannot connect to {url}: {}",
            chain(&error)
        ))),
        Err(_) => Err(Failure::new(format!(
            "cannot connect to {url}: no connection within {} (--connect-timeout)",
            humantime::format_duration(limit)
        ))),
    }
}

/// Stands for election (run, campaign): reaches the backend with an elector
/// for `key` (see [`candidate`]), runs `body` with it, then shuts the
/// elector down (withdraws a pending campaign, releases what is still held,
/// closes the client). A signal that stops tenure before the elector is
/// ready ends it at once, with that signal's exit status.
pub async fn stand(
    place: &Backend,
    key: &str,
    who: &Candidate,
    started: Instant,
    signals: &mut Signals,
    body: impl AsyncFnOnce(&Elector, &mut Signals) -> Result<u8, Failure>,
) -> Result<u8, Failure> {
    let elector = tokio::select! {
        elector = candidate(place, key, who, started) => elector?,
        received = signals.stop_requested() => return Ok(received.exit_code()),
    };
    let result = body(&elector, signals).await;
    elector.shutdown().await;
    result
}

/// A candidate's elector (run, campaign): the key, identity and TTL are
/// checked against the backend, and the backend answers a first look.
pub async fn candidate(
    place: &Backend,
    key: &str,
    who: &Candidate,
    started: Instant,
) -> Result<Elector, Failure> {
    let (backend, url) = backend(place).await?;
    // A backend that cannot fence (Redis) is only built from a URL that
    // says so (`?allow_unfenced=true`): that is the user's opt-in, and the
    // command then runs without TENURE_FENCING_TOKEN.
    let unfenced = !backend.capabilities().fencing;
    let mut builder = Elector::builder(backend).key(key).ttl(who.ttl);
    if unfenced {
        builder = builder.allow_unfenced();
    }
    if let Some(identity) = &who.identity {
        builder = builder.identity(identity.as_str());
    }
    // The TTL is checked first, against the backend's bounds.
    let elector = builder.build()?;
    let leader = first_look(&elector, &url, place.connect_timeout, started).await?;
    tracing::info!(
        key,
        leader = leader.as_ref().map(|l| l.identity.to_string()),
        "campaigning"
    );
    Ok(elector)
}

/// An elector that only looks (status, watch): the key is checked against
/// the backend's rules, and the TTL is one the backend accepts.
pub fn observer(backend: Arc<dyn LeaseBackend>, key: &str) -> Result<Elector, Failure> {
    let caps = backend.capabilities();
    let mut ttl = DEFAULT_TTL.max(caps.min_ttl);
    if let Some(max) = caps.max_ttl {
        ttl = ttl.min(max);
    }
    // An observer writes nothing: whether the backend can fence is moot.
    Ok(Elector::builder(backend)
        .key(key)
        .ttl(ttl)
        .allow_unfenced()
        .build()?)
}

/// Who leads the key, as the backend says: retried while the backend is
/// unavailable, until `--connect-timeout` has passed since `started`.
pub async fn first_look(
    elector: &Elector,
    url: &str,
    connect_timeout: Duration,
    started: Instant,
) -> Result<Option<LeaderInfo>, Failure> {
    let deadline = started + connect_timeout;
    let mut last_error = None;
    loop {
        match timeout_at(deadline, elector.leader()).await {
            Ok(Ok(leader)) => return Ok(leader),
            Ok(Err(error)) if error.is_retryable() => {
                tracing::debug!(%url, error = %chain(&error), "backend not reachable yet");
                last_error = Some(error);
            }
            Ok(Err(error)) => {
                return Err(Failure::new(format!("{url}: {}", chain(&error))));
            }
            Err(_) => break,
        }
        let next = Instant::now() + RETRY_EVERY;
        if next >= deadline {
            break;
        }
        sleep_until(next).await;
    }
    let why = last_error.map_or_else(|| "no answer".to_owned(), |e| chain(&e));
    Err(Failure::new(format!(
        "cannot reach {url} within {} (--connect-timeout): {why}",
        humantime::format_duration(connect_timeout)
    )))
}
