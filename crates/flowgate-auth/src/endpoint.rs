//! The URLs an authorization setting names (the issuer, a JWKS, the resource, a Google
//! audience), parsed as URLs rather than picked apart as text.
//!
//! A check on text can disagree with the HTTP client about which host a URL names:
//! `http://127.0.0.1:80@evil.example/` looks like loopback to a split on `:` but is a request to
//! `evil.example` with userinfo `127.0.0.1:80`. So every URL is parsed once, with the parser the
//! HTTP client itself uses, and the checks read the parsed parts:
//!
//! - the text must be an RFC 3986 URI: only its characters (no spaces, backslashes or
//!   non-ASCII, which parsers repair in different ways), every `%` followed by two hex digits;
//! - no userinfo (`user:password@`): nothing legitimate here carries it, and it only serves to
//!   disguise the host;
//! - `https`, or `http` only when the host the client will connect to is loopback (`localhost`,
//!   127.0.0.0/8, `::1`), for an issuer in development and tests;
//! - an issuer identifier (RFC 8414 §2) also has no query and no fragment.

use std::net::IpAddr;

use url::{Host, Url};

/// Why a URL setting is refused; names the rule, and quotes the value (a URL, not a secret:
/// userinfo is refused before anything is echoed, and its password never is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlError(String);

/// What a URL is for: an issuer identifier has the stricter RFC 8414 shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Issuer,
    Endpoint,
}

/// Checks an issuer identifier (RFC 8414 §2: `https`, no query, no fragment; `http` only to a
/// loopback host) and returns it parsed. The identifier itself stays the text as configured:
/// tokens' `iss` is compared with it character for character.
///
/// # Errors
/// A [`UrlError`] naming the rule the value breaks.
pub fn issuer(value: &str) -> Result<Url, UrlError> {
    check(value, Kind::Issuer)
}

/// Checks the URL of something fetched or named (a JWKS, the resource URI, a service URL):
/// `https`, or `http` only to a loopback host, no userinfo.
///
/// # Errors
/// A [`UrlError`] naming the rule the value breaks.
pub fn endpoint(value: &str) -> Result<Url, UrlError> {
    check(value, Kind::Endpoint)
}

fn check(value: &str, kind: Kind) -> Result<Url, UrlError> {
    if let Some(bad) = value.chars().find(|c| !is_uri_char(*c)) {
        return Err(UrlError(format!(
            "{} is not a URL: it contains {bad:?}, which a URL may not (RFC 3986)",
            shown(value)
        )));
    }
    if !percent_encoding_is_valid(value) {
        return Err(UrlError(format!(
            "{} is not a URL: a % must start a %XX escape (RFC 3986)",
            shown(value)
        )));
    }
    let url =
        Url::parse(value).map_err(|e| UrlError(format!("{} is not a URL: {e}", shown(value))))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError(
            "the URL has userinfo (user:password@ before the host); it may not, since it \
             only disguises which host is contacted"
                .into(),
        ));
    }
    let Some(host) = url.host() else {
        return Err(UrlError(format!("{} has no host", shown(value))));
    };
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(&host) => {}
        "http" => {
            return Err(UrlError(format!(
                "{} must be https: http is accepted only to a loopback host (localhost, \
                 127.0.0.0/8, ::1), and this one connects to {host}",
                shown(value)
            )));
        }
        other => {
            return Err(UrlError(format!(
                "{} must be an https URL, not {other}:",
                shown(value)
            )));
        }
    }
    if kind == Kind::Issuer {
        if url.query().is_some() {
            return Err(UrlError(format!(
                "issuer {} has a query; an issuer identifier has none (RFC 8414)",
                shown(value)
            )));
        }
        if url.fragment().is_some() {
            return Err(UrlError(format!(
                "issuer {} has a fragment; an issuer identifier has none (RFC 8414)",
                shown(value)
            )));
        }
    } else if url.fragment().is_some() {
        return Err(UrlError(format!(
            "{} has a fragment (#...), which is never sent to a server",
            shown(value)
        )));
    }
    Ok(url)
}

/// Whether the host the client connects to is this machine.
fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        // The parser lowercases domains; `localhost` resolves to loopback (RFC 6761 §6.3).
        Host::Domain(domain) => *domain == "localhost",
        Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
    }
}

/// RFC 3986 §2: unreserved, reserved (gen-delims and sub-delims), and `%` of an escape.
fn is_uri_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&'()*+,;=%".contains(c)
}

fn percent_encoding_is_valid(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || (bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// The value as quoted in an error: userinfo (which may hold a password) replaced by `***`, at
/// most 200 characters, and `{:?}`-escaped so nothing unprintable reaches a terminal or a log.
fn shown(value: &str) -> String {
    let redacted = match value.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://***{}", &rest[at..]),
                None => value.to_owned(),
            }
        }
        None => value.to_owned(),
    };
    let cut: String = redacted.chars().take(200).collect();
    format!("{cut:?}")
}

/// Where RFC 8414 §3.1 puts the authorization server metadata of `issuer`: the well-known
/// segment between the host and the issuer's path (its trailing `/` removed), so
/// `https://h/tenant` → `https://h/.well-known/oauth-authorization-server/tenant`. Then the
/// OpenID Connect Discovery 1.0 §4 form (`<issuer>/.well-known/openid-configuration`) and, for
/// servers that put RFC 8414's document there too, `<issuer>/.well-known/oauth-authorization-server`.
pub fn metadata_urls(issuer: &Url) -> Vec<String> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    let mut urls: Vec<String> = Vec::with_capacity(3);
    for url in [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
        format!("{origin}{path}/.well-known/oauth-authorization-server"),
    ] {
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_or_loopback_http_without_userinfo() {
        for ok in [
            "https://issuer.example",
            "https://issuer.example/realms/ops",
            "http://127.0.0.1:9000/realms/x",
            "http://127.1.2.3",
            "http://localhost:9000",
            "http://LOCALHOST:9000",
            "http://[::1]:8080/",
        ] {
            assert!(issuer(ok).is_ok(), "{ok}: {:?}", issuer(ok));
        }
        for (bad, why) in [
            ("http://issuer.example", "https"),
            ("issuer.example", "not a URL"),
            ("https://", "not a URL"),
            ("ftp://issuer.example", "https"),
            // The host a client connects to here is evil.example, whatever the text suggests.
            ("http://127.0.0.1:80@evil.example/", "userinfo"),
            ("http://localhost@evil.example", "userinfo"),
            ("https://user:secret@issuer.example", "userinfo"),
            ("https://user:sec ret@issuer.example", "RFC 3986"),
            ("http://evil.example\\@127.0.0.1", "RFC 3986"),
            ("http://127.0.0.1 .evil.example", "RFC 3986"),
            ("http://127.0.0.1.nip.io", "https"),
            ("http://localhost.evil.example", "https"),
            ("http://[::ffff:7f00:1]", "https"),
            ("https://issuer.example/%zz", "escape"),
            ("https://issuer.example?tenant=a", "query"),
            ("http://127.0.0.1:8080#@evil.example", "fragment"),
        ] {
            let err = issuer(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(!err.contains("secret"), "{bad}: {err}");
        }
        // Endpoints may have a query, not a fragment.
        assert!(endpoint("https://keys.example/jwks?tenant=a").is_ok());
        assert!(endpoint("https://flowgate.example/mcp#x").is_err());
        assert!(endpoint("http://10.0.0.1/jwks").is_err());
    }

    #[test]
    fn metadata_is_looked_for_where_rfc_8414_and_openid_discovery_say() {
        let at = |s: &str| metadata_urls(&issuer(s).expect(s));
        assert_eq!(
            at("https://as.example"),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            at("https://as.example/tenant/a/"),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant/a",
                "https://as.example/tenant/a/.well-known/openid-configuration",
                "https://as.example/tenant/a/.well-known/oauth-authorization-server",
            ]
        );
    }
}
