//! tenure keeps and sends no `metadata.managedFields`: the API server
//! keeps the ownership a Lease has when an update carries none, and
//! records the update as tenure's (the Lease API test server, as
//! kube-apiserver, `conformance/lease-server/tests/update_keeps_managed.rs`).

mod common;

use std::sync::{Arc, Mutex};

use common::env;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tenure_core::{AcquireMode, LeaseBackend};
use tenure_kube::{KubeBackend, KubeOptions};
use tenure_lease_server::kube_config_for;
use tenure_testkit::proxy::{Observer, Tap};
use tenure_testkit::ProxyLink;

/// Every byte the clients behind a proxy sent.
#[derive(Default)]
struct Sent(Arc<Mutex<Vec<u8>>>);

impl Tap for Sent {
    fn connection(&self) -> (Observer, Observer) {
        let sent = self.0.clone();
        (
            Box::new(move |bytes| sent.lock().unwrap().extend_from_slice(bytes)),
            Box::new(|_| {}),
        )
    }
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_renewals_and_releases_send_no_managed_fields_and_keep_other_owners() {
    let env = env().await;
    // Another manager owns a label of the Lease (server-side apply).
    let config = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": "owned", "labels": { "team": "billing" } },
    });
    env.raw
        .patch("owned", &PatchParams::apply("ops"), &Patch::Apply(&config))
        .await
        .unwrap();

    let sent = Sent::default();
    let bytes = sent.0.clone();
    let (_link, addrs) = ProxyLink::start_all_tapped(&[env.server.addr()], Some(Arc::new(sent)))
        .await
        .unwrap();
    let config = kube_config_for(addrs[0]).await.unwrap();
    let backend = KubeBackend::from_config(config, KubeOptions::default())
        .await
        .unwrap();
    let wants = common::candidacy("owned", "a");
    let lease = backend
        .acquire(&wants, AcquireMode::Once)
        .await
        .unwrap()
        .granted()
        .expect("the free Lease");
    // The server answered each write with managedFields; tenure keeps none.
    let lease = backend.renew(&lease).await.unwrap();
    let lease = backend.renew(&lease).await.unwrap();
    backend.release(&lease).await.unwrap();

    let bytes = bytes.lock().unwrap().clone();
    assert_eq!(count(&bytes, "PUT /apis/coordination.k8s.io/v1/"), 4);
    assert_eq!(
        count(&bytes, "managedFields"),
        0,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let stored = env.raw.get("owned").await.unwrap();
    let managers: Vec<(String, String)> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("ops".into(), "Apply".into())),
        "{managers:?}"
    );
    // tenure's writes, recorded as an update (its manager is the
    // client's User-Agent, which kube-client leaves empty).
    assert!(
        managers.iter().any(|(_, operation)| operation == "Update"),
        "{managers:?}"
    );
    assert_eq!(stored.metadata.labels.unwrap()["team"], "billing");
}
