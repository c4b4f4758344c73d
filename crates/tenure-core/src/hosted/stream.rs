//! A backend's [`watch`](crate::LeaseBackend::watch) stream, written once:
//! the backend says how to look at a key ([`Looks`]); [`watch_stream`]
//! does the rest (contract point 10).
//!
//! The first look is made by the `watch` call itself. The looks after it
//! run in a task of their own on the heartbeat runtime, from when the
//! reader first waits for a change (a watch read for its first state alone,
//! as `Elector::leader` reads one, costs that one look), and post each
//! state to a `tokio::sync::watch` channel, which keeps only the newest: a
//! reader that falls behind is given the state now, never a backlog of
//! stale ones, and never the state it was given last. An error ends the
//! stream after the newest state (so do looks that stop without one: a
//! panic, the runtime shutting down); a dropped stream stops the looks at
//! once.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;

use crate::{heartbeat_runtime, Error, LeaderEvent, Result};

/// How a backend looks at one key's election: the state now, then the
/// state after each change it hears of.
#[async_trait]
pub trait Looks: Send + 'static {
    /// On the first call, who leads the key now (an error fails the
    /// `watch` call itself). On every later call, who leads it once the
    /// backend has heard of a change, or has waited as long as it waits
    /// between looks; the state may equal the last one returned (the
    /// stream leaves it out). An error ends the stream: the backend cannot
    /// tell any more (a session ended, a server refused), and a reader such
    /// as `Elector::observe` watches again.
    async fn next(&mut self) -> Result<LeaderEvent>;
}

/// The stream a backend's `watch` returns: the state of the first look
/// (made before this returns, so a key that cannot be read fails the call),
/// then every change the later looks find, the newest winning.
pub async fn watch_stream(
    mut looks: impl Looks,
) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
    let first = looks.next().await?;
    let (tx, rx) = watch::channel(first);
    let ended = Arc::new(Mutex::new(None));
    // The looks run in the span of the `watch` call.
    let span = tracing::Span::current();
    let start: Start = {
        let ended = ended.clone();
        Box::new(move || {
            heartbeat_runtime().spawn(post(looks, tx, ended).instrument(span));
        })
    };
    Ok(read(rx, ended, start))
}

/// Starts the looks after the first.
type Start = Box<dyn FnOnce() + Send>;

/// Ends the stream with an error if the looks stop without one (a panic,
/// the heartbeat runtime shutting down): the reader then watches again.
struct EndsWithError(Arc<Mutex<Option<Error>>>);

impl Drop for EndsWithError {
    fn drop(&mut self) {
        let mut ended = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ended.is_none() {
            *ended = Some(Error::unavailable(
                "watch",
                "the watch's looks stopped (a panic, or the heartbeat runtime shut down)",
            ));
        }
    }
}

/// Posts each new state until the reader is gone or a look fails.
async fn post(
    mut looks: impl Looks,
    tx: watch::Sender<LeaderEvent>,
    ended: Arc<Mutex<Option<Error>>>,
) {
    // Dropped before `tx` is (locals before arguments): the error is there
    // when the reader sees the channel closed.
    let _ends = EndsWithError(ended.clone());
    loop {
        let next = tokio::select! {
            _ = tx.closed() => return,
            next = looks.next() => next,
        };
        match next {
            Ok(event) => {
                tx.send_if_modified(|now| {
                    let changed = *now != event;
                    if changed {
                        *now = event;
                    }
                    changed
                });
            }
            Err(error) => {
                // Dropping the sender ends the stream, after the state posted
                // last, with this error.
                *ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
                return;
            }
        }
    }
}

/// The first look's state, then the newest state posted whenever the
/// reader asks, never the one it was given last; then the error that ended
/// the looks.
fn read(
    rx: watch::Receiver<LeaderEvent>,
    ended: Arc<Mutex<Option<Error>>>,
    start: Start,
) -> BoxStream<'static, Result<LeaderEvent>> {
    let reader = Reader {
        rx,
        start: Some(start),
        given: None,
    };
    futures::stream::unfold(Some(reader), move |reader| {
        let ended = ended.clone();
        async move {
            let mut reader = reader?;
            match reader.next().await {
                Some(event) => Some((Ok(event), Some(reader))),
                None => {
                    let error = ended.lock().unwrap_or_else(|e| e.into_inner()).take()?;
                    Some((Err(error), None))
                }
            }
        }
    })
    .boxed()
}

/// The reader's side of the channel.
struct Reader {
    rx: watch::Receiver<LeaderEvent>,
    /// Starts the looks after the first, when the reader first waits.
    start: Option<Start>,
    /// The state given last.
    given: Option<LeaderEvent>,
}

impl Reader {
    /// The newest state unlike the one given last; `None` once the looks
    /// have ended.
    async fn next(&mut self) -> Option<LeaderEvent> {
        // The first look's state is unseen, though the channel was made
        // with it: it (or whatever came since) comes first.
        if self.given.is_some() {
            if let Some(start) = self.start.take() {
                start();
            }
        }
        loop {
            if self.given.is_some() {
                // A slow reader may find A posted again after B: given A
                // last, it waits for the next change.
                self.rx.changed().await.ok()?;
            }
            let event = self.rx.borrow_and_update().clone();
            if self.given.as_ref() != Some(&event) {
                self.given = Some(event.clone());
                return Some(event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use super::*;
    use crate::{CandidateId, FencingToken, LeaderInfo};

    fn elected(name: &str, token: u64) -> LeaderEvent {
        LeaderEvent::Elected(LeaderInfo {
            identity: CandidateId::new(name).unwrap(),
            token: Some(FencingToken::new(token)),
        })
    }

    /// Looks that return what a test scripted, one per call, then wait.
    struct Scripted {
        answers: Arc<Mutex<VecDeque<Result<LeaderEvent>>>>,
        more: Arc<tokio::sync::Notify>,
        dropped: Option<tokio::sync::oneshot::Sender<()>>,
    }

    impl Drop for Scripted {
        fn drop(&mut self) {
            if let Some(tx) = self.dropped.take() {
                let _ = tx.send(());
            }
        }
    }

    #[async_trait]
    impl Looks for Scripted {
        async fn next(&mut self) -> Result<LeaderEvent> {
            loop {
                let notified = self.more.notified();
                if let Some(answer) = self.answers.lock().unwrap().pop_front() {
                    return answer;
                }
                notified.await;
            }
        }
    }

    struct Script {
        answers: Arc<Mutex<VecDeque<Result<LeaderEvent>>>>,
        more: Arc<tokio::sync::Notify>,
    }

    impl Script {
        fn push(&self, answer: Result<LeaderEvent>) {
            self.answers.lock().unwrap().push_back(answer);
            self.more.notify_one();
        }
    }

    fn scripted(
        first: Vec<Result<LeaderEvent>>,
    ) -> (Scripted, Script, tokio::sync::oneshot::Receiver<()>) {
        let answers = Arc::new(Mutex::new(first.into_iter().collect()));
        let more = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let looks = Scripted {
            answers: answers.clone(),
            more: more.clone(),
            dropped: Some(tx),
        };
        (looks, Script { answers, more }, rx)
    }

    /// The reader waits once for a change that has not come (which starts
    /// the looks after the first), then looks away.
    async fn waits_once(events: &mut BoxStream<'static, Result<LeaderEvent>>) {
        let waited = tokio::time::timeout(Duration::from_millis(10), events.next()).await;
        assert!(waited.is_err(), "no change yet: {waited:?}");
    }

    /// Waits until the task has taken every scripted answer.
    async fn drained(script: &Script) {
        while !script.answers.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The last one taken is posted before the next look waits.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn the_first_state_comes_first_and_a_repeated_one_not_at_all() {
        let (looks, script, _) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        script.push(Ok(LeaderEvent::Vacant));
        script.push(Ok(elected("a", 1)));
        assert_eq!(events.next().await.unwrap().unwrap(), elected("a", 1));
        script.push(Ok(elected("a", 1)));
        script.push(Ok(LeaderEvent::Vacant));
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
    }

    #[tokio::test]
    async fn a_slow_reader_is_given_the_newest_state_not_a_backlog() {
        let (looks, script, _) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        // The reader waits once (which starts the looks), then falls behind.
        waits_once(&mut events).await;
        script.push(Ok(elected("a", 1)));
        script.push(Ok(LeaderEvent::Vacant));
        script.push(Ok(elected("b", 2)));
        drained(&script).await;
        assert_eq!(events.next().await.unwrap().unwrap(), elected("b", 2));
    }

    #[tokio::test]
    async fn a_slow_reader_is_not_given_the_state_it_was_given_last() {
        let (looks, script, _) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        waits_once(&mut events).await;
        // Held and let go again while the reader looked away: the newest
        // state is the one it has.
        script.push(Ok(elected("a", 1)));
        script.push(Ok(LeaderEvent::Vacant));
        drained(&script).await;
        script.push(Ok(elected("b", 2)));
        assert_eq!(events.next().await.unwrap().unwrap(), elected("b", 2));
    }

    #[tokio::test]
    async fn looks_that_stop_without_an_error_end_the_stream_with_one() {
        struct Panics(bool);
        #[async_trait]
        impl Looks for Panics {
            async fn next(&mut self) -> Result<LeaderEvent> {
                if std::mem::replace(&mut self.0, true) {
                    panic!("a look panicked (planted)");
                }
                Ok(LeaderEvent::Vacant)
            }
        }
        let mut events = watch_stream(Panics(false)).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        let Some(Err(error)) = events.next().await else {
            panic!("no error after the looks stopped");
        };
        assert!(error.is_retryable(), "{error}");
        assert!(events.next().await.is_none());
    }

    #[tokio::test]
    async fn a_failed_first_look_fails_the_call() {
        let (looks, _script, _) = scripted(vec![Err(Error::unavailable("test", "down"))]);
        let Err(error) = watch_stream(looks).await else {
            panic!("a watch whose first look failed");
        };
        assert!(error.is_retryable(), "{error}");
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_after_the_newest_state() {
        let (looks, script, _) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        waits_once(&mut events).await;
        script.push(Ok(elected("a", 1)));
        script.push(Err(Error::unavailable("test", "session ended")));
        drained(&script).await;
        assert_eq!(events.next().await.unwrap().unwrap(), elected("a", 1));
        let Some(Err(error)) = events.next().await else {
            panic!("no error after the newest state");
        };
        assert!(error.to_string().contains("session ended"), "{error}");
        assert!(events.next().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_read_for_its_first_state_alone_looks_no_more() {
        let (looks, script, dropped) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        script.push(Ok(elected("a", 1)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(script.answers.lock().unwrap().len(), 1, "a look was made");
        drop(events);
        dropped.await.expect("the looks dropped with the stream");
    }

    #[tokio::test]
    async fn a_dropped_stream_stops_the_looks() {
        let (looks, _script, dropped) = scripted(vec![Ok(LeaderEvent::Vacant)]);
        let mut events = watch_stream(looks).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
        waits_once(&mut events).await;
        drop(events);
        tokio::time::timeout(Duration::from_secs(5), dropped)
            .await
            .expect("the looks dropped within 5 s")
            .expect("dropped, not leaked");
    }
}
