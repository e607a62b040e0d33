//! The `flowgate` command: serve a manifest over MCP, check or list a manifest, and the helpers
//! (`ask`, `status`) that commands run by the local engine call.

mod auth;
mod cli;
mod env_vars;
mod helpers;
mod keys;
#[cfg(feature = "lambda")]
mod lambda_identity;
mod logging;
mod policy;
mod reload;
mod serve;
mod setup;
mod telemetry;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Check { manifest } => setup::check(&manifest),
        cli::Command::Tools { manifest } => setup::tools(&manifest),
        cli::Command::Policy { manifest } => policy::print(&manifest),
        cli::Command::Env => {
            for (name, what) in env_vars::ENV_VARS {
                println!("{name:<30} {what}");
            }
            std::process::ExitCode::SUCCESS
        }
        cli::Command::Ask(args) => helpers::ask(args),
        cli::Command::Status { message } => helpers::status(&message.join(" ")),
    }
}
