//! Which browser origins may call flowgate over HTTP.
//!
//! The Streamable HTTP transport asks servers to check `Origin` so that a web page cannot drive
//! a local server (DNS rebinding, cross-site requests): a request whose `Origin` is not allowed
//! gets 403. Requests without `Origin` (every non-browser client) pass. Loopback origins always
//! pass; others must be allowed by name (`--allowed-origin`). rmcp does the matching; this module
//! turns the configured entries into its exact form.

use axum::http::Uri;

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

#[cfg(test)]
mod tests {
    use super::*;

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
