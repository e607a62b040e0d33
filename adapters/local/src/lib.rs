//! The embedded engine: each tool call runs a command, detached from the server, with its
//! record in a folder on disk. It is flowgate's default engine and needs nothing installed.
//!
//! The command is an argv from the manifest, never a shell line built from arguments. The
//! call's arguments reach it as JSON on stdin, as `FLOWGATE_ARGS`, and one `FLOWGATE_ARG_<NAME>`
//! per top-level argument. It runs in its own process group under a supervisor (the flowgate
//! binary started as one, module `supervisor`) that records the exit status and ends every
//! process the command started, detached ones too, on a cancel and when the command ends; so a
//! run outlives the server that started it and any server with the same state folder answers
//! for it. The folder is the task store:
//!
//! | file | written by | meaning |
//! |---|---|---|
//! | `meta.json` | start | tool, argv, creation time, principal digest, boot id |
//! | `input.json` | start | the arguments (the command's stdin) |
//! | `pid` | start | the supervisor (its process group's leader) and its start time |
//! | `stdout`, `stderr` | the command | the result, and the failure's tail |
//! | `status` | the command (`flowgate status`) | the task's `statusMessage` |
//! | `questions/<n>/question.json` | `flowgate ask` | an input request `q<n>` |
//! | `questions/<n>/answer.json` | `respond` | its answer |
//! | `exit` | the supervisor | the exit status: the run is over, nothing of it is left |
//! | `cancelled` | `cancel` | cancelled (the supervisor is then signalled) |

pub mod ask;
mod config;
mod engine;
mod leaders;
mod open_runs;
mod reaper;
mod run_dir;
mod state_dir;
mod supervisor;
mod sweep;

pub use config::{BASE_ENV, LeftoverProcesses, LocalConfig, LocalTarget};
pub use engine::LocalEngine;
pub use reaper::reap_orphans_when_init;
pub use state_dir::prepare_state_dir;
pub use supervisor::{SUPERVISE_ARG, supervise_if_asked};
pub use sweep::{spawn_expiry_sweeper, sweep_expired_runs};

/// The engine kind manifests name: `engine: local`.
pub const KIND: &str = "local";

/// Registers the local engine under [`KIND`], with runs kept under `config.state_dir`.
pub fn register(registry: &mut flowgate_core::Registry, config: LocalConfig) {
    let shared = std::sync::Arc::new(config);
    registry.register(
        KIND,
        Box::new(move |spec| {
            let target = LocalTarget::from_manifest(spec.config, spec.base_dir)?;
            Ok(
                std::sync::Arc::new(LocalEngine::new(shared.clone(), target))
                    as std::sync::Arc<dyn flowgate_core::Engine>,
            )
        }),
    );
}
