//! A TCP front for in-process backend clients, so a candidate process can
//! be one more client of the test process's server (the memory backend, or
//! a mutant of it): [`serve`] listens on loopback, and each
//! [`Call::Hello`] gets a new client from the function it was given.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, ElectionKey, LeaderEvent, Lease,
    LeaseBackend, Result,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::clock::to_ns;
use super::wire::{Answer, Call, WireCapabilities, WireError};

/// Makes a new client of the server for each remote client.
pub type MakeClient = Arc<dyn Fn() -> Arc<dyn LeaseBackend> + Send + Sync>;

struct Remote {
    backend: Arc<dyn LeaseBackend>,
    grants: Mutex<HashMap<u64, Lease>>,
    next_grant: AtomicU64,
}

struct Front {
    make: MakeClient,
    clients: Mutex<HashMap<u64, Arc<Remote>>>,
    next: AtomicU64,
}

/// Listens on a loopback port and serves every connection on the current
/// tokio runtime, until it shuts down: the address to give candidates.
pub fn serve(make: MakeClient) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let front = Arc::new(Front {
        make,
        clients: Mutex::default(),
        next: AtomicU64::new(1),
    });
    runtime.spawn(async move {
        let Ok(listener) = TcpListener::from_std(listener) else {
            return;
        };
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(front.clone().connection(stream));
        }
    });
    Ok(addr)
}

async fn say(out: &mut OwnedWriteHalf, answer: &Answer) -> std::io::Result<()> {
    let mut line = serde_json::to_string(answer).map_err(std::io::Error::other)?;
    line.push('\n');
    out.write_all(line.as_bytes()).await
}

fn failed(e: &tenure_core::Error) -> Answer {
    Answer::Error(WireError::from(e))
}

/// Resolves when the remote client closes the connection (or says more:
/// one call per connection, so either ends the call).
async fn hung_up(lines: &mut Lines<BufReader<OwnedReadHalf>>) {
    let _ = lines.next_line().await;
}

impl Front {
    /// Releases a grant whose answer could not be sent: nobody would renew
    /// or release it.
    async fn undelivered(&self, client: Option<u64>, answer: &Answer) {
        let (Some(remote), Answer::Granted { grant, .. }) =
            (client.and_then(|c| self.remote(c)), answer)
        else {
            return;
        };
        if let Ok(lease) = remote.lease(*grant) {
            let _ = remote.backend.release(&lease).await;
        }
    }

    fn remote(&self, client: u64) -> Option<Arc<Remote>> {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&client)
            .cloned()
    }

    async fn connection(self: Arc<Self>, stream: TcpStream) {
        let (read, mut out) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let Ok(Some(line)) = lines.next_line().await else {
            return;
        };
        let Ok(call) = serde_json::from_str::<Call>(&line) else {
            return;
        };
        if let Call::Hello = call {
            let backend = (self.make)();
            let capabilities = WireCapabilities::from(&backend.capabilities());
            let client = self.next.fetch_add(1, Ordering::Relaxed);
            let remote = Remote {
                backend,
                grants: Mutex::default(),
                next_grant: AtomicU64::new(1),
            };
            self.clients
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(client, Arc::new(remote));
            let _ = say(
                &mut out,
                &Answer::Hello {
                    client,
                    capabilities,
                },
            )
            .await;
            return;
        }
        let client = call.client();
        let answer = tokio::select! {
            answer = self.call(call, &mut out) => answer,
            () = hung_up(&mut lines) => return, // drops the call: cancelled
        };
        if let Some(answer) = answer {
            if say(&mut out, &answer).await.is_err() {
                self.undelivered(client, &answer).await;
            }
        }
    }

    /// Runs one call; `None` once a watch has ended (it wrote its events).
    async fn call(&self, call: Call, out: &mut OwnedWriteHalf) -> Option<Answer> {
        let client = call.client()?;
        let Some(remote) = self.remote(client) else {
            return Some(failed(&tenure_core::Error::invalid(
                "url",
                format!("no client {client} on this front"),
            )));
        };
        Some(match remote.call(call, out).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return None,
            Err(e) => failed(&e),
        })
    }
}

impl Remote {
    fn lease(&self, grant: u64) -> Result<Lease> {
        self.grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&grant)
            .cloned()
            .ok_or_else(|| tenure_core::Error::invalid("lease", format!("no grant {grant}")))
    }

    async fn call(&self, call: Call, out: &mut OwnedWriteHalf) -> Result<Option<Answer>> {
        Ok(Some(match call {
            Call::Hello => return Ok(None),
            Call::Acquire {
                key,
                identity,
                ttl_ns,
                drift_ns,
                wait,
                ..
            } => {
                let candidacy = Candidacy::with_drift_margin(
                    ElectionKey::new(key)?,
                    CandidateId::new(identity)?,
                    Duration::from_nanos(ttl_ns),
                    Duration::from_nanos(drift_ns),
                )?;
                let mode = if wait {
                    AcquireMode::Wait
                } else {
                    AcquireMode::Once
                };
                match self.backend.acquire(&candidacy, mode).await? {
                    Acquisition::Granted(lease) => {
                        let grant = self.next_grant.fetch_add(1, Ordering::Relaxed);
                        let answer = Answer::Granted {
                            grant,
                            token: lease.token().map(|t| t.get()),
                            sent_at_ns: to_ns(lease.sent_at()),
                            expiry_lead_ns: lease.expiry_lead().as_nanos() as u64,
                        };
                        self.grants
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(grant, lease);
                        answer
                    }
                    Acquisition::Held(info) => Answer::Held {
                        identity: info.identity.as_str().to_owned(),
                        token: info.token.map(|t| t.get()),
                    },
                }
            }
            Call::Renew { grant, .. } => {
                let renewed = self.backend.renew(&self.lease(grant)?).await?;
                let sent_at_ns = to_ns(renewed.sent_at());
                self.grants
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(grant, renewed);
                Answer::Renewed { sent_at_ns }
            }
            Call::Release { grant, .. } => {
                self.backend.release(&self.lease(grant)?).await?;
                self.grants
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&grant);
                Answer::Released
            }
            Call::Watch { key, .. } => {
                let mut events = self.backend.watch(&ElectionKey::new(key)?).await?;
                while let Some(event) = events.next().await {
                    let answer = match event {
                        Ok(LeaderEvent::Vacant) => Answer::Event { leader: None },
                        Ok(LeaderEvent::Elected(info)) => Answer::Event {
                            leader: Some((
                                info.identity.as_str().to_owned(),
                                info.token.map(|t| t.get()),
                            )),
                        },
                        Err(e) => failed(&e),
                    };
                    if say(out, &answer).await.is_err() {
                        break;
                    }
                }
                return Ok(None);
            }
        }))
    }
}
