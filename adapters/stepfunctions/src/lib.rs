//! The AWS Step Functions engine: a tool names a state machine, a call starts an execution,
//! and the execution is the task.
//!
//! | flowgate | Step Functions |
//! |---|---|
//! | start | `StartExecution` (a named, idempotent start when the tool has an `execution_name` template) |
//! | get | `DescribeExecution`; while RUNNING also `GetExecutionHistory` (current state, pending input) |
//! | respond | `SendTaskSuccess` (accept) / `SendTaskFailure` (decline, cancel) with the waiting task token |
//! | cancel | `StopExecution` |
//! | list | `ListExecutions` |
//! | express workflows | `StartSyncExecution`, synchronous only, never a task |
//!
//! Status mapping: RUNNING and PENDING_REDRIVE -> working (input_required while a flowgate
//! input state waits on its task token), SUCCEEDED -> completed, FAILED and TIMED_OUT -> failed,
//! ABORTED -> cancelled, anything else -> unknown.
//!
//! **Input states.** A `.waitForTaskToken` state asks the client a question when its
//! `Parameters` hold, anywhere, an object with the task token and a `flowgate` block:
//!
//! ```json
//! "Approve": {
//!   "Type": "Task",
//!   "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
//!   "Parameters": {
//!     "QueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/approvals",
//!     "MessageBody": {
//!       "TaskToken.$": "$$.Task.Token",
//!       "flowgate": {
//!         "message.$": "States.Format('Deploy {} to production?', $.version)",
//!         "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}
//!       }
//!     }
//!   },
//!   "ResultPath": "$.approval",
//!   "Next": "Deploy"
//! }
//! ```
//!
//! The task turns `input_required` with that elicitation, keyed `sfn-<history event id>`;
//! `tasks/update` accept sends the form content as the task output (`SendTaskSuccess`), decline
//! or cancel fail the task with `flowgate.Declined` / `flowgate.Cancelled`.

mod config;
mod engine;
mod error;
mod history;
mod mapping;
mod policy;
mod sync_host;

pub use config::{SfnTarget, WorkflowType};
pub use engine::StepFunctionsEngine;
pub use policy::policies;

/// The engine kind manifests name: `engine: stepfunctions`.
pub const KIND: &str = "stepfunctions";

/// Registers the Step Functions engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|target, _base_dir| {
            let target = SfnTarget::from_manifest(target)?;
            Ok(std::sync::Arc::new(StepFunctionsEngine::new(target))
                as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

#[cfg(feature = "testing")]
pub mod testing;
