//! What a resource server tells a client that must (re)authorize: the `WWW-Authenticate`
//! header of a 401/403 (RFC 6750 §3, RFC 9728 §5.1) and the Protected Resource Metadata
//! document (RFC 9728 §2) the header points to.

use serde::Serialize;

/// Why a request is refused; selects the `error=` of the challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token at all: RFC 6750 says to send no `error` code then.
    Missing,
    /// A token that does not validate (401, `invalid_token`).
    InvalidToken,
    /// A valid token lacking a scope (403, `insufficient_scope`).
    InsufficientScope,
}

/// The `WWW-Authenticate` value for a refusal. `scopes` are the ones the request needs, so a
/// client can step up. Values are quoted; a `"` or `\` in them is escaped.
pub fn www_authenticate(resource_metadata: &str, refusal: Refusal, scopes: &[String]) -> String {
    www_authenticate_header(Some(resource_metadata), refusal, scopes)
}

/// [`www_authenticate`] with or without a `resource_metadata` parameter: a bare `Bearer` for a
/// missing credential of a deployment that publishes no metadata.
pub fn www_authenticate_header(
    resource_metadata: Option<&str>,
    refusal: Refusal,
    scopes: &[String],
) -> String {
    let mut params = Vec::new();
    if let Some(url) = resource_metadata {
        params.push(format!("resource_metadata=\"{}\"", escape(url)));
    }
    if !scopes.is_empty() {
        params.push(format!("scope=\"{}\"", escape(&scopes.join(" "))));
    }
    match refusal {
        Refusal::Missing => {}
        Refusal::InvalidToken => params.push("error=\"invalid_token\"".to_owned()),
        Refusal::InsufficientScope => params.push("error=\"insufficient_scope\"".to_owned()),
    }
    if params.is_empty() {
        "Bearer".to_owned()
    } else {
        format!("Bearer {}", params.join(", "))
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The RFC 9728 document served at `/.well-known/oauth-protected-resource[/mcp]`.
#[derive(Debug, Clone, Serialize)]
pub struct ProtectedResourceMetadata {
    /// The canonical resource URI; tokens must carry it as `aud`.
    pub resource: String,
    /// Issuer identifiers of the authorization servers that may issue tokens for it.
    pub authorization_servers: Vec<String>,
    /// Every scope a tool may require.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// Only the `Authorization` header is accepted (never a query parameter or form body).
    pub bearer_methods_supported: Vec<String>,
}

impl ProtectedResourceMetadata {
    /// The document for `resource`, protected by `authorization_servers`.
    pub fn new(resource: &str, authorization_servers: Vec<String>, scopes: Vec<String>) -> Self {
        ProtectedResourceMetadata {
            resource: resource.to_owned(),
            authorization_servers,
            scopes_supported: scopes,
            bearer_methods_supported: vec!["header".to_owned()],
        }
    }

    /// Where the document lives for a resource URI (RFC 9728 §3.1): the well-known segment is
    /// inserted between host and path, so `https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`.
    pub fn url_for(resource: &str) -> String {
        let (scheme, rest) = resource.split_once("://").unwrap_or(("https", resource));
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        format!("{scheme}://{host}/.well-known/oauth-protected-resource{path}")
    }
}
