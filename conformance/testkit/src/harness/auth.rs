//! etcd with authentication on, as operators run it: a root user, `auth
//! enable`, and tokens that expire (simple tokens after `--auth-token-ttl`
//! of disuse, JWTs after their `ttl` whatever their use).

use std::time::Duration;

use serde_json::json;

use super::cluster::Cluster;
use super::error::{HarnessError, Result};
use super::probe;

/// How an auth-enabled etcd issues its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdTokens {
    /// etcd's default simple tokens, dropped after `ttl` without use
    /// (`--auth-token-ttl`, whole seconds; etcd's default is 300 s).
    Simple {
        /// `--auth-token-ttl`.
        ttl: Duration,
    },
    /// Signed JWTs (`--auth-token=jwt,...,ttl=`), which expire `ttl` after
    /// issue whatever their use, and carry the auth store's revision, so any
    /// auth-store change (`etcdctl user add`) makes every one of them stale.
    /// The RS256 key pair is made at start with `openssl` on the host.
    Jwt {
        /// The tokens' lifetime.
        ttl: Duration,
    },
}

/// An etcd deployment with authentication on: the user `root` (with the
/// role `root`) and its password; clients connect as
/// `etcd://root:<password>@host:port/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    /// How tokens are issued.
    pub tokens: EtcdTokens,
    /// The root user's password.
    pub root_password: String,
}

impl EtcdAuth {
    /// Root with password `tenure-root`, tokens as given.
    pub fn new(tokens: EtcdTokens) -> Self {
        EtcdAuth {
            tokens,
            root_password: "tenure-root".into(),
        }
    }
}

/// What an auth-enabled node adds to its container: the env and the extra
/// server flags, and the command wrapper that writes the JWT keys.
#[derive(Debug, Clone)]
pub(crate) struct AuthSetup {
    pub env: Vec<String>,
    pub flags: Vec<String>,
}

const KEY_FILE: &str = "/tmp/tenure-jwt.key";
const PUB_FILE: &str = "/tmp/tenure-jwt.pub";

impl AuthSetup {
    /// Builds the setup for `auth` (generating the JWT key pair, shared by
    /// every member: a token one member signed is checked by all).
    pub(crate) async fn new(auth: &EtcdAuth) -> Result<AuthSetup> {
        match &auth.tokens {
            EtcdTokens::Simple { ttl } => Ok(AuthSetup {
                env: vec![],
                flags: vec![format!("--auth-token-ttl={}", ttl.as_secs().max(1))],
            }),
            EtcdTokens::Jwt { ttl } => {
                let private = openssl(&["genrsa", "2048"], None).await?;
                let public = openssl(&["rsa", "-pubout"], Some(&private)).await?;
                Ok(AuthSetup {
                    env: vec![
                        format!("TENURE_JWT_KEY={private}"),
                        format!("TENURE_JWT_PUB={public}"),
                    ],
                    flags: vec![format!(
                        "--auth-token=jwt,pub-key={PUB_FILE},priv-key={KEY_FILE},sign-method=RS256,ttl={}s",
                        ttl.as_secs().max(1)
                    )],
                })
            }
        }
    }

    /// `cmd` with the flags added, run through a shell that first writes the
    /// JWT keys from the environment, when there are any.
    pub(crate) fn wrap(&self, mut cmd: Vec<String>) -> Vec<String> {
        cmd.extend(self.flags.iter().cloned());
        if self.env.is_empty() {
            return cmd;
        }
        let script = format!(
            "printf '%s\\n' \"$TENURE_JWT_KEY\" > {KEY_FILE} && printf '%s\\n' \"$TENURE_JWT_PUB\" > {PUB_FILE} && exec \"$@\""
        );
        let mut wrapped = vec!["sh".into(), "-c".into(), script, "sh".into()];
        wrapped.extend(cmd);
        wrapped
    }
}

async fn openssl(args: &[&str], input: Option<&str>) -> Result<String> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("openssl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| HarnessError::Protocol(format!("openssl (for etcd's JWT keys): {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).await?;
    }
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        return Err(HarnessError::Protocol(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Turns authentication on through node 0's gateway, as an operator does:
/// `user add root`, `role add root`, `user grant-role root root`, `auth enable`.
pub(crate) async fn enable(endpoint: &str, auth: &EtcdAuth) -> Result<()> {
    let steps = [
        (
            "/v3/auth/user/add",
            json!({ "name": "root", "password": auth.root_password }),
        ),
        ("/v3/auth/role/add", json!({ "name": "root" })),
        (
            "/v3/auth/user/grant",
            json!({ "user": "root", "role": "root" }),
        ),
        ("/v3/auth/enable", json!({})),
    ];
    for (path, body) in steps {
        probe::etcd_post_json(endpoint, path, body).await?;
    }
    Ok(())
}

impl Cluster {
    /// Runs `etcdctl` with `args` inside node `index`'s container (against
    /// that node, as root when auth is on); its standard output, or an error
    /// with its standard error when it fails.
    pub async fn etcdctl(&self, index: usize, args: &[&str]) -> Result<String> {
        let node = self.node(index)?;
        let mut cmd = vec![
            "etcdctl".to_string(),
            "--endpoints=127.0.0.1:2379".to_string(),
        ];
        if let Some(auth) = self.etcd_auth() {
            cmd.push(format!("--user=root:{}", auth.root_password));
        }
        cmd.extend(args.iter().map(|a| a.to_string()));
        super::docker::exec(node.container(), cmd, &["ETCDCTL_API=3"]).await
    }
}
