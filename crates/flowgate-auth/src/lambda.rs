//! Caller identities AWS vouches for in Lambda mode, read from the invocation's request
//! context (which lambda_http puts in the request's extensions; a client cannot set it with a
//! header):
//!
//! - `aws-iam`: a Function URL (or HTTP API route) with `AWS_IAM` auth. AWS checked the
//!   caller's SigV4 signature and `lambda:InvokeFunctionUrl` permission; the context's
//!   `authorizer.iam` names the caller. Principal: issuer `aws:iam`, subject the caller's ARN
//!   (`userArn`, else `callerId`).
//! - `apigw-jwt`: an API Gateway HTTP API with a JWT authorizer, which validated the token;
//!   `authorizer.jwt.claims` carries it. Principal: the token's `iss` and `sub`; scopes from the
//!   authorizer's `scopes` or the `scope` claim.
//! - `apigw-authorizer`: an HTTP API Lambda authorizer; its returned context
//!   (`authorizer.lambda`) must name the caller as `principalId` (or `sub`). Principal: issuer
//!   `aws:apigw-authorizer:<apiId>`, that subject; scopes from a space-separated `scope`.
//!
//! Only payload format 2.0 events (Function URLs, HTTP APIs) carry these; any other request is
//! refused, as is one whose context lacks the configured authorizer (a Function URL left at
//! `AuthType: NONE`, say).
//!
//! Behind the `lambda` feature: it reads `lambda_http`'s request context type, which only a
//! build that serves Lambda events has.

use std::collections::BTreeSet;

use http::request::Parts;
use lambda_http::aws_lambda_events::apigw::ApiGatewayRequestAuthorizer;
use lambda_http::request::RequestContext;
use serde_json::Value;

use crate::{Authenticated, Identified, Identity, Mode, Principal, Refused};

/// Which authorizer's word is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LambdaAuthorizer {
    /// `aws-iam`: the Function URL's (or route's) IAM authorization.
    Iam,
    /// `apigw-jwt`: an HTTP API JWT authorizer.
    Jwt,
    /// `apigw-authorizer`: an HTTP API Lambda authorizer.
    Lambda,
}

impl LambdaAuthorizer {
    /// The authorizer of a Lambda mode ([`Mode::on_lambda`]; `None` for the others).
    pub fn for_mode(mode: Mode) -> Option<Self> {
        match mode {
            Mode::AwsIam => Some(LambdaAuthorizer::Iam),
            Mode::ApigwJwt => Some(LambdaAuthorizer::Jwt),
            Mode::ApigwAuthorizer => Some(LambdaAuthorizer::Lambda),
            _ => None,
        }
    }
}

/// An [`Identity`] over the Lambda request context.
#[derive(Debug)]
pub struct LambdaIdentity(LambdaAuthorizer);

impl LambdaIdentity {
    /// Takes the word of `authorizer`.
    pub fn new(authorizer: LambdaAuthorizer) -> Self {
        LambdaIdentity(authorizer)
    }

    fn caller(&self, parts: &Parts) -> Result<Authenticated, Refused> {
        let context = match parts.extensions.get::<RequestContext>() {
            Some(RequestContext::ApiGatewayV2(context)) => context,
            _ => {
                return Err(Refused::missing(
                    "this server takes callers from a Function URL or HTTP API request context, \
                     and the request has none",
                ));
            }
        };
        let authorizer = context.authorizer.as_ref();
        match self.0 {
            LambdaAuthorizer::Iam => iam(authorizer),
            LambdaAuthorizer::Jwt => jwt(authorizer),
            LambdaAuthorizer::Lambda => lambda(authorizer, context.apiid.as_deref()),
        }
    }
}

impl Identity for LambdaIdentity {
    fn mode(&self) -> Mode {
        match self.0 {
            LambdaAuthorizer::Iam => Mode::AwsIam,
            LambdaAuthorizer::Jwt => Mode::ApigwJwt,
            LambdaAuthorizer::Lambda => Mode::ApigwAuthorizer,
        }
    }

    fn identify<'a>(&'a self, parts: &'a Parts) -> Identified<'a> {
        let result = self.caller(parts);
        Box::pin(async move { result })
    }

    /// API Gateway passes the caller's JWT on in `Authorization`; it stops here.
    fn credential_headers(&self) -> &'static [&'static str] {
        &["authorization"]
    }
}

fn present(value: Option<&String>) -> Option<&str> {
    value.map(String::as_str).filter(|v| !v.is_empty())
}

fn iam(authorizer: Option<&ApiGatewayRequestAuthorizer>) -> Result<Authenticated, Refused> {
    let iam = authorizer.and_then(|a| a.iam.as_ref()).ok_or_else(|| {
        Refused::missing(
            "no IAM caller in the request context: the Function URL must use AuthType AWS_IAM",
        )
    })?;
    let subject = present(iam.user_arn.as_ref())
        .or(present(iam.caller_id.as_ref()))
        .ok_or_else(|| Refused::invalid("the IAM request context names no caller"))?;
    Ok(Authenticated {
        principal: Principal {
            issuer: "aws:iam".to_owned(),
            subject: subject.to_owned(),
        },
        scopes: BTreeSet::new(),
    })
}

fn jwt(authorizer: Option<&ApiGatewayRequestAuthorizer>) -> Result<Authenticated, Refused> {
    let jwt = authorizer.and_then(|a| a.jwt.as_ref()).ok_or_else(|| {
        Refused::missing(
            "no JWT authorizer result in the request context: the route needs a JWT authorizer",
        )
    })?;
    let (Some(issuer), Some(subject)) = (
        present(jwt.claims.get("iss")),
        present(jwt.claims.get("sub")),
    ) else {
        return Err(Refused::invalid(
            "the JWT authorizer's claims lack iss or sub",
        ));
    };
    let mut scopes: BTreeSet<String> = jwt.scopes.iter().flatten().cloned().collect();
    if let Some(scope) = jwt.claims.get("scope") {
        scopes.extend(scope.split_whitespace().map(str::to_owned));
    }
    Ok(Authenticated {
        principal: Principal {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
        },
        scopes,
    })
}

fn lambda(
    authorizer: Option<&ApiGatewayRequestAuthorizer>,
    api: Option<&str>,
) -> Result<Authenticated, Refused> {
    let fields = authorizer.map(|a| &a.fields).filter(|f| !f.is_empty());
    let fields = fields.ok_or_else(|| {
        Refused::missing(
            "no Lambda authorizer context in the request: the route needs a Lambda authorizer",
        )
    })?;
    let subject = ["principalId", "sub"]
        .iter()
        .find_map(|k| {
            fields
                .get(*k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .ok_or_else(|| {
            Refused::invalid("the Lambda authorizer's context names no principalId or sub")
        })?;
    let scopes = fields
        .get("scope")
        .and_then(Value::as_str)
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    Ok(Authenticated {
        principal: Principal {
            issuer: format!("aws:apigw-authorizer:{}", api.unwrap_or("")),
            subject: subject.to_owned(),
        },
        scopes,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::RefusalKind;

    /// A request whose payload format 2.0 context has `authorizer` (and the API id `api1`).
    fn request(authorizer: Option<Value>) -> Parts {
        let mut context = json!({"apiId": "api1", "http": {"method": "POST"}});
        if let Some(authorizer) = authorizer {
            context["authorizer"] = authorizer;
        }
        let context = serde_json::from_value(context).expect("a payload 2.0 request context");
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts
            .extensions
            .insert(RequestContext::ApiGatewayV2(context));
        parts
    }

    async fn identify(mode: Mode, parts: &Parts) -> Result<Authenticated, Refused> {
        let authorizer = LambdaAuthorizer::for_mode(mode).expect("a Lambda mode");
        let identity = LambdaIdentity::new(authorizer);
        assert_eq!(identity.mode(), mode);
        identity.identify(parts).await
    }

    #[tokio::test]
    async fn each_authorizer_names_its_caller() {
        let iam = request(Some(json!({"iam": {
            "userArn": "arn:aws:iam::1:user/u", "callerId": "AID"}})));
        let who = identify(Mode::AwsIam, &iam).await.expect("IAM caller");
        assert_eq!(
            (
                who.principal.issuer.as_str(),
                who.principal.subject.as_str()
            ),
            ("aws:iam", "arn:aws:iam::1:user/u")
        );
        let caller_id = request(Some(json!({"iam": {"callerId": "AID:session"}})));
        let who = identify(Mode::AwsIam, &caller_id)
            .await
            .expect("IAM caller");
        assert_eq!(who.principal.subject, "AID:session");

        let jwt = request(Some(json!({"jwt": {
            "claims": {"iss": "https://idp.example", "sub": "alice", "scope": "a b"},
            "scopes": ["c"]}})));
        let who = identify(Mode::ApigwJwt, &jwt).await.expect("JWT caller");
        assert_eq!(who.principal.issuer, "https://idp.example");
        assert_eq!(who.principal.subject, "alice");
        assert_eq!(who.scopes, ["a", "b", "c"].map(String::from).into());

        let lambda = request(Some(
            json!({"lambda": {"principalId": "bob", "scope": "deploy"}}),
        ));
        let who = identify(Mode::ApigwAuthorizer, &lambda)
            .await
            .expect("authorizer's caller");
        assert_eq!(who.principal.issuer, "aws:apigw-authorizer:api1");
        assert_eq!(who.principal.subject, "bob");
        assert_eq!(who.scopes, ["deploy".to_owned()].into());
    }

    #[tokio::test]
    async fn a_context_without_the_authorizer_is_refused() {
        let (bare, ()) = http::Request::new(()).into_parts();
        for mode in [Mode::AwsIam, Mode::ApigwJwt, Mode::ApigwAuthorizer] {
            let refused = identify(mode, &bare).await.expect_err("no context");
            assert_eq!(refused.kind, RefusalKind::Missing, "{mode}");
            let refused = identify(mode, &request(None))
                .await
                .expect_err("no authorizer");
            assert_eq!(refused.kind, RefusalKind::Missing, "{mode}");
        }
        // Another authorizer's result is not this one's.
        let jwt = request(Some(json!({"jwt": {"claims": {"iss": "i", "sub": "s"}}})));
        let refused = identify(Mode::AwsIam, &jwt).await.expect_err("not IAM");
        assert_eq!(refused.kind, RefusalKind::Missing);
        // A result that names nobody is an invalid credential.
        let nameless = request(Some(json!({"jwt": {"claims": {"iss": "i"}}})));
        let refused = identify(Mode::ApigwJwt, &nameless)
            .await
            .expect_err("no sub");
        assert_eq!(refused.kind, RefusalKind::InvalidToken);
        let nameless = request(Some(json!({"lambda": {"scope": "x"}})));
        let refused = identify(Mode::ApigwAuthorizer, &nameless)
            .await
            .expect_err("no principalId");
        assert_eq!(refused.kind, RefusalKind::InvalidToken);
        assert_eq!(LambdaAuthorizer::for_mode(Mode::Oauth), None);
    }
}
