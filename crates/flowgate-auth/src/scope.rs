//! The scope check: whether a caller may see and call a tool that requires some scopes.

use crate::Authenticated;

/// Whether `caller` may see and call a tool needing `required`. A caller no identity
/// established (stdio, or HTTP served without authentication) has no scopes to check, and
/// passes: whatever is in front of such a deployment decides who reaches it.
pub fn permits(caller: Option<&Authenticated>, required: &[String]) -> bool {
    caller.is_none_or(|c| c.has_all(required))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::Principal;

    #[test]
    fn a_caller_needs_every_required_scope_and_nobody_needs_none() {
        let carol = Authenticated {
            principal: Principal {
                issuer: "i".into(),
                subject: "carol".into(),
            },
            scopes: BTreeSet::from(["read".to_owned()]),
        };
        let deploy = ["read".to_owned(), "deploy".to_owned()];
        assert!(!permits(Some(&carol), &deploy));
        assert!(permits(Some(&carol), &deploy[..1]));
        assert!(permits(Some(&carol), &[]));
        assert!(permits(None, &deploy));
    }
}
