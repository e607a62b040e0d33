//! How many requests one principal may hold open at once on this instance.
//!
//! A held request (a `tasks/result` that waits for its task, a synchronous `tools/call` that
//! waits for its execution) keeps a connection, a task and an engine poll loop alive for up to
//! minutes. Without a cap, one caller could open thousands and poll the engine's quota away
//! for everyone. Each principal may hold at most `ServerOptions::max_holds_per_caller`
//! requests at once; one more is refused at once, before anything starts, with
//! [`too_many_holds`], which says what to do instead (poll with `tasks/get`, or call again
//! once one of the held requests has ended). A slot is given back when its request ends,
//! however it ends (the [`HoldSlot`] is dropped).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::json;

use crate::{Caller, audit};

/// The JSON-RPC error code of a refused hold: in the range JSON-RPC leaves to servers.
pub(crate) const TOO_MANY_HOLDS: i32 = -32000;

/// Held requests per principal key; a key is removed when its count drops to zero.
#[derive(Debug, Default)]
pub(crate) struct Holds(Arc<Mutex<HashMap<Arc<str>, usize>>>);

/// One held request's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct HoldSlot {
    holds: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    key: Arc<str>,
}

impl Drop for HoldSlot {
    fn drop(&mut self) {
        let mut held = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl Holds {
    /// A hold slot for `caller`, or `Err(limit)` when it already holds `limit`.
    pub(crate) fn take(&self, caller: &Caller, limit: usize) -> Result<HoldSlot, usize> {
        let holds = &self.0;
        let key: Arc<str> = Arc::from(caller.principal_key());
        let mut held = holds.lock().unwrap_or_else(|p| p.into_inner());
        let count = held.entry(Arc::clone(&key)).or_insert(0);
        if *count >= limit {
            drop(held);
            tracing::info!(
                limit,
                "refused a held request: the caller holds the most it may"
            );
            audit::refused(caller, "too_many_holds", None, None);
            return Err(limit);
        }
        *count += 1;
        Ok(HoldSlot {
            holds: Arc::clone(holds),
            key,
        })
    }
}

/// The answer to one `tasks/result` too many: a JSON-RPC error.
pub(crate) fn too_many_holds(limit: usize) -> ErrorData {
    ErrorData::new(
        ErrorCode(TOO_MANY_HOLDS),
        format!(
            "too many waiting requests: this caller already has {limit} tasks/result, \
             subscriptions/listen or synchronous tools/call requests waiting on this server \
             (the limit, FLOWGATE_MAX_HOLDS_PER_CALLER). Poll the task with tasks/get instead, \
             or call again once one of the waiting requests has ended."
        ),
        Some(json!({"limit": limit})),
    )
}

/// Why one synchronous `tools/call` too many was refused (nothing was started).
pub(crate) fn too_many_calls(tool: &str, limit: usize) -> String {
    format!(
        "{tool}: too many calls are waiting for their results: this caller already has {limit} \
         synchronous calls or tasks/result requests waiting on this server (the limit, \
         FLOWGATE_MAX_HOLDS_PER_CALLER), so nothing was started. Call again once one of them \
         has finished, or call from a client that supports MCP tasks."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_the_limit_and_gets_its_slots_back() {
        let holds = Holds::default();
        let alice = Caller::anonymous("r");
        let first = holds.take(&alice, 2).expect("first");
        let _second = holds.take(&alice, 2).expect("second");
        let limit = holds.take(&alice, 2).expect_err("third");
        assert_eq!(limit, 2);
        let refused = too_many_holds(limit);
        assert_eq!(refused.code.0, TOO_MANY_HOLDS);
        assert_eq!(refused.data, Some(json!({"limit": 2})));
        assert!(refused.message.contains("tasks/get"), "{}", refused.message);
        // Another principal has its own slots.
        let bob = Caller::authenticated(
            flowgate_auth::Authenticated {
                principal: flowgate_auth::Principal {
                    issuer: "https://i.example".into(),
                    subject: "bob".into(),
                },
                scopes: Default::default(),
            },
            "r2",
        );
        let bobs = holds.take(&bob, 2).expect("bob's own slot");
        drop(first);
        let _third = holds.take(&alice, 2).expect("a slot came back");
        drop(bobs);
        assert_eq!(
            holds.0.lock().map(|h| h.len()).unwrap_or(0),
            1,
            "bob's entry is gone"
        );
    }
}
