//! A small supervisor of named tasks: the running worker's source, data
//! path, maintenance loop and telemetry each run as one, and the worker
//! decides how to stop from which task ended first and how.
//!
//! - Every task has a name: a task that panics or is cancelled becomes
//!   [`WorkerError::Task`] naming it, wherever it is noticed.
//! - [`Tasks::next`] gives the first task to end, so a failure is seen
//!   when it happens, not when the stop reaches that task.
//! - Dropping [`Tasks`] aborts every task left: a stop abandoned at its
//!   deadline keeps nothing running (nothing more is stored, acknowledged
//!   or checkpointed).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{AbortHandle, Id, JoinError, JoinSet};

use super::error::WorkerError;

/// Named tasks, each returning `Result<T, WorkerError>`; aborted together
/// when dropped.
pub(super) struct Tasks<T> {
    set: JoinSet<Result<T, WorkerError>>,
    names: HashMap<Id, &'static str>,
    handles: HashMap<&'static str, AbortHandle>,
}

impl<T> std::fmt::Debug for Tasks<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("running", &self.names.values().collect::<Vec<_>>())
            .finish()
    }
}

impl<T: Send + 'static> Tasks<T> {
    pub(super) fn new() -> Self {
        Tasks {
            set: JoinSet::new(),
            names: HashMap::new(),
            handles: HashMap::new(),
        }
    }

    /// Starts `task` under `name`.
    pub(super) fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<T, WorkerError>> + Send + 'static,
    {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name);
        self.handles.insert(name, handle);
    }

    /// Aborts the task `name`, if running (it then ends as cancelled).
    pub(super) fn abort(&mut self, name: &'static str) {
        if let Some(handle) = self.handles.remove(name) {
            handle.abort();
        }
    }

    /// The next task to end, by name, with what it returned (a panic or a
    /// cancellation as [`WorkerError::Task`]); `None` once none is left.
    pub(super) async fn next(&mut self) -> Option<(&'static str, Result<T, WorkerError>)> {
        let joined = self.set.join_next_with_id().await?;
        Some(match joined {
            Ok((id, result)) => (self.name(id), result),
            Err(e) => self.failed(e),
        })
    }

    /// Waits for every task left. Their values by name once all ended, or
    /// the first error (in the order they ended): the others are still
    /// waited for, so a stop in progress finishes.
    pub(super) async fn join_all(mut self) -> Result<Vec<(&'static str, T)>, WorkerError> {
        let mut values = Vec::new();
        let mut first_error = None;
        while let Some((name, result)) = self.next().await {
            match result {
                Ok(value) => values.push((name, value)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(values),
        }
    }

    /// Waits at most `time` for the task `name` to end and returns what it
    /// returned; `None` if it did not end in time or is not running. Tasks
    /// that end meanwhile are dropped from the set, their results with them
    /// (this is for a stop already decided).
    pub(super) async fn wait_for(
        &mut self,
        name: &'static str,
        time: Duration,
    ) -> Option<Result<T, WorkerError>> {
        let found = async {
            while let Some((ended, result)) = self.next().await {
                if ended == name {
                    return Some(result);
                }
            }
            None
        };
        tokio::time::timeout(time, found).await.ok().flatten()
    }

    fn name(&mut self, id: Id) -> &'static str {
        // Every task is spawned with a name; "task" keeps a missing one
        // reportable rather than a panic of its own.
        let name = self.names.remove(&id).unwrap_or("task");
        self.handles.remove(name);
        name
    }

    fn failed(&mut self, e: JoinError) -> (&'static str, Result<T, WorkerError>) {
        let task = self.name(e.id());
        (task, Err(WorkerError::Task { task, source: e }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test(start_paused = true)]
    async fn tasks_end_in_order_by_name_and_a_panic_names_its_task() {
        let mut tasks: Tasks<u32> = Tasks::new();
        tasks.spawn("slow", async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok(2)
        });
        tasks.spawn("fast", async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(1)
        });
        tasks.spawn("broken", async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            panic!("a bug")
        });
        let (name, result) = tasks.next().await.unwrap();
        assert_eq!((name, result.unwrap()), ("fast", 1));
        let (name, result) = tasks.next().await.unwrap();
        assert_eq!((name, result.unwrap()), ("slow", 2));
        let (name, result) = tasks.next().await.unwrap();
        assert_eq!(name, "broken");
        match result {
            Err(WorkerError::Task { task, source }) => {
                assert_eq!(task, "broken");
                assert!(source.is_panic());
            }
            other => panic!("expected a task error, got {other:?}"),
        }
        assert!(tasks.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn join_all_waits_for_every_task_and_returns_the_first_error() {
        let mut tasks: Tasks<()> = Tasks::new();
        let last_finished = Arc::new(AtomicBool::new(false));
        let flag = last_finished.clone();
        tasks.spawn("first failure", async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(WorkerError::PipelineStopped)
        });
        tasks.spawn("later failure", async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Err(WorkerError::ShutdownTimeout {
                timeout: Duration::ZERO,
            })
        });
        tasks.spawn("last", async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        let result = tasks.join_all().await;
        assert!(
            matches!(result, Err(WorkerError::PipelineStopped)),
            "{result:?}"
        );
        assert!(
            last_finished.load(Ordering::SeqCst),
            "every task waited for"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_is_bounded_and_dropping_the_tasks_aborts_them() {
        let mut tasks: Tasks<()> = Tasks::new();
        let ran_on = Arc::new(AtomicBool::new(false));
        let flag = ran_on.clone();
        tasks.spawn("stuck", async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        tasks.spawn("quick", async { Ok(()) });
        let started = tokio::time::Instant::now();
        assert!(
            tasks
                .wait_for("stuck", Duration::from_secs(5))
                .await
                .is_none()
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        drop(tasks);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(!ran_on.load(Ordering::SeqCst), "aborted when dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_task_ends_as_cancelled_and_drops_what_it_held() {
        let mut tasks: Tasks<()> = Tasks::new();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        tasks.spawn("pipeline", async move {
            let _held = tx;
            std::future::pending().await
        });
        tasks.abort("pipeline");
        let (name, result) = tasks.next().await.unwrap();
        assert_eq!(name, "pipeline");
        assert!(matches!(result, Err(WorkerError::Task { source, .. }) if source.is_cancelled()));
        assert!(rx.recv().await.is_none(), "its sender dropped");
        tasks.abort("pipeline");
    }
}
