//! [`RemoteBackend`]: a client, in a candidate process, of a backend served
//! by a [`front`](super::front) in the test process (`memory+tcp://ADDR`).

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tenure_core::layers::{Checked, Traced};
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, Capabilities, ElectionKey, Error,
    FencingToken, LeaderEvent, LeaderInfo, Lease, LeaseBackend, LeaseHandle, Result,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::clock::from_ns;
use super::wire::{Answer, Call};

/// The backend name of a remote client.
pub const NAME: &str = "memory+tcp";

/// A client of a backend served by a [`front`](super::front), its input
/// checked and its operations traced by tenure's [layers](tenure_core::layers).
pub type RemoteBackend = Checked<Traced<RemoteClient>>;

/// The calls alone: every operation is one TCP connection, and dropping
/// its future closes the connection, which cancels the operation on the
/// server's side.
#[derive(Clone, Debug)]
pub struct RemoteClient {
    addr: SocketAddr,
    client: u64,
    capabilities: Capabilities,
}

fn unreachable(e: impl std::fmt::Display) -> Error {
    Error::unavailable(NAME, e.to_string())
}

fn unexpected(answer: &Answer) -> Error {
    Error::backend(NAME, format!("unexpected answer {answer:?}"))
}

/// One call's connection. Dropping it closes the connection, which cancels
/// the call on the server's side.
struct Connection {
    lines: Lines<BufReader<OwnedReadHalf>>,
    _write: OwnedWriteHalf,
}

/// Sends `call` on a new connection, on which the answers follow.
async fn open(addr: SocketAddr, call: &Call) -> Result<Connection> {
    let stream = TcpStream::connect(addr).await.map_err(unreachable)?;
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_string(call).map_err(unreachable)?;
    line.push('\n');
    write
        .write_all(line.as_bytes())
        .await
        .map_err(unreachable)?;
    Ok(Connection {
        lines: BufReader::new(read).lines(),
        _write: write,
    })
}

/// The next answer on `connection`; a server error becomes tenure's.
async fn answer(connection: &mut Connection) -> Result<Answer> {
    let line = connection
        .lines
        .next_line()
        .await
        .map_err(unreachable)?
        .ok_or_else(|| unreachable("the front closed the connection"))?;
    match serde_json::from_str::<Answer>(&line).map_err(unreachable)? {
        Answer::Error(e) => Err(Error::from(e)),
        answer => Ok(answer),
    }
}

impl RemoteClient {
    /// Connects to the front at `addr` as a new client of its server.
    pub async fn connect(addr: SocketAddr) -> Result<RemoteBackend> {
        match answer(&mut open(addr, &Call::Hello).await?).await? {
            Answer::Hello {
                client,
                capabilities,
            } => Ok(Checked::new(Traced::new(RemoteClient {
                addr,
                client,
                capabilities: capabilities.into(),
            }))),
            other => Err(unexpected(&other)),
        }
    }

    /// Connects to `memory+tcp://HOST:PORT`.
    pub async fn connect_url(url: &str) -> Result<RemoteBackend> {
        let addr = url
            .strip_prefix("memory+tcp://")
            .and_then(|rest| rest.trim_end_matches('/').parse().ok())
            .ok_or_else(|| {
                Error::invalid("url", format!("{url:?} is not memory+tcp://HOST:PORT"))
            })?;
        Self::connect(addr).await
    }

    async fn call(&self, call: &Call) -> Result<Answer> {
        answer(&mut open(self.addr, call).await?).await
    }
}

fn grant_of(lease: &Lease) -> Result<u64> {
    lease
        .handle()
        .get::<u64>()
        .copied()
        .ok_or_else(|| Error::invalid("lease", "was not granted through this front"))
}

#[async_trait]
impl LeaseBackend for RemoteClient {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let call = Call::Acquire {
            client: self.client,
            key: candidacy.key().as_str().to_owned(),
            identity: candidacy.identity().as_str().to_owned(),
            ttl_ns: candidacy.ttl().as_nanos() as u64,
            drift_ns: candidacy.drift_margin().as_nanos() as u64,
            wait: mode == AcquireMode::Wait,
        };
        match self.call(&call).await? {
            Answer::Granted {
                grant,
                token,
                sent_at_ns,
                expiry_lead_ns,
            } => Ok(Acquisition::Granted(
                Lease::new(
                    candidacy.clone(),
                    token.map(FencingToken::new),
                    from_ns(sent_at_ns),
                    LeaseHandle::new(grant),
                )
                .with_expiry_lead(Duration::from_nanos(expiry_lead_ns)),
            )),
            Answer::Held { identity, token } => Ok(Acquisition::Held(LeaderInfo {
                identity: CandidateId::new(identity)?,
                token: token.map(FencingToken::new),
            })),
            other => Err(unexpected(&other)),
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let call = Call::Renew {
            client: self.client,
            grant: grant_of(lease)?,
        };
        match self.call(&call).await? {
            Answer::Renewed { sent_at_ns } => {
                Ok(lease.renewed(from_ns(sent_at_ns), lease.handle().clone()))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let call = Call::Release {
            client: self.client,
            grant: grant_of(lease)?,
        };
        match self.call(&call).await? {
            Answer::Released => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let call = Call::Watch {
            client: self.client,
            key: key.as_str().to_owned(),
        };
        let connection = open(self.addr, &call).await?;
        Ok(
            futures::stream::unfold(Some(connection), |connection| async move {
                let mut connection = connection?;
                let event = match answer(&mut connection).await {
                    Ok(Answer::Event { leader: None }) => Ok(LeaderEvent::Vacant),
                    Ok(Answer::Event {
                        leader: Some((identity, token)),
                    }) => CandidateId::new(identity).map(|identity| {
                        LeaderEvent::Elected(LeaderInfo {
                            identity,
                            token: token.map(FencingToken::new),
                        })
                    }),
                    Ok(other) => Err(unexpected(&other)),
                    // The connection is gone: this error ends the stream.
                    Err(e) => return Some((Err(e), None)),
                };
                Some((event, Some(connection)))
            })
            .boxed(),
        )
    }
}
