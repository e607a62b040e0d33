//! The same server over stdin and stdout, for hosts that launch MCP servers as subprocesses.
//!
//! A sieve in front of rmcp reads stdin line by line and parses each line once
//! ([`Incoming`]):
//!
//! - a line that is not JSON gets a `-32700` parse error (rmcp's stdio transport would drop it
//!   without a word, and the client would wait forever), a line longer than rmcp takes a
//!   `-32600`;
//! - in a session that `initialize`d with protocol 2025-11-25, the revision's task requests
//!   (and the client's answers to the questions `tasks/result` asks) are answered by
//!   `crate::dialect_2025`, as on HTTP, each on its own task, its questions and answer written
//!   to stdout; `notifications/cancelled` for one of them ends it;
//! - every other line goes on to rmcp unchanged, which calls `crate::mcp`.
//!
//! When traces or metrics are on, each request line begins its MCP request span here (its
//! parent is the trace context in `params._meta`), which its answer ends, as on HTTP.
//!
//! Everything written to stdout goes through rmcp's own writer, so no message interleaves
//! with another. The `initialize` answer of a 2025-11-25 session gains `capabilities.tasks`
//! there, and tells the sieve the session's revision.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CustomRequest, CustomResult, RequestId, ServerJsonRpcMessage, ServerRequest, ServerResult,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::Value;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::dialect_2025::{self, Handled, Outbox, Question, V2025};
use crate::jsonrpc::Incoming;
use crate::mcp::McpService;
use crate::{Caller, FlowgateServer};

/// Bytes buffered between the sieve and rmcp.
const PIPE_BYTES: usize = 64 * 1024;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Serves MCP on stdio until the client closes the stream.
///
/// # Errors
/// When the transport fails to start or ends with an error.
pub async fn serve(server: FlowgateServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let (sieved, to_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (out, outgoing) = mpsc::unbounded_channel();
    let session = Arc::new(Session::default());
    let route = Route {
        server: server.clone(),
        session: Arc::clone(&session),
        out,
    };
    tokio::spawn(sieve(
        BufReader::new(stdin),
        sieved,
        route,
        DEFAULT_MAX_LINE_LENGTH,
    ));
    let transport = Stdio {
        inner: AsyncRwTransport::new_server(to_rmcp, stdout),
        outgoing,
        session: Arc::clone(&session),
        server: server.clone(),
    };
    let observed = Arc::clone(&session);
    let caller_of = move |ctx: &RequestContext<RoleServer>| caller_of(&observed, ctx);
    let running = McpService::new(server, Arc::new(caller_of))
        .serve(transport)
        .await?;
    running.waiting().await?;
    Ok(())
}

/// The caller of a request rmcp routes on stdio: nobody authenticated, its JSON-RPC id, gone
/// when the client cancels the request, traced in the span its line began.
fn caller_of(session: &Session, ctx: &RequestContext<RoleServer>) -> Caller {
    let id = serde_json::to_value(&ctx.id).unwrap_or_default();
    let span = session.span_of(&id_key(&id));
    Caller::anonymous(id_text(&id))
        .with_gone(ctx.ct.clone())
        .with_span(span)
}

/// The MCP request a line is, observed (`None` when traces and metrics are off, or the line
/// is no request).
fn observe(message: &Incoming) -> Option<flowgate_telemetry::Request> {
    if !flowgate_telemetry::request::active() {
        return None;
    }
    message.method.as_ref()?;
    let info = flowgate_telemetry::RequestInfo {
        method: message.method(),
        id: Some(message.id.as_ref()? as &dyn std::fmt::Display),
        tool: message.tool(),
        revision: message.revision.as_deref(),
        issuer: None,
        transport: "pipe",
    };
    Some(flowgate_telemetry::Request::begin(info, || {
        let meta = message.params.get("_meta").and_then(|m| m.as_object());
        flowgate_telemetry::traces::remote_parent(meta, None)
    }))
}

/// How an answer ends its request.
fn ended(message: &ServerJsonRpcMessage) -> Option<(String, flowgate_telemetry::Ended)> {
    match message {
        ServerJsonRpcMessage::Response(response) => Some((
            id_key(&serde_json::to_value(&response.id).ok()?),
            flowgate_telemetry::Ended::Ok,
        )),
        ServerJsonRpcMessage::Error(error) => Some((
            id_key(&serde_json::to_value(error.id.as_ref()?).ok()?),
            flowgate_telemetry::Ended::Error(i64::from(error.error.code.0)),
        )),
        _ => None,
    }
}

/// A JSON-RPC id as the request id of log lines: a number in decimal, a string as it is when
/// it is a short token (else a fresh id, as on HTTP).
fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => crate::caller::request_id(Some(s)),
        other => other.to_string(),
    }
}

/// A JSON-RPC id as the key of the session's maps: exact (`"1"` and `1` differ), unlike
/// [`id_text`], which replaces an id that is no token.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// What one stdio session knows: the revision its `initialize` settled on, and the dialect
/// requests in flight (to end one that is cancelled, and all of them at the end of input).
#[derive(Debug, Default)]
struct Session {
    revision: Mutex<Option<String>>,
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    closed: CancellationToken,
    /// The requests rmcp serves, observed until answered, by JSON-RPC id.
    observed: Mutex<HashMap<String, flowgate_telemetry::Request>>,
}

impl Session {
    fn revision(&self) -> Option<String> {
        self.revision
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn settle(&self, revision: &str) {
        *self.revision.lock().unwrap_or_else(|p| p.into_inner()) = Some(revision.to_owned());
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn observed(&self) -> std::sync::MutexGuard<'_, HashMap<String, flowgate_telemetry::Request>> {
        self.observed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The span of the request `id` rmcp is serving (disabled when it is not traced).
    fn span_of(&self, id: &str) -> tracing::Span {
        self.observed()
            .get(id)
            .map_or_else(tracing::Span::none, |r| r.span().clone())
    }

    /// The request `id` was answered.
    fn answered(&self, id: &str, how: flowgate_telemetry::Ended) {
        let observed = self.observed().remove(id);
        if let Some(request) = observed {
            request.end(how);
        }
    }
}

/// Where the sieve sends each line.
struct Route {
    server: FlowgateServer,
    session: Arc<Session>,
    /// Messages for stdout, written through rmcp's writer.
    out: mpsc::UnboundedSender<ServerJsonRpcMessage>,
}

impl Route {
    /// Whether `message` is the 2025-11-25 dialect's, which then answers it on a task of its
    /// own. `initialize` always goes to rmcp, which runs the session.
    fn dialect(&self, message: Incoming) -> Option<Incoming> {
        if message.method() == "notifications/cancelled"
            && let Some(id) = message.params.get("requestId")
            && let Some(flight) = self.session.flights().remove(&id_key(id))
        {
            flight.cancel();
        }
        if message.method() == "initialize" || !dialect_2025::claims(&self.server, &message) {
            return Some(message);
        }
        let id = message.id.as_ref().map(id_key).unwrap_or_default();
        let gone = self.session.closed.child_token();
        self.session.flights().insert(id.clone(), gone.clone());
        let observed = observe(&message);
        let span = observed
            .as_ref()
            .map_or_else(tracing::Span::none, |r| r.span().clone());
        let caller = Caller::anonymous(message.id.as_ref().map(id_text).unwrap_or_default())
            .with_gone(gone)
            .with_span(span.clone());
        let (server, session, out) = (
            self.server.clone(),
            Arc::clone(&self.session),
            self.out.clone(),
        );
        tokio::spawn(async move {
            let ask = |question: Question| {
                let request = CustomRequest::new("elicitation/create", Some(question.params));
                let id = RequestId::String(question.id.into());
                let _ = out.send(ServerJsonRpcMessage::request(
                    ServerRequest::CustomRequest(request),
                    id,
                ));
            };
            // stdio has no deadline and cannot resume a request: a hold that runs out answers
            // with an error saying to call again.
            let outbox = Outbox {
                send: &ask,
                resumable: false,
                end_at_question: false,
            };
            let handled = dialect_2025::handle(&server, &caller, &message, Some(outbox))
                .instrument(span)
                .await;
            session.flights().remove(&id);
            let Handled::Reply(answer) = handled else {
                return;
            };
            if let Some(observed) = observed {
                observed.end(match &answer {
                    Ok(_) => flowgate_telemetry::Ended::Ok,
                    Err(e) => flowgate_telemetry::Ended::Error(i64::from(e.code.0)),
                });
            }
            let Some(id) = message
                .id
                .clone()
                .and_then(|id| serde_json::from_value::<RequestId>(id).ok())
            else {
                return;
            };
            let _ = out.send(match answer {
                Ok(result) => ServerJsonRpcMessage::response(
                    ServerResult::CustomResult(CustomResult(result)),
                    id,
                ),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
            });
        });
        None
    }
}

/// Copies each line of `input` that is JSON and not the dialect's to `output`, answers each
/// one that is not JSON (or is longer than `max_line` bytes) with an error, and hands the
/// dialect its own. Ends at the end of `input` (closing `output`, which ends the service, and
/// ending the dialect's holds) or when rmcp has gone.
async fn sieve<R, W>(mut input: R, mut output: W, route: Route, max_line: usize)
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(max_line as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        let error = match read {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() > max_line && !line.ends_with(b"\n") => {
                if skip_rest_of_line(&mut input).await.is_err() {
                    break;
                }
                ErrorData::invalid_request(
                    format!("Invalid Request: a message is longer than {max_line} bytes"),
                    None,
                )
            }
            Ok(_) => match parse(&line, route.session.revision().as_deref()) {
                Ok(message) => {
                    let passes = match message {
                        None => true,
                        Some(message) => match route.dialect(message) {
                            Some(message) => {
                                // A request rmcp serves: observed until its answer goes out.
                                if let (Some(observed), Some(id)) = (observe(&message), &message.id)
                                {
                                    route.session.observed().insert(id_key(id), observed);
                                }
                                true
                            }
                            None => false,
                        },
                    };
                    if passes && output.write_all(&line).await.is_err() {
                        break;
                    }
                    continue;
                }
                Err(problem) => ErrorData::parse_error(format!("Parse error: {problem}"), None),
            },
        };
        // A parse error has no id to answer (MCP omits it).
        if route
            .out
            .send(ServerJsonRpcMessage::error(error, None))
            .is_err()
        {
            break;
        }
    }
    route.session.closed.cancel();
}

/// The message on `line` (`None` for a blank line, which rmcp skips), or why it is not JSON.
fn parse(line: &[u8], revision: Option<&str>) -> Result<Option<Incoming>, String> {
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Incoming::parse(line, revision)
        .map(Some)
        .map_err(|e| e.to_string())
}

async fn skip_rest_of_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    let mut chunk = Vec::new();
    loop {
        chunk.clear();
        let n = (&mut *input)
            .take(PIPE_BYTES as u64)
            .read_until(b'\n', &mut chunk)
            .await?;
        if n == 0 || chunk.ends_with(b"\n") {
            return Ok(());
        }
    }
}

/// rmcp's stdio transport, plus the messages the sieve and the dialect write.
struct Stdio<T> {
    inner: T,
    outgoing: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
    session: Arc<Session>,
    server: FlowgateServer,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Stdio<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some((id, how)) = ended(&item) {
            self.session.answered(&id, how);
        }
        let item = match item {
            ServerJsonRpcMessage::Response(response) => match response.result {
                // The session's revision is what its `initialize` settled on; a 2025-11-25
                // session's answer declares the revision's tasks capability.
                ServerResult::InitializeResult(info) => {
                    self.session.settle(info.protocol_version.as_str());
                    let result = if info.protocol_version.as_str() == V2025 {
                        ServerResult::CustomResult(CustomResult(dialect_2025::initialize_result(
                            &self.server,
                        )))
                    } else {
                        ServerResult::InitializeResult(info)
                    };
                    ServerJsonRpcMessage::response(result, response.id)
                }
                result => ServerJsonRpcMessage::response(result, response.id),
            },
            other => other,
        };
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            tokio::select! {
                message = self.inner.receive() => return message,
                Some(message) = self.outgoing.recv() => {
                    // Sent on its own task so this future stays safe to drop, as rmcp polls it
                    // inside a select.
                    let send = self.inner.send(message);
                    tokio::spawn(async move {
                        if let Err(e) = send.await {
                            tracing::debug!(error = %e, "could not write a message on stdout");
                        }
                    });
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use flowgate_core::handle::{HandleKey, Keyring};

    use super::*;
    use crate::{ServerOptions, ToolSet};

    fn route() -> (Route, mpsc::UnboundedReceiver<ServerJsonRpcMessage>) {
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        let server = FlowgateServer::new(ToolSet::default(), keys, ServerOptions::default());
        let (out, written) = mpsc::unbounded_channel();
        let route = Route {
            server,
            session: Arc::new(Session::default()),
            out,
        };
        (route, written)
    }

    async fn sift(input: &str, route: Route, max_line: usize) -> String {
        let (mut out, sieved) = tokio::io::duplex(PIPE_BYTES);
        sieve(input.as_bytes(), sieved, route, max_line).await;
        let mut passed = String::new();
        out.read_to_string(&mut passed).await.expect("read");
        passed
    }

    #[tokio::test]
    async fn json_lines_pass_and_every_other_line_is_reported() {
        let long = format!("[{}]\n", "1,".repeat(100));
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1}}\n{{not json\n\n\u{feff}[1]\r\n{long}{{\"open\": \n[2]"
        );
        let (route, mut written) = route();
        let passed = sift(&input, route, 100).await;
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1}\n\n\u{feff}[1]\r\n[2]"
        );
        let mut codes = Vec::new();
        while let Ok(message) = written.try_recv() {
            let (error, id) = message.into_error().expect("an error");
            assert!(id.is_none());
            codes.push(error.code.0);
        }
        assert_eq!(codes, [-32700, -32600, -32700]);
    }

    #[tokio::test]
    async fn a_2025_session_has_its_task_requests_answered_by_the_dialect() {
        let (route, mut written) = route();
        route.session.settle(V2025);
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            "\n",
        );
        let passed = sift(input, route, 4096).await;
        // initialize and ping are rmcp's; tasks/list is answered here.
        assert!(passed.contains(r#""method":"initialize""#), "{passed}");
        assert!(passed.contains(r#""method":"ping""#), "{passed}");
        assert!(!passed.contains("tasks/list"), "{passed}");
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), written.recv())
            .await
            .expect("answered")
            .expect("a message");
        let (result, id) = answer.into_response().expect("a response");
        assert_eq!(id, RequestId::Number(2));
        let ServerResult::CustomResult(CustomResult(result)) = result else {
            panic!("{result:?}");
        };
        assert_eq!(result, serde_json::json!({"tasks": []}));
    }

    #[tokio::test]
    async fn another_revisions_task_requests_go_to_rmcp() {
        let (route, _written) = route();
        route.session.settle("2025-06-18");
        let line = r#"{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}"#;
        let passed = sift(&format!("{line}\n"), route, 4096).await;
        assert_eq!(passed, format!("{line}\n"));
    }
}
