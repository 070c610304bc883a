//! The running service's shared domain services, and how they are opened.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use dashmap::DashMap;
use jiff::Timestamp;
use tokio::sync::{Notify, mpsc};

use crate::audit::gate::{CLOSE_WAIT, OrgGate};
use crate::audit::limits::ToolLimits;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::identity::LoginGuard;
use crate::identity::oidc::Oidc;
use crate::kb::KbError;
use crate::kb::extract::{Extractor, Limits};
use crate::kb::index::SearchIndex;
use crate::metrics::Metrics;
use crate::oauth::bearer_cache::BearerCache;
use crate::store::{BatchWriter, GroupCommit, Store, StoreError};

/// Directory of the search index inside the data directory.
pub const INDEX_DIR: &str = "index";

/// Why the service could not open its data directory.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] KbError),
    #[error("could not start a background writer's thread: {0}")]
    Thread(std::io::Error),
}

/// File in the data directory holding the server key (HMAC for signed links, …).
pub const SECRET_KEY_FILE: &str = "secret.key";

/// The domain services every area shares: store, index, clock, run queue, tool limits,
/// configuration and the metrics handle. No HTTP state lives here (rate limiters of the
/// endpoints belong to the routes that use them).
pub struct App {
    pub config: Config,
    /// Base URL without trailing slash: the OAuth issuer and base of every URL handed out.
    pub public_url: String,
    pub store: Store,
    pub clock: SharedClock,
    pub batch: BatchWriter,
    pub metrics: Metrics,
    pub server_key: [u8; 32],
    pub kb_index: Arc<SearchIndex>,
    pub tool_limits: ToolLimits,
    /// Shared commits for webhook deliveries: durable before the 202, many per fsync.
    pub commits: GroupCommit,
    /// Wakes the agent workers for stored, queued runs.
    pub runs: RunQueue,
    /// When each grant's last use was last queued for writing (throttles the batch writer).
    pub grant_use_stamped: DashMap<u64, Timestamp>,
    /// Bearer checks that passed, while nothing they read has changed.
    pub bearer_cache: BearerCache,
    /// The same for personal access tokens.
    pub pat_use_stamped: DashMap<u64, Timestamp>,
    /// Password and second-factor checks: failure counts and the bounded hashing pool.
    pub login: LoginGuard,
    /// Takes the text of PDF and Office files in a sandboxed child process.
    pub extractor: Extractor,
    /// Sign-in with the `[[oidc]]` providers: their cached discovery and keys, and limits.
    pub oidc: Oidc,
    /// Passes for an organisation's in-flight calls, closed when its removal begins.
    pub org_gate: OrgGate,
}

impl App {
    /// Opens the store, the server key and the search index (catching it up with the store),
    /// and starts the background writer.
    pub fn open(
        config: Config,
        public_url: String,
        clock: SharedClock,
    ) -> Result<Arc<App>, OpenError> {
        let store = Store::open(&config.data_dir)?;
        let server_key = load_or_create_key(&config.data_dir)?;
        let kb_index = Arc::new(SearchIndex::open(
            &config.data_dir.join(INDEX_DIR),
            config.extract_text,
        )?);
        let extractor = extractor(&config);
        let caught_up = kb_index.catch_up(&store)?;
        if caught_up > 0 {
            tracing::info!(changes = caught_up, "search index caught up with the store");
        }
        let tool_limits = ToolLimits::restore(&store, clock.now())?;
        let batch = BatchWriter::start(store.clone()).map_err(OpenError::Thread)?;
        let commits = GroupCommit::start(store.clone()).map_err(OpenError::Thread)?;
        let login = LoginGuard::new(clock.clone(), crate::identity::login::hashers());
        let oidc = Oidc::new(&config, &public_url, server_key, clock.clone());
        Ok(Arc::new(App {
            bearer_cache: BearerCache::new(&store),
            grant_use_stamped: DashMap::new(),
            pat_use_stamped: DashMap::new(),
            config,
            public_url,
            store,
            clock,
            batch,
            metrics: Metrics::new(),
            server_key,
            kb_index,
            tool_limits,
            commits,
            runs: RunQueue::new(),
            login,
            extractor,
            oidc,
            org_gate: OrgGate::default(),
        }))
    }

    /// Runs blocking work (redb transactions, argon2) off the async workers.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&App) -> T + Send + 'static,
    ) -> T {
        let app = self.clone();
        match tokio::task::spawn_blocking(move || f(&app)).await {
            Ok(v) => v,
            // The work panicked: the same panic goes on in the caller (a request's handler,
            // where the catch-panic layer answers 500). Cancelled happens only while the
            // runtime shuts down.
            Err(e) => match e.try_into_panic() {
                Ok(payload) => std::panic::resume_unwind(payload),
                Err(e) => std::panic::resume_unwind(Box::new(format!("blocking task: {e}"))),
            },
        }
    }

    /// Runs `f`, which may take a while, from code that may be on one of the runtime's async
    /// workers (a tool run inline, [`crate::tools::ToolSpec::quick`]): there it first hands
    /// the worker's other tasks to another thread (`block_in_place`), so they do not wait for
    /// it; elsewhere (a blocking thread, a current-thread runtime, no runtime) it just runs.
    pub fn long_work<T>(f: impl FnOnce() -> T) -> T {
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(f)
            }
            _ => f(),
        }
    }

    /// The one way to hand a stored, queued agent job (a trigger's run or a feature request's
    /// job) to the workers: counts it in the queue gauge, which the worker that picks it up
    /// counts down again, and wakes a worker.
    pub fn enqueue(&self, id: u64) {
        self.metrics.run_queue.inc();
        self.runs.wake(id);
    }

    /// The removal of organisation `org_id` has begun (it is hidden): its calls still in
    /// flight end first, none starts any more, and every record they queued for the batch
    /// writer is committed when this returns, before the removal sweeps those tables.
    pub fn close_org(&self, org_id: u64) {
        self.org_gate.close(org_id, CLOSE_WAIT);
        self.batch.flush();
    }

    /// The connector's URL: the OAuth audience and what people paste into an assistant.
    pub fn connector_url(&self) -> String {
        format!("{}{}", self.public_url, crate::config::CONNECTOR_PATH)
    }
}

/// Wakes workers for runs that are stored and queued, and stops runs that were cancelled.
pub struct RunQueue {
    tx: mpsc::UnboundedSender<u64>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<u64>>>,
    /// The runs a worker is executing, with the signal that stops each.
    running: Mutex<HashMap<u64, Arc<Notify>>>,
}

impl Default for RunQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl RunQueue {
    pub fn new() -> RunQueue {
        let (tx, rx) = mpsc::unbounded_channel();
        RunQueue {
            tx,
            rx: Mutex::new(Some(rx)),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Hands a stored, queued run to the workers.
    pub fn wake(&self, run_id: u64) {
        let _ = self.tx.send(run_id);
    }

    /// Stops the executor of run `run_id` if a worker is executing it (its slot is then free
    /// for the next run). The run's status is the caller's to set (see [`cancel_run`]).
    pub fn stop(&self, run_id: u64) {
        if let Some(signal) = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run_id)
        {
            // `notify_one` keeps the signal if the worker is not waiting yet.
            signal.notify_one();
        }
    }

    /// Marks run `run_id` as executing; the signal stops it ([`RunQueue::stop`]).
    pub fn enter(&self, run_id: u64) -> Arc<Notify> {
        let signal = Arc::new(Notify::new());
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(run_id, signal.clone());
        signal
    }

    /// Run `run_id` no longer executes.
    pub fn leave(&self, run_id: u64) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&run_id);
    }

    /// The receiving end, for the workers: taken once (`None` the second time).
    pub fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<u64>> {
        self.rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The extractor for this configuration: `kennis extract-worker` children of this executable
/// (or of `extract_program`), with the knowledge base's limits.
pub fn extractor(config: &Config) -> Extractor {
    let program = config
        .extract_program
        .clone()
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| "kennis".into());
    Extractor::new(program, Limits::DEFAULT)
}

/// Reads `secret.key`, or creates it (32 random bytes, mode 0600) on first start.
pub fn load_or_create_key(data_dir: &Path) -> Result<[u8; 32], StoreError> {
    let path = data_dir.join(SECRET_KEY_FILE);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    match std::fs::read(&path) {
        Ok(bytes) => bytes.try_into().map_err(|_| StoreError::Io {
            path: path.clone(),
            source: std::io::Error::other("server key must be exactly 32 bytes"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::io::Write;
            let key: [u8; 32] = rand::random();
            let tmp = data_dir.join(".secret.key.tmp");
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            let mut f = opts.open(&tmp).map_err(io)?;
            f.write_all(&key).and_then(|_| f.sync_all()).map_err(io)?;
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(key)
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::App;

    /// [`App::long_work`] runs its work wherever it is called from: outside a runtime, on a
    /// current-thread runtime (where `block_in_place` would panic), on a multi-thread
    /// runtime's worker, in its `block_on` and on its blocking threads.
    #[test]
    fn long_work_runs_on_every_kind_of_thread() {
        assert_eq!(App::long_work(|| 1), 1);
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(current.block_on(async { App::long_work(|| 2) }), 2);
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        assert_eq!(multi.block_on(async { App::long_work(|| 3) }), 3);
        let on_worker =
            multi.block_on(async { tokio::spawn(async { App::long_work(|| 4) }).await.unwrap() });
        assert_eq!(on_worker, 4);
        let on_blocking = multi.block_on(async {
            tokio::task::spawn_blocking(|| App::long_work(|| 5))
                .await
                .unwrap()
        });
        assert_eq!(on_blocking, 5);
    }
}
