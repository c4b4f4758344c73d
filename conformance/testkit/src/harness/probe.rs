//! Small protocol clients for readiness checks, leader detection, statistics
//! and tests: etcd's HTTP/JSON gateway, ZooKeeper's four-letter words and raw
//! RESP for Redis. Every call gives up after [`PROBE_TIMEOUT`] with
//! [`HarnessError::Timeout`], which is what a paused server produces: its
//! published port still accepts connections, but nothing answers.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::error::{HarnessError, Result};

/// How long one probe waits for an answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

async fn within<T>(
    what: impl FnOnce() -> String,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(PROBE_TIMEOUT, fut).await {
        Ok(result) => result,
        Err(_) => Err(HarnessError::Timeout {
            what: what(),
            after: PROBE_TIMEOUT,
        }),
    }
}

fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            // A fresh connection per request: no pooled connection outlives a
            // fault (or the runtime of the test that opened it).
            .pool_max_idle_per_host(0)
            .no_proxy()
            .build()
            .expect("a plain HTTP client builds")
    })
}

async fn etcd_post(endpoint: &str, path: &str, body: Value) -> Result<Value> {
    let url = format!("http://{endpoint}{path}");
    within(|| format!("POST {url}"), async {
        let response = http().post(&url).json(&body).send().await?;
        let status = response.status();
        let value: Value = response.json().await?;
        if !status.is_success() {
            return Err(HarnessError::Protocol(format!(
                "POST {url}: {status}: {value}"
            )));
        }
        Ok(value)
    })
    .await
}

/// The gateway renders 64-bit integers as strings.
fn json_u64(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// `POST` a JSON body to etcd's gateway at `path` (`/v3/auth/enable`, ...);
/// its JSON answer, or an error for a non-success status.
pub async fn etcd_post_json(endpoint: &str, path: &str, body: Value) -> Result<Value> {
    etcd_post(endpoint, path, body).await
}

/// `GET /health`: whether the member reports `{"health":"true"}` (it has a
/// leader and can serve).
pub async fn etcd_health(endpoint: &str) -> Result<bool> {
    let url = format!("http://{endpoint}/health");
    within(|| format!("GET {url}"), async {
        let value: Value = http().get(&url).send().await?.json().await?;
        Ok(value.get("health").and_then(Value::as_str) == Some("true"))
    })
    .await
}

/// What `/v3/maintenance/status` says about a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The answering member's id.
    pub member_id: u64,
    /// The member id of the leader it knows (0: none).
    pub leader: u64,
    /// Its raft term.
    pub raft_term: u64,
    /// The store revision it has applied.
    pub revision: u64,
}

/// `POST /v3/maintenance/status`.
pub async fn etcd_status(endpoint: &str) -> Result<EtcdStatus> {
    let v = etcd_post(endpoint, "/v3/maintenance/status", json!({})).await?;
    let header = &v["header"];
    let field = |v: &Value, name: &str| {
        json_u64(v).ok_or_else(|| HarnessError::Protocol(format!("status without {name}: {v}")))
    };
    Ok(EtcdStatus {
        member_id: field(&header["member_id"], "member_id")?,
        leader: json_u64(&v["leader"]).unwrap_or(0),
        raft_term: json_u64(&header["raft_term"]).unwrap_or(0),
        revision: json_u64(&header["revision"]).unwrap_or(0),
    })
}

/// `POST /v3/kv/put`; returns the revision of the write.
pub async fn etcd_put(endpoint: &str, key: &[u8], value: &[u8]) -> Result<u64> {
    let body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
    let v = etcd_post(endpoint, "/v3/kv/put", body).await?;
    json_u64(&v["header"]["revision"])
        .ok_or_else(|| HarnessError::Protocol(format!("put without revision: {v}")))
}

/// `POST /v3/kv/range` for one key (a linearizable read: it needs a leader).
pub async fn etcd_get(endpoint: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let v = etcd_post(endpoint, "/v3/kv/range", json!({ "key": B64.encode(key) })).await?;
    let Some(kv) = v["kvs"].as_array().and_then(|kvs| kvs.first()) else {
        return Ok(None);
    };
    let value = kv["value"].as_str().unwrap_or("");
    B64.decode(value)
        .map(Some)
        .map_err(|e| HarnessError::Protocol(format!("value is not base64: {e}")))
}

/// `GET /metrics`: the Prometheus text exposition.
pub async fn etcd_metrics(endpoint: &str) -> Result<String> {
    let url = format!("http://{endpoint}/metrics");
    within(|| format!("GET {url}"), async {
        Ok(http().get(&url).send().await?.text().await?)
    })
    .await
}

/// Sends a ZooKeeper four-letter word (`ruok`, `srvr`, `mntr`, ...) and
/// returns the whole answer.
pub async fn zk_four_letter(endpoint: &str, word: &str) -> Result<String> {
    within(|| format!("{word} to {endpoint}"), async {
        let mut stream = TcpStream::connect(endpoint).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    })
    .await
}

/// The `Mode:` line of `srvr` (`leader`, `follower`, `standalone`), or
/// `None` when the server is up but not serving (no quorum).
pub async fn zk_mode(endpoint: &str) -> Result<Option<String>> {
    let srvr = zk_four_letter(endpoint, "srvr").await?;
    Ok(srvr
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string()))
}

/// Opens a real ZooKeeper session and closes it again: `ConnectRequest`,
/// then `closeSession`. Both are transactions, so this is a client write.
/// Returns the session id and the zxid of the close.
pub async fn zk_session(endpoint: &str) -> Result<(u64, u64)> {
    within(|| format!("a ZooKeeper session with {endpoint}"), async {
        let mut stream = TcpStream::connect(endpoint).await?;
        // ConnectRequest: protocolVersion, lastZxidSeen, timeOut,
        // sessionId, passwd (16 bytes), readOnly.
        let mut connect = Vec::with_capacity(49);
        connect.extend_from_slice(&45i32.to_be_bytes());
        connect.extend_from_slice(&0i32.to_be_bytes());
        connect.extend_from_slice(&0i64.to_be_bytes());
        connect.extend_from_slice(&4_000i32.to_be_bytes());
        connect.extend_from_slice(&0i64.to_be_bytes());
        connect.extend_from_slice(&16i32.to_be_bytes());
        connect.extend_from_slice(&[0; 16]);
        connect.push(0);
        stream.write_all(&connect).await?;
        let response = read_frame(&mut stream).await?;
        // ConnectResponse: protocolVersion, timeOut, sessionId, passwd, ...
        let session = response
            .get(8..16)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            .filter(|id| *id != 0)
            .ok_or_else(|| HarnessError::Protocol("ZooKeeper refused the session".into()))?;
        // RequestHeader { xid: 1, type: closeSession (-11) }
        let mut close = Vec::with_capacity(12);
        close.extend_from_slice(&8i32.to_be_bytes());
        close.extend_from_slice(&1i32.to_be_bytes());
        close.extend_from_slice(&(-11i32).to_be_bytes());
        stream.write_all(&close).await?;
        // ReplyHeader { xid, zxid, err }
        let reply = read_frame(&mut stream).await?;
        let (Some(zxid), Some(err)) = (reply.get(4..12), reply.get(12..16)) else {
            return Err(HarnessError::Protocol(format!("short reply {reply:?}")));
        };
        let err = i32::from_be_bytes(err.try_into().expect("4 bytes"));
        if err != 0 {
            return Err(HarnessError::Protocol(format!(
                "closeSession failed: {err}"
            )));
        }
        Ok((
            session,
            u64::from_be_bytes(zxid.try_into().expect("8 bytes")),
        ))
    })
    .await
}

/// One length-prefixed ZooKeeper frame.
async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>> {
    let len = stream.read_i32().await?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= 1 << 20)
        .ok_or_else(|| HarnessError::Protocol(format!("bad frame length {len}")))?;
    let mut frame = vec![0; len];
    stream.read_exact(&mut frame).await?;
    Ok(frame)
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:1`
    Integer(i64),
    /// `$n ...`; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*n ...`; `None` for the null array.
    Array(Option<Vec<Resp>>),
}

/// Sends one command (`["SET", "k", "v"]`) on a fresh connection and reads
/// one reply.
pub async fn redis_command(endpoint: &str, args: &[&[u8]]) -> Result<Resp> {
    within(|| format!("redis command to {endpoint}"), async {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        let mut stream = BufReader::new(TcpStream::connect(endpoint).await?);
        stream.get_mut().write_all(&request).await?;
        read_resp(&mut stream).await
    })
    .await
}

async fn read_resp(stream: &mut BufReader<TcpStream>) -> Result<Resp> {
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        return Err(HarnessError::Protocol(
            "connection closed before a reply".into(),
        ));
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| HarnessError::Protocol(format!("bad RESP line {line:?}")))
    };
    Ok(match kind {
        "+" => Resp::Simple(rest.to_string()),
        "-" => Resp::Error(rest.to_string()),
        ":" => Resp::Integer(number()?),
        "$" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Resp::Bulk(None));
            };
            let mut data = vec![0; len + 2];
            stream.read_exact(&mut data).await?;
            data.truncate(len);
            Resp::Bulk(Some(data))
        }
        "*" => {
            let Ok(len) = usize::try_from(number()?) else {
                return Ok(Resp::Array(None));
            };
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(Box::pin(read_resp(stream)).await?);
            }
            Resp::Array(Some(items))
        }
        _ => return Err(HarnessError::Protocol(format!("bad RESP line {line:?}"))),
    })
}
