//! Who is calling, as the transport established it: the one thing the task operations know
//! about a request besides its parameters.
//!
//! The HTTP transport builds a [`Caller`] from the identity that vouched for the request (or
//! none), the request's id, the platform's deadline when it gives one, and a token cancelled
//! when the client goes away; stdio builds one per JSON-RPC request. The operations take it
//! instead of any transport's types, so every transport (and each task dialect) reaches the
//! same code.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use flowgate_auth::{Authenticated, principal, scope};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long before the platform's deadline a request stops waiting (for the engine, for an
/// execution), leaving time to answer (and to stop the execution of a synchronous call).
pub(crate) const DEADLINE_MARGIN: Duration = Duration::from_secs(2);

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

    /// When the request stops waiting: [`DEADLINE_MARGIN`] before its deadline.
    pub(crate) fn answer_by(&self) -> Option<Instant> {
        self.deadline
            .map(|d| d.checked_sub(DEADLINE_MARGIN).unwrap_or(d))
    }

    /// Runs `work`, this caller's request, so that every engine call in it ends before the
    /// request must answer (its deadline less the margin to answer): the engines' decorator
    /// (`flowgate_core::retrying`) reads it, and a call it cuts short is a `Timeout`. Each
    /// transport runs each request's operation in this, once.
    /// (A plain function, not an `async fn`, which would hold `work` twice.)
    pub fn bounded<F: std::future::Future>(
        &self,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> + use<F> {
        flowgate_core::retrying::answer_by(self.answer_by(), work)
    }

    /// Completes when the caller has gone away (never, on a transport that cannot tell).
    pub async fn gone(&self) {
        match &self.gone {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

/// The request id of a request whose client or platform offered `offered`: the offered id when
/// it is a [`token`], else a fresh one.
pub(crate) fn request_id(offered: Option<&str>) -> String {
    match offered {
        Some(id) if token(id) => id.to_owned(),
        _ => fresh_id(),
    }
}

/// The longest request id taken from a header.
const MAX_ID: usize = 128;

/// What flowgate's own ids start with. An offered id starting so is refused, so no client can
/// name its request with an id flowgate gave (or will give) another request.
const FRESH_PREFIX: &str = "fg-";

/// Whether an offered request id is taken as it is: 1 to 128 characters of a short token
/// alphabet (ASCII letters and digits, `-._~:/+`), starting with a letter or digit, and not in
/// the namespace of flowgate's fresh ids. Anything else (spaces, quotes, `=`, `;`, control
/// characters) could split or forge a log line in the text format, or pass for a field: it is
/// replaced by a fresh id.
fn token(id: &str) -> bool {
    id.len() <= MAX_ID
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~:/+".contains(c))
        && !id.starts_with(FRESH_PREFIX)
}

/// A fresh id: `fg-` and 16 hex digits of the clock mixed with a per-process counter, unique
/// enough to correlate log lines, and never one an offered id can take.
fn fresh_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let mixed = nanos ^ NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    format!("{FRESH_PREFIX}{mixed:016x}")
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

    #[test]
    fn an_offered_id_is_taken_only_as_a_short_token() {
        for good in [
            "test-tools/call",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "1-5759e988-bd862e3fe1be46a994272793",
            "req_1.2~a:b+c",
        ] {
            assert!(token(good), "{good}");
        }
        let long = "a".repeat(MAX_ID + 1);
        for bad in [
            "",
            "two words",
            "id\tmcpMethod=tools/call",
            "x requestId=other",
            "\"quoted\"",
            "a;b",
            "a=b",
            "-leading",
            "fg-0123456789abcdef",
            "caf\u{e9}",
            long.as_str(),
        ] {
            assert!(!token(bad), "{bad:?}");
        }
    }

    #[test]
    fn fresh_ids_are_distinct_and_outside_what_a_client_may_offer() {
        let a = fresh_id();
        let b = fresh_id();
        assert_ne!(a, b);
        assert!(
            a.starts_with(FRESH_PREFIX) && a.len() == FRESH_PREFIX.len() + 16,
            "{a}"
        );
        assert!(!token(&a));
    }
}
