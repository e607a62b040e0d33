//! `flowgate serve`: stdio, AWS Lambda (when `AWS_LAMBDA_RUNTIME_API` is set), or HTTP (on
//! `$PORT` for Cloud Run), with graceful drain on SIGTERM.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use flowgate_server::http::{HttpOptions, allowed_origin, router};
use flowgate_server::{FlowgateServer, ServerOptions};
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::{env_vars, keys, logging, setup, telemetry};

/// How long in-flight requests may finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(8);

pub(crate) fn run(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flowgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let traces = match runtime.block_on(async { telemetry::traces() }) {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    logging::init(logging::wants_json(), traces.as_ref());
    if let Some(traces) = &traces {
        tracing::info!(
            protocol = traces.protocol,
            "exporting traces to {}",
            traces.endpoint
        );
    }
    let exit = runtime.block_on(serve(args, traces.clone()));
    // Spans of the last requests go out before the process ends.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    exit
}

/// The listen address: `--listen`/`FLOWGATE_LISTEN`, else every interface on `$PORT`, else
/// loopback port 8080; and whether it came from `$PORT`.
fn listen_address(given: Option<String>) -> (String, bool) {
    if let Some(given) = given {
        return (given, false);
    }
    match std::env::var(env_vars::PORT).ok().filter(|p| !p.is_empty()) {
        Some(port) => (format!("0.0.0.0:{port}"), true),
        None => ("127.0.0.1:8080".to_owned(), false),
    }
}

/// The `--allowed-origin` entries in canonical form; a typo is an error at start rather than an
/// origin that silently matches nothing.
fn allowed_origins(entries: &[String]) -> Result<Vec<String>, String> {
    entries
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| allowed_origin(e))
        .collect()
}

/// How long before the platform's request timeout a synchronous wait gives up, leaving time
/// to stop the execution and answer.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(2);

/// The synchronous wait, shortened to end before the platform's request timeout (a request
/// the platform ends gets no answer, and its execution would run on unheld).
fn sync_wait_within(sync_wait: Duration, request_timeout: Option<Duration>) -> Duration {
    match request_timeout {
        Some(timeout) if timeout.saturating_sub(TIMEOUT_MARGIN) < sync_wait => {
            let capped = timeout
                .saturating_sub(TIMEOUT_MARGIN)
                .max(Duration::from_secs(1));
            tracing::info!(
                sync_wait_secs = capped.as_secs(),
                "the synchronous wait ends before the request timeout"
            );
            capped
        }
        _ => sync_wait,
    }
}

/// How often finished local runs past their ttl are removed (also once at start).
#[cfg(feature = "local")]
const EXPIRY_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

async fn serve(args: ServeArgs, traces: Option<flowgate_telemetry::Traces>) -> ExitCode {
    // Metrics first: the engines bound below count their calls in them.
    if let Some(address) = &args.metrics_listen
        && let Err(e) = telemetry::serve_metrics(address).await
    {
        eprintln!("flowgate: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = setup::one_manifest_source(args.manifest.as_deref()) {
        eprintln!("flowgate: {e}");
        return ExitCode::FAILURE;
    }
    let state_dir = setup::state_dir(args.state_dir.clone());
    let registry = setup::registry(state_dir.as_deref().unwrap_or(Path::new("")));
    let Some(tools) = setup::tool_set(args.manifest.as_deref(), &registry) else {
        return ExitCode::FAILURE;
    };
    #[cfg(feature = "local")]
    if let Err(e) = setup::check_state_dir(state_dir.as_deref(), &tools) {
        eprintln!("flowgate: {e}");
        return ExitCode::FAILURE;
    }
    #[cfg(feature = "local")]
    flowgate_local::reap_orphans_when_init();
    #[cfg(feature = "local")]
    if let Some(dir) = &state_dir
        && tools
            .iter()
            .any(|t| t.spec.target.engine == flowgate_local::KIND)
    {
        flowgate_local::spawn_expiry_sweeper(dir.clone(), EXPIRY_SWEEP_EVERY);
    }
    let state_dir = state_dir.unwrap_or_default();
    let allowed_origins = match allowed_origins(&args.allowed_origins) {
        Ok(origins) => origins,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let keys = match keys::load().await {
        Ok(k) => k,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let request_timeout = match crate::platform_deadline::request_timeout(
        std::env::var(env_vars::REQUEST_TIMEOUT_SECS)
            .ok()
            .as_deref(),
    ) {
        Ok(timeout) => timeout,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = ServerOptions {
        sync_wait: sync_wait_within(Duration::from_secs(args.sync_wait_secs), request_timeout),
        max_holds_per_caller: args.max_holds_per_caller,
    };
    let tool_count = tools.iter().count();
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.loaded(tool_count);
    }
    let mut scopes: Vec<String> = tools.iter().flat_map(|t| t.spec.scopes.clone()).collect();
    scopes.sort();
    scopes.dedup();
    let lambda = std::env::var_os(env_vars::LAMBDA_RUNTIME_API).is_some() && !args.stdio;
    let identity = match crate::auth::from_args(&args, scopes, lambda) {
        Ok(identity) => identity,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (listen, from_port) = listen_address(args.listen.clone());
    if !args.stdio
        && identity.is_none()
        && let Some(why) = crate::auth::exposure(lambda, &listen, from_port)
    {
        if !args.allow_unauthenticated {
            eprintln!("flowgate: {}", crate::auth::refusal(&why));
            return ExitCode::FAILURE;
        }
        tracing::warn!(
            "serving {why} WITHOUT authentication (--allow-unauthenticated): whatever is in \
             front must check every caller"
        );
    }
    if let Some(identity) = &identity {
        tracing::info!(auth_mode = %identity.mode(), "callers are authenticated");
    }
    let server = FlowgateServer::new(tools, keys, options);
    // SIGHUP (and with --watch, a change to the manifest's files) reloads the tools.
    let watched = match crate::reload::watched(args.manifest.as_deref(), args.watch) {
        Ok(watched) => watched,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    match crate::reload::Triggers::new(watched.as_deref()) {
        Ok(triggers) => {
            tokio::spawn(crate::reload::serve(
                server.clone(),
                args.manifest.clone(),
                registry,
                triggers,
            ));
        }
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    }
    if args.stdio {
        tracing::info!(tools = tool_count, "serving MCP on stdio");
        return match flowgate_server::stdio::serve(server).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("flowgate: stdio transport: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let shutdown = CancellationToken::new();
    let invoke_mode = match lambda.then(lambda_invoke_mode).transpose() {
        Ok(mode) => mode,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let app = router(
        server,
        HttpOptions {
            allowed_hosts: args.allowed_hosts,
            allowed_origins,
            shutdown: shutdown.clone(),
            identity,
            buffered_responses: invoke_mode.is_some_and(LambdaMode::is_buffered),
            answer_limit: invoke_mode.and_then(LambdaMode::answer_limit),
        },
    );
    if let Some(mode) = invoke_mode {
        let app = match traces {
            Some(traces) => telemetry::flush_after_each_request(app, traces),
            None => app,
        };
        return serve_lambda(app, mode, tool_count).await;
    }
    // Cloud Run ends a request after the service's timeoutSeconds: every wait of a request
    // (a synchronous call, a tasks/result hold, an engine call) ends before it.
    let app = match request_timeout {
        Some(timeout) => app.layer(axum::middleware::from_fn_with_state(
            crate::platform_deadline::DeadlineSource::RequestTimeout(timeout),
            crate::platform_deadline::with_deadline,
        )),
        None => app,
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("flowgate: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(listen);
    tracing::info!(tools = tool_count, state_dir = %state_dir.display(), "serving MCP on http://{addr}/mcp");
    let signal = shutdown.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            wait_for_signal().await;
            tracing::info!(
                drain_secs = DRAIN.as_secs(),
                "shutting down: no new connections; finishing in-flight requests"
            );
            // Requests still running when the drain time is up are cut short (Cloud Run sends
            // SIGKILL 10 s after SIGTERM).
            tokio::spawn(async move {
                tokio::time::sleep(DRAIN).await;
                signal.cancel();
            });
        })
        .await;
    match served {
        Ok(()) => {
            tracing::info!("drained; exiting");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flowgate: http server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How the Lambda function's answers reach clients.
#[cfg(feature = "lambda")]
type LambdaMode = crate::lambda_payload::InvokeMode;

/// Without Lambda support there is no mode (serving Lambda fails in [`serve_lambda`]).
#[cfg(not(feature = "lambda"))]
#[derive(Debug, Clone, Copy)]
struct LambdaMode;

#[cfg(not(feature = "lambda"))]
impl LambdaMode {
    fn is_buffered(self) -> bool {
        false
    }

    fn answer_limit(self) -> Option<flowgate_server::http::AnswerLimit> {
        None
    }
}

/// The invoke mode `FLOWGATE_LAMBDA_INVOKE_MODE` names (checked at start).
#[cfg(feature = "lambda")]
fn lambda_invoke_mode() -> Result<LambdaMode, String> {
    LambdaMode::parse(std::env::var(env_vars::LAMBDA_INVOKE_MODE).ok().as_deref())
}

#[cfg(not(feature = "lambda"))]
fn lambda_invoke_mode() -> Result<LambdaMode, String> {
    Ok(LambdaMode)
}

#[cfg(feature = "lambda")]
async fn serve_lambda(app: axum::Router, mode: LambdaMode, tool_count: usize) -> ExitCode {
    use crate::lambda_payload::InvokeMode;
    use crate::platform_deadline::{DeadlineSource, with_deadline};
    // The invocation's deadline goes in each request (its caller carries it: every wait of
    // the request ends before it); the server was told how the mode carries answers
    // (`buffered_responses`, `answer_limit`).
    let app = app.layer(axum::middleware::from_fn_with_state(
        DeadlineSource::LambdaInvocation,
        with_deadline,
    ));
    tracing::info!(tools = tool_count, invoke_mode = ?mode, "serving MCP as an AWS Lambda function");
    let served = match mode {
        InvokeMode::Buffered => lambda_http::run(app).await,
        // The body reaches the client as it is written (a Function URL in RESPONSE_STREAM
        // mode): server-sent events flow while a request holds.
        InvokeMode::ResponseStream => lambda_http::run_with_streaming_response(app).await,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowgate: lambda runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "lambda"))]
async fn serve_lambda(_app: axum::Router, _mode: LambdaMode, _tool_count: usize) -> ExitCode {
    eprintln!(
        "flowgate: AWS_LAMBDA_RUNTIME_API is set but this build has no Lambda support (cargo feature lambda)"
    );
    ExitCode::FAILURE
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::{allowed_origins, listen_address};

    #[test]
    fn the_synchronous_wait_fits_the_request_timeout() {
        use std::time::Duration;
        let s = Duration::from_secs;
        assert_eq!(super::sync_wait_within(s(60), None), s(60));
        assert_eq!(super::sync_wait_within(s(30), Some(s(300))), s(30));
        assert_eq!(super::sync_wait_within(s(60), Some(s(10))), s(8));
    }

    #[test]
    fn an_explicit_address_wins() {
        assert_eq!(
            listen_address(Some("127.0.0.1:9".into())),
            ("127.0.0.1:9".to_owned(), false)
        );
    }

    #[test]
    fn allowed_origins_are_checked_at_start() {
        let given = ["https://app.example".to_owned(), " ".to_owned()];
        assert_eq!(
            allowed_origins(&given),
            Ok(vec!["https://app.example:443".to_owned()])
        );
        let typo = ["app.example".to_owned()];
        let e = allowed_origins(&typo).expect_err("no scheme");
        assert!(e.contains("app.example"), "{e}");
    }
}
