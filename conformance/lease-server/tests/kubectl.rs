//! kubectl, the operator's client, against this server: the kubectl of
//! Debian 13's kubernetes-client (1.32), as conformance/peers/build.sh
//! copies it out, with its defaults (discovery, server-side apply with
//! field validation left to the server, JSON bodies). Without the build
//! the test says so and passes.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// kubectl with the kubeconfig at `kubeconfig`.
struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// Runs `kubectl args`: its exit success, stdout and stderr.
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::process::Command::new(&self.binary)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .await
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs `kubectl args`, which must succeed: its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed: {stderr}");
        stdout
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn kubectl_applies_reads_annotates_and_deletes_a_lease() {
    let Some(peers) = common::peers_dir("kubectl") else {
        return;
    };
    let f = common::fixture().await;
    let kubeconfig = f.server.kubeconfig_file().unwrap();
    let kubectl = Kubectl {
        binary: peers.join("kubectl"),
        kubeconfig: kubeconfig.path().to_owned(),
    };
    let dir = std::env::temp_dir().join(format!("tenure-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = write(
        &dir,
        "lease.yaml",
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: op\n\
         spec:\n  holderIdentity: someone\n  leaseDurationSeconds: 15\n",
    );

    let applied = kubectl
        .ok(&["apply", "--server-side", "-f", manifest.to_str().unwrap()])
        .await;
    assert_eq!(
        applied.trim(),
        "lease.coordination.k8s.io/op serverside-applied"
    );
    let (code, stored) = f.get("op").await;
    assert_eq!(code, 200, "{stored}");
    assert_eq!(stored["spec"]["holderIdentity"], "someone");
    assert_eq!(stored["metadata"]["managedFields"][0]["manager"], "kubectl");
    assert_eq!(stored["metadata"]["managedFields"][0]["operation"], "Apply");

    let yaml = kubectl.ok(&["get", "lease", "op", "-o", "yaml"]).await;
    let read: Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(read["kind"], "Lease");
    assert_eq!(read["spec"]["holderIdentity"], "someone");
    assert_eq!(
        read["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );

    kubectl
        .ok(&["annotate", "lease", "op", "tenure.example/by=operator"])
        .await;
    let (_, annotated) = f.get("op").await;
    assert_eq!(
        annotated["metadata"]["annotations"]["tenure.example/by"],
        "operator"
    );
    assert_eq!(annotated["spec"]["holderIdentity"], "someone");

    let deleted = kubectl.ok(&["delete", "lease", "op"]).await;
    assert_eq!(deleted.trim(), "lease.coordination.k8s.io \"op\" deleted");
    assert_eq!(f.get("op").await.0, 404);
    let (ok, _, stderr) = kubectl.run(&["get", "lease", "op"]).await;
    assert!(!ok);
    assert!(stderr.contains("NotFound"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
