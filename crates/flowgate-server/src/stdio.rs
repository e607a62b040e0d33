//! The same server over stdin and stdout, for hosts that launch MCP servers as subprocesses.

use rmcp::ServiceExt;

use crate::FlowgateServer;

/// Serves MCP on stdio until the client closes the stream.
///
/// # Errors
/// When the transport fails to start or ends with an error.
pub async fn serve(server: FlowgateServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
