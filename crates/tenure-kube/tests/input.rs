//! Bad input gets `InvalidArgument` naming the field before any request:
//! election keys that cannot name a Lease, and malformed `kube://` URLs.

mod common;

use std::time::Duration;

use common::{candidacy, env, hold};
use tenure_conformance::{Link, LinkFault};
use tenure_core::{AcquireMode, ElectionKey, Error, LeaseBackend};
use tenure_kube::KubeBackend;
use tenure_lease_server::kube_url;
use tokio::time::timeout;

fn field<T>(result: &tenure_core::Result<T>) -> Option<&'static str> {
    match result {
        Err(Error::InvalidArgument { field, .. }) => Some(field),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn key_not_a_dns1123_subdomain_is_invalid_argument_before_any_request() {
    let env = env().await;
    // Behind a blackholed link, any request would hang: only a check made
    // before sending can answer.
    let (backend, link) = env.proxied_backend().await;
    link.set(LinkFault::Blackhole).await.unwrap();
    let limit = Duration::from_millis(500);
    for key in [
        "Billing",
        "billing_job",
        "-billing",
        "billing-",
        "billing..job",
        ".billing",
        "billing job",
        "billing/job",
    ] {
        for mode in [AcquireMode::Once, AcquireMode::Wait] {
            let answer = timeout(limit, backend.acquire(&candidacy(key, "a"), mode))
                .await
                .unwrap_or_else(|_| panic!("{key:?}: acquire({mode:?}) sent a request"));
            assert_eq!(field(&answer), Some("key"), "{key:?}: {answer:?}");
        }
        let watch = timeout(limit, backend.watch(&ElectionKey::new(key).unwrap()))
            .await
            .unwrap_or_else(|_| panic!("{key:?}: watch sent a request"));
        assert_eq!(field(&watch), Some("key"), "{key:?}: watch");
    }
    assert_eq!(env.server.writes(), 0, "the server saw a write");
    // The control: a valid key on the same client does send, and hangs.
    let valid = candidacy("billing", "a");
    let sent = timeout(limit, backend.acquire(&valid, AcquireMode::Once)).await;
    assert!(sent.is_err(), "the blackholed link let a request through");
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_url_with_a_kubeconfig_file_and_namespace_reaches_the_server() {
    let env = env().await;
    let file = env.server.kubeconfig_file().unwrap();
    let backend = KubeBackend::connect_url(&file.url()).await.unwrap();
    assert_eq!(backend.namespace(), "default");
    let lease = hold(&backend, "via-url", "a").await;
    let written = env.raw.get("via-url").await.unwrap();
    assert_eq!(
        written.spec.unwrap().holder_identity.as_deref(),
        Some(lease.holder().as_str())
    );

    let elsewhere = KubeBackend::connect_url(&kube_url(file.path(), "team-a"))
        .await
        .unwrap();
    assert_eq!(elsewhere.namespace(), "team-a");
    // Another namespace, another Lease of the same name.
    let other = hold(&elsewhere, "via-url", "b").await;
    let in_team_a = elsewhere.api().get("via-url").await.unwrap();
    assert_eq!(in_team_a.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(other.holder().as_str(), "b");
    let in_default = env.raw.get("via-url").await.unwrap().spec.unwrap();
    assert_eq!(in_default.holder_identity.as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_url_bad_input_is_invalid_argument_naming_url() {
    let dir = std::env::temp_dir();
    let missing = dir.join(format!("tenure-no-such-kubeconfig-{}", std::process::id()));
    let garbage = dir.join(format!("tenure-garbage-kubeconfig-{}", std::process::id()));
    std::fs::write(&garbage, "{ not: [yaml").unwrap();
    let no_context =
        tenure_lease_server::KubeconfigFile::write("127.0.0.1:9".parse().unwrap()).unwrap();
    let urls = [
        "https://127.0.0.1:6443".to_owned(),
        "kube://apiserver:6443".to_owned(),
        "kube:///".to_owned(),
        "kube://?namespace=Not_A_Label".to_owned(),
        "kube://?flavour=vanilla".to_owned(),
        kube_url(&missing, "default"),
        kube_url(&garbage, "default"),
        format!("{}&context=no-such-context", no_context.url()),
    ];
    for url in &urls {
        let answer = timeout(Duration::from_secs(5), KubeBackend::connect_url(url))
            .await
            .unwrap_or_else(|_| panic!("{url}: hung"));
        assert_eq!(field(&answer), Some("url"), "{url}: {answer:?}");
    }
    let _ = std::fs::remove_file(&garbage);
}
