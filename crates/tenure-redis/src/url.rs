//! `redis://` and `rediss://` URLs:
//! `redis://[user:password@]host[:port][,host[:port]...][/prefix]?allow_unfenced=true[&...]`.

use tenure_core::backend_url::BackendUrl;
use tenure_core::{Error, Result};

use crate::{RedisBackend, RedlockBuilder, RedlockOptions};

/// Redis's port, for a host the URL gives without one.
const DEFAULT_PORT: u16 = 6379;

/// Parses a URL into a builder (nothing is connected).
pub(crate) fn parse(text: &str) -> Result<RedlockBuilder> {
    let mut url = BackendUrl::parse(text, &["redis", "rediss"])?;
    let tls = url.scheme() == "rediss";
    if tls && cfg!(not(feature = "tls")) {
        return Err(url.invalid(
            "rediss:// (TLS) needs tenure-redis's cargo feature `tls` (tenure's `redis-tls`), \
             which is off",
        ));
    }
    let masters = url.endpoints(DEFAULT_PORT)?;
    let mut options = RedlockOptions::default();
    let path = url.path().trim_start_matches('/');
    if !path.is_empty() {
        options.key_prefix = if path.ends_with(':') {
            path.to_owned()
        } else {
            format!("{path}:")
        };
    }
    let allowed = url.take_bool("allow_unfenced")?;
    // The old spelling, kept for one release.
    let accepted = match url.take("unfenced")?.as_deref() {
        None => false,
        Some("accept") => {
            tracing::warn!(
                url = url.redacted(),
                "the URL parameter unfenced=accept is deprecated; write allow_unfenced=true"
            );
            true
        }
        Some(other) => {
            return Err(url.invalid(format!(
                "unfenced={other:?}: write allow_unfenced=true (unfenced=accept is its deprecated spelling)"
            )))
        }
    };
    if allowed == Some(false) && accepted {
        return Err(url.invalid(
            "allow_unfenced=false and the deprecated unfenced=accept contradict each other",
        ));
    }
    let unfenced = allowed == Some(true) || accepted;
    if let Some(value) = url.take("node_timeout_fraction")? {
        options.node_timeout_fraction = value
            .parse()
            .map_err(|_| url.invalid(format!("node_timeout_fraction={value:?} is not a number")))?;
    }
    if let Some(timeout) = url.take_duration("connect_timeout")? {
        options.connect_timeout = timeout;
    }
    if let Some(poll) = url.take_duration("watch_poll")? {
        options.watch_poll = poll;
    }
    let shown = url.redacted().to_owned();
    let (user, password) = (
        url.user().map(str::to_owned),
        url.password().map(str::to_owned),
    );
    url.finish()?;
    if !unfenced {
        return Err(Error::invalid(
            "allow_unfenced",
            format!(
                "{shown:?}: Redlock cannot issue fencing tokens; add ?allow_unfenced=true to the URL to \
                 state that a duplicate run is acceptable for your job"
            ),
        ));
    }
    let mut builder = RedisBackend::builder(&masters)
        .options(options)
        .allow_unfenced();
    #[cfg(feature = "tls")]
    if tls {
        builder = builder.tls();
    }
    // `redis://secret@host`: a userinfo without `:` is a password, as before.
    match (user, password) {
        (None, None) => {}
        (user, Some(password)) => builder = builder.password(user, password),
        (Some(password), None) => builder = builder.password(None, password),
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn field(url: &str) -> &'static str {
        match parse(url) {
            Err(Error::InvalidArgument { field, .. }) => field,
            other => panic!("{url}: expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn a_url_names_masters_prefix_and_options() {
        let b =
            parse("redis://a:1,b:2,c:3/jobs?allow_unfenced=true&connect_timeout=500ms").unwrap();
        assert_eq!(b.masters, ["a:1", "b:2", "c:3"]);
        assert_eq!(b.options.key_prefix, "jobs:");
        assert_eq!(b.options.connect_timeout, Duration::from_millis(500));
        assert!(b.unfenced_accepted);
        let b = parse("redis://:pw@a:1?allow_unfenced=true").unwrap();
        assert_eq!(b.password, Some((None, "pw".to_owned())));
        assert_eq!(b.options.key_prefix, "tenure:");
        let b = parse("redis://a,b:2,[::1]/jobs:?allow_unfenced=true&watch_poll=2s").unwrap();
        assert_eq!(b.masters, ["a:6379", "b:2", "[::1]:6379"]);
        assert_eq!(b.options.key_prefix, "jobs:");
        assert_eq!(b.options.watch_poll, Duration::from_secs(2));
    }

    #[test]
    fn user_and_password_are_percent_decoded() {
        let b = parse("redis://app:p%40ss%3Aw@a:1?allow_unfenced=true").unwrap();
        assert_eq!(b.password, Some((Some("app".into()), "p@ss:w".to_owned())));
        let b = parse("redis://secret@a:1?allow_unfenced=true").unwrap();
        assert_eq!(b.password, Some((None, "secret".to_owned())));
    }

    #[test]
    fn a_url_without_the_opt_in_names_allow_unfenced() {
        assert_eq!(field("redis://a:1"), "allow_unfenced");
        assert_eq!(field("redis://a:1?allow_unfenced=false"), "allow_unfenced");
        let err = parse("redis://a:1").unwrap_err().to_string();
        assert!(err.contains("?allow_unfenced=true"), "{err}");
        assert_eq!(field("redis://a:1?allow_unfenced=yes"), "url");
        assert_eq!(field("redis://a:1?unfenced=yes"), "url");
        assert_eq!(
            field("redis://a:1?allow_unfenced=false&unfenced=accept"),
            "url"
        );
    }

    #[test]
    fn the_deprecated_unfenced_accept_still_opts_in() {
        assert!(
            parse("redis://a:1?unfenced=accept")
                .unwrap()
                .unfenced_accepted
        );
        let both = parse("redis://a:1?unfenced=accept&allow_unfenced=true").unwrap();
        assert!(both.unfenced_accepted);
    }

    #[test]
    fn bad_urls_name_url_and_hide_the_password() {
        for url in [
            "redis://?allow_unfenced=true",
            "redis://a:0?allow_unfenced=true",
            "redis://a:65536?allow_unfenced=true",
            "redis://a:1?allow_unfenced=true&allow_unfenced=true",
            "redis://a:1?allow_unfenced=true&node_timeout_fraction=half",
            "redis://a:1?unfenced",
            "redis://a:1,,b:2?allow_unfenced=true",
            "redis://a:1?allow_unfenced=true&bogus=1",
            "redis://a:1?allow_unfenced=true&connect_timeout=fast",
        ] {
            assert_eq!(field(url), "url", "{url}");
        }
        for url in ["redis://u:secret@a:1?nope=1", "redis://u:secret@a:1"] {
            let err = parse(url).unwrap_err().to_string();
            assert!(!err.contains("secret") && err.contains("u:***@"), "{err}");
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_tls_url_without_the_feature_names_it() {
        let err = parse("rediss://a:1?allow_unfenced=true").unwrap_err();
        assert_eq!(field("rediss://a:1?allow_unfenced=true"), "url");
        assert!(err.to_string().contains("`tls`"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_rediss_url_asks_for_tls() {
        assert!(parse("rediss://a:1?allow_unfenced=true").unwrap().tls);
        assert!(!parse("redis://a:1?allow_unfenced=true").unwrap().tls);
    }
}
