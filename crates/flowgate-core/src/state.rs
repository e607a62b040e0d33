//! The seven task states and the moves between them.

use serde::{Deserialize, Serialize};

/// The life-cycle state of a task, as the SEP-1686 design names them.
///
/// Adapters map their engine's own statuses onto these; the server then projects them onto
/// whichever wire dialect the client speaks (see [`crate::wire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Accepted by the engine but not yet running (queued).
    Submitted,
    /// Running.
    Working,
    /// Running, and waiting for an answer from the client.
    InputRequired,
    /// Finished; the engine has a result (which may itself describe a failure of the workflow).
    Completed,
    /// Finished without a result.
    Failed,
    /// Stopped on request.
    Cancelled,
    /// The engine reported something the adapter does not understand. Terminal, never a guess.
    Unknown,
}

impl TaskState {
    /// Every state, in declaration order (for exhaustive tests and tables).
    pub const ALL: [TaskState; 7] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
        TaskState::Unknown,
    ];

    /// Whether the task can never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Cancelled | TaskState::Unknown
        )
    }

    /// Whether a task may move from `self` to `next` under the SEP-1686 rules.
    ///
    /// Staying in the same state is always allowed (two polls that see no change). Terminal
    /// states never move; nothing moves back to `submitted`.
    pub fn can_transition_to(self, next: TaskState) -> bool {
        if self == next {
            return true;
        }
        match self {
            TaskState::Submitted => next != TaskState::Submitted,
            TaskState::Working => next != TaskState::Submitted,
            TaskState::InputRequired => next != TaskState::Submitted,
            TaskState::Completed
            | TaskState::Failed
            | TaskState::Cancelled
            | TaskState::Unknown => false,
        }
    }

    /// The state's snake_case name, as it appears in logs and on the SEP-1686 wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::TaskState::{self, *};

    /// The whole 7x7 table, written out by hand from SEP-1686 section 4.3.
    #[test]
    fn transitions_match_the_sep_table_exhaustively() {
        let allowed: &[(TaskState, &[TaskState])] = &[
            (
                Submitted,
                &[
                    Submitted,
                    Working,
                    InputRequired,
                    Completed,
                    Failed,
                    Cancelled,
                    Unknown,
                ],
            ),
            (
                Working,
                &[
                    Working,
                    InputRequired,
                    Completed,
                    Failed,
                    Cancelled,
                    Unknown,
                ],
            ),
            (
                InputRequired,
                &[
                    InputRequired,
                    Working,
                    Completed,
                    Failed,
                    Cancelled,
                    Unknown,
                ],
            ),
            (Completed, &[Completed]),
            (Failed, &[Failed]),
            (Cancelled, &[Cancelled]),
            (Unknown, &[Unknown]),
        ];
        let mut checked = 0;
        for (from, tos) in allowed {
            for to in TaskState::ALL {
                assert_eq!(
                    from.can_transition_to(to),
                    tos.contains(&to),
                    "{from} -> {to}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 49);
    }

    #[test]
    fn terminal_states_are_the_four_the_sep_names() {
        let terminal: Vec<_> = TaskState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, vec![Completed, Failed, Cancelled, Unknown]);
    }

    #[test]
    fn names_round_trip_through_serde() {
        for s in TaskState::ALL {
            let json = serde_json::to_string(&s).expect("serialize");
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            let back: TaskState = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, s);
        }
    }
}
