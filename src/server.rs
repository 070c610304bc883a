//! The top floor: opens the store and the index, starts the agent workers, housekeeping and
//! the admin socket, and assembles the router from each area's `routes()`. Nothing imports
//! this module but the command line (`cli`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::admin::{self, AdminContext};
use crate::app::App;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::extraction;
use crate::http::{PeerAddr, acme, files, observe, tls};
use crate::store::StoreError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Open(#[from] crate::app::OpenError),
    #[error("{0}")]
    Startup(String),
    #[error(transparent)]
    Admin(#[from] admin::SocketError),
}

/// All routes of the service.
pub fn router(app: Arc<App>) -> Router {
    let clock = app.clock.clone();
    Router::new()
        .route("/", get(front_door))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/files/{token}", get(files::download))
        .merge(crate::connector::http::routes(app.clone()))
        .merge(crate::hooks::routes())
        .merge(crate::oauth::routes::routes(clock.clone()))
        .merge(crate::portal::routes(app.clone()))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            observe::observe,
        ))
        .with_state(app)
}

/// `GET /`: people who type the server's address land in the portal (which asks for a
/// login first).
async fn front_door() -> axum::response::Redirect {
    axum::response::Redirect::to("/portal")
}

/// What a request whose handler panicked gets: a plain 500, like any internal error. The
/// panic itself is logged once, without a backtrace, by [`install_panic_hook`].
fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(serde_json::json!({"message": "internal error"})),
    )
        .into_response()
}

/// Replaces the default panic output (a message and, with `RUST_BACKTRACE`, a backtrace on
/// stderr for every panic) by one log line per panic, and after the first 20 only every
/// power of two, so input that makes a handler panic cannot flood the logs.
pub fn install_panic_hook() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PANICS: AtomicU64 = AtomicU64::new(0);
    std::panic::set_hook(Box::new(|info| {
        let n = PANICS.fetch_add(1, Ordering::Relaxed) + 1;
        if n > 20 && !n.is_power_of_two() {
            return;
        }
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(%location, %message, panics = n, "panic (the request was answered 500)");
    }));
}

async fn healthz(State(app): State<Arc<App>>) -> impl IntoResponse {
    let store = app.store.clone();
    let ok = tokio::task::spawn_blocking(move || store.read(|tx| tx.count(crate::store::META)))
        .await
        .map(|r| r.is_ok())
        .unwrap_or(false);
    let mut body = if ok {
        serde_json::json!({"status": "ok"})
    } else {
        serde_json::json!({"status": "store unavailable"})
    };
    // With TLS: when the certificate in use expires (null while ACME has none yet).
    if app.config.tls.is_some() || app.config.acme.is_some() {
        let expiry = app.metrics.tls_cert_expiry.get();
        let at = (expiry > 0)
            .then(|| jiff::Timestamp::from_second(expiry).ok())
            .flatten();
        let certificate = serde_json::json!({
            "source": if app.config.acme.is_some() { "acme" } else { "files" },
            "expiresAt": at.map(|t| t.to_string()),
            "daysLeft": at.map(|t| t.duration_since(app.clock.now()).as_secs() / 86_400),
        });
        if let Some(o) = body.as_object_mut() {
            o.insert("certificate".into(), certificate);
        }
    }
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
}

/// A started server. Dropping it does not stop it; call [`RunningServer::shutdown`].
pub struct RunningServer {
    pub local_addr: SocketAddr,
    pub app: Arc<App>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    admin_task: tokio::task::JoinHandle<()>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningServer {
    pub fn public_url(&self) -> &str {
        &self.app.public_url
    }

    /// Stops accepting, lets in-flight requests finish, flushes the batch writer.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let _ = self.admin_task.await;
        for w in self.workers {
            let _ = w.await;
        }
        let app = self.app.clone();
        let _ = tokio::task::spawn_blocking(move || {
            app.batch.shutdown();
            app.commits.shutdown();
        })
        .await;
    }

    /// Waits until the server stops by itself (it does not, except on a fatal error).
    pub async fn stopped(&mut self) {
        let _ = (&mut self.task).await;
    }
}

/// Opens the data directory, binds the listener and starts serving.
pub async fn start(config: Config, clock: SharedClock) -> Result<RunningServer, ServerError> {
    let mut acme_tls = None;
    let mut file_expiry = None;
    let tls = match (&config.tls, &config.acme) {
        (Some(files), _) => {
            let (acceptor, expiry) = tls::acceptor(files).map_err(ServerError::Tls)?;
            file_expiry = expiry;
            Some(acceptor)
        }
        (None, Some(acme)) => {
            let setup = acme::setup(acme, &config.data_dir).map_err(ServerError::Tls)?;
            let acceptor = tokio_rustls::TlsAcceptor::from(setup.server_config.clone());
            acme_tls = Some(setup);
            Some(acceptor)
        }
        (None, None) => None,
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.listen,
        source,
    })?;
    let public_url = config.public_url.clone().unwrap_or_else(|| {
        let scheme = if tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{local_addr}")
    });
    let data_dir = config.data_dir.clone();
    let app = {
        let clock = clock.clone();
        tokio::task::spawn_blocking(move || App::open(config, public_url, clock))
            .await
            .map_err(|e| {
                ServerError::Startup(format!("opening the data directory stopped: {e}"))
            })??
    };
    if let Some(t) = file_expiry {
        app.metrics.tls_cert_expiry.set(t);
    }
    // The search vocabulary is read before the server answers (0.3 s at 1 GB): read by the
    // first search instead, it held every search of the first moments back that long (a
    // hundred assistants' search p99 went from 3.5 to 100 ms in the capacity benchmark).
    {
        let app = app.clone();
        let started = std::time::Instant::now();
        match tokio::task::spawn_blocking(move || app.kb_index.prepare_search()).await {
            Ok(Ok(words)) => tracing::info!(
                words,
                ms = started.elapsed().as_millis() as u64,
                "search vocabulary read"
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the search vocabulary ahead; the first search will")
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the search vocabulary stopped; the first search will read it")
            }
        }
    }
    let (stop, stop_rx) = watch::channel(false);
    let mut workers = crate::agents::start_workers(&app, stop_rx.clone())?;
    if let Some(acme_tls) = acme_tls {
        // Runs until shutdown: ordering and renewal never stop the server.
        let driver = acme_tls.drive(app.clone());
        let mut rx = stop_rx.clone();
        workers.push(tokio::spawn(async move {
            let _ = rx.wait_for(|s| *s).await;
            driver.abort();
        }));
    }
    workers.push(crate::housekeeping::start(&app, stop_rx.clone()));
    workers.push(crate::housekeeping::watch_index(&app, stop_rx.clone()));
    workers.push(crate::triggers::callback::start(&app, stop_rx.clone()));
    // Removals an interruption left unfinished (`org delete`, `user delete`) finish now.
    workers.push({
        let app = app.clone();
        tokio::task::spawn_blocking(move || {
            let close = |id| app.close_org(id);
            match crate::erase::finish_pending(&app.store, &app.kb_index, &close, &mut |_| {}) {
                Ok(0) => {}
                Ok(n) => tracing::info!(removals = n, "finished interrupted removals"),
                Err(e) => tracing::error!(error = %e, "could not finish an interrupted removal"),
            }
        })
    });
    if app.kb_index.with_extracted() {
        workers.push(extraction::start(&app, stop_rx.clone()));
    }
    let wait_stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let admin_ctx = AdminContext {
        store: app.store.clone(),
        data_dir,
        clock,
        kb_index: app.kb_index.clone(),
        public_url: app.public_url.clone(),
        extractor: app.extractor.clone(),
        llm_endpoints: app.config.llm.endpoints.clone(),
        callback_allow_http_loopback: app.config.callback_allow_http_loopback,
        terms_version: app.config.terms_version.clone(),
        // Weak: the admin task must not keep the store open past shutdown.
        wake_jobs: Some({
            let app = Arc::downgrade(&app);
            Arc::new(move |id| {
                if let Some(app) = app.upgrade() {
                    app.enqueue(id);
                }
            })
        }),
        stop_run: Some({
            let app = Arc::downgrade(&app);
            Arc::new(move |id| {
                if let Some(app) = app.upgrade() {
                    app.runs.stop(id);
                }
            })
        }),
        close_org: Some({
            let app = Arc::downgrade(&app);
            Arc::new(move |id| {
                if let Some(app) = app.upgrade() {
                    app.close_org(id);
                }
            })
        }),
    };
    let admin_shutdown = wait_stop(stop_rx.clone());
    let admin_listener = admin::bind_socket(&admin_ctx.data_dir)?;
    let admin_task = tokio::spawn(async move {
        if let Err(e) = admin::serve_socket(admin_ctx, admin_listener, admin_shutdown).await {
            tracing::error!(error = %e, "admin socket stopped");
        }
    });
    let service = router(app.clone()).into_make_service_with_connect_info::<PeerAddr>();
    let shutdown = wait_stop(stop_rx);
    let task = match tls {
        None => tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, service)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "server stopped");
            }
        }),
        Some(acceptor) => {
            let listener = tls::TlsListener::new(listener, local_addr, acceptor);
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, service)
                    .with_graceful_shutdown(shutdown)
                    .await
                {
                    tracing::error!(error = %e, "server stopped");
                }
            })
        }
    };
    Ok(RunningServer {
        local_addr,
        app,
        stop,
        task,
        admin_task,
        workers,
    })
}

/// A future that resolves on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled, so call it before announcing that the server
/// is up: a signal sent right after the announcement then stops it cleanly.
pub fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, ServerError> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind, name| {
        signal(kind)
            .map_err(|e| ServerError::Startup(format!("installing the {name} handler: {e}")))
    };
    let mut term = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut int = handler(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}
