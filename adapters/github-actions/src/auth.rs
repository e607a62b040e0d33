//! Credentials: a token, or a GitHub App whose installation tokens are minted on demand and
//! reused until five minutes before they expire (an hour each). Neither is ever logged: the
//! key and the tokens are [`Secret`]s.

use std::sync::Mutex;

use base64::Engine as _;
use chrono::{DateTime, Duration, Utc};
use flowgate_core::EngineError;
use flowgate_http::{HttpClient, Method, Secret, header};
use serde::Deserialize;

use crate::KIND;

/// Mint a new installation token when the cached one has less than this left.
const REFRESH_BEFORE: Duration = Duration::minutes(5);

/// How the engine authenticates.
#[derive(Debug)]
pub(crate) enum Credentials {
    /// A token (fine-grained, classic, or an installation token minted elsewhere).
    Token(Secret),
    /// A GitHub App installation.
    App(App),
}

/// A GitHub App installation and its current token.
pub(crate) struct App {
    app_id: String,
    installation_id: u64,
    key: jsonwebtoken::EncodingKey,
    cached: Mutex<Option<(Secret, DateTime<Utc>)>>,
    /// The numeric id, once known (a manifest may name the App by its client id).
    numeric: Mutex<Option<u64>>,
}

#[derive(Deserialize)]
struct AppInfo {
    id: u64,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("app_id", &self.app_id)
            .field("installation_id", &self.installation_id)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct InstallationToken {
    token: String,
    expires_at: DateTime<Utc>,
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    iat: i64,
    exp: i64,
    iss: &'a str,
}

impl App {
    /// An App from its id, installation and PEM private key (`BEGIN RSA PRIVATE KEY`, as
    /// GitHub hands it out).
    ///
    /// # Errors
    /// A message naming what is wrong with the key (never the key).
    pub(crate) fn new(app_id: String, installation_id: u64, pem: &Secret) -> Result<App, String> {
        let text = pem.expose().trim();
        let body = text
            .strip_prefix("-----BEGIN RSA PRIVATE KEY-----")
            .and_then(|t| t.strip_suffix("-----END RSA PRIVATE KEY-----"))
            .ok_or_else(|| {
                "the App private key must be the PEM GitHub issues (BEGIN RSA PRIVATE KEY); \
                 convert a PKCS#8 key with `openssl rsa -traditional`"
                    .to_owned()
            })?;
        let b64: String = body.split_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "the App private key is not valid PEM".to_owned())?;
        let numeric = app_id.parse().ok();
        Ok(App {
            app_id,
            installation_id,
            key: jsonwebtoken::EncodingKey::from_rsa_der(&der),
            cached: Mutex::new(None),
            numeric: Mutex::new(numeric),
        })
    }

    /// The App's numeric id (what custom deployment protection rules name): the manifest's
    /// `app_id` when it is a number, else asked once of `GET /app`.
    pub(crate) async fn numeric_id(
        &self,
        http: &HttpClient,
        api_url: &str,
    ) -> Result<u64, EngineError> {
        if let Some(id) = *self.numeric.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(id);
        }
        let request = http
            .request(Method::GET, &format!("{api_url}/app"))
            .header(header::AUTHORIZATION, format!("Bearer {}", self.jwt()?))
            .header(header::ACCEPT, "application/vnd.github+json");
        let info: AppInfo = http.json(request, "apps.getAuthenticated").await?;
        *self.numeric.lock().unwrap_or_else(|p| p.into_inner()) = Some(info.id);
        Ok(info.id)
    }

    /// A JWT that authenticates as the App itself (ten minutes at most, backdated a minute
    /// for clock drift).
    fn jwt(&self) -> Result<String, EngineError> {
        let now = Utc::now().timestamp();
        let claims = Claims {
            iat: now - 60,
            exp: now + 540,
            iss: &self.app_id,
        };
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &claims,
            &self.key,
        )
        .map_err(|e| EngineError::Denied {
            engine: KIND,
            message: format!("cannot sign the GitHub App token request: {e}"),
        })
    }

    fn cached(&self) -> Option<Secret> {
        let guard = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .filter(|(_, expires)| *expires - Utc::now() > REFRESH_BEFORE)
            .map(|(t, _)| t.clone())
    }

    async fn token(&self, http: &HttpClient, api_url: &str) -> Result<Secret, EngineError> {
        if let Some(t) = self.cached() {
            return Ok(t);
        }
        let jwt = self.jwt()?;
        let url = format!(
            "{api_url}/app/installations/{}/access_tokens",
            self.installation_id
        );
        let request = http
            .request(Method::POST, &url)
            .header(header::AUTHORIZATION, format!("Bearer {jwt}"))
            .header(header::ACCEPT, "application/vnd.github+json");
        let minted: InstallationToken = http
            .json(request, "apps.createInstallationAccessToken")
            .await?;
        let token = Secret::new(minted.token);
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((token.clone(), minted.expires_at));
        Ok(token)
    }
}

impl Credentials {
    /// The bearer token for the next request.
    ///
    /// # Errors
    /// As the installation-token request, for an App.
    pub(crate) async fn bearer(
        &self,
        http: &HttpClient,
        api_url: &str,
    ) -> Result<Secret, EngineError> {
        match self {
            Credentials::Token(t) => Ok(t.clone()),
            Credentials::App(app) => app.token(http, api_url).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_other_forms_are_refused_without_echoing_them() {
        let e = App::new(
            "1".into(),
            2,
            &Secret::new("-----BEGIN PRIVATE KEY-----\nsecretstuff\n-----END PRIVATE KEY-----"),
        )
        .expect_err("pkcs8");
        assert!(e.contains("openssl rsa -traditional") && !e.contains("secretstuff"));
    }
}
