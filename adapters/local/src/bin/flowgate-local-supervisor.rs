//! The local engine's run supervisor on its own, for the crate's tests (the flowgate binary is
//! the supervisor in a server: it acts as one when given `flowgate_local::SUPERVISE_ARG` first).

fn main() -> std::process::ExitCode {
    flowgate_local::supervise_if_asked().unwrap_or(std::process::ExitCode::from(2))
}
