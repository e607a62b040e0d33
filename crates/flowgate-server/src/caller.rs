//! Who is calling, as the transport established it: the one thing the task operations know
//! about a request besides its parameters.
//!
//! The HTTP transport builds a [`Caller`] from the identity that vouched for the request (or
//! none), the request's id, the platform's deadline when it gives one, and a token cancelled
//! when the client goes away; stdio builds one per JSON-RPC request. The operations take it
//! instead of any transport's types, so every transport (and each task dialect) reaches the
//! same code.

use std::sync::{Arc, LazyLock};

use flowgate_auth::{Authenticated, principal, scope};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The caller of one request.
#[derive(Debug, Clone)]
pub struct Caller {
    identity: Option<Arc<Authenticated>>,
    key: Arc<str>,
    request_id: Arc<str>,
    deadline: Option<Instant>,
    /// Cancelled when the caller goes away; `None` until a transport says how it notices.
    gone: Option<CancellationToken>,
    /// The request's span, where the operations record what they learn (the tool of a task
    /// they opened); disabled unless the request is traced.
    span: tracing::Span,
}

/// The anonymous principal key, shared (a caller is made per request).
static ANONYMOUS_KEY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(principal::ANONYMOUS));

impl Caller {
    /// A caller no identity established (stdio, or HTTP served without authentication): its
    /// principal is [`principal::ANONYMOUS`], and it has no scopes to check.
    pub fn anonymous(request_id: impl Into<Arc<str>>) -> Self {
        Caller {
            identity: None,
            key: Arc::clone(&ANONYMOUS_KEY),
            request_id: request_id.into(),
            deadline: None,
            gone: None,
            span: tracing::Span::none(),
        }
    }

    /// A caller an identity vouched for.
    pub fn authenticated(who: Authenticated, request_id: impl Into<Arc<str>>) -> Self {
        Caller {
            key: Arc::from(who.principal.key()),
            identity: Some(Arc::new(who)),
            ..Caller::anonymous(request_id)
        }
    }

    /// The caller, who must be answered before `deadline` (the platform ends the request
    /// then): every wait of the request ends before it.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The caller, whose going away (a dropped connection, a cancelled request) cancels `gone`.
    #[must_use]
    pub fn with_gone(mut self, gone: CancellationToken) -> Self {
        self.gone = Some(gone);
        self
    }

    /// The caller, whose request is traced as `span`.
    #[must_use]
    pub fn with_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// The request's span (disabled when it is not traced).
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The identity that vouched for the caller, if any.
    pub fn identity(&self) -> Option<&Authenticated> {
        self.identity.as_deref()
    }

    /// The principal key handles are sealed to ([`flowgate_auth::Principal::key`], or
    /// [`principal::ANONYMOUS`]).
    pub fn principal_key(&self) -> &str {
        &self.key
    }

    /// The principal's tag, what engines mark the caller's executions with.
    pub fn principal_tag(&self) -> String {
        principal::digest(&self.key)
    }

    /// Whether the caller may see and call a tool needing `required` scopes.
    pub fn may_use(&self, required: &[String]) -> bool {
        scope::permits(self.identity(), required)
    }

    /// The request's id, for log lines and the audit trail.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// When the platform ends the request, if it does.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Completes when the caller has gone away (never, on a transport that cannot tell).
    pub async fn gone(&self) {
        match &self.gone {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use flowgate_auth::Principal;

    use super::*;

    #[test]
    fn a_caller_is_its_principal_with_its_scopes() {
        let nobody = Caller::anonymous("r1");
        assert_eq!(nobody.principal_key(), principal::ANONYMOUS);
        assert!(nobody.may_use(&["deploy".to_owned()]));
        assert_eq!(nobody.request_id(), "r1");
        let alice = Caller::authenticated(
            Authenticated {
                principal: Principal {
                    issuer: "https://i.example".into(),
                    subject: "alice".into(),
                },
                scopes: BTreeSet::from(["read".to_owned()]),
            },
            "r2",
        );
        assert_eq!(alice.principal_key(), "17:https://i.examplealice");
        assert_ne!(alice.principal_tag(), nobody.principal_tag());
        assert_eq!(alice.principal_tag().len(), 16);
        assert!(alice.may_use(&["read".to_owned()]));
        assert!(!alice.may_use(&["deploy".to_owned()]));
        assert!(alice.deadline().is_none());
    }
}
