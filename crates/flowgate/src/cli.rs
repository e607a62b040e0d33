//! Command-line arguments.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use flowgate_auth::Mode;

use crate::env_vars;

/// Workflow executions as MCP tools whose calls run as MCP tasks.
#[derive(Debug, Parser)]
#[command(name = "flowgate", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the tools of a manifest over MCP (HTTP by default, or stdio).
    Serve(ServeArgs),
    /// Validate a manifest (a file or a folder) and exit non-zero on any error; every error
    /// found is printed, each with its file, line and column.
    Check(ManifestArg),
    /// Print the least-privilege cloud permissions a manifest's tools need (AWS IAM policy,
    /// Google Cloud IAM roles).
    Policy(ManifestArg),
    /// List the environment variables flowgate reads; with --manifest, the ones a manifest
    /// references (`${NAME}`), which a deployment must set.
    Env {
        /// The manifest file or folder whose variables to list.
        #[arg(long, short)]
        manifest: Option<PathBuf>,
    },
    /// List the tools a manifest declares.
    Tools(ManifestArg),
    /// Inside a local-engine command: ask the client a question and print the answer (JSON).
    Ask(AskArgs),
    /// Inside a local-engine command: set the task's status message.
    Status {
        /// The message.
        #[arg(required = true)]
        message: Vec<String>,
    },
}

/// The manifest of `check`, `policy` and `tools`: as an argument, or with `--manifest` as
/// `serve` takes it (so a command line can be reused from one to the other).
#[derive(Debug, Args)]
pub(crate) struct ManifestArg {
    /// The manifest file or folder.
    #[arg(value_name = "MANIFEST", required_unless_present = "manifest_option")]
    path: Option<PathBuf>,
    /// The manifest file or folder (instead of the argument).
    #[arg(
        long = "manifest",
        short = 'm',
        value_name = "MANIFEST",
        conflicts_with = "path"
    )]
    manifest_option: Option<PathBuf>,
}

impl ManifestArg {
    /// The manifest given, either way.
    pub(crate) fn path(&self) -> PathBuf {
        self.path
            .clone()
            .or_else(|| self.manifest_option.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The manifest file or folder; the bundled example when absent (and no inline manifest
    /// is in FLOWGATE_MANIFEST_YAML).
    #[arg(long, short, env = env_vars::MANIFEST)]
    pub(crate) manifest: Option<PathBuf>,
    /// The HTTP listen address [default: 0.0.0.0:$PORT when PORT is set, else 127.0.0.1:8080].
    #[arg(long, env = env_vars::LISTEN)]
    pub(crate) listen: Option<String>,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (a listener of their own, never
    /// beside `/mcp`), e.g. `127.0.0.1:9464`.
    #[arg(long, env = env_vars::METRICS_LISTEN)]
    pub(crate) metrics_listen: Option<String>,
    /// Reload the manifest when its files change (SIGHUP always reloads it). Needs a manifest
    /// file or folder.
    #[arg(long, env = env_vars::WATCH)]
    pub(crate) watch: bool,
    /// Serve over stdin/stdout instead of HTTP.
    #[arg(long)]
    pub(crate) stdio: bool,
    /// Host names the HTTP `Host` header may carry besides loopback (repeatable, or comma
    /// separated); `*` turns the check off.
    #[arg(
        long = "allowed-host",
        env = env_vars::ALLOWED_HOSTS,
        value_delimiter = ','
    )]
    pub(crate) allowed_hosts: Vec<String>,
    /// Browser origins allowed to call besides loopback ones (repeatable, or comma separated):
    /// `https://app.example` (default port), `http://host:8080`, `http://host:*` (any port);
    /// `*` turns the check off. A request with any other `Origin` gets 403.
    #[arg(
        long = "allowed-origin",
        env = env_vars::ALLOWED_ORIGINS,
        value_delimiter = ','
    )]
    pub(crate) allowed_origins: Vec<String>,
    /// Where the local engine keeps its runs.
    #[arg(long, env = env_vars::STATE_DIR)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Seconds a call waits for its result when the client cannot take a task.
    #[arg(long, env = env_vars::SYNC_WAIT_SECS, default_value_t = 60)]
    pub(crate) sync_wait_secs: u64,
    /// How many requests one caller may have waiting at once on this server (tasks/result
    /// holds and synchronous calls); one more is refused at once.
    #[arg(long, env = env_vars::MAX_HOLDS_PER_CALLER, default_value_t = flowgate_server::DEFAULT_MAX_HOLDS_PER_CALLER, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    pub(crate) max_holds_per_caller: usize,
    /// Who vouches for callers on `/mcp` [default: oauth when --auth-issuer is given]:
    /// `oauth` (JWT access tokens of --auth-issuer for --auth-resource); on AWS Lambda,
    /// `aws-iam` (Function URL AuthType AWS_IAM), `apigw-jwt` (HTTP API JWT authorizer),
    /// `apigw-authorizer` (HTTP API Lambda authorizer); on Google Cloud, `google-id-token`
    /// (Google-signed ID token for --auth-audience) or `google-iap` (Identity-Aware Proxy
    /// assertion for --auth-audience). HTTP only.
    #[arg(long, env = env_vars::AUTH_MODE, value_parser = auth_modes())]
    pub(crate) auth_mode: Option<Mode>,
    /// `google-id-token`: the service's URL (the ID tokens' audience); `google-iap`: IAP's
    /// audience, `/projects/NUMBER/global/backendServices/ID` or `/projects/NUMBER/apps/PROJECT`.
    #[arg(long, env = env_vars::AUTH_AUDIENCE)]
    pub(crate) auth_audience: Option<String>,
    /// The Google callers let through (repeatable, or comma separated): an email, or
    /// `*@domain`. Required by `google-id-token` (any Google account can get an ID token for
    /// any audience); optional with `google-iap`, whose own policy already admitted the caller.
    #[arg(long = "auth-allowed", env = env_vars::AUTH_ALLOWED, value_delimiter = ',')]
    pub(crate) auth_allowed: Vec<String>,
    /// Serve without any authentication where flowgate would refuse to (a non-loopback
    /// address, `$PORT`, AWS Lambda): only when something in front already checks every caller.
    #[arg(long, env = env_vars::ALLOW_UNAUTHENTICATED)]
    pub(crate) allow_unauthenticated: bool,
    /// Require OAuth access tokens on `/mcp`: the issuer (authorization server) whose JWT
    /// access tokens are accepted. Needs `--auth-resource`. HTTP only.
    #[arg(long, env = env_vars::AUTH_ISSUER, requires = "auth_resource")]
    pub(crate) auth_issuer: Option<String>,
    /// This server's canonical resource URI (the `aud` tokens must carry), e.g.
    /// `https://flowgate.example/mcp`.
    #[arg(long, env = env_vars::AUTH_RESOURCE, requires = "auth_issuer")]
    pub(crate) auth_resource: Option<String>,
    /// The signing keys' JWKS URL: for `oauth`, by default discovered from the issuer's
    /// metadata; for the Google modes, by default Google's published keys.
    #[arg(long, env = env_vars::AUTH_JWKS_URL)]
    pub(crate) auth_jwks_url: Option<String>,
    /// `oauth` only: also accept access tokens whose header `typ` is not `at+jwt` (RFC 9068),
    /// for issuers that do not type them (Microsoft Entra ID, Amazon Cognito, Keycloak). Tokens
    /// that are recognisably not access tokens are still refused: an ID token's `nonce` or
    /// `at_hash`, a logout token's `events`, Cognito's `token_use: id`, Keycloak's `typ: ID`.
    #[arg(long, env = env_vars::AUTH_UNTYPED_ACCESS_TOKENS)]
    pub(crate) auth_untyped_access_tokens: bool,
    /// The shortest time between two fetches of the signing keys (an unknown `kid` refreshes
    /// them at most this often); while fetches fail the wait doubles, up to 10 minutes.
    #[arg(
        long,
        env = env_vars::AUTH_KEYS_REFRESH_SECS,
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub(crate) auth_keys_refresh_secs: u64,
}

/// The values of `--auth-mode`: the names flowgate-auth defines for its modes.
fn auth_modes() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::ALL.map(Mode::name))
        .try_map(|name| Mode::from_name(&name).ok_or(format!("unknown auth mode {name:?}")))
}

#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// The question.
    #[arg(long, short)]
    pub(crate) message: String,
    /// The JSON Schema (an object with flat properties) of the answer's form.
    #[arg(long, conflicts_with = "confirm")]
    pub(crate) schema: Option<String>,
    /// Ask a yes/no question (the answer's `confirm` field).
    #[arg(long)]
    pub(crate) confirm: bool,
    /// Print only this field of the answer (strings without quotes).
    #[arg(long)]
    pub(crate) field: Option<String>,
    /// Give up after this many seconds (exit 5).
    #[arg(long)]
    pub(crate) timeout_secs: Option<u64>,
}
