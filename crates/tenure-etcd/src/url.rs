//! `etcd://` and `etcds://` URLs: endpoints, key prefix, auth and TLS.

use std::path::PathBuf;
use std::time::Duration;

use tenure_core::backend_url::BackendUrl;
use tenure_core::Result;

use crate::EtcdOptions;

/// etcd's client port, for a host the URL gives without one.
const DEFAULT_PORT: u16 = 2379;

/// What an etcd URL asks for (nothing read or connected yet).
#[derive(Debug)]
pub(crate) struct Target {
    pub endpoints: Vec<String>,
    /// Empty, or a directory ending with `/`.
    pub prefix: String,
    /// etcd auth: user name and password.
    pub user: Option<(String, String)>,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))] // read only with TLS
    pub tls: Option<Tls>,
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    /// The URL, its password hidden, for later errors.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))] // read only with TLS
    url: BackendUrl,
}

/// TLS files: `ca` to trust (else the system's roots), `cert` and `key`
/// for a client certificate (mTLS).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tls {
    pub ca: Option<PathBuf>,
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Parses an etcd URL; every problem is `InvalidArgument` naming `url`.
pub(crate) fn parse(text: &str) -> Result<Target> {
    let mut url = BackendUrl::parse(text, &["etcd", "etcds"])?;
    let endpoints = url.endpoints(DEFAULT_PORT)?;
    let prefix = match url.path().trim_start_matches('/') {
        "" => String::new(),
        p if p.ends_with('/') => p.to_owned(),
        p => format!("{p}/"),
    };
    let user = match (url.user(), url.password()) {
        (None, None) => None,
        (Some(user), Some(password)) => Some((user.to_owned(), password.to_owned())),
        _ => {
            return Err(url
                .invalid("etcd auth needs both a user and a password (etcd://user:password@host)"))
        }
    };
    let tls_flag = url.take_bool("tls")?;
    let tls_wanted = match (url.scheme(), tls_flag) {
        ("etcds", Some(false)) => return Err(url.invalid("etcds:// with tls=false")),
        ("etcds", _) => true,
        (_, flag) => flag.unwrap_or(false),
    };
    let ca = url.take("ca")?.map(PathBuf::from);
    let cert = url.take("cert")?.map(PathBuf::from);
    let key = url.take("key")?.map(PathBuf::from);
    let client = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        _ => return Err(url.invalid("cert= and key= go together (a client certificate)")),
    };
    if !tls_wanted && (ca.is_some() || client.is_some()) {
        return Err(url.invalid("ca=, cert= and key= need TLS: write etcds:// or tls=true"));
    }
    let tls = tls_wanted.then_some(Tls { ca, client });
    if tls.is_some() && cfg!(not(feature = "tls")) {
        return Err(url.invalid(
            "TLS needs tenure-etcd's cargo feature `tls` (tenure's `etcd-tls`), which is off",
        ));
    }
    let request_timeout = url.take_duration("request_timeout")?;
    let connect_timeout = url.take_duration("connect_timeout")?;
    url.clone().finish()?;
    Ok(Target {
        endpoints,
        prefix,
        user,
        tls,
        request_timeout,
        connect_timeout,
        url,
    })
}

impl Target {
    /// The options this URL asks for; reads the TLS files it names (a few
    /// small files, once, while connecting).
    pub(crate) fn options(&self) -> Result<EtcdOptions> {
        let mut options = EtcdOptions::default().with_key_prefix(self.prefix.clone());
        if let Some(timeout) = self.request_timeout {
            options = options.with_request_timeout(timeout);
        }
        let mut connect = options.connect.clone();
        if let Some(timeout) = self.connect_timeout {
            connect = connect.with_connect_timeout(timeout);
        }
        if let Some((user, password)) = &self.user {
            connect = connect.with_user(user.clone(), password.clone());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            connect = connect.with_tls(self.tls_options(tls)?);
        }
        Ok(options.with_connect_options(connect))
    }

    #[cfg(feature = "tls")]
    fn tls_options(&self, tls: &Tls) -> Result<etcd_client::TlsOptions> {
        use etcd_client::{Certificate, Identity, TlsOptions};
        let read = |name: &'static str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| {
                self.url
                    .invalid(format!("cannot read {name}={}: {e}", path.display()))
            })
        };
        let mut options = TlsOptions::new();
        match &tls.ca {
            Some(ca) => options = options.ca_certificate(Certificate::from_pem(read("ca", ca)?)),
            None => options = options.with_native_roots(),
        }
        if let Some((cert, key)) = &tls.client {
            let cert = read("cert", cert)?;
            let key = read("key", key)?;
            options = options.identity(Identity::from_pem(cert, key));
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::backend_url::refusal;

    #[test]
    fn a_url_path_is_a_prefix_directory() {
        let t = parse("etcd://a:2379,b:2379/tenure").unwrap();
        assert_eq!(t.endpoints, ["a:2379", "b:2379"]);
        assert_eq!(t.prefix, "tenure/");
        assert_eq!(parse("etcd://a:2379/tenure/").unwrap().prefix, "tenure/");
        assert_eq!(parse("etcd://a:2379/x/y").unwrap().prefix, "x/y/");
        assert_eq!(parse("etcd://a:2379/").unwrap().prefix, "");
        assert_eq!(parse("etcd://a:2379").unwrap().prefix, "");
    }

    #[test]
    fn a_host_without_a_port_gets_2379() {
        assert_eq!(
            parse("etcd://a,[::1]").unwrap().endpoints,
            ["a:2379", "[::1]:2379"]
        );
    }

    #[test]
    fn a_bad_url_names_url() {
        for url in [
            "http://a:2379",
            "etcd://",
            "etcd:///tenure",
            "etcd://,/",
            "etcd://a:1,,b:2",
            "etcd://a:70000",
            "etcd://a?colour=blue",
            "etcd://a?request_timeout=1s&request_timeout=2s",
            "etcd://a?request_timeout=soon",
            "etcd://a?ca=/ca.pem",
            "etcd://a?tls=maybe",
            "etcds://a?tls=false",
            "etcd://user@a",
            "etcd://:pw@a",
        ] {
            refusal(parse, url);
        }
    }

    #[test]
    fn user_and_password_are_decoded_and_never_shown() {
        let t = parse("etcd://root:p%40ss%2Fw@a:2379/x").unwrap();
        assert_eq!(t.user, Some(("root".into(), "p@ss/w".into())));
        let why = refusal(parse, "etcd://root:p%40ss@a:2379?nope=1");
        assert!(
            why.contains("root:***@") && !why.contains("p%40ss"),
            "{why}"
        );
        assert!(
            why.contains("\"nope\"") && why.contains("known: tls"),
            "{why}"
        );
    }

    #[test]
    fn timeouts_are_read() {
        let t = parse("etcd://a?request_timeout=2s&connect_timeout=500ms").unwrap();
        assert_eq!(t.request_timeout, Some(Duration::from_secs(2)));
        assert_eq!(t.connect_timeout, Some(Duration::from_millis(500)));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_parameters_are_read() {
        let t = parse("etcds://a?ca=/c/ca.pem&cert=/c/me.pem&key=/c/me.key").unwrap();
        let tls = t.tls.unwrap();
        assert_eq!(tls.ca, Some(PathBuf::from("/c/ca.pem")));
        assert_eq!(tls.client, Some(("/c/me.pem".into(), "/c/me.key".into())));
        assert_eq!(
            parse("etcd://a?tls=true").unwrap().tls,
            Some(Tls::default())
        );
        assert_eq!(parse("etcd://a?tls=false").unwrap().tls, None);
        assert!(refusal(parse, "etcds://a?cert=/c/me.pem").contains("go together"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn an_unreadable_tls_file_names_it() {
        let t = parse("etcds://a?ca=/nonexistent/ca.pem").unwrap();
        let error = t.options().unwrap_err();
        assert!(
            error.to_string().contains("ca=/nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_tls_url_without_the_feature_names_it() {
        for url in ["etcds://a:2379", "etcd://a:2379?tls=true&ca=/ca.pem"] {
            let why = refusal(parse, url);
            assert!(why.contains("`tls`") && why.contains("`etcd-tls`"), "{why}");
        }
    }
}
