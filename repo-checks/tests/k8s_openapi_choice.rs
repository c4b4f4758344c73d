//! A library must not pick the Kubernetes version of k8s-openapi (its build
//! fails when two version features are on): an application using tenure's
//! `kube` feature picks one, and it may be another than this workspace's
//! own (1.34). `k8s-openapi-choice/` is such an application, a workspace of
//! its own that picks 1.33; this checks that it builds.

use tenure_repo_checks::{cargo, target_dir, workspace_root};

#[test]
fn an_application_may_pick_another_kubernetes_version() {
    let manifest = workspace_root().join("repo-checks/k8s-openapi-choice/Cargo.toml");
    let mut command = cargo(&["check", "--locked", "--quiet", "--manifest-path"]);
    command
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", target_dir().join("k8s-openapi-choice"))
        // .cargo/config.toml picks 1.34 for this workspace's builds; the
        // application's own choice must be the only one here. (A variable
        // set in the environment wins over [env]; empty means none.)
        .env("K8S_OPENAPI_ENABLED_VERSION", "");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "an application on Kubernetes 1.33 with tenure's kube feature does not build \
         (does a library of this workspace enable a k8s-openapi version feature?):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
