//! Group commit: many small write transactions from concurrent requests share one redb commit
//! (one fsync), each caller still learning only after the commit that its write is durable.
//! Webhook deliveries use it so a run is durable before its 202 at well over one commit's rate.
//!
//! Jobs run one after another inside the shared transaction, so each sees the writes of the
//! jobs before it (a slot check followed by a run creation stays atomic per job). If any job
//! returns an error, the whole batch is discarded and every job of it gets an error: store
//! errors are rare and a half-applied batch would be worse.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, PoisonError};

use super::{Store, StoreError, WriteTx};

/// The most jobs in one commit.
pub const MAX_GROUP: usize = 512;

type Reply = Box<dyn FnOnce(Result<(), String>) + Send>;
type Job = Box<dyn FnOnce(&mut WriteTx) -> Result<Reply, StoreError> + Send>;

/// Handle to the committing thread; it stops when the handle is dropped or shut down.
pub struct GroupCommit {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl GroupCommit {
    /// Starts the writer's thread; `Err` when the system gives no thread.
    pub fn start(store: Store) -> std::io::Result<GroupCommit> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kennis-group-commit".into())
            .spawn(move || run(store, rx))?;
        Ok(GroupCommit {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Commits what was handed in and stops the thread (releasing its handle on the store);
    /// later writes fail.
    pub fn shutdown(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }

    /// Runs `f` in a shared write transaction and returns its value once that transaction is
    /// durably committed.
    pub async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WriteTx) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (done, wait) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |tx| {
            let value = f(tx)?;
            Ok(Box::new(move |committed: Result<(), String>| {
                let _ = done.send(committed.map(|()| value).map_err(StoreError::Db));
            }) as Reply)
        });
        let sent = match &*self.tx.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(tx) => tx.send(job).is_ok(),
            None => false,
        };
        if !sent {
            return Err(StoreError::Db("the commit thread stopped".into()));
        }
        wait.await
            .unwrap_or_else(|_| Err(StoreError::Db("the commit thread stopped".into())))
    }
}

fn run(store: Store, rx: Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut replies = Vec::with_capacity(jobs.len());
        let outcome = store.write(|tx| {
            for job in jobs {
                replies.push(job(tx)?);
            }
            Ok::<(), StoreError>(())
        });
        match outcome {
            Ok(()) => replies.into_iter().for_each(|r| r(Ok(()))),
            Err(e) => {
                tracing::error!(error = %e, "group commit failed");
                // Jobs that ran before the failure learn it; jobs after it never ran and their
                // callers see the dropped reply channel as an error.
                replies.into_iter().for_each(|r| r(Err(e.to_string())));
            }
        }
    }
}
