//! Which browser origins may call flowgate over HTTP.
//!
//! The Streamable HTTP transport asks servers to check `Origin` so that a web page cannot drive
//! a local server (DNS rebinding, cross-site requests): a request whose `Origin` is not allowed
//! gets 403. Requests without `Origin` (every non-browser client) pass. Loopback origins always
//! pass; others must be allowed by name (`--allowed-origin`). rmcp does the matching for the
//! requests it serves; this module turns the configured entries into its exact form, and makes
//! the same `Host` and `Origin` checks ([`Guard`]) for the requests answered before rmcp (the
//! 2025-11-25 dialect's), so no request escapes them.

use axum::http::uri::Authority;
use axum::http::{HeaderMap, StatusCode, Uri, header};

/// Loopback pages on any port: a local inspector or agent UI talking to a local server.
pub(crate) const LOOPBACK: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// The canonical form of one `--allowed-origin` entry: `scheme://host:port`, `scheme://host:*`
/// for any port, `null` for opaque origins, or `*` (the check is off).
///
/// An entry without a port means the scheme's default port (443 for `https`, 80 for `http`),
/// as a browser's `Origin` omits it.
///
/// # Errors
/// When the entry is not an origin (no scheme or host, or a path, query or user part).
pub fn allowed_origin(entry: &str) -> Result<String, String> {
    let entry = entry.trim();
    if entry == "*" || entry.eq_ignore_ascii_case("null") {
        return Ok(entry.to_ascii_lowercase());
    }
    let (base, any_port) = match entry.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (entry, false),
    };
    let invalid = |why: &str| {
        format!(
            "allowed origin {entry:?} {why}; write it as scheme://host[:port], e.g. https://app.example"
        )
    };
    let uri: Uri = base.parse().map_err(|_| invalid("is not a URL"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(invalid("needs a scheme and a host"));
    };
    if authority.as_str().contains('@')
        || uri.query().is_some()
        || !matches!(uri.path(), "" | "/")
        || base.ends_with('/')
    {
        return Err(invalid("must be an origin only, without a path"));
    }
    let scheme = scheme.to_ascii_lowercase();
    let host = authority.host().to_ascii_lowercase();
    let port = match (any_port, authority.port_u16(), scheme.as_str()) {
        (true, Some(_), _) => return Err(invalid("has two ports")),
        (true, None, _) => "*".to_owned(),
        (false, Some(port), _) => port.to_string(),
        (false, None, "https") => "443".to_owned(),
        (false, None, "http") => "80".to_owned(),
        (false, None, _) => return Err(invalid("needs a port (or :* for any)")),
    };
    Ok(format!("{scheme}://{host}:{port}"))
}

/// The origins rmcp should allow: loopback and the configured ones, or `None` when the
/// configuration turns the check off with `*`. Entries that are not origins are left out with a
/// warning (the binary refuses them before it gets here).
pub(crate) fn allowlist(configured: &[String]) -> Option<Vec<String>> {
    let mut list: Vec<String> = LOOPBACK.map(String::from).into();
    for entry in configured {
        match allowed_origin(entry) {
            Ok(origin) if origin == "*" => return None,
            Ok(origin) => list.push(origin),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    Some(list)
}

/// The `Host` and `Origin` checks, as rmcp makes them with the same lists (DNS rebinding and
/// cross-site requests), for requests answered before they reach rmcp.
///
/// The lists are read once, when the guard is made: a request then compares its own `Host`
/// and `Origin` against entries already taken apart (and lowercased), without parsing or
/// copying an entry per request (a share of every poll's work: docs/benchmarks.md).
#[derive(Debug, Clone, Default)]
pub(crate) struct Guard {
    /// Allowed `Host`s; `None`: any.
    hosts: Option<Vec<AllowedHost>>,
    /// Allowed origins; `None`: any.
    origins: Option<Vec<AllowedOrigin>>,
}

/// One allowed `Host` entry: a name (lowercased, without brackets), for one port or any.
#[derive(Debug, Clone)]
struct AllowedHost {
    name: String,
    port: Option<u16>,
}

/// One allow-list entry in [`allowed_origin`]'s form, taken apart; an entry that is no origin
/// admits nothing.
#[derive(Debug, Clone)]
enum AllowedOrigin {
    Null,
    Tuple { origin: Origin, any_port: bool },
    Nothing,
}

impl Guard {
    /// The guard for `hosts` (`host` or `host:port` entries; empty: any) and `origins` (in
    /// [`allowed_origin`]'s form; `None`: any).
    pub(crate) fn new(hosts: &[String], origins: Option<Vec<String>>) -> Self {
        let hosts = (!hosts.is_empty()).then(|| {
            hosts
                .iter()
                .filter_map(|allowed| {
                    let allowed = allowed.trim();
                    let (name, port) = match Authority::try_from(allowed) {
                        Ok(a) => (normalize(a.host()), a.port_u16()),
                        Err(_) => (normalize(allowed), None),
                    };
                    // An empty name matches no host.
                    (!name.is_empty()).then_some(AllowedHost { name, port })
                })
                .collect()
        });
        let origins = origins.map(|entries| {
            entries
                .iter()
                .map(|entry| {
                    let entry = entry.trim();
                    if entry.eq_ignore_ascii_case("null") {
                        return AllowedOrigin::Null;
                    }
                    let (base, any_port) = match entry.strip_suffix(":*") {
                        Some(base) => (base, true),
                        None => (entry, false),
                    };
                    match Origin::parse(base) {
                        Some(origin @ Origin::Tuple { .. }) => {
                            AllowedOrigin::Tuple { origin, any_port }
                        }
                        _ => AllowedOrigin::Nothing,
                    }
                })
                .collect()
        });
        Guard { hosts, origins }
    }

    /// Why the request must be refused (its status and rmcp's words), if it must.
    pub(crate) fn refusal(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Option<(StatusCode, &'static str)> {
        let host = match headers.get(header::HOST) {
            Some(value) => {
                let Ok(text) = value.to_str() else {
                    return Some((
                        StatusCode::BAD_REQUEST,
                        "Bad Request: Invalid Host header encoding",
                    ));
                };
                let Ok(authority) = Authority::try_from(text) else {
                    return Some((StatusCode::BAD_REQUEST, "Bad Request: Invalid Host header"));
                };
                authority
            }
            None => match uri.authority() {
                Some(authority) => authority.clone(),
                None => return Some((StatusCode::BAD_REQUEST, "Bad Request: missing Host header")),
            },
        };
        if let Some(hosts) = &self.hosts
            && !hosts.iter().any(|allowed| allowed.matches(&host))
        {
            return Some((
                StatusCode::FORBIDDEN,
                "Forbidden: Host header is not allowed",
            ));
        }
        let (Some(allowed), Some(origin)) = (&self.origins, headers.get(header::ORIGIN)) else {
            return None;
        };
        let Ok(origin) = origin.to_str() else {
            return Some((
                StatusCode::FORBIDDEN,
                "Forbidden: Invalid Origin header encoding",
            ));
        };
        let Some(origin) = Origin::parse(origin) else {
            return Some((StatusCode::FORBIDDEN, "Forbidden: Invalid Origin header"));
        };
        if allowed.iter().any(|entry| entry.admits(&origin)) {
            None
        } else {
            Some((
                StatusCode::FORBIDDEN,
                "Forbidden: Origin header is not allowed",
            ))
        }
    }
}

fn normalize(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

impl AllowedHost {
    /// Whether `host` is this entry (`host`, or `host:port` for that port only).
    fn matches(&self, host: &Authority) -> bool {
        self.name
            .eq_ignore_ascii_case(host.host().trim_matches(['[', ']']))
            && self.port.is_none_or(|p| host.port_u16() == Some(p))
    }
}

/// A request's `Origin` (or an allow-list entry's, taken apart the same way).
#[derive(Debug, Clone)]
enum Origin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

impl Origin {
    fn parse(value: &str) -> Option<Origin> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("null") {
            return Some(Origin::Null);
        }
        let uri: Uri = value.parse().ok()?;
        let authority = uri.authority()?;
        Some(Origin::Tuple {
            scheme: uri.scheme_str()?.to_ascii_lowercase(),
            host: normalize(authority.host()),
            port: authority.port_u16(),
        })
    }
}

impl AllowedOrigin {
    /// Whether this entry (`scheme://host:port`, `scheme://host:*`, `null`) admits `origin`.
    fn admits(&self, origin: &Origin) -> bool {
        match (self, origin) {
            (AllowedOrigin::Null, Origin::Null) => true,
            (
                AllowedOrigin::Tuple {
                    origin:
                        Origin::Tuple {
                            scheme: s,
                            host: h,
                            port: p,
                        },
                    any_port,
                },
                Origin::Tuple { scheme, host, port },
            ) => {
                let default = match scheme.as_str() {
                    "http" => Some(80),
                    "https" => Some(443),
                    _ => None,
                };
                s == scheme && h == host && (*any_port || p.is_none() || port.or(default) == *p)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_checks_host_and_origin_as_rmcp_does() {
        let guard = Guard::new(
            &[
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
                "svc.example:8443".into(),
            ],
            allowlist(&["https://app.example".into()]),
        );
        let uri: Uri = "/mcp".parse().expect("uri");
        let with = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                    v.parse().expect("value"),
                );
            }
            guard.refusal(&uri, &h).map(|(status, _)| status.as_u16())
        };
        assert_eq!(with(&[("host", "127.0.0.1:9000")]), None);
        assert_eq!(with(&[("host", "[::1]:80")]), None);
        assert_eq!(with(&[("host", "svc.example:8443")]), None);
        assert_eq!(with(&[("host", "svc.example:443")]), Some(403));
        assert_eq!(with(&[("host", "evil.example")]), Some(403));
        assert_eq!(with(&[]), Some(400));
        for (origin, refused) in [
            ("https://app.example", None),
            ("https://app.example:443", None),
            ("https://app.example:8443", Some(403)),
            ("http://localhost:3000", None),
            ("http://evil.example", Some(403)),
            ("null", Some(403)),
            ("not an origin", Some(403)),
        ] {
            assert_eq!(
                with(&[("host", "localhost"), ("origin", origin)]),
                refused,
                "{origin}"
            );
        }
        let open = Guard::default();
        assert_eq!(
            open.refusal(
                &"http://any.example/mcp".parse().expect("uri"),
                &HeaderMap::new()
            ),
            None
        );
    }

    #[test]
    fn entries_take_their_canonical_form() {
        for (entry, canonical) in [
            ("https://App.Example", "https://app.example:443"),
            ("http://evil.example", "http://evil.example:80"),
            ("http://localhost:3000", "http://localhost:3000"),
            ("https://app.example:*", "https://app.example:*"),
            ("http://[::1]:8080", "http://[::1]:8080"),
            ("chrome-extension://abc:*", "chrome-extension://abc:*"),
            ("null", "null"),
            ("*", "*"),
        ] {
            assert_eq!(allowed_origin(entry).as_deref(), Ok(canonical), "{entry}");
        }
    }

    #[test]
    fn what_is_not_an_origin_is_refused() {
        for entry in [
            "app.example",
            "https://app.example/path",
            "https://app.example/",
            "https://user@app.example",
            "https://app.example?q=1",
            "https://app.example:443:*",
            "chrome-extension://abc",
            "",
        ] {
            assert!(allowed_origin(entry).is_err(), "{entry}");
        }
    }

    #[test]
    fn the_allowlist_holds_loopback_and_the_configured_origins_unless_turned_off() {
        let list = allowlist(&["https://app.example".into(), "nonsense".into()]).expect("on");
        assert!(list.contains(&"http://localhost:*".to_owned()));
        assert!(list.contains(&"https://app.example:443".to_owned()));
        assert_eq!(list.len(), LOOPBACK.len() + 1);
        assert_eq!(allowlist(&["https://a.example".into(), "*".into()]), None);
    }
}
