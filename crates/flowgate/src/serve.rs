//! `flowgate serve`: HTTP or stdio, with graceful shutdown.

use std::process::ExitCode;
use std::time::Duration;

use flowgate_core::handle::{HandleKey, Keyring};
use flowgate_server::http::{HttpOptions, router};
use flowgate_server::{FlowgateServer, ServerOptions};
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::setup;

/// The environment variable holding the handle keys: `kid:base64[,kid:base64...]`.
const KEYS_ENV: &str = "FLOWGATE_HANDLE_KEYS";

pub(crate) fn run(args: ServeArgs) -> ExitCode {
    init_logging(args.stdio);
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
    runtime.block_on(serve(args))
}

fn init_logging(stdio: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOWGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // stdout is the MCP stream in stdio mode; logs always go to stderr.
    let _ = stdio;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .ok();
}

fn keyring() -> Result<Keyring, String> {
    match std::env::var(KEYS_ENV) {
        Ok(spec) => Keyring::parse(&spec).map_err(|e| format!("{KEYS_ENV}: {e}")),
        Err(_) => {
            tracing::warn!(
                "{KEYS_ENV} is not set: task handles are sealed with a random key, so they stop \
                 opening when this process ends. Set it for any deployment."
            );
            let key = HandleKey::random("dev").map_err(|e| e.to_string())?;
            Ok(Keyring::new(key, Vec::new()))
        }
    }
}

async fn serve(args: ServeArgs) -> ExitCode {
    let state_dir = setup::state_dir(args.state_dir.clone());
    let registry = setup::registry(&state_dir);
    let Some(tools) = setup::tool_set(args.manifest.as_deref(), &registry) else {
        return ExitCode::FAILURE;
    };
    let keys = match keyring() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("flowgate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = ServerOptions {
        sync_wait: Duration::from_secs(args.sync_wait_secs),
    };
    let tool_count = tools.iter().count();
    let server = FlowgateServer::new(tools, keys, options);
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
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("flowgate: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let shutdown = CancellationToken::new();
    let app = router(
        server,
        HttpOptions {
            allowed_hosts: args.allowed_hosts,
            shutdown: shutdown.clone(),
        },
    );
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(args.listen);
    tracing::info!(tools = tool_count, state_dir = %state_dir.display(), "serving MCP on http://{addr}/mcp");
    let signal = shutdown.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: finishing in-flight requests");
            signal.cancel();
        })
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowgate: http server: {e}");
            ExitCode::FAILURE
        }
    }
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
