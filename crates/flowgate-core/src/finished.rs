//! The records of executions that ended, kept in one engine's process: a terminal answer is
//! final (a task that read `completed` never reads anything else, even if someone reruns the
//! execution on the engine), so polling it again costs the engine no read at all, where an
//! ended execution's record is often the dearest to build (logs, artifacts, job lists, task
//! results). Bounded: the oldest entries leave first, and a forgotten one is simply read from
//! the engine again. Keyed by whatever the engine names executions by.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;

use crate::ExecutionRecord;

/// How many ended executions one engine remembers.
pub const CAPACITY: usize = 1024;

/// Ended executions' records by key, at most [`CAPACITY`].
#[derive(Debug)]
pub struct Finished<K> {
    inner: Mutex<(HashMap<K, ExecutionRecord>, VecDeque<K>)>,
}

impl<K> Default for Finished<K> {
    fn default() -> Self {
        Finished {
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }
}

impl<K: Hash + Eq + Clone> Finished<K> {
    /// The record kept for `key`, if its execution ended and is still remembered.
    pub fn get<Q>(&self, key: &Q) -> Option<ExecutionRecord>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(key).cloned()
    }

    /// Remembers `record` for `key` if it is terminal.
    pub fn keep(&self, key: K, record: &ExecutionRecord) {
        if !record.state.is_terminal() {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(key.clone(), record.clone()).is_none() {
            order.push_back(key);
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
    use crate::TaskState;

    #[test]
    fn only_terminal_records_are_kept_and_the_oldest_leave_first() {
        let f = Finished::<u64>::default();
        let at = chrono::Utc::now();
        f.keep(1, &ExecutionRecord::new(TaskState::Working, "running", at));
        assert!(f.get(&1).is_none());
        for id in 0..(CAPACITY as u64 + 1) {
            f.keep(
                id,
                &ExecutionRecord::new(TaskState::Completed, "success", at),
            );
        }
        assert!(f.get(&0).is_none(), "the oldest left");
        assert!(f.get(&(CAPACITY as u64)).is_some());
        let named = Finished::<String>::default();
        named.keep(
            "run".into(),
            &ExecutionRecord::new(TaskState::Failed, "failed", at),
        );
        assert!(named.get("run").is_some(), "looked up by &str");
    }
}
