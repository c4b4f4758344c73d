//! `redis://[user:password@]host:port[,host:port...][/prefix]?unfenced=accept[&...]`.

use std::time::Duration;

use tenure_core::{Error, Result};

use crate::{RedlockBackend, RedlockBuilder, RedlockOptions};

fn bad(url: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid("url", format!("{}: {why}", redacted(url)))
}

/// The URL with any password replaced, for error messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn duration(url: &str, field: &str, text: &str) -> Result<Duration> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| text.split_at(i))
        .unwrap_or((text, ""));
    let n: u64 = number.parse().map_err(|_| {
        bad(
            url,
            format!("{field}={text:?} is not a duration like 500ms or 2s"),
        )
    })?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(bad(
            url,
            format!("{field}={text:?} is not a duration like 500ms or 2s"),
        )),
    }
}

/// Parses a URL into a builder (nothing is connected).
pub(crate) fn parse(url: &str) -> Result<RedlockBuilder> {
    let rest = url.strip_prefix("redis://").ok_or_else(|| {
        bad(
            url,
            "does not start with redis:// (TLS is not supported yet)",
        )
    })?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let masters: Vec<&str> = hosts.split(',').collect();
    if hosts.is_empty() || masters.iter().any(|m| m.is_empty()) {
        return Err(bad(url, "names no master, or an empty one"));
    }
    let mut options = RedlockOptions::default();
    if !path.is_empty() {
        options.key_prefix = if path.ends_with(':') {
            path.to_owned()
        } else {
            format!("{path}:")
        };
    }
    let mut unfenced = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "unfenced" if value == "accept" => unfenced = true,
            "unfenced" => {
                return Err(bad(
                    url,
                    format!("unfenced={value:?}: the only value is accept"),
                ))
            }
            "node_timeout_fraction" => {
                options.node_timeout_fraction = value.parse().map_err(|_| {
                    bad(
                        url,
                        format!("node_timeout_fraction={value:?} is not a number"),
                    )
                })?
            }
            "connect_timeout" => options.connect_timeout = duration(url, name, value)?,
            "watch_poll" => options.watch_poll = duration(url, name, value)?,
            other => {
                return Err(bad(
                    url,
                    format!(
                        "unknown parameter {other:?} (known: unfenced, node_timeout_fraction, \
                         connect_timeout, watch_poll)"
                    ),
                ))
            }
        }
    }
    if !unfenced {
        return Err(Error::invalid(
            "unfenced",
            format!(
                "{}: Redlock cannot issue fencing tokens; add ?unfenced=accept to the URL to \
                 state that a duplicate run is acceptable for your job",
                redacted(url)
            ),
        ));
    }
    let mut builder = RedlockBackend::builder(&masters)
        .options(options)
        .accept_unfenced();
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => ((!user.is_empty()).then(|| user.to_owned()), password),
            None => (None, userinfo),
        };
        builder = builder.password(user, password);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
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
    }

    #[test]
    fn a_url_without_the_opt_in_names_unfenced() {
        assert_eq!(field("redis://a:1"), "unfenced");
        assert_eq!(field("redis://a:1?unfenced=yes"), "url");
    }

    #[test]
    fn bad_urls_name_url_and_hide_the_password() {
        for url in [
            "rediss://a:1?unfenced=accept",
            "redis://?unfenced=accept",
            "redis://a:1,,b:2?unfenced=accept",
            "redis://a:1?unfenced=accept&bogus=1",
            "redis://a:1?unfenced=accept&connect_timeout=fast",
        ] {
            assert_eq!(field(url), "url", "{url}");
        }
        let err = parse("redis://u:secret@a:1?nope=1")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret") && err.contains("u:***@"), "{err}");
    }
}
