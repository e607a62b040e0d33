//! The metrics listener: `GET /metrics` on its own address (`--metrics-listen`), so the
//! metrics are never served beside `/mcp` to whoever can reach the MCP endpoint.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// The exposition's media type: OpenMetrics text, which Prometheus asks for first.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The router of the metrics listener: `GET /metrics`, and 404 for anything else.
pub fn router(metrics: &'static Metrics) -> Router {
    Router::new().route(
        "/metrics",
        get(move || async move {
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, CONTENT_TYPE)],
                metrics.encode(),
            )
                .into_response()
        }),
    )
}

/// Binds `address` for the metrics listener.
///
/// # Errors
/// The address cannot be bound (in use, not local, malformed), naming it.
pub async fn bind(address: &str) -> Result<TcpListener, String> {
    TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot serve metrics on {address}: {e}"))
}

/// Serves `metrics` on `listener` until the process ends.
pub fn spawn(listener: TcpListener, metrics: &'static Metrics) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(metrics)).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metrics_are_served_on_their_own_listener() {
        let metrics: &'static Metrics = Box::leak(Box::new(Metrics::new()));
        metrics.auth_refused("unauthenticated");
        let listener = bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let server = spawn(listener, metrics);
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("application/openmetrics-text"), "{answer}");
        assert!(
            answer.contains("flowgate_auth_refusals_total{reason=\"unauthenticated\"} 1"),
            "{answer}"
        );
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        stream
            .write_all(b"GET /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        server.abort();
    }

    #[tokio::test]
    async fn a_taken_address_is_an_error_naming_it() {
        let taken = bind("127.0.0.1:0").await.expect("bind");
        let address = taken.local_addr().expect("address").to_string();
        let e = bind(&address).await.expect_err("in use");
        assert!(e.contains(&address), "{e}");
    }
}
