//! Every environment variable flowgate reads, in one place, so that deploy files can be checked
//! against it (the end-to-end tests include this file).

/// `(name, what it holds)` for every variable the binary reads.
pub(crate) const ENV_VARS: &[(&str, &str)] = &[
    (MANIFEST, "the manifest file or folder"),
    (
        MANIFEST_YAML,
        "the manifest itself, inline (when no file can be shipped)",
    ),
    (LISTEN, "the HTTP listen address"),
    (
        PORT,
        "the port to listen on all interfaces (Cloud Run sets it)",
    ),
    (
        ALLOWED_HOSTS,
        "Host header values accepted besides loopback; * turns the check off",
    ),
    (
        ALLOWED_ORIGINS,
        "browser origins allowed besides loopback; * turns the check off",
    ),
    (STATE_DIR, "where the local engine keeps runs"),
    (
        SYNC_WAIT_SECS,
        "the longest synchronous wait for clients without tasks",
    ),
    (
        MAX_HOLDS_PER_CALLER,
        "how many tasks/result holds and synchronous calls one caller may have waiting at once",
    ),
    (HANDLE_KEYS, "handle keys: kid:base64key[,kid:base64key...]"),
    (
        HANDLE_KEYS_FILE,
        "a file holding the handle keys (a mounted secret)",
    ),
    (
        HANDLE_KEYS_SSM,
        "an SSM parameter (SecureString) holding the handle keys",
    ),
    (
        HANDLE_KEYS_SECRET,
        "a Secrets Manager secret holding the handle keys",
    ),
    (LOG, "the log filter"),
    (
        LOG_FORMAT,
        "json or text (json by default on Lambda and Cloud Run)",
    ),
    (
        LAMBDA_RUNTIME_API,
        "set by AWS Lambda: serve Lambda events instead of HTTP",
    ),
    (
        LAMBDA_INVOKE_MODE,
        "the Function URL's InvokeMode: BUFFERED (default) or RESPONSE_STREAM",
    ),
    (
        REQUEST_TIMEOUT_SECS,
        "the platform's request timeout (Cloud Run's timeoutSeconds): held requests end before it",
    ),
    (CLOUD_RUN_SERVICE, "set by Cloud Run"),
    (
        AUTH_ISSUER,
        "OAuth issuer whose access tokens /mcp requires (turns auth on)",
    ),
    (
        AUTH_RESOURCE,
        "this server's resource URI, the tokens' audience (e.g. https://host/mcp)",
    ),
    (
        AUTH_JWKS_URL,
        "the signing keys' JWKS URL (instead of discovery, or of Google's keys)",
    ),
    (
        AUTH_MODE,
        "who vouches for callers: oauth, aws-iam, apigw-jwt, apigw-authorizer, google-id-token, google-iap",
    ),
    (
        AUTH_AUDIENCE,
        "the audience of Google ID tokens (the service URL) or IAP assertions",
    ),
    (
        AUTH_ALLOWED,
        "Google callers let through: emails or *@domain, comma separated",
    ),
    (
        ALLOW_UNAUTHENTICATED,
        "true: serve a public address or Lambda without authentication",
    ),
    (
        AUTH_UNTYPED_ACCESS_TOKENS,
        "true: oauth accepts access tokens not typed at+jwt (Entra ID, Cognito)",
    ),
    (
        AUTH_KEYS_REFRESH_SECS,
        "the shortest time between two fetches of the signing keys (default 30)",
    ),
    (
        STEPFUNCTIONS_QUOTA_SHARE,
        "the most (0-1] of the account's Step Functions API quotas this server may use, when other software shares the account (instances find their shares without it)",
    ),
    (
        "GITHUB_TOKEN",
        "the token of github-actions targets (unless a target names another variable: token_env)",
    ),
    (
        "GITLAB_TOKEN",
        "the token of gitlab-ci targets (unless a target names another variable: token_env)",
    ),
    (
        XDG_STATE_HOME,
        "the local engine's state is in $XDG_STATE_HOME/flowgate when FLOWGATE_STATE_DIR is not set (else ~/.local/state/flowgate)",
    ),
    (
        RUN_DIR,
        "set by the local engine for its commands: the run `flowgate ask` talks to",
    ),
    (
        STATUS_FILE,
        "set by the local engine for its commands: where `flowgate status` writes",
    ),
    (
        METRICS_LISTEN,
        "serve Prometheus metrics at http://ADDR/metrics (its own listener)",
    ),
    (
        WATCH,
        "true: reload the manifest when its files change (SIGHUP always does)",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "export traces over OTLP to this collector (off when unset)",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "the traces' own OTLP endpoint (used as it is)",
    ),
    (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "http/protobuf (default) or grpc; also OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "headers sent to the collector (k=v,k2=v2); also OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ),
    (
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "how long an export may take (ms, default 10000)",
    ),
    (
        "OTEL_SERVICE_NAME",
        "the traces' service name (default flowgate)",
    ),
    (
        "OTEL_RESOURCE_ATTRIBUTES",
        "more resource attributes for the traces (k=v,k2=v2)",
    ),
    (
        "OTEL_TRACES_SAMPLER",
        "the sampler (parentbased_always_on by default; traceidratio, ...)",
    ),
    (
        "OTEL_TRACES_SAMPLER_ARG",
        "the sampler's argument (a ratio)",
    ),
    ("OTEL_SDK_DISABLED", "true: export no traces"),
    ("OTEL_TRACES_EXPORTER", "otlp (default) or none"),
    (
        "OTEL_BSP_SCHEDULE_DELAY",
        "the longest time a span waits in the batch (ms, default 5000)",
    ),
    (
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "spans kept for export at most; more are dropped (default 2048)",
    ),
];

pub(crate) const MANIFEST: &str = "FLOWGATE_MANIFEST";
pub(crate) const MANIFEST_YAML: &str = "FLOWGATE_MANIFEST_YAML";
pub(crate) const LISTEN: &str = "FLOWGATE_LISTEN";
pub(crate) const PORT: &str = "PORT";
pub(crate) const ALLOWED_HOSTS: &str = "FLOWGATE_ALLOWED_HOSTS";
pub(crate) const ALLOWED_ORIGINS: &str = "FLOWGATE_ALLOWED_ORIGINS";
pub(crate) const STATE_DIR: &str = "FLOWGATE_STATE_DIR";
pub(crate) const SYNC_WAIT_SECS: &str = "FLOWGATE_SYNC_WAIT_SECS";
pub(crate) const MAX_HOLDS_PER_CALLER: &str = "FLOWGATE_MAX_HOLDS_PER_CALLER";
pub(crate) const HANDLE_KEYS: &str = "FLOWGATE_HANDLE_KEYS";
pub(crate) const HANDLE_KEYS_FILE: &str = "FLOWGATE_HANDLE_KEYS_FILE";
pub(crate) const HANDLE_KEYS_SSM: &str = "FLOWGATE_HANDLE_KEYS_SSM";
pub(crate) const HANDLE_KEYS_SECRET: &str = "FLOWGATE_HANDLE_KEYS_SECRET";
pub(crate) const LOG: &str = "FLOWGATE_LOG";
pub(crate) const LOG_FORMAT: &str = "FLOWGATE_LOG_FORMAT";
pub(crate) const LAMBDA_RUNTIME_API: &str = "AWS_LAMBDA_RUNTIME_API";
pub(crate) const LAMBDA_INVOKE_MODE: &str = "FLOWGATE_LAMBDA_INVOKE_MODE";
pub(crate) const REQUEST_TIMEOUT_SECS: &str = "FLOWGATE_REQUEST_TIMEOUT_SECS";
pub(crate) const CLOUD_RUN_SERVICE: &str = "K_SERVICE";
pub(crate) const AUTH_ISSUER: &str = "FLOWGATE_AUTH_ISSUER";
pub(crate) const AUTH_RESOURCE: &str = "FLOWGATE_AUTH_RESOURCE";
pub(crate) const AUTH_JWKS_URL: &str = "FLOWGATE_AUTH_JWKS_URL";
pub(crate) const AUTH_MODE: &str = "FLOWGATE_AUTH_MODE";
pub(crate) const AUTH_AUDIENCE: &str = "FLOWGATE_AUTH_AUDIENCE";
pub(crate) const ALLOW_UNAUTHENTICATED: &str = "FLOWGATE_ALLOW_UNAUTHENTICATED";
pub(crate) const AUTH_ALLOWED: &str = "FLOWGATE_AUTH_ALLOWED";
pub(crate) const AUTH_UNTYPED_ACCESS_TOKENS: &str = "FLOWGATE_AUTH_UNTYPED_ACCESS_TOKENS";
pub(crate) const AUTH_KEYS_REFRESH_SECS: &str = "FLOWGATE_AUTH_KEYS_REFRESH_SECS";
pub(crate) const METRICS_LISTEN: &str = "FLOWGATE_METRICS_LISTEN";
pub(crate) const WATCH: &str = "FLOWGATE_WATCH";
pub(crate) const STEPFUNCTIONS_QUOTA_SHARE: &str = "FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE";
pub(crate) const XDG_STATE_HOME: &str = "XDG_STATE_HOME";
pub(crate) const RUN_DIR: &str = "FLOWGATE_RUN_DIR";
pub(crate) const STATUS_FILE: &str = "FLOWGATE_STATUS_FILE";
