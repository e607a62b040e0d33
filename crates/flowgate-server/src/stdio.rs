//! The same server over stdin and stdout, for hosts that launch MCP servers as subprocesses.
//!
//! Each line of stdin is parsed once ([`Incoming`]) and handed to the dispatcher
//! (`crate::dispatch`) with what the session knows of its client: the revision and
//! capabilities its `initialize` settled. What only stdio decides lives here:
//!
//! - a line that is not JSON gets a `-32700` parse error, a line longer than [`MAX_LINE`] a
//!   `-32600`, JSON that is no JSON-RPC message a `-32600` (a client must never wait forever
//!   for an answer to a line the server could not read);
//! - each request runs on a task of its own, so a held request (`tasks/result`, a synchronous
//!   call) holds nothing else; `notifications/cancelled` ends the request it names, and the end
//!   of input ends them all;
//! - `initialize` is answered before the next line is read, since the lines after it are in
//!   the revision it settles;
//! - a 2025-11-25 `tasks/result` sends the questions it asks as `elicitation/create` requests
//!   on stdout, whose answers come back as lines like any other;
//! - a `subscriptions/listen` writes each of its messages as a line (stdio has no deadline:
//!   it ends when what it follows has ended, on `notifications/cancelled`, or at the end of
//!   input), and a session that `initialize` settled is sent
//!   `notifications/tools/list_changed` after each manifest reload.
//!
//! Every message goes to stdout through one writer, a line each, so none interleaves with
//! another. When traces or metrics are on, each request's span begins when its line is read
//! (its parent is the trace context in `params._meta`) and ends with its reply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::InitializeRequestParams;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dialect_2025::{Outbox, Question};
use crate::dispatch::{self, Request, Session as Known};
use crate::jsonrpc::{self, Incoming};
use crate::reply::{self, Reply};
use crate::{Caller, FlowgateServer};

/// The longest line read (16 MiB, what rmcp's stdio transport took).
const MAX_LINE: usize = 16 * 1024 * 1024;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";
/// How long the answers of requests in flight may take to go out once input has ended.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves MCP on stdio until the client closes the stream.
///
/// # Errors
/// When stdout cannot be written.
pub async fn serve(server: FlowgateServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    serve_on(server, input, tokio::io::stdout(), MAX_LINE).await?;
    Ok(())
}

/// Serves MCP on `input` and `output` until `input` ends.
async fn serve_on<R, W>(
    server: FlowgateServer,
    mut input: R,
    output: W,
    max_line: usize,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, lines) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(write_lines(lines, output));
    let session = Arc::new(Session::default());
    tokio::spawn(tell_of_reloads(
        server.clone(),
        Arc::clone(&session),
        out.clone(),
    ));
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(max_line as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        let refused = match read {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() > max_line && !line.ends_with(b"\n") => {
                if skip_rest_of_line(&mut input).await.is_err() {
                    break;
                }
                Some((
                    None,
                    ErrorData::invalid_request(
                        format!("Invalid Request: a message is longer than {max_line} bytes"),
                        None,
                    ),
                ))
            }
            Ok(_) => match parse(&line, session.revision().as_deref()) {
                Ok(None) => None,
                Ok(Some(message)) if !message.is_message() => {
                    Some((message.id.clone(), jsonrpc::not_a_message()))
                }
                Ok(Some(message)) => {
                    session.take(&server, message, &out).await;
                    None
                }
                Err(problem) => Some((None, jsonrpc::not_json(&problem))),
            },
        };
        if let Some((id, error)) = refused
            && out.send(reply::bytes(id.as_ref(), &Err(error))).is_err()
        {
            break;
        }
    }
    // The end of input ends every request in flight; their answers still go out.
    session.closed.cancel();
    drop(out);
    match tokio::time::timeout(DRAIN, writer).await {
        Ok(Ok(written)) => written,
        _ => Ok(()),
    }
}

/// Until the session closes: after each reload, tells a session that `initialize` settled
/// (the revisions with a handshake, whose server may send notifications on stdout at any
/// time) that the tool list changed. 2026-07-28 clients learn it on `subscriptions/listen`.
async fn tell_of_reloads(
    server: FlowgateServer,
    session: Arc<Session>,
    out: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut changes = server.tools_changed();
    loop {
        tokio::select! {
            biased;
            () = session.closed.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if session.revision().is_some() {
            let line = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
            if out.send(line.to_vec()).is_err() {
                return;
            }
        }
    }
}

/// Writes each message on its own line, in the order sent, until every sender is gone.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(mut line) = lines.recv().await {
        line.push(b'\n');
        output.write_all(&line).await?;
        output.flush().await?;
    }
    Ok(())
}

/// What one stdio session knows: what its `initialize` settled, and the requests in flight.
#[derive(Debug, Default)]
struct Session {
    known: Mutex<Known>,
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    closed: CancellationToken,
}

impl Session {
    fn known(&self) -> Known {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn revision(&self) -> Option<String> {
        self.known().revision
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one message: `initialize` and responses at once, other requests on tasks of their
    /// own.
    async fn take(
        self: &Arc<Self>,
        server: &FlowgateServer,
        message: Incoming,
        out: &mpsc::UnboundedSender<Vec<u8>>,
    ) {
        if message.method() == "notifications/cancelled"
            && let Some(id) = message.params.get("requestId")
            && let Some(flight) = self.flights().remove(&id_key(id))
        {
            flight.cancel();
        }
        let id = message.id.as_ref().map(id_key).unwrap_or_default();
        let gone = self.closed.child_token();
        let initialize = message.method() == "initialize";
        let request = message.method.is_some() && message.id.is_some() && !initialize;
        if request {
            self.flights().insert(id.clone(), gone.clone());
        }
        let session = Arc::clone(self);
        let (server, out) = (server.clone(), out.clone());
        let answer = async move {
            let observed = observe(&message);
            let span = observed
                .as_ref()
                .map_or_else(tracing::Span::none, |r| r.span().clone());
            let caller = Caller::anonymous(message.id.as_ref().map(id_text).unwrap_or_default())
                .with_gone(gone)
                .with_span(span);
            let ask = |question: Question| {
                let _ = out.send(question.to_json().to_string().into_bytes());
            };
            // stdio has no deadline and cannot resume a request: a hold that runs out answers
            // with an error saying to call again.
            let outbox = Outbox {
                send: &ask,
                resumable: false,
                end_at_question: false,
            };
            let known = session.known();
            let reply = dispatch::dispatch(
                &server,
                Request {
                    message: &message,
                    caller: &caller,
                    session: Some(&known),
                    outbox: Some(outbox),
                },
            )
            .await;
            if let Reply::Listen(listener) = reply {
                // Each message of the listener is a line; it ends when what it follows has
                // ended, on `notifications/cancelled`, or at the end of input.
                let mut send = |message: Value| {
                    let _ = out.send(message.to_string().into_bytes());
                };
                listener.run(&server, &caller, &mut send).await;
                session.flights().remove(&id);
                if let Some(observed) = observed {
                    observed.end(flowgate_telemetry::Ended::Ok);
                }
                return;
            }
            session.flights().remove(&id);
            if let Some(observed) = observed {
                observed.end(reply.ended());
            }
            let outcome = match reply {
                Reply::Answer(answer) => answer.outcome,
                // No identity on stdio: every caller may call every tool.
                Reply::Forbidden(_) => Err(ErrorData::invalid_params("unknown tool", None)),
                Reply::Accepted | Reply::Stray | Reply::Gone | Reply::Paused | Reply::Listen(_) => {
                    return;
                }
            };
            if initialize && outcome.is_ok() {
                session.settle(&message);
            }
            let _ = out.send(reply::bytes(message.id.as_ref(), &outcome));
        };
        if request {
            tokio::spawn(answer);
        } else {
            answer.await;
        }
    }

    /// What `initialize` (`message`, answered) settled: the revision the dispatcher settles
    /// on for what the client asked, and the client's capabilities.
    fn settle(&self, message: &Incoming) {
        let Ok(request) = serde_json::from_value::<InitializeRequestParams>(message.params.clone())
        else {
            return;
        };
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.revision = Some(
            dispatch::negotiated(&request.protocol_version)
                .as_str()
                .to_owned(),
        );
        known.capabilities = Some(request.capabilities);
    }
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

/// A JSON-RPC id as the request id of log lines: a number in decimal, a string as it is when
/// it is a short token (else a fresh id, as on HTTP).
fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => crate::caller::request_id(Some(s)),
        other => other.to_string(),
    }
}

/// A JSON-RPC id as the key of the session's map: exact (`"1"` and `1` differ), unlike
/// [`id_text`], which replaces an id that is no token.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The message on `line` (`None` for a blank line), or why it is not JSON.
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
            .take(64 * 1024)
            .read_until(b'\n', &mut chunk)
            .await?;
        if n == 0 || chunk.ends_with(b"\n") {
            return Ok(());
        }
    }
}

/// The JSON-RPC answers `input` (lines) gets from a server of `tools`, in order of writing.
#[cfg(test)]
async fn answers(server: FlowgateServer, input: &str, max_line: usize) -> Vec<Value> {
    let (output, mut read) = tokio::io::duplex(1 << 20);
    serve_on(server, input.as_bytes(), output, max_line)
        .await
        .expect("served");
    let mut text = String::new();
    read.read_to_string(&mut text).await.expect("read");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| serde_json::json!({"unreadable": l})))
        .collect()
}

#[cfg(test)]
mod tests {
    use flowgate_core::handle::{HandleKey, Keyring};

    use super::*;
    use crate::{ServerOptions, ToolSet};
    use serde_json::json;

    fn server() -> FlowgateServer {
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        FlowgateServer::new(ToolSet::default(), keys, ServerOptions::default())
    }

    #[tokio::test]
    async fn every_line_that_is_no_message_is_answered_with_an_error() {
        let long = format!("[{}]\n", "1,".repeat(100));
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1}}\n{{not json\n\n\u{feff}[1]\r\n{long}{{\"open\": \n[2]"
        );
        let answers = answers(server(), &input, 100).await;
        let codes: Vec<_> = answers.iter().map(|a| a["error"]["code"].clone()).collect();
        assert_eq!(
            codes,
            [
                json!(-32600),
                json!(-32700),
                json!(-32600),
                json!(-32600),
                json!(-32700),
                json!(-32600)
            ],
            "{answers:?}"
        );
        assert_eq!(answers[0]["id"], 1, "an id that can be read is answered");
    }

    #[tokio::test]
    async fn a_2025_session_gets_the_revisions_task_methods() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            "\n",
        );
        let answers = answers(server(), input, 4096).await;
        let by_id = |id: i64| {
            answers
                .iter()
                .find(|a| a["id"] == id)
                .unwrap_or_else(|| panic!("{id}: {answers:?}"))
        };
        assert_eq!(by_id(1)["result"]["protocolVersion"], "2025-11-25");
        assert!(by_id(1)["result"]["capabilities"]["tasks"].is_object());
        assert_eq!(by_id(2)["result"], json!({"tasks": []}));
        assert_eq!(by_id(3)["result"], json!({}));
        assert_eq!(answers.len(), 3, "the notification is not answered");
    }

    #[tokio::test]
    async fn another_revisions_session_has_no_task_listing() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{}}"#,
            "\n",
        );
        let answers = answers(server(), input, 4096).await;
        assert_eq!(answers[0]["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(answers[1]["error"]["code"], -32601, "{answers:?}");
    }

    /// A `subscriptions/listen` line is answered with its messages as lines: the
    /// acknowledgement (without an id that does not open), then its result.
    #[tokio::test]
    async fn a_listen_writes_its_messages_as_lines() {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        });
        let listen = json!({"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen",
            "params": {"_meta": meta, "notifications": {"taskIds": ["fg2.forged"]}}});
        let answers = answers(server(), &format!("{listen}\n"), 4096).await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(
            answers[0]["method"],
            "notifications/subscriptions/acknowledged"
        );
        assert_eq!(
            answers[0]["params"]["notifications"],
            json!({"taskIds": []})
        );
        assert_eq!(answers[1]["id"], "l");
        assert_eq!(answers[1]["result"]["resultType"], "complete");
    }
}
