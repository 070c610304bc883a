//! A background writer for high-rate appends (audit records, last-use stamps). One redb commit
//! costs an fsync; batching many records into one commit keeps request latency free of it.
//!
//! Promise: a record handed to [`BatchWriter::append`] is durable within [`MAX_DELAY`] plus
//! one commit, and [`BatchWriter::shutdown`] commits everything handed in before it returns.

use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::TableHandle;

use super::{Store, Table, encode};

/// How long a record may wait for company before its batch is committed.
pub const MAX_DELAY: Duration = Duration::from_millis(50);
/// The most records in one commit.
pub const MAX_BATCH: usize = 2048;

enum Msg {
    Append {
        table: Table,
        /// `None`: the writer assigns the next number of the table's own sequence.
        key: Option<Vec<u8>>,
        value: Vec<u8>,
    },
    Flush(Sender<()>),
}

/// Handle to the writer thread. Dropping it without [`shutdown`](Self::shutdown) still
/// commits what was queued, but does not wait for it.
pub struct BatchWriter {
    tx: Mutex<Option<Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl BatchWriter {
    /// Starts the writer's thread; `Err` when the system gives no thread.
    pub fn start(store: Store) -> std::io::Result<BatchWriter> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kennis-batch-writer".into())
            .spawn(move || run(store, rx))?;
        Ok(BatchWriter {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues a record under an explicit key.
    pub fn put<R: serde::Serialize>(&self, table: Table, key: Vec<u8>, record: &R) {
        self.send(Msg::Append {
            table,
            key: Some(key),
            value: encode(record),
        });
    }

    /// Queues a record under the next sequence number of `table` (named after the table).
    pub fn append<R: serde::Serialize>(&self, table: Table, record: &R) {
        self.send(Msg::Append {
            table,
            key: None,
            value: encode(record),
        });
    }

    /// Waits until everything queued before this call is committed.
    pub fn flush(&self) {
        let (done_tx, done_rx) = mpsc::channel();
        self.send(Msg::Flush(done_tx));
        self.wake();
        let _ = done_rx.recv();
    }

    /// Commits everything queued and stops the thread; later appends are dropped.
    pub fn shutdown(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.wake();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }

    /// Ends the writer's wait for company early.
    fn wake(&self) {
        if let Some(t) = &*self.thread.lock().unwrap_or_else(PoisonError::into_inner) {
            t.thread().unpark();
        }
    }

    fn send(&self, msg: Msg) {
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(PoisonError::into_inner) {
            // The thread only ends after the sender is dropped, so this cannot fail while
            // `self` is alive, short of a panic in the writer, which is logged there.
            let _ = tx.send(msg);
        }
    }
}

fn run(store: Store, rx: Receiver<Msg>) {
    let mut open = true;
    while open {
        let first = match rx.recv() {
            Ok(m) => m,
            Err(_) => break,
        };
        let deadline = Instant::now() + MAX_DELAY;
        // A flush is answered at once, with what has come so far.
        let mut urgent = matches!(first, Msg::Flush(_));
        let mut batch = vec![first];
        // The records that arrive meanwhile are taken when the delay is over, not one by one
        // as they come: waking for each cost a thread switch per record (at 10,000 tool calls
        // a second, a fifth of the server's time went to switching threads).
        // [`BatchWriter::flush`] and [`BatchWriter::shutdown`] wake the thread early.
        while batch.len() < MAX_BATCH && open && !urgent {
            match rx.try_recv() {
                Ok(m) => {
                    urgent = matches!(m, Msg::Flush(_));
                    batch.push(m);
                }
                Err(TryRecvError::Disconnected) => open = false,
                Err(TryRecvError::Empty) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
        let mut waiters = Vec::new();
        if let Err(e) = commit(&store, batch, &mut waiters) {
            tracing::error!(error = %e, "batch writer could not commit; records of this batch are lost");
        }
        for w in waiters {
            let _ = w.send(());
        }
    }
}

fn commit(
    store: &Store,
    batch: Vec<Msg>,
    waiters: &mut Vec<Sender<()>>,
) -> Result<(), super::StoreError> {
    store.write(|tx| {
        for msg in batch {
            match msg {
                Msg::Append { table, key, value } => {
                    let key = match key {
                        Some(k) => k,
                        None => tx
                            .next_id(&format!("table:{}", table.name()))?
                            .to_be_bytes()
                            .to_vec(),
                    };
                    tx.put_raw(table, &key, &value)?;
                }
                Msg::Flush(w) => waiters.push(w),
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::super::AUDIT;
    use super::*;

    #[test]
    fn appends_are_committed_in_order_and_shutdown_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let writer = BatchWriter::start(store.clone()).unwrap();
        for i in 0..5000u32 {
            writer.append(AUDIT, &i);
        }
        writer.shutdown();
        let rows: Vec<(Vec<u8>, u32)> = store.read(|tx| tx.scan(AUDIT, b"")).unwrap();
        assert_eq!(rows.len(), 5000);
        assert!(rows.iter().enumerate().all(|(i, r)| r.1 == i as u32));
    }

    #[test]
    fn flush_makes_records_visible() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let writer = BatchWriter::start(store.clone()).unwrap();
        writer.put(AUDIT, b"k".to_vec(), &"v");
        writer.flush();
        let v: Option<String> = store.read(|tx| tx.get(AUDIT, b"k")).unwrap();
        assert_eq!(v.as_deref(), Some("v"));
    }

    #[test]
    fn parallel_appends_and_flushes_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let writer = std::sync::Arc::new(BatchWriter::start(store.clone()).unwrap());
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        writer.put(AUDIT, (t * 1000 + i).to_be_bytes().to_vec(), &i);
                        if i % 250 == 0 {
                            writer.flush();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        writer.flush();
        assert_eq!(store.read(|tx| tx.count(AUDIT)).unwrap(), 8000);
        writer.shutdown();
    }
}
