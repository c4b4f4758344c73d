//! `kube://` URLs: which kubeconfig, context and namespace a backend uses.
//!
//! - `kube://` : the default kubeconfig (`KUBECONFIG`, `~/.kube/config`), else
//!   the in-cluster service account;
//! - `kube:///path/to/kubeconfig` : that file (an absolute path);
//! - either with `?namespace=ns&context=name` (percent-encoded where needed)
//!   and `fencing=lease-transitions` for clusters before Kubernetes 1.35
//!   (default `fencing=resource-version`).
//!
//! The grammar is [`tenure_core::backend_url`]'s, without hosts or a user:
//! the API server's address, TLS and credentials come from the kubeconfig
//! (or the service account).

use std::path::PathBuf;

use tenure_core::backend_url::BackendUrl;
use tenure_core::{Error, Result};

use crate::Fencing;

/// What a `kube://` URL asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Target {
    /// The kubeconfig file; `None`: infer (default kubeconfig or in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None`: its current context.
    pub context: Option<String>,
    /// The Leases' namespace; `None`: the context's (or the service account's).
    pub namespace: Option<String>,
    /// The fencing token; `None`: the default.
    pub fencing: Option<Fencing>,
}

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid("url", format!("{url:?}: {why}"))
}

/// Whether `name` is a DNS-1123 label (a namespace name).
fn is_dns1123_label(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// Parses a `kube://` URL; every problem is `InvalidArgument` naming `url`.
pub(crate) fn parse(text: &str) -> Result<Target> {
    let mut url = BackendUrl::parse(text, &["kube"])?;
    if let Some(host) = url.hosts().first() {
        return Err(url.invalid(format!(
            "names the host {:?}; a kube URL names a kubeconfig file (kube:///path/to/kubeconfig) or nothing (kube://)",
            host.host
        )));
    }
    if url.user().is_some() || url.password().is_some() {
        return Err(url.invalid(
            "a kube URL carries no user or password: credentials come from the kubeconfig",
        ));
    }
    if url.has_root_path() {
        return Err(url.invalid(
            "the kubeconfig path is empty (write kube:// to use the default kubeconfig)",
        ));
    }
    let mut target = Target {
        kubeconfig: (!url.path().is_empty()).then(|| PathBuf::from(url.path())),
        ..Target::default()
    };
    if let Some(fencing) = url.take("fencing")? {
        target.fencing = Some(match fencing.as_str() {
            "resource-version" => Fencing::ResourceVersion,
            "lease-transitions" => Fencing::LeaseTransitions,
            other => {
                return Err(url.invalid(format!(
                    "fencing {other:?} is neither resource-version nor lease-transitions"
                )))
            }
        });
    }
    if let Some(namespace) = url.take("namespace")? {
        if !is_dns1123_label(&namespace) {
            return Err(url.invalid(format!(
                "namespace {namespace:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63)"
            )));
        }
        target.namespace = Some(namespace);
    }
    match url.take("context")? {
        Some(context) if context.is_empty() => return Err(url.invalid("context is empty")),
        context => target.context = context,
    }
    url.finish()?;
    Ok(target)
}

/// The client configuration a [`Target`] names.
pub(crate) async fn config(url: &str, target: Target) -> Result<kube::Config> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..Default::default()
    };
    let mut config = match (&target.kubeconfig, &target.context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| invalid(url, format!("cannot read the kubeconfig: {e}")))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| invalid(url, format!("unusable kubeconfig: {e}")))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| invalid(url, format!("the default kubeconfig: {e}")))?,
        (None, None) => kube::Config::infer()
            .await
            .map_err(|e| Error::backend(crate::error::BACKEND, e))?,
    };
    if let Some(namespace) = target.namespace {
        config.default_namespace = namespace;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(result: Result<Target>) -> Option<&'static str> {
        match result {
            Err(Error::InvalidArgument { field, .. }) => Some(field),
            _ => None,
        }
    }

    #[test]
    fn empty_url_infers_everything() {
        assert_eq!(parse("kube://").unwrap(), Target::default());
    }

    #[test]
    fn path_namespace_and_context_are_read_and_decoded() {
        let t =
            parse("kube:///tmp/my%20dir/config.yaml?namespace=team-a&context=kind%2Dx").unwrap();
        assert_eq!(t.kubeconfig, Some(PathBuf::from("/tmp/my dir/config.yaml")));
        assert_eq!(t.namespace.as_deref(), Some("team-a"));
        assert_eq!(t.context.as_deref(), Some("kind-x"));
        let t = parse("kube://?namespace=ops").unwrap();
        assert_eq!((t.kubeconfig, t.namespace.as_deref()), (None, Some("ops")));
        assert_eq!(t.fencing, None);
    }

    #[test]
    fn fencing_is_read() {
        let t = parse("kube://?fencing=lease-transitions&namespace=ops").unwrap();
        assert_eq!(t.fencing, Some(Fencing::LeaseTransitions));
        let t = parse("kube:///k?fencing=resource-version").unwrap();
        assert_eq!(t.fencing, Some(Fencing::ResourceVersion));
    }

    #[test]
    fn bad_urls_are_invalid_argument_naming_url() {
        for bad in [
            "etcd://127.0.0.1:2379",
            "kube:",
            "kube://apiserver:6443",
            "kube://apiserver/path",
            "kube:///",
            "kube:///k?namespace=Team_A",
            "kube:///k?namespace=",
            "kube:///k?namespace=a&namespace=b",
            "kube:///k?context=",
            "kube:///k?colour=blue",
            "kube:///k?namespace",
            "kube:///k%zz",
            "kube:///k#frag",
            "kube:///k?fencing=transitions",
            "kube:///k?fencing=lease-transitions&fencing=resource-version",
            "kube://u:pw@/k",
            "kube:///k?token=abc",
        ] {
            assert_eq!(field(parse(bad)), Some("url"), "{bad}");
        }
    }
}
