//! The records of pipelines that ended, kept in this process: a finished pipeline's answer
//! cannot change (a terminal answer is final), so polling it again costs no trace download,
//! no artifact download and no job list. Bounded; the oldest entries leave first, and a
//! forgotten one is simply read from GitLab again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use flowgate_core::ExecutionRecord;

/// How many finished pipelines one engine remembers.
const CAPACITY: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Finished {
    inner: Mutex<(HashMap<u64, ExecutionRecord>, VecDeque<u64>)>,
}

impl Finished {
    pub(crate) fn get(&self, pipeline: u64) -> Option<ExecutionRecord> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(&pipeline).cloned()
    }

    /// Remembers `record` if it is terminal.
    pub(crate) fn keep(&self, pipeline: u64, record: &ExecutionRecord) {
        if !record.state.is_terminal() {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(pipeline, record.clone()).is_none() {
            order.push_back(pipeline);
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
        f.keep(1, &ExecutionRecord::new(TaskState::Working, "running", at));
        assert!(f.get(1).is_none());
        for id in 0..(CAPACITY as u64 + 1) {
            f.keep(
                id,
                &ExecutionRecord::new(TaskState::Completed, "success", at),
            );
        }
        assert!(f.get(0).is_none(), "the oldest left");
        assert!(f.get(CAPACITY as u64).is_some());
    }
}
