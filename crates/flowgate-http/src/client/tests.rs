//! The client against a real HTTP server on loopback that answers as the engines' APIs do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap as AxumHeaders, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use axum::routing::get;
use flowgate_core::EngineError;

use super::*;

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn client(timeout_ms: u64) -> HttpClient {
    let config = HttpConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(timeout_ms),
        ..HttpConfig::default()
    };
    HttpClient::new("test", &config).expect("client")
}

#[tokio::test]
async fn unreachable_is_unavailable_and_silence_is_a_timeout() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let c = client(300);
    let e = c
        .send(
            c.request(Method::GET, &format!("http://127.0.0.1:{port}/x")),
            "get x",
        )
        .await
        .expect_err("refused");
    assert!(matches!(e, EngineError::Unavailable { .. }), "{e:?}");

    let base = serve(Router::new().route(
        "/slow",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "late"
        }),
    ))
    .await;
    let started = std::time::Instant::now();
    let e = c
        .send(c.request(Method::POST, &format!("{base}/slow")), "create")
        .await
        .expect_err("silent");
    assert!(matches!(e, EngineError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("create"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn statuses_and_rate_limits_become_kinds_with_the_api_message() {
    let app = Router::new()
        .route(
            "/busy",
            get(|| async {
                let mut h = AxumHeaders::new();
                h.insert("retry-after", "3".parse().expect("v"));
                (AxumStatus::TOO_MANY_REQUESTS, h, "slow down")
            }),
        )
        .route(
            "/primary",
            get(|| async {
                let mut h = AxumHeaders::new();
                h.insert("x-ratelimit-remaining", "0".parse().expect("v"));
                h.insert("x-ratelimit-reset", "20".parse().expect("v"));
                (
                    AxumStatus::FORBIDDEN,
                    h,
                    r#"{"message": "API rate limit exceeded"}"#,
                )
            }),
        )
        .route(
            "/denied",
            get(|| async { (AxumStatus::FORBIDDEN, r#"{"message": "Resource not accessible by integration"}"#) }),
        )
        .route(
            "/missing",
            get(|| async { (AxumStatus::NOT_FOUND, r#"{"message": "Not Found"}"#) }),
        )
        .route(
            "/bad",
            get(|| async {
                (
                    AxumStatus::BAD_REQUEST,
                    r#"{"error": {"code": 400, "message": "argument too large", "status": "INVALID_ARGUMENT"}}"#,
                )
            }),
        );
    let base = serve(app).await;
    let c = client(2000);
    let call = |path: &str| c.send(c.request(Method::GET, &format!("{base}{path}")), "op");
    match call("/busy").await {
        Err(EngineError::Throttled { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("{other:?}"),
    }
    match call("/primary").await {
        Err(EngineError::Throttled { retry_after, .. }) => {
            assert!(retry_after.is_some_and(|d| d <= Duration::from_secs(20)))
        }
        other => panic!("{other:?}"),
    }
    assert!(
        c.rate_limits().pacing().is_some(),
        "the limit headers were seen"
    );
    let e = call("/denied").await.expect_err("denied");
    assert!(matches!(e, EngineError::Denied { .. }), "{e:?}");
    assert!(e.to_string().contains("Resource not accessible"), "{e}");
    let e = call("/missing").await.expect_err("missing");
    assert!(e.is_not_found(), "{e:?}");
    let e = call("/bad").await.expect_err("bad");
    assert!(matches!(e, EngineError::InvalidInput { .. }), "{e:?}");
    assert!(
        e.to_string().contains("HTTP 400: argument too large"),
        "{e}"
    );
}

#[tokio::test]
async fn conditional_gets_answer_304s_from_the_remembered_body() {
    let conditional = Arc::new(AtomicUsize::new(0));
    let seen = conditional.clone();
    let app = Router::new().route(
        "/run",
        get(move |headers: AxumHeaders| {
            let seen = seen.clone();
            async move {
                if headers.get("if-none-match").is_some_and(|v| v == "\"v1\"") {
                    seen.fetch_add(1, Ordering::SeqCst);
                    return AxumStatus::NOT_MODIFIED.into_response();
                }
                let mut h = AxumHeaders::new();
                h.insert("etag", "\"v1\"".parse().expect("v"));
                (h, r#"{"status": "in_progress"}"#).into_response()
            }
        }),
    );
    let base = serve(app).await;
    let c = client(2000);
    let url = format!("{base}/run");
    let first = c
        .get_conditional(c.request(Method::GET, &url), &url, "get run")
        .await
        .expect("first");
    assert!(!first.not_modified);
    let second = c
        .get_conditional(c.request(Method::GET, &url), &url, "get run")
        .await
        .expect("second");
    assert!(second.not_modified);
    assert_eq!(second.body, first.body);
    assert_eq!(conditional.load(Ordering::SeqCst), 1);
    let v: serde_json::Value = c.decode("get run", &second.body).expect("json");
    assert_eq!(v["status"], "in_progress");
}

#[test]
fn api_messages_are_found_and_bounded() {
    assert_eq!(
        api_message(r#"{"error": "insufficient_scope"}"#),
        "insufficient_scope"
    );
    assert_eq!(api_message(&"x".repeat(1000)).len(), MAX_MESSAGE);
    assert_eq!(api_message(""), "");
}

/// Which server saw a request, and its `PRIVATE-TOKEN` and `Authorization` headers.
type Seen = (String, Option<String>, Option<String>);

/// A redirect to another origin (an artifact download sent to object storage) arrives there
/// without the request's credentials; a redirect within the origin keeps them.
#[tokio::test]
async fn credentials_never_follow_a_redirect_to_another_origin() {
    let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
    let record = |path: &'static str, seen: Arc<std::sync::Mutex<Vec<_>>>| {
        get(move |headers: AxumHeaders| {
            let seen = seen.clone();
            async move {
                let header = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                seen.lock().unwrap_or_else(|p| p.into_inner()).push((
                    path.to_owned(),
                    header("private-token"),
                    header("authorization"),
                ));
                "the artifact"
            }
        })
    };
    let storage = serve(Router::new().route("/blob", record("storage", seen.clone()))).await;
    let api = {
        let storage = storage.clone();
        serve(
            Router::new()
                .route(
                    "/away",
                    get(move || {
                        let to = format!("{storage}/blob");
                        async move { (AxumStatus::FOUND, [("location", to)]) }
                    }),
                )
                .route(
                    "/here",
                    get(|| async { (AxumStatus::TEMPORARY_REDIRECT, [("location", "/final")]) }),
                )
                .route("/final", record("api", seen.clone())),
        )
        .await
    };
    let c = client(2000);
    for path in ["/away", "/here"] {
        let request = c
            .request(Method::GET, &format!("{api}{path}"))
            .header("PRIVATE-TOKEN", "glpat-secret")
            .bearer_auth("also-secret");
        let body = c
            .send(request, "download")
            .await
            .expect("followed")
            .text()
            .await
            .expect("body");
        assert_eq!(body, "the artifact");
    }
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        seen,
        vec![
            ("storage".to_owned(), None, None),
            (
                "api".to_owned(),
                Some("glpat-secret".to_owned()),
                Some("Bearer also-secret".to_owned())
            ),
        ]
    );
}
