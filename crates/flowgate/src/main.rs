//! The `flowgate` command: serve a manifest over MCP, check or list a manifest, and the helpers
//! (`ask`, `status`) that commands run by the local engine call.

mod cli;
mod helpers;
mod serve;
mod setup;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Check { manifest } => setup::check(&manifest),
        cli::Command::Tools { manifest } => setup::tools(&manifest),
        cli::Command::Ask(args) => helpers::ask(args),
        cli::Command::Status { message } => helpers::status(&message.join(" ")),
    }
}
