//! `redis://` and `rediss://` URLs:
//! `redis://[user:password@]host[:port][,host[:port]...][/prefix]?unfenced=accept[&...]`.

use tenure_core::backend_url::BackendUrl;
use tenure_core::{Error, Result};

use crate::{RedlockBackend, RedlockBuilder, RedlockOptions};

/// Redis's port, for a host the URL gives without one.
const DEFAULT_PORT: u16 = 6379;

const KNOWN: &[&str] = &[
    "unfenced",
    "node_timeout_fraction",
    "connect_timeout",
    "watch_poll",
];

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
    let unfenced = match url.take("unfenced")?.as_deref() {
        None => false,
        Some("accept") => true,
        Some(other) => {
            return Err(url.invalid(format!("unfenced={other:?}: the only value is accept")))
        }
    };
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
    url.finish(KNOWN)?;
    if !unfenced {
        return Err(Error::invalid(
            "unfenced",
            format!(
                "{shown:?}: Redlock cannot issue fencing tokens; add ?unfenced=accept to the URL to \
                 state that a duplicate run is acceptable for your job"
            ),
        ));
    }
    let mut builder = RedlockBackend::builder(&masters)
        .options(options)
        .accept_unfenced();
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
        let b = parse("redis://a:1,b:2,c:3/jobs?unfenced=accept&connect_timeout=500ms").unwrap();
        assert_eq!(b.masters, ["a:1", "b:2", "c:3"]);
        assert_eq!(b.options.key_prefix, "jobs:");
        assert_eq!(b.options.connect_timeout, Duration::from_millis(500));
        assert!(b.unfenced_accepted);
        let b = parse("redis://:pw@a:1?unfenced=accept").unwrap();
        assert_eq!(b.password, Some((None, "pw".to_owned())));
        assert_eq!(b.options.key_prefix, "tenure:");
        let b = parse("redis://a,b:2,[::1]/jobs:?unfenced=accept&watch_poll=2s").unwrap();
        assert_eq!(b.masters, ["a:6379", "b:2", "[::1]:6379"]);
        assert_eq!(b.options.key_prefix, "jobs:");
        assert_eq!(b.options.watch_poll, Duration::from_secs(2));
    }

    #[test]
    fn user_and_password_are_percent_decoded() {
        let b = parse("redis://app:p%40ss%3Aw@a:1?unfenced=accept").unwrap();
        assert_eq!(b.password, Some((Some("app".into()), "p@ss:w".to_owned())));
        let b = parse("redis://secret@a:1?unfenced=accept").unwrap();
        assert_eq!(b.password, Some((None, "secret".to_owned())));
    }

    #[test]
    fn a_url_without_the_opt_in_names_unfenced() {
        assert_eq!(field("redis://a:1"), "unfenced");
        assert_eq!(field("redis://a:1?unfenced=yes"), "url");
    }

    #[test]
    fn bad_urls_name_url_and_hide_the_password() {
        for url in [
            "redis://?unfenced=accept",
            "redis://a:0?unfenced=accept",
            "redis://a:65536?unfenced=accept",
            "redis://a:1?unfenced=accept&unfenced=accept",
            "redis://a:1?unfenced=accept&node_timeout_fraction=half",
            "redis://a:1?unfenced",
            "redis://a:1,,b:2?unfenced=accept",
            "redis://a:1?unfenced=accept&bogus=1",
            "redis://a:1?unfenced=accept&connect_timeout=fast",
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
        let err = parse("rediss://a:1?unfenced=accept").unwrap_err();
        assert_eq!(field("rediss://a:1?unfenced=accept"), "url");
        assert!(err.to_string().contains("`tls`"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_rediss_url_asks_for_tls() {
        assert!(parse("rediss://a:1?unfenced=accept").unwrap().tls);
        assert!(!parse("redis://a:1?unfenced=accept").unwrap().tls);
    }
}
