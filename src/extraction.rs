//! The background task that extracts the text of binary documents stored without it (portal
//! uploads, documents an older kennis stored): it works through `kb::extracted::Backlog` one
//! document at a time on a blocking thread, and looks for new work twice a second when idle.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::app::App;
use crate::kb::extracted::Backlog;

/// How long the task waits when there was nothing to do.
const IDLE: Duration = Duration::from_millis(500);

/// Runs until `stop` turns true.
pub fn start(app: &Arc<App>, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        let backlog = app.blocking(|app| Backlog::start(&app.store)).await;
        let mut backlog = match backlog {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "text extraction could not start; binary documents stay unsearched until a restart");
                return;
            }
        };
        loop {
            if *stop.borrow() {
                break;
            }
            let (back, worked) = app
                .blocking(move |app| {
                    let r =
                        backlog.step(&app.store, &app.kb_index, &app.extractor, app.clock.now());
                    (backlog, r)
                })
                .await;
            backlog = back;
            let idle = match worked {
                Ok(worked) => !worked,
                Err(e) => {
                    tracing::error!(error = %e, "text extraction failed; trying again shortly");
                    true
                }
            };
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(IDLE) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        }
    })
}
