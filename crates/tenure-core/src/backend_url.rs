//! One URL grammar for every backend, for backend authors: a backend's
//! `connect_url` parses its URL with [`BackendUrl::parse`], takes the query
//! parameters it knows, then calls [`BackendUrl::finish`], which refuses any
//! other.
//!
//! ```text
//! scheme://[user[:password]@]host[:port][,host[:port]...][/path][?name=value[&name=value...]]
//! ```
//!
//! - the user and the password are percent-decoded (`p%40ss` is `p@ss`);
//!   the password never appears in an error message;
//! - hosts are separated by commas; an IPv6 address is bracketed
//!   (`[::1]:2379`); a port is a number from 1 to 65535;
//! - the path and the query are parsed by the `url` crate and
//!   percent-decoded (in the query, `+` is a space);
//! - no fragment (`#`); no parameter without `=`, none given twice, none
//!   the backend does not know.
//!
//! Every problem is an [`Error::InvalidArgument`] naming `url`.
//!
//! ```
//! use std::time::Duration;
//! use tenure_core::backend_url::BackendUrl;
//!
//! let mut url = BackendUrl::parse("zk://me:p%40ss@a:2181,b/base?tick_time=200ms", &["zk"])?;
//! assert_eq!(url.endpoints(2181)?, ["a:2181", "b:2181"]);
//! assert_eq!((url.user(), url.password()), (Some("me"), Some("p@ss")));
//! assert_eq!(url.path(), "/base");
//! assert_eq!(url.take_duration("tick_time")?, Some(Duration::from_millis(200)));
//! url.finish()?;
//! # Ok::<(), tenure_core::Error>(())
//! ```

use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::{Error, Result};

/// One host of a URL's host list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The host name or address; an IPv6 address keeps its brackets.
    pub host: String,
    /// The port, if the URL gives one.
    pub port: Option<u16>,
}

impl Host {
    /// Parses one `host[:port]` as a URL's host list gives it (an IPv6
    /// address in brackets); a bad one is an [`Error::InvalidArgument`]
    /// naming `field`. For backends that take addresses outside a URL too.
    pub fn parse(text: &str, field: &'static str) -> Result<Host> {
        parse_host(text).map_err(|why| Error::invalid(field, why))
    }
}

/// A backend URL, parsed; see the [module documentation](self).
#[derive(Clone)]
pub struct BackendUrl {
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<Host>,
    path: String,
    params: Vec<(String, String)>,
    /// The parameters the parser asked for, in order: those it knows.
    asked: Vec<String>,
    /// The URL as given, its password replaced by `***`: for messages.
    shown: String,
}

impl std::fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BackendUrl").field(&self.shown).finish()
    }
}

impl BackendUrl {
    /// Parses `url`, whose scheme must be one of `schemes`. Nothing is
    /// connected.
    pub fn parse(url: &str, schemes: &[&str]) -> Result<Self> {
        let shown = redacted(url);
        let bad = |why: String| Error::invalid("url", format!("{shown:?}: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(scheme, _)| schemes.contains(scheme))
            .ok_or_else(|| {
                let expected: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
                bad(format!("does not start with {}", expected.join(" or ")))
            })?;
        if rest.contains('#') {
            return Err(bad("a backend URL has no fragment (#)".into()));
        }
        check_escapes(rest).map_err(bad)?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => {
                let (user, password) =
                    match userinfo.split_once(':') {
                        Some((user, password)) => (
                            user,
                            Some(decode(password).map_err(|_| {
                                bad("the password is not UTF-8 once decoded".into())
                            })?),
                        ),
                        None => (userinfo, None),
                    };
                let user = decode(user).map_err(&bad)?;
                ((!user.is_empty()).then_some(user), password)
            }
        };
        let hosts = if hosts.is_empty() {
            Vec::new()
        } else {
            hosts
                .split(',')
                .map(parse_host)
                .collect::<std::result::Result<_, _>>()
                .map_err(bad)?
        };
        // The url crate parses and normalises the rest; its host is a stand-in.
        let parsed = ::url::Url::parse(&format!("{scheme}://host{tail}"))
            .map_err(|e| bad(format!("not a URL: {e}")))?;
        let path = decode(parsed.path()).map_err(&bad)?;
        let mut params = Vec::new();
        for pair in parsed.query().unwrap_or("").split('&') {
            if pair.is_empty() {
                continue;
            }
            if !pair.contains('=') {
                return Err(bad(format!(
                    "parameter {pair:?} has no value (write name=value)"
                )));
            }
            let (name, value) = ::url::form_urlencoded::parse(pair.as_bytes())
                .next()
                .expect("a pair with '=' yields one pair");
            params.push((name.into_owned(), value.into_owned()));
        }
        Ok(BackendUrl {
            scheme: scheme.to_owned(),
            user,
            password,
            hosts,
            path,
            params,
            asked: Vec::new(),
            shown,
        })
    }

    /// The scheme, without `://`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, percent-decoded; `None` if none or empty.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, percent-decoded; `None` without a `:` in the userinfo.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts, in order; empty if the URL names none.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The hosts as `host:port`, `default_port` where a host has none;
    /// an error if the URL names no host.
    pub fn endpoints(&self, default_port: u16) -> Result<Vec<String>> {
        if self.hosts.is_empty() {
            return Err(self.invalid(format!("names no {} endpoint (host[:port])", self.scheme)));
        }
        Ok(self
            .hosts
            .iter()
            .map(|h| format!("{}:{}", h.host, h.port.unwrap_or(default_port)))
            .collect())
    }

    /// The path, percent-decoded: empty, or starting with `/`.
    pub fn path(&self) -> &str {
        match self.path.as_str() {
            "/" => "",
            path => path,
        }
    }

    /// Whether the URL ends its authority with `/` and nothing after it
    /// (`kube:///`), as opposed to no path at all (`kube://`).
    pub fn has_root_path(&self) -> bool {
        self.path == "/"
    }

    /// Removes and returns parameter `name`'s value; an error if it is
    /// given more than once.
    pub fn take(&mut self, name: &str) -> Result<Option<String>> {
        if !self.asked.iter().any(|known| known == name) {
            self.asked.push(name.to_owned());
        }
        let mut found = None;
        let mut error = None;
        self.params.retain(|(n, v)| {
            if n != name {
                return true;
            }
            if found.replace(v.clone()).is_some() {
                error = Some(format!("parameter {name:?} is given twice"));
            }
            false
        });
        match error {
            Some(why) => Err(self.invalid(why)),
            None => Ok(found),
        }
    }

    /// Parameter `name` as a duration: `500ms`, `2s`; a plain number is
    /// accepted, as milliseconds, only where `name` ends in `_ms`.
    pub fn take_duration(&mut self, name: &str) -> Result<Option<Duration>> {
        let Some(text) = self.take(name)? else {
            return Ok(None);
        };
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let n = number.parse::<u64>().ok();
        match (n, unit) {
            (Some(n), "ms") => Ok(Some(Duration::from_millis(n))),
            (Some(n), "s") => Ok(Some(Duration::from_secs(n))),
            (Some(n), "") if name.ends_with("_ms") => Ok(Some(Duration::from_millis(n))),
            _ => Err(self.invalid(format!(
                "{name}={text:?} is not a duration like 500ms or 2s"
            ))),
        }
    }

    /// Parameter `name` as a duration ([`take_duration`](Self::take_duration)),
    /// or under `old`, the name it had before (a plain number of milliseconds
    /// is still accepted there where `old` ends in `_ms`). The old name is
    /// deprecated: it works, with a warning; both at once are refused.
    pub fn take_duration_renamed(&mut self, name: &str, old: &str) -> Result<Option<Duration>> {
        let current = self.take_duration(name)?;
        let renamed = self.take_duration(old)?;
        match (current, renamed) {
            (Some(_), Some(_)) => Err(self.invalid(format!(
                "{name} is given twice, once under its old name {old}; give {name} only"
            ))),
            (None, Some(value)) => {
                tracing::warn!(
                    parameter = old,
                    "URL parameter {old} is deprecated; use {name}={value:?}"
                );
                Ok(Some(value))
            }
            (current, None) => Ok(current),
        }
    }

    /// Parameter `name` as `true` or `false`.
    pub fn take_bool(&mut self, name: &str) -> Result<Option<bool>> {
        match self.take(name)?.as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(self.invalid(format!("{name}={other:?} is neither true nor false"))),
        }
    }

    /// Succeeds if every parameter was taken; else names the first one
    /// left, and lists those the parser knows: every name it asked for
    /// (deprecated spellings included), so the list cannot drift from the
    /// parser.
    pub fn finish(self) -> Result<()> {
        match self.params.first() {
            None => Ok(()),
            Some((name, _)) => Err(self.invalid(format!(
                "unknown parameter {name:?} (known: {})",
                self.asked.join(", ")
            ))),
        }
    }

    /// An [`Error::InvalidArgument`] naming `url`: the URL (its password
    /// hidden), then `why`.
    pub fn invalid(&self, why: impl std::fmt::Display) -> Error {
        Error::invalid("url", format!("{:?}: {why}", self.shown))
    }

    /// The URL as given, its password replaced by `***`.
    pub fn redacted(&self) -> &str {
        &self.shown
    }
}

/// `url` with the password of its userinfo, if any, replaced by `***`: for
/// messages about a URL that did not parse.
pub fn redacted(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => match userinfo.split_once(':') {
            Some((user, _)) => format!(
                "{}{user}:***{}",
                &url[..start],
                &url[start + userinfo.len()..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Every `%` starts an escape of two hex digits.
fn check_escapes(text: &str) -> std::result::Result<(), String> {
    let bytes = text.as_bytes();
    for (i, _) in text.match_indices('%') {
        let ok = bytes
            .get(i + 1..i + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
        if !ok {
            return Err(format!(
                "a % at byte {} does not start an escape like %2F",
                i
            ));
        }
    }
    Ok(())
}

fn decode(text: &str) -> std::result::Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_host(text: &str) -> std::result::Result<Host, String> {
    if text.is_empty() {
        return Err("the host list has an empty entry".into());
    }
    let (host, port) = if text.starts_with('[') {
        let close = text
            .find(']')
            .ok_or_else(|| format!("host {text:?}: an IPv6 address lacks its ']'"))?;
        let (host, after) = text.split_at(close + 1);
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("host {text:?}: expected ':port' after ']'")),
            },
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("host {text:?} has an empty name"));
    }
    if host.contains(['%', ' ', '@']) || (!host.starts_with('[') && host.contains(['[', ']'])) {
        return Err(format!("host {text:?} is not a host name or address"));
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                return Err(format!(
                    "host {text:?}: the port is not a number from 1 to 65535"
                ))
            }
        },
    };
    Ok(Host {
        host: host.to_owned(),
        port,
    })
}

/// The reason a backend's URL parser `parse` gave for refusing `url`: the
/// text of its [`Error::InvalidArgument`] naming `url`. For the parsers'
/// tests: panics, naming `url`, on any other result.
#[doc(hidden)]
pub fn refusal<T: std::fmt::Debug>(parse: impl FnOnce(&str) -> Result<T>, url: &str) -> String {
    match parse(url) {
        Err(Error::InvalidArgument {
            field: "url",
            reason,
        }) => reason,
        other => panic!("{url}: expected InvalidArgument naming url, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<impl std::fmt::Debug>) -> String {
        refusal(|_| result, "the URL")
    }

    #[test]
    fn scheme_userinfo_hosts_path_and_query_are_read() {
        let mut url = BackendUrl::parse(
            "etcd://u:p@a:1,[::1]:2,c/x/y?ca=%2Ftmp%2Fca.pem&n=a+b",
            &["etcd"],
        )
        .unwrap();
        assert_eq!(url.scheme(), "etcd");
        assert_eq!((url.user(), url.password()), (Some("u"), Some("p")));
        assert_eq!(url.endpoints(9).unwrap(), ["a:1", "[::1]:2", "c:9"]);
        assert_eq!(url.path(), "/x/y");
        assert_eq!(url.take("ca").unwrap().as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(url.take("n").unwrap().as_deref(), Some("a b"));
        assert_eq!(url.take("n").unwrap(), None);
        url.finish().unwrap();
    }

    #[test]
    fn percent_encoded_user_and_password_are_decoded() {
        let url = BackendUrl::parse("zk://m%C3%A9:p%40ss%3Aw%2Fd@h:1", &["zk"]).unwrap();
        assert_eq!(url.user(), Some("mé"));
        assert_eq!(url.password(), Some("p@ss:w/d"));
        let url = BackendUrl::parse("zk://:only@h:1", &["zk"]).unwrap();
        assert_eq!((url.user(), url.password()), (None, Some("only")));
        let url = BackendUrl::parse("zk://user@h:1", &["zk"]).unwrap();
        assert_eq!((url.user(), url.password()), (Some("user"), None));
    }

    #[test]
    fn a_raw_at_sign_in_the_password_is_kept() {
        let url = BackendUrl::parse("zk://u:p@ss@h:1/b", &["zk"]).unwrap();
        assert_eq!(url.password(), Some("p@ss"));
        assert_eq!(url.endpoints(1).unwrap(), ["h:1"]);
    }

    #[test]
    fn no_path_a_root_path_and_a_path_differ() {
        let url = BackendUrl::parse("kube://", &["kube"]).unwrap();
        assert_eq!((url.path(), url.has_root_path()), ("", false));
        let url = BackendUrl::parse("kube:///", &["kube"]).unwrap();
        assert_eq!((url.path(), url.has_root_path()), ("", true));
        let url = BackendUrl::parse("kube:///a%20b/c?x=1", &["kube"]).unwrap();
        assert_eq!(url.path(), "/a b/c");
        assert!(url.hosts().is_empty());
    }

    #[test]
    fn unknown_parameters_are_named() {
        let mut url = BackendUrl::parse("zk://h:1?tick_time_ms=5&colour=blue", &["zk"]).unwrap();
        url.take("tick_time_ms").unwrap();
        let why = reason(url.finish());
        assert!(
            why.contains("\"colour\"") && why.contains("known: tick_time_ms"),
            "{why}"
        );
    }

    #[test]
    fn a_parameter_given_twice_is_refused() {
        let mut url = BackendUrl::parse("zk://h:1?a=1&a=2", &["zk"]).unwrap();
        assert!(reason(url.take("a")).contains("given twice"));
    }

    #[test]
    fn durations_take_units_and_plain_milliseconds_only_for_ms_names() {
        let mut url =
            BackendUrl::parse("zk://h?a=500ms&b=2s&c_ms=250&d=250&e=fast&f=1.5s", &["zk"]).unwrap();
        assert_eq!(
            url.take_duration("a").unwrap(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            url.take_duration("b").unwrap(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            url.take_duration("c_ms").unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(url.take_duration("zz").unwrap(), None);
        for name in ["d", "e", "f"] {
            assert!(
                reason(url.take_duration(name)).contains("not a duration"),
                "{name}"
            );
        }
    }

    #[test]
    fn a_renamed_duration_is_read_under_either_name_but_not_both() {
        let mut url = BackendUrl::parse("zk://h?a_ms=250&b=2s&c=1s&c_ms=1000", &["zk"]).unwrap();
        assert_eq!(
            url.take_duration_renamed("a", "a_ms").unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            url.take_duration_renamed("b", "b_ms").unwrap(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(url.take_duration_renamed("z", "z_ms").unwrap(), None);
        let why = reason(url.take_duration_renamed("c", "c_ms"));
        assert!(
            why.contains("c is given twice") && why.contains("c_ms"),
            "{why}"
        );
    }

    #[test]
    fn booleans_are_true_or_false() {
        let mut url = BackendUrl::parse("etcd://h?tls=true&x=false&y=yes", &["etcd"]).unwrap();
        assert_eq!(url.take_bool("tls").unwrap(), Some(true));
        assert_eq!(url.take_bool("x").unwrap(), Some(false));
        assert!(reason(url.take_bool("y")).contains("neither true nor false"));
    }

    #[test]
    fn empty_hosts_and_bad_ports_are_refused() {
        for (bad, says) in [
            ("etcd://a:1,,b:2", "empty entry"),
            ("etcd://,", "empty entry"),
            ("etcd://:2379", "empty name"),
            ("etcd://a:65536", "from 1 to 65535"),
            ("etcd://a:0", "from 1 to 65535"),
            ("etcd://a:", "from 1 to 65535"),
            ("etcd://a:x", "from 1 to 65535"),
            ("etcd://[::1", "lacks its ']'"),
            ("etcd://[::1]x", "expected ':port'"),
        ] {
            let why = reason(BackendUrl::parse(bad, &["etcd"]));
            assert!(why.contains(says), "{bad}: {why}");
        }
        let url = BackendUrl::parse("etcd:///p", &["etcd"]).unwrap();
        assert!(reason(url.endpoints(1)).contains("names no etcd endpoint"));
    }

    #[test]
    fn malformed_urls_are_refused() {
        for (bad, says) in [
            ("http://a:1", "does not start with etcd:// or etcds://"),
            ("etcd:a", "does not start with"),
            ("", "does not start with"),
            ("etcd://a/p#frag", "no fragment"),
            ("etcd://a/p%zz", "does not start an escape"),
            ("etcd://a?x", "has no value"),
            ("etcd://a/%FF", "not UTF-8"),
        ] {
            let why = reason(BackendUrl::parse(bad, &["etcd", "etcds"]));
            assert!(why.contains(says), "{bad}: {why}");
        }
    }

    #[test]
    fn passwords_never_appear_in_errors() {
        for bad in [
            "etcd://u:s3cret@a:0",
            "etcd://u:s3cret@a/%zz",
            "etcd://u:s3cret@a?x",
            "etcd://u:s3%ZZcret@a",
            "etcd://u:s3cret@a#f",
            "etcx://u:s3cret@a",
            "u:s3cret@a",
        ] {
            let why = reason(BackendUrl::parse(bad, &["etcd"]));
            assert!(
                !why.contains("s3") && why.contains("u:***@"),
                "{bad}: {why}"
            );
        }
        let url = BackendUrl::parse("etcd://u:s3cret@a?z=1", &["etcd"]).unwrap();
        assert!(!format!("{url:?}").contains("s3cret"));
        let why = reason(url.finish());
        assert!(!why.contains("s3cret"), "{why}");
    }
}
