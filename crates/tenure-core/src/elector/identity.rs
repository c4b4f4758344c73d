//! The identity an elector campaigns with when none is given.

use crate::{CandidateId, Error, Result};

/// The identity [`ElectorBuilder::build`](super::ElectorBuilder::build)
/// uses when [`identity`](super::ElectorBuilder::identity) was not set: the
/// environment variable `POD_NAME` if it is set and not empty (give it the
/// pod's name through the downward API, as client-go's examples do), else
/// `<hostname>-<pid>`. Two processes on one host get different identities;
/// a process restarted in the same pod keeps its identity, as a pod does.
///
/// The host name is `HOSTNAME` if set, else the kernel's
/// (`/proc/sys/kernel/hostname`, then `/etc/hostname`), else `localhost`.
pub fn default_identity() -> Result<CandidateId> {
    let pod = std::env::var("POD_NAME").ok();
    let identity = match pod.as_deref().map(str::trim) {
        Some(pod) if !pod.is_empty() => pod.to_owned(),
        _ => format!("{}-{}", hostname(), std::process::id()),
    };
    CandidateId::new(&identity).map_err(|e| {
        Error::invalid(
            "identity",
            format!(
                "the default identity {identity:?} is not usable ({e}); set one with .identity()"
            ),
        )
    })
}

fn hostname() -> String {
    let from_env = std::env::var("HOSTNAME").ok();
    let from_files = || {
        ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
    };
    from_env
        .or_else(from_files)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::hostname;

    #[test]
    fn the_host_name_is_never_empty_or_padded() {
        let name = hostname();
        assert!(!name.is_empty());
        assert_eq!(name.trim(), name);
    }
}
