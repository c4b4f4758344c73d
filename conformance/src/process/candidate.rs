//! The candidate's side: an Elector driven over stdin/stdout.
//!
//! Usage: `tenure-candidate URL KEY IDENTITY TTL_MS`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Elector, Leadership, Term};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use super::clock::to_ns;
use super::connect::Connector;
use super::protocol::{Command, Message, Request, Status};

/// The arguments of a candidate process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// The backend's URL, for the connector.
    pub url: String,
    /// The election key.
    pub key: String,
    /// The candidate's identity.
    pub identity: String,
    /// The TTL.
    pub ttl: Duration,
}

impl Args {
    /// Parses `URL KEY IDENTITY TTL_MS`.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut next = |what: &str| {
            args.next()
                .ok_or_else(|| format!("missing {what}; usage: URL KEY IDENTITY TTL_MS"))
        };
        let (url, key, identity) = (next("URL")?, next("KEY")?, next("IDENTITY")?);
        let ttl_ms: u64 = next("TTL_MS")?
            .parse()
            .map_err(|e| format!("TTL_MS: {e}"))?;
        Ok(Args {
            url,
            key,
            identity,
            ttl: Duration::from_millis(ttl_ms),
        })
    }
}

#[derive(Default)]
struct State {
    leadership: Option<Leadership>,
    term: Option<Term>,
}

impl State {
    fn status(&self) -> Status {
        let Some(term) = &self.term else {
            return Status::default();
        };
        Status {
            leader: term.ended().is_none(),
            valid: term.is_valid(),
            token: term.token().map(|t| t.get()),
            valid_until_ns: Some(to_ns(term.valid_until())),
        }
    }
}

/// Where a candidate says what it has to say (its stdout), shared by its
/// tasks: one message a line, whole.
#[derive(Clone)]
pub struct Out(Arc<Mutex<tokio::io::Stdout>>);

impl Out {
    /// This process's stdout.
    pub fn stdout() -> Out {
        Out(Arc::new(Mutex::new(tokio::io::stdout())))
    }

    /// Writes `message` as one line.
    pub async fn say(&self, message: &Message) {
        let mut line = serde_json::to_string(message).expect("messages serialize");
        line.push('\n');
        let mut out = self.0.lock().await;
        // The driver going away ends the candidate through stdin; ignore write errors here.
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    }
}

/// What a candidate does with the driver's commands, for [`serve`].
#[async_trait]
pub trait Commands: Send {
    /// Carries out `op`; the error to reply with, if it failed.
    async fn handle(&mut self, op: Command) -> Option<String>;

    /// The candidate's view, for the reply.
    async fn status(&self) -> Status;
}

/// The candidate's side of the protocol: `ready`, then a reply to each
/// command read from stdin, until stdin closes or `exit` is answered.
pub async fn serve(out: &Out, commands: &mut impl Commands) -> Result<(), String> {
    let pid = std::process::id();
    out.say(&Message::Ready { pid }).await;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let request: Request =
            serde_json::from_str(&line).map_err(|e| format!("bad command {line:?}: {e}"))?;
        let error = commands.handle(request.op).await;
        let status = commands.status().await;
        let id = request.id;
        out.say(&Message::Reply { id, error, status }).await;
        if request.op == Command::Exit {
            break;
        }
    }
    Ok(())
}

/// Campaigns in the background; reports `elected`, then `lost`.
fn campaign(elector: Elector, state: Arc<Mutex<State>>, out: Out) {
    tokio::spawn(async move {
        let Ok(leadership) = elector.campaign().await else {
            return;
        };
        let term = leadership.term();
        let at_ns = to_ns(tokio::time::Instant::now());
        {
            let mut st = state.lock().await;
            st.term = Some(term.clone());
            st.leadership = Some(leadership);
        }
        let elected = Message::Elected {
            token: term.token().map(|t| t.get()),
            at_ns,
            valid_until_ns: to_ns(term.valid_until()),
        };
        out.say(&elected).await;
        let reason = term.lost().await;
        let at_ns = to_ns(tokio::time::Instant::now());
        let lost = Message::Lost {
            reason: format!("{reason:?}"),
            at_ns,
            valid_until_ns: to_ns(term.valid_until()),
        };
        out.say(&lost).await;
    });
}

/// An Elector's answers to the driver's commands.
struct ElectorCommands {
    elector: Elector,
    state: Arc<Mutex<State>>,
    out: Out,
}

#[async_trait]
impl Commands for ElectorCommands {
    async fn handle(&mut self, op: Command) -> Option<String> {
        match op {
            Command::Campaign => {
                campaign(self.elector.clone(), self.state.clone(), self.out.clone());
                None
            }
            Command::Resign => {
                let leadership = self.state.lock().await.leadership.take();
                match leadership {
                    Some(l) => l.resign().await.err().map(|e| e.to_string()),
                    None => Some("not leading".into()),
                }
            }
            Command::Status | Command::Write | Command::Exit => None,
        }
    }

    async fn status(&self) -> Status {
        self.state.lock().await.status()
    }
}

/// Runs a candidate with `connector` until stdin closes or `exit` arrives.
pub async fn run(args: Args, connector: Connector) -> Result<(), String> {
    let backend = connector(args.url.clone())
        .await
        .map_err(|e| e.to_string())?;
    let elector = Elector::builder(backend)
        .key(args.key)
        .identity(args.identity)
        .ttl(args.ttl)
        .allow_unfenced()
        .build()
        .map_err(|e| e.to_string())?;
    let out = Out::stdout();
    let mut commands = ElectorCommands {
        elector: elector.clone(),
        state: Arc::default(),
        out: out.clone(),
    };
    serve(&out, &mut commands).await?;
    elector.shutdown().await;
    Ok(())
}

/// The body of a candidate binary: parses the arguments, runs, exits 2 on error.
pub fn main_with(connector: Connector) {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("tenure-candidate: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(run(args, connector)),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        eprintln!("tenure-candidate: {e}");
        std::process::exit(2);
    }
}
