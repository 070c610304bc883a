//! Run callbacks, the sending half (DESIGN.md "Run callbacks"; the durable records are
//! `requests::callback`): when a run of a trigger with a `callback_url` ends, kennis POSTs
//! `{"type": "run.finished", "run": {…}}` — the run as `GET /api/hooks/runs/:id` shows it —
//! signed the Standard Webhooks way with the trigger's signing secret (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`).
//!
//! The URL is checked when the trigger is saved ([`check_url`]) and again before every attempt
//! (`crate::outbound`: public addresses only, pinned, no redirects). An attempt that gets no 2xx
//! within [`TIMEOUT`] is retried with backoff (`requests::callback::retry_wait`), across
//! restarts, with the same `webhook-id`.
//!
//! One task ([`start`]) looks for due callbacks a few times a second and sends each in its own
//! task: at most [`POOL`] at once and at most [`PER_ORG`] for one organisation, so a slow or
//! dead receiver holds only its own organisation's share and never a worker, a hook request or
//! another organisation's callbacks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::signature::{key_bytes, sign_standard};
use super::{RunView, Trigger, TriggerError};
use crate::app::App;
use crate::audit::{self, Actor};
use crate::outbound::{self, Guard};
use crate::requests::{self, callback as record};
use crate::store::StoreError;

/// How long one attempt may take, from resolving the name to the answer's status.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Callbacks sent at once, over all organisations.
pub const POOL: usize = 64;
/// Callbacks of one organisation sent at once.
pub const PER_ORG: usize = 16;
/// How often the sender looks for due callbacks.
const TICK: Duration = Duration::from_millis(200);
/// Longest callback URL accepted.
pub const MAX_URL_LEN: usize = 2000;
/// The event type of the one callback kennis sends.
pub const EVENT_TYPE: &str = "run.finished";

fn refused(url: &str, why: impl std::fmt::Display) -> TriggerError {
    let shown: String = url.chars().take(200).collect();
    TriggerError::InvalidInput(format!("the callback_url `{shown}` is refused: {why}"))
}

/// Checks a callback URL's form: https (or, with the test switch, `http://127.0.0.1:<port>`), a
/// host, no user information, no fragment.
fn check_form(raw: &str, allow_http_loopback: bool) -> Result<url::Url, TriggerError> {
    if raw.len() > MAX_URL_LEN {
        return Err(refused(
            raw,
            format!("it is longer than {MAX_URL_LEN} characters"),
        ));
    }
    let url = url::Url::parse(raw).map_err(|_| refused(raw, "it is not a URL"))?;
    let loopback = outbound::loopback_allowed(&url, allow_http_loopback);
    if url.scheme() != "https" && !loopback {
        return Err(refused(raw, "it must be an https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refused(raw, "it has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refused(raw, "it must not carry user information"));
    }
    if url.fragment().is_some() {
        return Err(refused(raw, "it must not have a fragment"));
    }
    Ok(url)
}

/// The check when a trigger is saved: the form, then the host's addresses (all public; a name
/// that cannot be resolved now is accepted, and checked again before every attempt). Returns
/// the URL as it is stored.
pub fn check_url(raw: &str, allow_http_loopback: bool) -> Result<String, TriggerError> {
    let url = check_form(raw, allow_http_loopback)?;
    match outbound::resolve_blocking(&url, allow_http_loopback) {
        Ok(_) | Err(Guard::Unresolved(_)) => Ok(url.to_string()),
        Err(Guard::Refused(why)) => Err(refused(raw, why)),
    }
}

/// The body of a run's callback: `{"type": "run.finished", "run": <the read-run answer>}`.
pub fn body(run: &requests::Request) -> Vec<u8> {
    let v = serde_json::json!({"type": EVENT_TYPE, "run": RunView::from(run)});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What one attempt sends.
struct Prepared {
    org_id: u64,
    url: String,
    webhook_id: String,
    body: Vec<u8>,
    key: [u8; 32],
}

enum Next {
    Send(Box<Prepared>),
    /// Not (or no longer) due: another attempt settled it, or it was sent again.
    Skip,
    /// It cannot be sent at all: this outcome, not retried.
    GiveUp(String),
}

fn prepare(app: &App, run_id: u64, now: Timestamp) -> Result<Next, StoreError> {
    app.store.read(|tx| {
        let Some(cb) = record::get(tx, run_id)? else {
            return Ok(Next::Skip);
        };
        if cb.state != record::State::Pending || cb.next_at.is_none_or(|t| t > now) {
            return Ok(Next::Skip);
        }
        let Some(run) = requests::get(tx, run_id)? else {
            return Ok(Next::GiveUp("the run no longer exists".into()));
        };
        // A deleted trigger stays stored (marked `deleted`) but no longer exists for anyone:
        // its runs' results go nowhere any more.
        let trigger: Option<Trigger> = match run.trigger_id {
            Some(id) => super::live(tx, id)?,
            None => None,
        };
        let Some(trigger) = trigger else {
            return Ok(Next::GiveUp("the run's trigger no longer exists".into()));
        };
        Ok(Next::Send(Box::new(Prepared {
            org_id: run.org_id,
            url: cb.url,
            webhook_id: cb.webhook_id,
            body: body(&run),
            key: key_bytes(&app.server_key, &trigger),
        })))
    })
}

fn failure(status: u16, reason: impl Into<String>) -> record::Outcome {
    record::Outcome {
        status,
        reason: reason.into(),
        final_failure: false,
    }
}

/// One attempt: the URL checked again, the address pinned, the signed POST.
async fn attempt(app: &App, p: &Prepared, now: Timestamp) -> record::Outcome {
    let allow = app.config.callback_allow_http_loopback;
    let url = match check_form(&p.url, allow) {
        Ok(u) => u,
        Err(e) => {
            return record::Outcome {
                status: 0,
                reason: e.to_string(),
                final_failure: true,
            };
        }
    };
    let work = async {
        let pinned = match outbound::resolve(p.org_id, &url, allow).await {
            Ok(p) => p,
            Err(Guard::Refused(why)) => {
                return record::Outcome {
                    status: 0,
                    reason: format!("not sent: {why}"),
                    final_failure: true,
                };
            }
            Err(Guard::Unresolved(why)) => return failure(0, why),
        };
        let client = match outbound::client(&pinned, TIMEOUT) {
            Ok(c) => c,
            Err(e) => return failure(0, e),
        };
        let timestamp = now.as_second();
        let signature = sign_standard(&p.key, &p.webhook_id, timestamp, &p.body);
        let sent = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &p.webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(p.body.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => record::Outcome {
                status: r.status().as_u16(),
                reason: "delivered".into(),
                final_failure: false,
            },
            Ok(r) if r.status().is_redirection() => failure(
                r.status().as_u16(),
                "the receiver answered with a redirect, which is not followed",
            ),
            Ok(r) => failure(
                r.status().as_u16(),
                format!("the receiver answered {}", r.status()),
            ),
            Err(e) if e.is_timeout() => {
                failure(0, format!("no answer within {} seconds", TIMEOUT.as_secs()))
            }
            Err(e) if e.is_connect() => failure(0, "cannot connect"),
            Err(e) => failure(0, e.to_string()),
        }
    };
    match tokio::time::timeout(TIMEOUT, work).await {
        Ok(o) => o,
        Err(_) => failure(0, format!("no answer within {} seconds", TIMEOUT.as_secs())),
    }
}

/// Sends run `run_id`'s callback once if it is due, and keeps the outcome. Stopping the server
/// abandons an attempt unrecorded; the next start sends it again.
async fn send_one(app: Arc<App>, run_id: u64, mut stop: watch::Receiver<bool>) {
    let now = app.clock.now();
    let next = app.blocking(move |app| prepare(app, run_id, now)).await;
    let outcome = match next {
        Ok(Next::Skip) => return,
        Ok(Next::GiveUp(reason)) => record::Outcome {
            status: 0,
            reason,
            final_failure: true,
        },
        Ok(Next::Send(p)) => {
            tokio::select! {
                o = attempt(&app, &p, now) => o,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        Err(e) => {
            tracing::error!(run = run_id, error = %e, "could not read a run's callback");
            return;
        }
    };
    let jitter: f64 = rand::random();
    let stored = app
        .commits
        .write(move |tx| record::record(tx, run_id, now, outcome, jitter))
        .await;
    match stored {
        Ok(Some(cb)) => match cb.state {
            record::State::Delivered => {
                app.metrics.callbacks_sent.inc();
            }
            record::State::Failed => {
                app.metrics.callbacks_failed.inc();
                tracing::warn!(run = run_id, "a run's callback was given up");
            }
            _ => {}
        },
        Ok(None) => {}
        Err(e) => tracing::error!(run = run_id, error = %e, "could not store a callback attempt"),
    };
}

/// "Send again" (portal): run `run_id`'s callback (of the organisation `org_id`) is due at once,
/// with the same webhook id, audited (`run.callback_again`). A run without a callback, not yet
/// ended, or of another organisation is [`TriggerError::RunNotFound`].
pub async fn send_again(
    app: &Arc<App>,
    by: Actor,
    org_id: u64,
    run_id: u64,
    now: Timestamp,
) -> Result<(), TriggerError> {
    app.commits
        .write(move |tx| {
            let again = record::send_again_in(tx, org_id, run_id, now)?;
            if again.is_some() {
                let target = format!("run {run_id}");
                audit::admin_in(tx, org_id, &by, "run.callback_again", &target, now)?;
            }
            Ok::<_, StoreError>(again)
        })
        .await?
        .map(|_| ())
        .ok_or(TriggerError::RunNotFound)
}

/// The callbacks in flight: by run, and how many per organisation.
#[derive(Default)]
struct InFlight {
    runs: HashSet<u64>,
    per_org: HashMap<u64, usize>,
}

impl InFlight {
    fn of(&self, org: u64) -> usize {
        self.per_org.get(&org).copied().unwrap_or(0)
    }

    fn enter(&mut self, org: u64, run: u64) {
        self.runs.insert(run);
        *self.per_org.entry(org).or_default() += 1;
    }

    fn leave(&mut self, org: u64, run: u64) {
        self.runs.remove(&run);
        if let Some(n) = self.per_org.get_mut(&org) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_org.remove(&org);
            }
        }
    }
}

/// Starts the sender; it stops (waiting for attempts under way to notice) when `stop` turns
/// true.
pub fn start(app: &Arc<App>, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        let mut tasks: JoinSet<(u64, u64)> = JoinSet::new();
        let mut flight = InFlight::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            while let Some(done) = tasks.try_join_next() {
                if let Ok((org, run)) = done {
                    flight.leave(org, run);
                }
            }
            if flight.runs.len() >= POOL {
                continue;
            }
            let now = app.clock.now();
            let counts: HashMap<u64, usize> = flight.per_org.clone();
            let found = app
                .blocking(move |app| {
                    app.store.read(|tx| {
                        // Enough of each organisation to fill its share past those in flight
                        // (which are still listed as due); none of one at its share.
                        let due = record::due(tx, now, |org| {
                            match counts.get(&org).copied().unwrap_or(0) {
                                busy if busy >= PER_ORG => 0,
                                busy => PER_ORG + busy,
                            }
                        })?;
                        Ok::<_, StoreError>((due, record::pending_count(tx)?))
                    })
                })
                .await;
            let (due, pending) = match found {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!(error = %e, "could not read the due callbacks");
                    continue;
                }
            };
            app.metrics
                .callbacks_pending
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
            for (org, run) in due {
                if flight.runs.len() >= POOL {
                    break;
                }
                if flight.runs.contains(&run) || flight.of(org) >= PER_ORG {
                    continue;
                }
                flight.enter(org, run);
                let (app, stop) = (app.clone(), stop.clone());
                tasks.spawn(async move {
                    send_one(app, run, stop).await;
                    (org, run)
                });
            }
        }
        while tasks.join_next().await.is_some() {}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_urls_are_https_public_and_plain() {
        assert_eq!(
            check_url("https://93.184.215.14/hook?x=1", false).unwrap(),
            "https://93.184.215.14/hook?x=1"
        );
        for bad in [
            "http://93.184.215.14/hook",
            "https://10.0.0.1/hook",
            "https://169.254.169.254/latest",
            "https://[::1]/hook",
            "https://user:pw@93.184.215.14/hook",
            "https://93.184.215.14/hook#frag",
            "http://127.0.0.1:8080/hook",
            "not a url",
        ] {
            let e = check_url(bad, false).unwrap_err().to_string();
            assert!(e.contains("refused"), "{bad}: {e}");
        }
        assert!(check_url("http://127.0.0.1:8080/hook", true).is_ok());
        assert!(check_url("http://localhost:8080/hook", true).is_err());
        assert!(check_url("http://10.0.0.1:8080/hook", true).is_err());
    }
}
