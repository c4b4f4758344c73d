//! Names a tenure-kube type and a k8s-openapi type of the version this
//! application picked, so both are compiled.

fn main() {
    let lease = k8s_openapi::api::coordination::v1::Lease::default();
    let name = std::any::type_name::<tenure::kube::KubeBackend>();
    println!("{name} {:?}", lease.metadata.name);
}
