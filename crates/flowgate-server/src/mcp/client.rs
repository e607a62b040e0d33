//! What the client of this request can take. Per request, never inferred from earlier ones:
//! 2026-07-28 clients declare their capabilities in every request's `_meta`; older clients
//! (protocol < 2026-07-28) get neither tasks nor MRTR rounds from flowgate.

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, ProtocolVersion};
use rmcp::service::RequestContext;

/// The request's capabilities, if it speaks 2026-07-28 or later.
fn modern_capabilities(ctx: &RequestContext<RoleServer>) -> Option<ClientCapabilities> {
    let modern = ctx
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        ctx.client_capabilities()
    } else {
        None
    }
}

/// Whether this request may get a `CreateTaskResult` (it declared the tasks extension).
pub(crate) fn takes_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    modern_capabilities(ctx).is_some_and(|c| c.supports_tasks())
}

/// Whether this request may get an `InputRequiredResult` with form elicitations.
pub(crate) fn can_elicit(ctx: &RequestContext<RoleServer>) -> bool {
    modern_capabilities(ctx).is_some_and(|c| c.elicitation.is_some())
}
