//! `zk://` URLs: servers, base path, digest auth and session timing.

use tenure_core::backend_url::BackendUrl;
use tenure_core::Result;

use crate::ZooKeeperOptions;

/// ZooKeeper's client port, for a host the URL gives without one.
const DEFAULT_PORT: u16 = 2181;

/// Parses a `zk://` URL into a connect string and options; every problem
/// is `InvalidArgument` naming `url`.
pub(crate) fn parse(text: &str) -> Result<(String, ZooKeeperOptions)> {
    let mut url = BackendUrl::parse(text, &["zk"])?;
    let hosts = url.endpoints(DEFAULT_PORT)?.join(",");
    let mut options = ZooKeeperOptions::default().with_base_path(url.path());
    match (url.user(), url.password()) {
        (None, None) => {}
        (Some(user), Some(password)) => {
            options = options.with_auth("digest", format!("{user}:{password}"));
        }
        _ => {
            return Err(url
                .invalid("digest auth needs both a user and a password (zk://user:password@host)"))
        }
    }
    if let Some(timeout) = url.take_duration_renamed("session_timeout", "session_timeout_ms")? {
        options = options.with_session_timeout(timeout);
    }
    if let Some(tick) = url.take_duration_renamed("tick_time", "tick_time_ms")? {
        options = options.with_tick_time(tick);
    }
    if let Some(timeout) = url.take_duration("request_timeout")? {
        options = options.with_request_timeout(timeout);
    }
    if url.take_bool("tls")? == Some(true) {
        return Err(url.invalid("tls: TLS to ZooKeeper is not supported by tenure-zookeeper yet"));
    }
    url.finish()?;
    Ok((hosts, options))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use tenure_core::backend_url::refusal;

    #[test]
    fn hosts_base_and_timing_are_read() {
        let (hosts, options) =
            parse("zk://a:1,b/services/latches?session_timeout=1s&tick_time=200ms").unwrap();
        assert_eq!(hosts, "a:1,b:2181");
        assert_eq!(options.base_path, "/services/latches");
        assert_eq!(options.session_timeout, Duration::from_secs(1));
        assert_eq!(options.tick_time, Duration::from_millis(200));
        assert_eq!(options.auth, None);
        let (_, options) =
            parse("zk://a?session_timeout=6s&tick_time=1s&request_timeout=500ms").unwrap();
        assert_eq!(options.session_timeout, Duration::from_secs(6));
        assert_eq!(options.tick_time, Duration::from_secs(1));
        assert_eq!(options.request_timeout, Duration::from_millis(500));
        // The old names, deprecated, still read plain milliseconds.
        let (_, options) = parse("zk://a?session_timeout_ms=1000&tick_time_ms=200").unwrap();
        assert_eq!(options.session_timeout, Duration::from_secs(1));
        assert_eq!(options.tick_time, Duration::from_millis(200));
        assert_eq!(parse("zk://a").unwrap().1.base_path, "");
    }

    #[test]
    fn user_and_password_are_digest_auth_and_never_shown() {
        let (_, options) = parse("zk://app:p%40ss%3A1@a:2181/b").unwrap();
        assert_eq!(
            options.auth,
            Some(("digest".into(), b"app:p@ss:1".to_vec()))
        );
        let why = refusal(parse, "zk://app:p%40ss@a:2181?colour=blue");
        assert!(why.contains("app:***@") && !why.contains("p%40ss"), "{why}");
        assert!(
            why.contains("\"colour\"") && why.contains("known: session_timeout,"),
            "{why}"
        );
    }

    #[test]
    fn bad_urls_name_url() {
        for url in [
            "etcd://a:2181",
            "zk://",
            "zk:///base",
            "zk://a:1,,b:2",
            "zk://a:99999",
            "zk://a?session_timeout=soon",
            "zk://a?session_timeout=1000",
            "zk://a?tick_time=1ms&tick_time=2ms",
            "zk://a?tick_time=2s&tick_time_ms=2000",
            "zk://a?tick_time=2h",
            "zk://user@a",
            "zk://a/b#c",
        ] {
            refusal(parse, url);
        }
    }

    #[test]
    fn tls_is_refused_naming_it() {
        let why = refusal(parse, "zk://a:2181?tls=true");
        assert!(
            why.contains("tls") && why.contains("not supported"),
            "{why}"
        );
        assert!(parse("zk://a:2181?tls=false").is_ok());
    }
}
