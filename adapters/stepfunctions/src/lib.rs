//! The AWS Step Functions engine: a tool names a state machine, a call starts an execution,
//! and the execution is the task.
//!
//! | flowgate | Step Functions |
//! |---|---|
//! | start | `StartExecution`, always named: the tool's `execution_name` template, else the call's idempotency key |
//! | get | `GetExecutionHistory`, newest first, from where this instance last read (`DescribeExecution` with `history: false`), in turn within the budget |
//! | which executions ended | `ListExecutions` with statusFilter RUNNING, between reads |
//! | respond | `SendTaskSuccess` (accept) / `SendTaskFailure` (decline, cancel) with the waiting task token |
//! | cancel | `StopExecution` |
//! | list | `ListExecutions` |
//! | express workflows | `StartSyncExecution`, synchronous only, never a task |
//!
//! Status mapping: RUNNING and PENDING_REDRIVE -> working (input_required while a flowgate
//! input state waits on its task token), SUCCEEDED -> completed, FAILED and TIMED_OUT -> failed,
//! ABORTED -> cancelled, anything else -> unknown.
//!
//! **Exactly-once starts.** Every start is named, so a retried start (a lost answer, a timeout)
//! meets `ExecutionAlreadyExists`; the engine then describes that execution and adopts it only
//! when its input is the call's. Another input under the same name is a tool error naming the
//! clash, never another caller's execution. Template names that cleaning changed (`ann lee`,
//! `ann/lee`) or that were cut at 80 characters end with a digest of the rendered text, so
//! different values never share a name.
//!
//! **One call a read.** A history only grows, so each instance keeps, per execution, what it
//! has folded in (the open waits, the current state, the end) and reads only the newer events:
//! one `GetExecutionHistory` page per read in the steady state, however long the history, and
//! every open wait is found (a full read, oldest first and a few pages a poll, when an instance
//! first sees an execution). The closing
//! event carries the result, so a finished execution costs one call, then none: its record is
//! kept. Polls of one execution on one instance share one call (single flight), and a record
//! answers further polls for 1 s. Waits close on `TaskSucceeded`, `TaskFailed`,
//! `TaskTimedOut`, `TaskStateAborted` (a Parallel's failed sibling) and the execution's end.
//!
//! **Quota.** AWS throttles per account with token buckets (GetExecutionHistory refills
//! 20/s, DescribeExecution 15/s in the large regions and 10/s elsewhere, ListExecutions 5/s
//! and 2/s). Reads of running executions stay within 80% of the read refill: each execution
//! is read once per *cycle* (500 executions: 31 s), least recently read first, and a poll
//! between its reads shows the task as last read. When the cycle is longer than a listing
//! and a poll, ListExecutions (statusFilter RUNNING, 1,000 executions a page) tells which
//! executions ended: a listing runs about once a second, an execution it no longer shows is
//! read at its next poll, out of the same budget, and the advertised `pollIntervalMs` is that
//! shorter interval (2 s), the one in which a poll can learn of an end. Each instance finds its
//! share of the account from throttled answers (an adaptive rate per account bucket, see
//! [`flowgate_core::pacing`]), so any number of instances share it without a setting; a
//! throttled poll answers with the task as last seen, never an error. [`QUOTA_SHARE_ENV`]
//! caps what an instance takes when other software shares the account.
//! Every call has a deadline (3 s to connect, 5 s an attempt; StartSyncExecution 5 min), and
//! the SDK's own retries are off: the server's retry policy is the only one.
//!
//! **Client text.** Messages name the call and the state machine's name; ARNs and account ids
//! in AWS's messages are cut down to the resource (`execution:etl:run-1`) and masked. The full
//! error goes to the log.
//!
//! **Versions and aliases.** A `state_machine_arn` may carry `:VERSION` or `:ALIAS`: starts
//! go there, executions are the unqualified machine's.
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
//! The token is read from the key `TaskToken`, `taskToken` or `token` of the object that holds
//! the `flowgate` block, and from no other: a block whose token sits elsewhere asks nothing, and
//! the task's status message names the state and these keys while it waits.
//!
//! The task turns `input_required` with that elicitation, keyed `sfn-<history event id>`;
//! `tasks/update` accept sends the form content as the task output (`SendTaskSuccess`), decline
//! or cancel fail the task with `flowgate.Declined` / `flowgate.Cancelled`.

mod config;
mod ends;
mod engine;
mod error;
mod history;
mod mapping;
mod policy;
mod quota;
mod sync_host;

pub use config::{SfnTarget, WorkflowType};
pub use engine::StepFunctionsEngine;
pub use policy::{granted_actions, policies};
pub use quota::SHARE_ENV as QUOTA_SHARE_ENV;

/// The engine kind manifests name: `engine: stepfunctions`.
pub const KIND: &str = "stepfunctions";

/// Registers the Step Functions engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = SfnTarget::from_manifest(spec)?;
            quota::share().map_err(flowgate_core::TargetError::whole)?;
            Ok(std::sync::Arc::new(StepFunctionsEngine::new(target))
                as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

#[cfg(feature = "testing")]
pub mod testing;
