//! Expiry judged by the observer's own monotonic clock (client-go#448), and
//! waiting for a Lease to change by watching it.
//!
//! Watches and lists go through the client as raw requests: kube-client
//! keeps neither the `Retry-After` header nor a Status's
//! `details.retryAfterSeconds` in its errors, and a server that sheds load
//! (API Priority and Fairness's 429) says there how long to stay away.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::ObjectList;
use kube::error::ErrorResponse;
use kube::{Api, Client};
use serde_json::Value;
use tenure_core::Candidacy;
use tokio::time::Instant;

/// When this process first saw each Lease's current resourceVersion.
#[derive(Debug, Default)]
pub(crate) struct Observations(Mutex<HashMap<String, (String, Instant)>>);

impl Observations {
    /// Records seeing `name` at `resource_version`; returns since when this
    /// process has seen it unchanged.
    pub fn seen(&self, name: &str, resource_version: &str) -> Instant {
        let mut map = self.0.lock().unwrap();
        match map.get(name) {
            Some((rv, since)) if rv == resource_version => *since,
            _ => {
                let now = Instant::now();
                map.insert(name.to_owned(), (resource_version.to_owned(), now));
                now
            }
        }
    }
}

/// What waiting for a change found.
pub(crate) enum Change {
    /// The Lease as the watch delivered it (`None`: deleted). It is the
    /// state at the event's resourceVersion; a write based on it is still a
    /// compare-and-swap, so a later change only makes that write conflict.
    Seen(Option<Box<Lease>>),
    /// The deadline passed, or the watch failed (after its back-off): re-read.
    Unknown,
}

/// A failed watch or list: the error, and how long the server asked us to
/// stay away (`Retry-After`, or a Status's `details.retryAfterSeconds`).
pub(crate) struct Failure {
    // Boxed: a Result carrying it stays small.
    error: Box<kube::Error>,
    retry_after: Option<Duration>,
}

impl From<kube::Error> for Failure {
    fn from(error: kube::Error) -> Self {
        Failure {
            error: Box::new(error),
            retry_after: None,
        }
    }
}

impl Failure {
    /// The error, and how long the server asked us to stay away.
    pub(crate) fn into_parts(self) -> (kube::Error, Option<Duration>) {
        (*self.error, self.retry_after)
    }

    /// 410 Gone / Expired: the history after the resourceVersion is gone.
    fn is_expired(&self) -> bool {
        matches!(&*self.error, kube::Error::Api(e) if e.code == 410)
    }

    fn is_forbidden(&self) -> bool {
        matches!(&*self.error, kube::Error::Api(e) if e.code == 403)
    }

    /// A failure read from a `Status` object (an error answer's body, or a
    /// watch's ERROR event), `code` the HTTP status if there was one.
    fn from_status(status: &Value, code: u16, header: Option<Duration>) -> Failure {
        let text = |field: &str| status[field].as_str().unwrap_or_default().to_owned();
        let code = status["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(code);
        let asked = status["details"]["retryAfterSeconds"]
            .as_u64()
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        Failure {
            error: Box::new(kube::Error::Api(ErrorResponse {
                status: text("status"),
                message: text("message"),
                reason: text("reason"),
                code,
            })),
            retry_after: asked.max(header),
        }
    }

    /// A failure answered with HTTP status `code`, body `body`.
    fn from_answer(code: u16, body: &[u8], header: Option<Duration>) -> Failure {
        match serde_json::from_slice::<Value>(body) {
            Ok(status) if status.is_object() => Failure::from_status(&status, code, header),
            // Not a Status: API Priority and Fairness answers its 429 as text.
            _ => Failure {
                error: Box::new(kube::Error::Api(ErrorResponse {
                    status: "Failure".to_owned(),
                    message: String::from_utf8_lossy(body).trim().to_owned(),
                    reason: String::new(),
                    code,
                })),
                retry_after: header,
            },
        }
    }
}

/// `Retry-After` in seconds (the only form kube-apiserver sends).
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

type Events = BoxStream<'static, Result<WatchEvent<Lease>, Failure>>;

fn params_for(name: &str, selector: Option<&str>) -> WatchParams {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(290);
    match selector {
        Some(label) => params.labels(label),
        None => params,
    }
}

/// Sends `request`; a 2xx answer's body, or the failure.
pub(crate) async fn send(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
    kind: &'static str,
) -> Result<kube::client::Body, Failure> {
    request.extensions_mut().insert(kind);
    let answer = client.send(request.map(kube::client::Body::from)).await?;
    let code = answer.status().as_u16();
    if (200..300).contains(&code) {
        return Ok(answer.into_body());
    }
    let header = retry_after(answer.headers());
    let body = answer
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Err(Failure::from_answer(code, &body, header))
}

/// A watch's body as events, one JSON object a line; an ERROR event is a
/// [`Failure`] (its Status may carry `retryAfterSeconds`).
fn events(body: kube::client::Body) -> Events {
    let state = (body.into_data_stream(), Vec::<u8>::new(), false);
    futures::stream::unfold(state, |(mut data, mut buffer, mut ended)| async move {
        loop {
            if let Some(at) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some((event(&line), (data, buffer, ended)));
            }
            if ended {
                // A partial last line (a connection cut mid-event) is dropped.
                return None;
            }
            match data.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    ended = true;
                    buffer.clear();
                    return Some((Err(Failure::from(e)), (data, buffer, ended)));
                }
                None => ended = true,
            }
        }
    })
    .boxed()
}

fn event(line: &[u8]) -> Result<WatchEvent<Lease>, Failure> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| Failure::from(kube::Error::SerdeError(e)))?;
    match value["type"].as_str() {
        Some("ERROR") => Err(Failure::from_status(&value["object"], 500, None)),
        Some(_) => {
            serde_json::from_value(value).map_err(|e| Failure::from(kube::Error::SerdeError(e)))
        }
        // A bare Status: an error written into the stream.
        None => Err(Failure::from_status(&value, 500, None)),
    }
}

/// The shortest and longest cap of the back-off after a failed watch or list.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(4);
/// The longest `Retry-After` honoured (a waiter's deadline cuts it shorter).
const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);
/// Failures in a row before a WARN; then at most one WARN per this period.
const WARN_AFTER: u32 = 3;
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Back-off between failed watches and lists: full jitter (a delay drawn
/// uniformly from zero to a cap doubling from 100 ms to 4 s), at least what
/// the server asked for; reset when the watch delivers again.
#[derive(Debug, Default)]
struct Retry {
    attempt: u32,
    failures: u32,
    since: Option<Instant>,
    warned: Option<Instant>,
}

impl Retry {
    fn succeeded(&mut self, name: &str) {
        if self.warned.is_some() {
            tracing::info!(
                lease = name,
                failures = self.failures,
                "watching the Lease works again"
            );
        }
        *self = Retry::default();
    }

    /// The delay before the next try after `failure` of `what`; says so at
    /// WARN once failures persist, at most once a minute.
    fn failed(
        &mut self,
        name: &str,
        what: &'static str,
        failure: &Failure,
        tell: Option<&Candidacy>,
    ) -> Duration {
        let cap = RETRY_MIN
            .saturating_mul(1 << self.attempt.min(10))
            .min(RETRY_MAX);
        self.attempt += 1;
        self.failures += 1;
        let since = *self.since.get_or_insert_with(Instant::now);
        let mut delay = cap.mul_f64(rand::random::<f64>());
        if let Some(asked) = failure.retry_after {
            delay = delay.max(asked.min(RETRY_AFTER_MAX));
        }
        let error = &failure.error;
        let due = self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY);
        if self.failures >= WARN_AFTER && due {
            self.warned = Some(Instant::now());
            let hint = if failure.is_forbidden() {
                "; tenure needs get, list, watch, create, update and patch on leases.coordination.k8s.io"
            } else {
                ""
            };
            tracing::warn!(
                lease = name,
                failures = self.failures,
                failing_for = ?since.elapsed(),
                %error,
                retry_in = ?delay,
                "the Lease's {what} keeps failing; reading it after each back-off instead{hint}"
            );
            if let Some(candidacy) = tell {
                candidacy.warning(
                    "watch",
                    format!(
                        "the Lease {name}'s {what} failed {} times in {:?} ({error}); reading it \
                         after each back-off instead{hint}",
                        self.failures,
                        since.elapsed()
                    ),
                );
            }
        } else {
            tracing::debug!(lease = name, %error, retry_in = ?delay, "the Lease's {what} failed");
        }
        delay
    }
}

/// What a list after a 410 found.
enum Relisted {
    /// The Lease changed since the resourceVersion (or is gone).
    Changed(Option<Box<Lease>>),
    /// Unchanged: a watch from the list's resourceVersion.
    Watching(Events),
}

/// The `User-Agent` of a watch (and of the list after a 410) for `role`:
/// `tenure-kube/<version> (<role>)`, or `(<role>; <identity>)` for a
/// candidate's where its identity can be a header's text. An API server's
/// audit log and metrics can tell the watches apart by it, and the Lease API
/// test server counts them, so the conformance suite knows who waits.
pub(crate) fn user_agent(role: &str, identity: Option<&str>) -> http::HeaderValue {
    let version = env!("CARGO_PKG_VERSION");
    let named = identity
        .filter(|id| id.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b')'))
        .and_then(|id| {
            http::HeaderValue::try_from(format!("tenure-kube/{version} ({role}; {id})")).ok()
        });
    named.unwrap_or_else(|| {
        http::HeaderValue::try_from(format!("tenure-kube/{version} ({role})"))
            .expect("an ASCII header value")
    })
}

/// Where a watch or list goes (shared across threads while a request is
/// on its way, which the open stream is not).
struct Target {
    client: Client,
    url: String,
    name: String,
    /// Whom the watch is for ([`user_agent`]).
    user_agent: http::HeaderValue,
    /// The label the watch selects on, if any (never the list's).
    selector: Option<String>,
}

impl Target {
    fn agent(&self, mut request: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
        request
            .headers_mut()
            .insert(http::header::USER_AGENT, self.user_agent.clone());
        request
    }

    async fn start(&self, resource_version: &str) -> Result<Events, Failure> {
        let request = kube::core::Request::new(&self.url)
            .watch(
                &params_for(&self.name, self.selector.as_deref()),
                resource_version,
            )
            .map_err(|e| Failure::from(kube::Error::BuildRequest(e)))?;
        let body = send(&self.client, self.agent(request), "watch").await?;
        Ok(events(body))
    }

    /// The Lease and the list's resourceVersion.
    async fn list(&self) -> Result<(Option<Lease>, Option<String>), Failure> {
        let params = ListParams::default().fields(&format!("metadata.name={}", self.name));
        let request = kube::core::Request::new(&self.url)
            .list(&params)
            .map_err(|e| Failure::from(kube::Error::BuildRequest(e)))?;
        let body = send(&self.client, self.agent(request), "list").await?;
        let bytes = body.collect().await.map_err(Failure::from)?.to_bytes();
        let list: ObjectList<Lease> = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::from(kube::Error::SerdeError(e)))?;
        Ok((
            list.items.into_iter().next(),
            list.metadata.resource_version,
        ))
    }

    /// After a 410 Gone (the history after `resource_version` is gone):
    /// lists the Lease, as client-go's reflector does. If it changed since
    /// `resource_version`, that is the change; otherwise the watch goes on
    /// from the list's resourceVersion, which the server still has. (A watch
    /// from the object's own resourceVersion would be refused again for as
    /// long as the Lease is not written.)
    async fn relist(&self, resource_version: &str) -> Result<Relisted, Failure> {
        let (current, from) = self.list().await?;
        match &current {
            Some(lease) if lease.metadata.resource_version.as_deref() == Some(resource_version) => {
                let from = from.ok_or_else(|| {
                    Failure::from(kube::Error::Service(
                        "a list of Leases came without a resourceVersion".into(),
                    ))
                })?;
                Ok(Relisted::Watching(self.start(&from).await?))
            }
            _ => Ok(Relisted::Changed(current.map(Box::new))),
        }
    }
}

/// One Lease's changes, over a watch kept open from one change to the next.
///
/// A watch opened anew after every event would start from a resourceVersion
/// the server may have passed already: kube-apiserver without its watch
/// cache, like the Lease test server, serves that from etcd's catch-up loop,
/// every 100 ms. So a release that lands just after a renewal would reach a
/// standby up to 100 ms late. Kept open, the stream carries the release as
/// soon as it is written; and a waiting candidate makes one request per
/// wait, not one per renewal it sees. A deadline that passes leaves the
/// stream open for the next wait.
///
/// A watch or list that fails (403, 429, 5xx, a broken connection) is tried
/// again after a back-off ([`Retry`]) that honours `Retry-After`; a 410 Gone,
/// as an answer or as an ERROR event, is followed by a list.
///
/// A watch may select on a label ([`selecting`](Self::selecting)): then,
/// as kube-apiserver's watch cache does for a label selector, it tells of a
/// change only if the Lease carries the label after it or carried it
/// before; a change that removes the label (a DELETED event from such a
/// server) is told as [`Change::Unknown`], to be read. The filter is
/// applied here as well, so a server that sends every change (the Lease
/// test server) tells the caller no more than kube-apiserver would.
pub(crate) struct LeaseWatch {
    target: Target,
    name: String,
    /// The open stream and the resourceVersion of the last event it told.
    open: Option<(String, Events)>,
    /// A watch [`open`](Self::open) could not start, from that resourceVersion.
    refused: Option<(String, Failure)>,
    retry: Retry,
    /// Whose health hears of failures that persist (a waiting candidate's).
    tell: Option<Candidacy>,
    /// With a label selector: whether the Lease as the caller last knew it
    /// carried the label.
    labelled: bool,
}

/// Whether resourceVersion `a` is not after `b` (equal, or both integers
/// and `a` the smaller).
fn not_after(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a <= b)
}

impl LeaseWatch {
    /// A watch of `name`, its requests sent with `user_agent` ([`user_agent`]).
    pub(crate) fn new(api: Api<Lease>, name: &str, user_agent: http::HeaderValue) -> LeaseWatch {
        LeaseWatch {
            target: Target {
                url: api.resource_url().to_owned(),
                client: api.into_client(),
                name: name.to_owned(),
                user_agent,
                selector: None,
            },
            name: name.to_owned(),
            open: None,
            refused: None,
            retry: Retry::default(),
            tell: None,
            labelled: false,
        }
    }

    /// The same watch, its persisting failures also told to `candidacy`'s
    /// owner ([`Candidacy::warning`]: an Elector counts them in its health).
    pub(crate) fn telling(mut self, candidacy: &Candidacy) -> LeaseWatch {
        self.tell = Some(candidacy.clone());
        self
    }

    /// The same watch, selecting on the label `label` (its presence).
    pub(crate) fn selecting(mut self, label: String) -> LeaseWatch {
        self.target.selector = Some(label);
        self
    }

    /// Says whether the Lease as the caller knows it now (the
    /// resourceVersion it waits from next) carries the selected label.
    pub(crate) fn knowing(&mut self, labelled: bool) {
        self.labelled = labelled;
    }

    /// Whether a watch is open and its last event was at `resource_version`.
    pub(crate) fn follows(&self, resource_version: &str) -> bool {
        self.open
            .as_ref()
            .is_some_and(|(rv, _)| rv == resource_version)
    }

    /// Whether the open stream can tell the changes after
    /// `resource_version`: it is there, or, selecting on a label, before
    /// it (the changes between, which the caller knows of, are passed over).
    fn goes_on_to(&self, resource_version: &str) -> bool {
        let selecting = self.target.selector.is_some();
        self.open.as_ref().is_some_and(|(rv, _)| {
            rv == resource_version || (selecting && not_after(rv, resource_version))
        })
    }

    /// Opens the watch from `resource_version` now, unless it is open
    /// there already: a look the caller takes next then cannot miss a change
    /// that the watch would carry only from the server's catch-up. A watch
    /// that cannot start is not tried again by the next
    /// [`changed`](Self::changed) from there: that one backs off (or lists,
    /// after a 410).
    pub(crate) async fn open(&mut self, resource_version: &str) {
        if self.goes_on_to(resource_version) {
            return;
        }
        match self.target.start(resource_version).await {
            Ok(stream) => self.open = Some((resource_version.to_owned(), stream)),
            Err(failure) => self.refused = Some((resource_version.to_owned(), failure)),
        }
    }

    /// Backs off after `failure` of `what`; the caller reads again.
    async fn failed(&mut self, what: &'static str, failure: Failure) -> Change {
        self.open = None;
        let delay = self
            .retry
            .failed(&self.name, what, &failure, self.tell.as_ref());
        tokio::time::sleep(delay).await;
        Change::Unknown
    }

    /// Waits until the Lease changes after `resource_version` (or is
    /// deleted), `until` passes, or the watch fails (then after a back-off).
    /// The changed object comes with the event, so the caller need not read
    /// it again: one request fewer on every hand-over. The stream stays open
    /// for the next call if that call goes on from the event this one
    /// returned (or, if `until` passed, from where this one started).
    pub(crate) async fn changed(
        &mut self,
        resource_version: &str,
        until: Option<Instant>,
    ) -> Change {
        match until {
            Some(until) => tokio::time::timeout_at(until, self.wait(resource_version))
                .await
                .unwrap_or(Change::Unknown),
            None => self.wait(resource_version).await,
        }
    }

    /// Lists after a 410 Gone: the Lease if it changed since
    /// `resource_version`; else the watch goes on from the list.
    async fn relist(&mut self, resource_version: &str) -> Option<Change> {
        match self.target.relist(resource_version).await {
            Ok(Relisted::Changed(now)) => {
                self.retry.succeeded(&self.name);
                Some(Change::Seen(now))
            }
            Ok(Relisted::Watching(stream)) => {
                self.open = Some((resource_version.to_owned(), stream));
                None
            }
            Err(failure) => Some(self.failed("list", failure).await),
        }
    }

    /// [`changed`](Self::changed) without its deadline. The stream lives in
    /// `self.open` while it is read, so a deadline that cuts the wait short
    /// leaves it there.
    async fn wait(&mut self, resource_version: &str) -> Change {
        let refused = self.refused.take().filter(|(rv, _)| rv == resource_version);
        let mut relisted = false;
        let mut opened = None;
        if !self.goes_on_to(resource_version) {
            self.open = None;
            let started = match refused {
                Some((_, failure)) => Err(failure),
                None => self.target.start(resource_version).await,
            };
            match started {
                Ok(stream) => self.open = Some((resource_version.to_owned(), stream)),
                // An HTTP 410 (an older apiserver, a proxy) means what the
                // ERROR event means.
                Err(failure) if failure.is_expired() => {
                    relisted = true;
                    if let Some(change) = self.relist(resource_version).await {
                        return change;
                    }
                }
                Err(failure) => return self.failed("watch", failure).await,
            }
            opened = Some(Instant::now());
        }
        let selector = self.target.selector.clone();
        loop {
            let Some((_, stream)) = self.open.as_mut() else {
                return Change::Unknown;
            };
            let Some(event) = stream.next().await else {
                break;
            };
            match event {
                Ok(WatchEvent::Bookmark(_)) => self.retry.succeeded(&self.name),
                Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease)) => {
                    self.retry.succeeded(&self.name);
                    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
                    let Some(label) = &selector else {
                        self.open.as_mut().expect("open").0 = rv;
                        return Change::Seen(Some(Box::new(lease)));
                    };
                    if not_after(&rv, resource_version) {
                        // The caller knows of it already.
                        continue;
                    }
                    let labelled = lease
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(label));
                    if !labelled && !self.labelled {
                        // Neither before nor after: a server that filters
                        // would not have sent it.
                        continue;
                    }
                    self.labelled = labelled;
                    self.open.as_mut().expect("open").0 = rv;
                    if !labelled {
                        // The label is gone: a filtering server tells this
                        // as DELETED, with the Lease as it was. Read it.
                        return Change::Unknown;
                    }
                    return Change::Seen(Some(Box::new(lease)));
                }
                Ok(WatchEvent::Deleted(lease)) => {
                    self.retry.succeeded(&self.name);
                    let Some(label) = &selector else {
                        self.open = None;
                        return Change::Seen(None);
                    };
                    let labelled = lease
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(label));
                    if !labelled && !self.labelled {
                        // Not labelled before: a server that filters
                        // would not have sent it.
                        continue;
                    }
                    // Deleted, or no longer labelled: read it.
                    self.open = None;
                    return Change::Unknown;
                }
                Ok(WatchEvent::Error(e)) => {
                    return self
                        .failed("watch", Failure::from(kube::Error::Api(e)))
                        .await
                }
                Err(failure) if failure.is_expired() && !relisted => {
                    relisted = true;
                    self.open = None;
                    if let Some(change) = self.relist(resource_version).await {
                        return change;
                    }
                }
                Err(failure) => return self.failed("watch", failure).await,
            }
        }
        self.open = None;
        // The server ended the watch. One that ends as soon as it starts
        // (a proxy that closes it, a server going away) is a failure too.
        if opened.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            let ended = Failure::from(kube::Error::Service(
                "the watch ended as soon as it started".into(),
            ));
            return self.failed("watch", ended).await;
        }
        Change::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::user_agent;

    #[test]
    fn a_user_agent_names_the_role_and_an_identity_that_can_be_header_text() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            user_agent("waiting", Some("pod-7")),
            format!("tenure-kube/{version} (waiting; pod-7)").as_str()
        );
        assert_eq!(
            user_agent("holder", None),
            format!("tenure-kube/{version} (holder)").as_str()
        );
        for unfit in ["pödchen", "a)b", "tab\there"] {
            assert_eq!(
                user_agent("waiting", Some(unfit)),
                format!("tenure-kube/{version} (waiting)").as_str(),
                "{unfit:?}"
            );
        }
    }
}
