//! Kubeconfigs that reach a Lease server (or a proxy in front of one): as
//! YAML, as a `kube::Config`, and as a temporary file for candidate processes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tenure_testkit::harness::HarnessError;

/// A kubeconfig whose current context reaches a Lease server (or a proxy in
/// front of one) at `addr`, namespace `default`, no credentials.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: tenure-lease-server
  cluster:
    server: http://{addr}
contexts:
- name: tenure-lease-server
  context:
    cluster: tenure-lease-server
    user: tenure
    namespace: default
current-context: tenure-lease-server
users:
- name: tenure
  user: {{}}
"
    )
}

/// A `kube::Config` from [`kubeconfig_yaml`]`(addr)`.
pub async fn kube_config_for(addr: SocketAddr) -> Result<kube::Config, HarnessError> {
    let invalid = HarnessError::Protocol;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig_yaml(addr))
        .map_err(|e| invalid(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(e.to_string()))
}

/// [`kubeconfig_yaml`] in a file of its own under the temporary directory,
/// removed when dropped: what a candidate process is pointed at with
/// [`url`](Self::url).
#[derive(Debug)]
pub struct KubeconfigFile {
    path: PathBuf,
}

impl KubeconfigFile {
    /// Writes the kubeconfig for `addr` to a new file.
    pub fn write(addr: SocketAddr) -> Result<KubeconfigFile, HarnessError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "tenure-kubeconfig-{}-{}-{}.yaml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            addr.port()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, kubeconfig_yaml(addr))?;
        Ok(KubeconfigFile { path })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `kube:///<path>?namespace=default`, the URL a candidate process takes.
    pub fn url(&self) -> String {
        kube_url(&self.path, "default")
    }
}

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `kube:///<path>?namespace=<namespace>`, with the characters a URL cannot
/// carry as they are percent-encoded (`path` must be absolute).
pub fn kube_url(path: &Path, namespace: &str) -> String {
    let mut url = String::from("kube://");
    for byte in path.to_string_lossy().bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(byte as char)
            }
            other => url.push_str(&format!("%{other:02X}")),
        }
    }
    url.push_str("?namespace=");
    url.push_str(namespace);
    url
}
