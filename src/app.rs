//! The running service's shared state, and its start and stop.

use std::path::Path;
use std::sync::Arc;

use crate::agents::RunQueue;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::http::metrics::Metrics;
use crate::store::{BatchWriter, GroupCommit, Store, StoreError};

/// File in the data directory holding the server key (HMAC for signed links, …).
pub const SECRET_KEY_FILE: &str = "secret.key";

/// Everything request handlers share.
pub struct App {
    pub config: Config,
    /// Base URL without trailing slash: the OAuth issuer and base of every URL handed out.
    pub public_url: String,
    pub store: Store,
    pub clock: SharedClock,
    pub batch: BatchWriter,
    pub metrics: Metrics,
    pub server_key: [u8; 32],
    /// Shared commits for webhook deliveries: durable before the 202, many per fsync.
    pub commits: GroupCommit,
    /// Wakes the agent workers for stored, queued runs.
    pub runs: RunQueue,
    /// Rate limits and throttles of the authorization server and portal.
    pub oauth: Arc<crate::oauth::OAuthState>,
}

impl App {
    /// Opens the store and the server key, and starts the background writer.
    pub fn open(
        config: Config,
        public_url: String,
        clock: SharedClock,
    ) -> Result<Arc<App>, StoreError> {
        let store = Store::open(&config.data_dir)?;
        let server_key = load_or_create_key(&config.data_dir)?;
        let batch = BatchWriter::start(store.clone());
        let commits = GroupCommit::start(store.clone());
        let oauth = crate::oauth::OAuthState::new(clock.clone());
        Ok(Arc::new(App {
            oauth,
            config,
            public_url,
            store,
            clock,
            batch,
            metrics: Metrics::new(),
            server_key,
            commits,
            runs: RunQueue::new(),
        }))
    }

    /// Runs blocking work (redb transactions, argon2) off the async workers.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&App) -> T + Send + 'static,
    ) -> T {
        let app = self.clone();
        tokio::task::spawn_blocking(move || f(&app))
            .await
            .expect("blocking task panicked")
    }

    /// The connector's URL: the OAuth audience and what people paste into an assistant.
    pub fn connector_url(&self) -> String {
        format!("{}/mcp/kennisbank", self.public_url)
    }
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
