//! Fencing real writes in a SQL database (SQLite): a deposed leader's late
//! write is refused by the database itself.
//!
//! Run: `cargo run --example sqlite_fencing` (the memory backend, no server)
//! or with a URL: `cargo run --example sqlite_fencing --features etcd -- etcd://127.0.0.1:2379/tenure/`
//! (also `zk://…`, `kube://…`; not `redis://`, which has no tokens to fence with).
//!
//! The database is the one thing both replicas share; each opens its own
//! connection to it. Every row a leader writes carries the token of the
//! term that wrote it, and a write goes through only if its token is at
//! least that one:
//!
//! ```sql
//! UPDATE accounts SET balance = balance - :amount, fence_token = :token
//!  WHERE id = :id AND fence_token <= :token
//! ```
//!
//! Steps: replica-a is elected and writes twice; it checks `is_valid()`,
//! prepares a third write and freezes before sending it; its lease runs out,
//! replica-b is elected with a greater token and writes; replica-a wakes up
//! and sends its write with its old token: zero rows match, and the database
//! refuses it. The process exits with an error if the late write is applied.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tenure::{Elector, FencingToken, Leadership, LeaseBackend, MemoryBackend};
use tokio::time::Instant;

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const KEY: &str = "tenure-sqlite-example";
const ACCOUNT: i64 = 1;

/// How a write went.
enum Write {
    Applied,
    /// A newer leader has written this row: its token is `highest`.
    Refused {
        highest: i64,
    },
}

/// One replica's connection to the shared database.
struct Db(Connection);

impl Db {
    fn open(path: &PathBuf) -> BoxResult<Db> {
        let conn = Connection::open(path)?;
        // The other replica may hold the write lock for a moment.
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(Db(conn))
    }

    fn create_schema(&self) -> BoxResult<()> {
        // One fence per resource row: `fence_token` is the token of the last
        // term that wrote the row (0 before any leader did). A one-row `fence`
        // table, updated in the same transaction, would fence the whole
        // database instead.
        self.0.execute_batch(
            "CREATE TABLE accounts (
                 id INTEGER PRIMARY KEY,
                 balance INTEGER NOT NULL,
                 fence_token INTEGER NOT NULL DEFAULT 0
             );
             CREATE TABLE audit (
                 account INTEGER NOT NULL,
                 amount INTEGER NOT NULL,
                 written_by TEXT NOT NULL,
                 fence_token INTEGER NOT NULL
             );
             INSERT INTO accounts (id, balance) VALUES (1, 1000);",
        )?;
        Ok(())
    }

    /// Charges `amount` to `account` as the leader of the term `token`, or
    /// refuses if a leader of a later term has written the row.
    fn charge(
        &mut self,
        token: FencingToken,
        who: &str,
        account: i64,
        amount: i64,
    ) -> BoxResult<Write> {
        let token = i64::try_from(token.get())?;
        // One transaction (IMMEDIATE: it takes the write lock at BEGIN) holds
        // the fenced UPDATE and the audit row, so a write is applied whole or
        // not at all: a refused UPDATE rolls the audit row back with it.
        let tx = self
            .0
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The check and the write are ONE statement. Reading `fence_token`
        // first, comparing it here and then updating would let a newer
        // leader's write land between the read and the update, and ours
        // would overwrite it: the very race fencing is there to stop.
        //
        // `<=`, not `<`: a leader writes many times in one term, all with
        // the same token, and each must pass. Tokens only grow from term to
        // term, so a token below the row's belongs to a leader that has
        // since been replaced.
        let changed = tx.execute(
            "UPDATE accounts SET balance = balance - ?1, fence_token = ?2
              WHERE id = ?3 AND fence_token <= ?2",
            params![amount, token, account],
        )?;
        if changed != 1 {
            let highest: Option<i64> = tx
                .query_row(
                    "SELECT fence_token FROM accounts WHERE id = ?1",
                    [account],
                    |row| row.get(0),
                )
                .optional()?;
            let highest = highest.ok_or_else(|| format!("no account {account}"))?;
            return Ok(Write::Refused { highest }); // dropping `tx` rolls back
        }
        tx.execute(
            "INSERT INTO audit (account, amount, written_by, fence_token) VALUES (?1, ?2, ?3, ?4)",
            params![account, amount, who, token],
        )?;
        tx.commit()?;
        Ok(Write::Applied)
    }

    fn print(&self) -> BoxResult<()> {
        let (balance, fence): (i64, i64) = self.0.query_row(
            "SELECT balance, fence_token FROM accounts WHERE id = ?1",
            [ACCOUNT],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        println!("account {ACCOUNT}: balance {balance}, fence_token {fence}");
        let mut audit = self
            .0
            .prepare("SELECT written_by, amount, fence_token FROM audit ORDER BY rowid")?;
        let rows = audit.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (who, amount, token) = row?;
            println!("  audit: {who} charged {amount} with token {token}");
        }
        Ok(())
    }
}

/// One candidate: its elector, its database connection, and (on the memory
/// backend) its link to the server, which can be cut to freeze it.
struct Replica {
    name: &'static str,
    elector: Elector,
    db: Db,
    link: Option<MemoryBackend>,
}

impl Replica {
    /// Charges as the leader `leadership`, checking `is_valid()` first.
    fn charge(&mut self, leadership: &Leadership, amount: i64) -> BoxResult<Write> {
        if !leadership.is_valid() {
            return Err(format!("{} is no longer leader", self.name).into());
        }
        let token = leadership
            .token()
            .ok_or("this backend issues no fencing tokens")?;
        self.db.charge(token, self.name, ACCOUNT, amount)
    }
}

/// Builds the two replicas: on one memory server (each with its own client,
/// so one can be cut off), or each with its own client of the server at `url`.
async fn replicas(url: &str, db_path: &PathBuf) -> BoxResult<(Replica, Replica)> {
    let server = url.starts_with("memory://").then(MemoryBackend::new);
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b"] {
        let (backend, link): (Arc<dyn LeaseBackend>, _) = match &server {
            Some(server) => {
                let client = server.client();
                (Arc::new(client.clone()), Some(client))
            }
            None => (tenure::connect(url).await?, None),
        };
        let ttl = backend.capabilities().min_ttl.max(Duration::from_secs(2));
        let elector = Elector::builder(backend)
            .key(KEY)
            .identity(name)
            .ttl(ttl)
            .build()?;
        replicas.push(Replica {
            name,
            elector,
            db: Db::open(db_path)?,
            link,
        });
    }
    let b = replicas.pop().expect("two replicas");
    let a = replicas.pop().expect("two replicas");
    Ok((a, b))
}

/// Removes the database file when the example ends, however it ends.
struct TempDb(PathBuf);

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn say(start: Instant, line: impl AsRef<str>) {
    println!("[{:>5} ms] {}", start.elapsed().as_millis(), line.as_ref());
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".to_owned());
    let db = TempDb(
        std::env::temp_dir().join(format!("tenure-sqlite-fencing-{}.db", std::process::id())),
    );
    let start = Instant::now();
    say(
        start,
        format!("backend: {url}; database: {}", db.0.display()),
    );
    let (mut a, mut b) = replicas(&url, &db.0).await?;
    a.db.create_schema()?;

    // 1. replica-a is elected and writes; twice with one token.
    let a_leads = a.elector.campaign().await?;
    let a_token = a_leads
        .token()
        .ok_or("this backend issues no fencing tokens")?;
    say(start, format!("replica-a leads with token {a_token}"));
    for amount in [100, 50] {
        match a.charge(&a_leads, amount)? {
            Write::Applied => say(start, format!("replica-a charged {amount}: applied")),
            Write::Refused { highest } => {
                return Err(format!("replica-a's write refused (row at {highest})").into())
            }
        }
    }
    let b_campaign = tokio::spawn({
        let elector = b.elector.clone();
        async move { elector.campaign().await }
    });

    // 2. replica-a checks that it leads, prepares a write, and freezes
    //    before sending it (GC pause, host suspend): `is_valid()` was true
    //    when it looked, and nothing it can check locally covers the gap.
    say(
        start,
        format!(
            "replica-a: is_valid() = {}; prepares a charge of 25 with token {a_token}",
            a_leads.is_valid()
        ),
    );
    let frozen = Instant::now();
    let a_term = a_leads.term();
    let a_leads = match &a.link {
        // Its renewals stop reaching the server, so its lease runs out
        // after the TTL, as a real freeze would make it. It keeps its
        // Leadership value, stale by the time it looks again.
        Some(link) => {
            link.faults().cut_off();
            say(
                start,
                "replica-a freezes (its renewals stop reaching the server)",
            );
            Some(a_leads)
        }
        // On a real server this program cannot freeze itself: replica-a's
        // lease is released for it (from the server's side the same as the
        // expiry a freeze would cause); it keeps its term and token.
        None => {
            say(
                start,
                "replica-a freezes (here: its lease is released for it)",
            );
            a_leads.resign().await?;
            None
        }
    };

    // 3. replica-b is elected with a greater token and writes.
    let b_leads = b_campaign.await??;
    let b_token = b_leads
        .token()
        .ok_or("this backend issues no fencing tokens")?;
    say(
        start,
        format!(
            "replica-b leads with token {b_token} ({} ms after replica-a froze; greater: {})",
            frozen.elapsed().as_millis(),
            b_token > a_token
        ),
    );
    match b.charge(&b_leads, 200)? {
        Write::Applied => say(start, "replica-b charged 200: applied"),
        Write::Refused { highest } => {
            return Err(format!("replica-b's write refused (row at {highest})").into())
        }
    }

    // 4. replica-a wakes up and sends the write it prepared, token and all.
    if let Some(link) = &a.link {
        link.faults().heal();
    }
    say(start, format!(
        "replica-a wakes up (its term, seen now: valid = {}) and sends its charge of 25 with token {a_token}",
        a_term.is_valid()
    ));
    match a.db.charge(a_token, a.name, ACCOUNT, 25)? {
        Write::Refused { highest } => say(start, format!(
            "replica-a's late write: REFUSED by the database (token {a_token} < fence_token {highest})"
        )),
        Write::Applied => return Err("replica-a's late write was applied: fencing failed".into()),
    }
    a.db.print()?;

    drop(a_leads);
    b_leads.resign().await?;
    a.elector.shutdown().await;
    b.elector.shutdown().await;
    say(start, "done");
    Ok(())
}
