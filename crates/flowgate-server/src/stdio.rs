//! The same server over stdin and stdout, for hosts that launch MCP servers as subprocesses.
//!
//! rmcp's stdio transport drops a line that is not JSON without a word, so a client that sent
//! one waits forever. A sieve in front of it reads stdin line by line: well-formed lines go on
//! to rmcp unchanged, and each line that is not JSON gets a `-32700` parse error on stdout
//! (written through rmcp's own writer, so it never interleaves with another message).

use std::future::Future;

use rmcp::model::ServerJsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use rmcp::{ErrorData, RoleServer, ServiceExt};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::mpsc;

use crate::FlowgateServer;

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
    let (errors, parse_errors) = mpsc::channel(16);
    tokio::spawn(sieve(
        BufReader::new(stdin),
        sieved,
        errors,
        DEFAULT_MAX_LINE_LENGTH,
    ));
    let transport = AnswerParseErrors {
        inner: AsyncRwTransport::new_server(to_rmcp, stdout),
        parse_errors,
    };
    let running = server.serve(transport).await?;
    running.waiting().await?;
    Ok(())
}

/// Copies each line of `input` that is JSON to `output`, and reports each one that is not (or
/// is longer than `max_line` bytes). Ends at the end of `input` (closing `output`, which ends
/// the service) or when rmcp has gone.
async fn sieve<R, W>(mut input: R, mut output: W, errors: mpsc::Sender<ErrorData>, max_line: usize)
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
            Ok(0) | Err(_) => return,
            Ok(_) if line.len() > max_line && !line.ends_with(b"\n") => {
                if skip_rest_of_line(&mut input).await.is_err() {
                    return;
                }
                ErrorData::invalid_request(
                    format!("Invalid Request: a message is longer than {max_line} bytes"),
                    None,
                )
            }
            Ok(_) => match parse_problem(&line) {
                None => {
                    if output.write_all(&line).await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(problem) => ErrorData::parse_error(format!("Parse error: {problem}"), None),
            },
        };
        if errors.send(error).await.is_err() {
            return;
        }
    }
}

/// Why `line` is not JSON, or `None` when it is (or is blank, which rmcp skips).
fn parse_problem(line: &[u8]) -> Option<String> {
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(line)
        .err()
        .map(|e| e.to_string())
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

/// rmcp's stdio transport, plus the parse errors the sieve reports.
struct AnswerParseErrors<T> {
    inner: T,
    parse_errors: mpsc::Receiver<ErrorData>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for AnswerParseErrors<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            tokio::select! {
                message = self.inner.receive() => return message,
                Some(error) = self.parse_errors.recv() => {
                    // A parse error has no id to answer (MCP omits it). Sent on its own task so
                    // this future stays safe to drop, as rmcp polls it inside a select.
                    let send = self.inner.send(ServerJsonRpcMessage::error(error, None));
                    tokio::spawn(async move {
                        if let Err(e) = send.await {
                            tracing::debug!(error = %e, "could not answer a line that is not JSON");
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
    use super::*;

    #[tokio::test]
    async fn json_lines_pass_and_every_other_line_is_reported() {
        let long = format!("[{}]\n", "1,".repeat(100));
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1}}\n{{not json\n\n\u{feff}[1]\r\n{long}{{\"open\": \n[2]"
        );
        let (mut out, sieved) = tokio::io::duplex(PIPE_BYTES);
        let (tx, mut rx) = mpsc::channel(16);
        sieve(input.as_bytes(), sieved, tx, 100).await;
        let mut passed = String::new();
        out.read_to_string(&mut passed).await.expect("read");
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1}\n\n\u{feff}[1]\r\n[2]"
        );
        let mut codes = Vec::new();
        while let Ok(e) = rx.try_recv() {
            codes.push(e.code.0);
        }
        assert_eq!(codes, [-32700, -32600, -32700]);
    }
}
