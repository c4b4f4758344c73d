//! A newcomer's first command (`cargo run --example quickstart`) and a
//! `cargo add tenure` with default features must build with nothing but the
//! Rust toolchain. etcd-client compiles protobuf definitions with protoc at
//! build time, bollard is the test harness's Docker client, and the
//! Kubernetes crates are minutes of compiling for a demo that uses the
//! memory backend: none of them may be in either build graph.

use tenure_repo_checks::tree;

/// Packages that must not be built by default: what needs protoc (etcd-client
/// and the protobuf build crates), Docker (bollard), or is heavy and only for
/// one backend (kube, k8s-openapi).
const FORBIDDEN: &[&str] = &[
    "etcd-client",
    "prost-build",
    "tonic-prost-build",
    "bollard",
    "kube",
    "kube-client",
    "k8s-openapi",
];

fn forbidden_in(packages: &[(String, String)]) -> Vec<String> {
    packages
        .iter()
        .filter(|(name, _)| FORBIDDEN.contains(&name.as_str()))
        .map(|(name, version)| format!("{name} {version}"))
        .collect()
}

/// `cargo add tenure` (default features): what a dependent builds.
#[test]
fn default_build_of_the_facade_needs_no_protoc_docker_or_kubernetes() {
    let packages = tree(&["-p", "tenure", "-e", "normal,build"]);
    assert!(packages.iter().any(|(name, _)| name == "tenure-core"));
    let found = forbidden_in(&packages);
    assert!(
        found.is_empty(),
        "the facade's default build pulls in {found:?}: keep them behind their backend's feature"
    );
}

/// `cargo run --example quickstart`: the facade with its dev-dependencies.
#[test]
fn quickstart_build_needs_no_protoc_docker_or_kubernetes() {
    let packages = tree(&["-p", "tenure", "-e", "normal,build,dev"]);
    let found = forbidden_in(&packages);
    assert!(
        found.is_empty(),
        "`cargo run --example quickstart` would build {found:?}: the root package's \
         dev-dependencies are for the memory-backend examples only; move tests that need \
         servers to conformance/e2e (`cargo tree -p tenure -e dev -i <name>` shows the path)"
    );
}

/// The guard looks at the right graph: with the etcd feature, etcd-client
/// and its protobuf build are there.
#[test]
fn the_etcd_feature_is_what_brings_protoc() {
    let packages = tree(&["-p", "tenure", "-e", "normal,build", "--features", "etcd"]);
    let found = forbidden_in(&packages);
    assert!(
        found.iter().any(|p| p.starts_with("etcd-client ")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.starts_with("prost-build ")),
        "{found:?}"
    );
}

/// Each backend's client crates: what building that backend brings.
const BACKEND_CLIENTS: &[(&str, &[&str])] = &[
    ("tenure-etcd", &["etcd-client"]),
    ("tenure-zookeeper", &["zookeeper-client"]),
    ("tenure-kube", &["kube", "kube-client", "k8s-openapi"]),
    ("tenure-redis", &["redis"]),
];

/// `cargo test -p tenure-etcd` builds etcd and nothing of the other
/// backends: a backend's tests use the suite (`tenure-conformance`) and the
/// containers (`tenure-testkit`), which depend on no backend; the suite
/// against all of them lives in `tenure-e2e`. (tenure-kube's tests build
/// etcd-client, for the Lease API test server's storage, and no other
/// backend's client.)
#[test]
fn a_backends_tests_build_no_other_backend() {
    let mut wrong = Vec::new();
    for (backend, own) in BACKEND_CLIENTS {
        let packages = tree(&["-p", backend, "-e", "normal,build,dev"]);
        assert!(
            packages
                .iter()
                .any(|(name, _)| own.contains(&name.as_str())),
            "{backend}'s graph lacks its own client {own:?}: the check looks at the wrong graph"
        );
        for (other, clients) in BACKEND_CLIENTS {
            if other == backend {
                continue;
            }
            let found: Vec<&String> = packages
                .iter()
                .map(|(name, _)| name)
                .filter(|name| clients.contains(&name.as_str()) || name.as_str() == *other)
                // The Lease API test server that tenure-kube is tested
                // against keeps its Leases in etcd, as kube-apiserver does.
                .filter(|name| !(*backend == "tenure-kube" && name.as_str() == "etcd-client"))
                .collect();
            if !found.is_empty() {
                wrong.push(format!(
                    "`cargo test -p {backend}` builds {found:?} of {other} \
                     (`cargo tree -p {backend} -e dev -i <name>` shows the path)"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
