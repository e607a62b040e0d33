//! The records of DAG runs that ended, kept in this process: a task's terminal answer is final
//! (even if someone later clears the run in Airflow and it runs again), so polling it again costs
//! no task list, XCom or log read. Bounded; the oldest entries leave first, and a forgotten one
//! is simply read from Airflow again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use flowgate_core::ExecutionRecord;

/// How many finished DAG runs one engine remembers.
const CAPACITY: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Finished {
    inner: Mutex<(HashMap<String, ExecutionRecord>, VecDeque<String>)>,
}

impl Finished {
    pub(crate) fn get(&self, run: &str) -> Option<ExecutionRecord> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(run).cloned()
    }

    /// Remembers `record` if it is terminal.
    pub(crate) fn keep(&self, run: &str, record: &ExecutionRecord) {
        if !record.state.is_terminal() {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(run.to_owned(), record.clone()).is_none() {
            order.push_back(run.to_owned());
            while order.len() > CAPACITY {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowgate_core::TaskState;

    #[test]
    fn only_terminal_records_are_kept_and_the_oldest_leave_first() {
        let f = Finished::default();
        let at = chrono::Utc::now();
        f.keep(
            "w",
            &ExecutionRecord::new(TaskState::Working, "running", at),
        );
        assert!(f.get("w").is_none());
        for id in 0..=CAPACITY {
            f.keep(
                &id.to_string(),
                &ExecutionRecord::new(TaskState::Completed, "success", at),
            );
        }
        assert!(f.get("0").is_none(), "the oldest left");
        assert!(f.get(&CAPACITY.to_string()).is_some());
    }
}
