//! Every crate's `rust-version` is true: it is the lowest version its
//! dependency tree allows, the maximum of the `rust-version` that its
//! dependencies (normal and build, all features on) declare. A dependency
//! update that raises the tree's minimum fails here until the crate
//! declares the new one.

use std::collections::HashMap;

use serde_json::Value;
use tenure_repo_checks::{cargo, stdout_of, tree};

/// `1.88`, `1.88.0` → (1, 88, 0).
fn parse(version: &str) -> (u64, u64, u64) {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn every_crate_declares_the_rust_version_its_dependency_tree_needs() {
    let metadata: Value = serde_json::from_str(&stdout_of(cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--locked",
        "--all-features",
    ])))
    .expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let rust_version: HashMap<(String, String), String> = packages
        .iter()
        .filter_map(|p| {
            Some((
                (
                    p["name"].as_str()?.to_owned(),
                    p["version"].as_str()?.to_owned(),
                ),
                p["rust_version"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let members: Vec<&Value> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(|id| packages.iter().find(|p| p["id"] == *id))
        .collect();
    assert!(members.len() >= 8, "{} workspace members?", members.len());

    let mut wrong = Vec::new();
    for member in members {
        let name = member["name"].as_str().expect("name");
        let declared = member["rust_version"].as_str();
        let deps = tree(&["-p", name, "-e", "normal,build", "--all-features"]);
        let needed = deps
            .iter()
            .filter(|(dep, _)| dep != name)
            .filter_map(|(dep, version)| {
                let v = rust_version.get(&(dep.clone(), version.clone()))?;
                Some((parse(v), format!("{dep} {version} needs {v}")))
            })
            .max();
        let Some((needed, because)) = needed else {
            continue;
        };
        match declared {
            None => wrong.push(format!("{name}: no rust-version; {because}")),
            Some(d) if parse(d) < needed => {
                wrong.push(format!("{name}: rust-version {d} is too low: {because}"))
            }
            Some(d) if parse(d) > needed => wrong.push(format!(
                "{name}: rust-version {d} is higher than its tree needs (the highest: {because}); \
                 declare the lowest"
            )),
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
