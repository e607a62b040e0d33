//! The `flowgate` command: serve a manifest over MCP, check or list a manifest, and the helpers
//! (`ask`, `status`) that commands run by the local engine call.

use clap::Parser;

/// Prints a line of a command's output on stdout. A reader that went away (`flowgate policy |
/// head`) ends the output quietly instead of panicking as `println!` does on a broken pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
pub(crate) use out;

mod auth;
mod cli;
mod env_vars;
mod helpers;
mod keys;
#[cfg(feature = "lambda")]
mod lambda_payload;
mod logging;
mod platform_deadline;
mod policy;
mod reload;
mod serve;
mod setup;
mod telemetry;

/// mimalloc instead of the C library's allocator: a request allocates and frees many small
/// blocks, which glibc's malloc served at a large share of a poll's CPU, and the memory of many
/// connections' buffers goes back to the system once they close instead of staying in glibc's
/// per-thread arenas. mimalloc's v2 line (the `v2` feature): it returns freed pages after
/// 10 ms where v3 waits a second, which kept the RSS of many connections higher at the same
/// speed. Without transparent huge pages (the `no_thp` feature): mimalloc would ask the kernel
/// for them on its regions with `madvise`, and a kernel set to `madvise` (the common default)
/// then backs its eagerly committed arenas in 2 MiB pages, raising idle and loaded RSS alike
/// for no CPU gain. The measurements behind each choice: docs/benchmarks.md, "The allocator".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A run's supervisor (the local engine starts the binary as one): not the CLI.
    #[cfg(feature = "local")]
    if let Some(code) = flowgate_local::supervise_if_asked() {
        return code;
    }
    // Lambda starts a custom runtime's `bootstrap` without arguments: that means `serve`.
    let cli = if std::env::args_os().len() == 1
        && std::env::var_os(env_vars::LAMBDA_RUNTIME_API).is_some()
    {
        cli::Cli::parse_from(["flowgate", "serve"])
    } else {
        cli::Cli::parse()
    };
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Check(manifest) => setup::check(&manifest.path()),
        cli::Command::Tools(manifest) => setup::tools(&manifest.path()),
        cli::Command::Policy(manifest) => policy::print(&manifest.path()),
        cli::Command::Env { manifest: None } => {
            for (name, what) in env_vars::ENV_VARS {
                out!("{name:<30} {what}");
            }
            std::process::ExitCode::SUCCESS
        }
        cli::Command::Env {
            manifest: Some(manifest),
        } => match flowgate_manifest::variables(&manifest) {
            Ok(names) => {
                for (name, file) in names {
                    out!("{name:<30} referenced by {}", file.display());
                }
                std::process::ExitCode::SUCCESS
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                std::process::ExitCode::FAILURE
            }
        },
        cli::Command::Ask(args) => helpers::ask(args),
        cli::Command::Status { message } => helpers::status(&message.join(" ")),
    }
}
