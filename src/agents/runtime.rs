//! The bounded worker pool that takes jobs off the run queue (`app::RunQueue`, woken by
//! `App::enqueue`).
//!
//! A run is durable in redb (`REQUESTS` plus the `ACTIVE_RUNS` index) before anyone hears of it;
//! the in-memory channel only wakes the workers. At start, [`recover`] puts runs a crash left
//! behind back in line: a `queued` run is simply queued again, a `running` run is re-queued
//! once and marked `failed` if the server stopped during it a second time, so no slot stays
//! blocked for ever.
//!
//! No executor can stop a worker: a panic inside one fails that job with a readable result
//! ([`guarded`]), and a panic anywhere else in a job is caught at the worker, which fails the
//! run if it is still active and takes the next one.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use tokio::sync::watch;

use super::exec::{JobContext, dispatch};
use super::protocol::{AgentEvent, EventSink, Job, JobAgent, Outcome};
use super::transcript::{self, Step, Transcript};
use crate::app::{App, RunQueue};
use crate::audit::{self, Actor};
use crate::identity;
use crate::requests::{self, JobState, Kind, Message, Request, Role, Status, feature};
use crate::roster::Agent;
use crate::store::{ACTIVE_RUNS, Store, StoreError, key};

/// Why a run could not be cancelled.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// No such run (or, for an organisation-bound lookup, not one of its runs).
    #[error("no run {0}")]
    NotFound(u64),
    #[error("{0} is a feature request, not a run; cancel it by setting its status")]
    NotARun(u64),
    #[error("run {id} has already ended ({status})")]
    Final { id: u64, status: &'static str },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Cancels a queued or running run: it becomes `cancelled` at once (freeing its trigger
/// slot), and a worker executing it is told to stop its executor through `runs` (`None` when
/// no server runs: nothing executes then). With `org_id`, only that organisation's runs.
pub fn cancel_run(
    store: &Store,
    runs: Option<&RunQueue>,
    org_id: Option<u64>,
    id: u64,
    by: &Actor,
    now: jiff::Timestamp,
) -> Result<Request, CancelError> {
    let who = match by {
        Actor::Operator => "an administrator",
        Actor::Person { email, .. } => email.as_str(),
    };
    let run = store.write(|tx| {
        let run = requests::get(tx, id)?
            .filter(|r| org_id.is_none_or(|o| r.org_id == o))
            .ok_or(CancelError::NotFound(id))?;
        if run.kind != Kind::Run {
            return Err(CancelError::NotARun(id));
        }
        if run.status.is_final() {
            return Err(CancelError::Final {
                id,
                status: run.status.as_str(),
            });
        }
        let mut run = run;
        run.result = Some(format!(
            "cancelled by {who} while it was {}",
            run.status.as_str()
        ));
        run.status = Status::Cancelled;
        run.updated_at = now;
        requests::put(tx, &run)?;
        tx.delete(ACTIVE_RUNS, &key::id(id))?;
        audit::admin_in(tx, run.org_id, by, "run.cancel", &format!("run {id}"), now)?;
        Ok(run)
    })?;
    if let Some(runs) = runs {
        runs.stop(id);
    }
    Ok(run)
}

/// A run that was `running` when the server stopped this many times is failed, not retried.
const MAX_ATTEMPTS: u32 = 2;

/// Finds runs a crash left queued or running; re-queues or fails them. Returns the ids to
/// queue, oldest first.
pub fn recover(store: &Store, now: jiff::Timestamp) -> Result<Vec<u64>, StoreError> {
    store.write(|tx| {
        let ids: Vec<u64> = tx
            .scan::<bool>(ACTIVE_RUNS, b"")?
            .into_iter()
            .filter_map(|(k, _)| key::id_at(&k, 0))
            .collect();
        let mut queue = Vec::new();
        for id in ids {
            let Some(mut run) = requests::get(tx, id)? else {
                tx.delete(ACTIVE_RUNS, &key::id(id))?;
                continue;
            };
            if run.kind == Kind::FeatureRequest {
                if recover_feature_job(tx, &mut run, now)? {
                    queue.push(id);
                }
                continue;
            }
            match run.status {
                Status::Queued => queue.push(id),
                Status::Running if run.attempts >= MAX_ATTEMPTS => {
                    run.status = Status::Failed;
                    run.result = Some(format!(
                        "the server stopped while this run was running, {} times; it is not retried again",
                        run.attempts
                    ));
                    run.updated_at = now;
                    requests::put(tx, &run)?;
                    tx.delete(ACTIVE_RUNS, &key::id(id))?;
                }
                Status::Running => {
                    run.status = Status::Queued;
                    run.updated_at = now;
                    requests::put(tx, &run)?;
                    queue.push(id);
                }
                _ => {
                    tx.delete(ACTIVE_RUNS, &key::id(id))?;
                }
            }
        }
        Ok(queue)
    })
}

/// Recovery of a feature request's agent job: like a run's, but the request's own status is
/// left alone (the job, not the request, was interrupted). Returns whether to queue it.
fn recover_feature_job(
    tx: &mut crate::store::WriteTx,
    r: &mut Request,
    now: jiff::Timestamp,
) -> Result<bool, StoreError> {
    match r.job {
        Some(JobState::Queued) => Ok(true),
        Some(JobState::Running) if r.attempts >= MAX_ATTEMPTS => {
            r.job = None;
            r.redispatch = false;
            r.attempts = 0;
            r.conversation.push(system_message(
                format!(
                    "The server stopped while the agent was working on this request, {MAX_ATTEMPTS} times; the agent is not started again until the next reply."
                ),
                now,
            ));
            r.updated_at = now;
            requests::put(tx, r)?;
            tx.delete(ACTIVE_RUNS, &key::id(r.id))?;
            Ok(false)
        }
        Some(JobState::Running) => {
            r.job = Some(JobState::Queued);
            requests::put(tx, r)?;
            Ok(true)
        }
        None => {
            tx.delete(ACTIVE_RUNS, &key::id(r.id))?;
            Ok(false)
        }
    }
}

/// A note from kennis itself in a request's conversation (agent failures, refused events).
fn system_message(text: String, at: jiff::Timestamp) -> Message {
    Message {
        author: "kennis".into(),
        role: Role::Agent,
        text,
        at,
    }
}

/// Recovers left-over runs and starts `config.agent_workers` workers; they stop when `stop`
/// turns true. The handles let shutdown wait for them (they hold the app, and so the store).
pub fn start_workers(
    app: &Arc<App>,
    stop: watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, StoreError> {
    for id in recover(&app.store, app.clock.now())? {
        app.enqueue(id);
    }
    let Some(rx) = app.runs.take_receiver() else {
        tracing::error!("the agent workers were started twice; the second start is ignored");
        return Ok(Vec::new());
    };
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut handles = Vec::new();
    for _ in 0..app.config.agent_workers {
        let (app, rx, mut stop) = (app.clone(), rx.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    id = async { rx.lock().await.recv().await } => id,
                    _ = stop.wait_for(|s| *s) => None,
                };
                let Some(id) = next else { break };
                tokio::select! {
                    _ = worker_job(&app, id) => {},
                    // Stopping abandons the run (a command is killed); it stays `running` and
                    // the next start re-queues it.
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        }));
    }
    Ok(handles)
}

/// The text of a caught panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    transcript::shorten(&text, 300)
}

/// Runs an executor; a panic inside it fails the job (its result says so, the log says where)
/// instead of ending the worker.
async fn guarded(work: impl Future<Output = Outcome>) -> Outcome {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic_text(panic.as_ref());
            tracing::error!(panic = %what, "an agent executor panicked; its job failed");
            // The panic's words are the server's: the log has them, the run's reader does not.
            Outcome::Failed(
                "the executor stopped on an internal error (the server's log says where); the job was failed and the worker went on"
                    .to_owned(),
            )
        }
    }
}

/// One job of a worker: a panic outside the executor (which [`guarded`] catches) is caught
/// here too; the run is failed if it is still active, and the worker takes the next job.
async fn worker_job(app: &Arc<App>, id: u64) {
    let Err(panic) = AssertUnwindSafe(execute_run(app, id)).catch_unwind().await else {
        return;
    };
    let what = panic_text(panic.as_ref());
    tracing::error!(run = id, panic = %what, "an agent job panicked; the worker goes on");
    app.runs.leave(id);
    let now = app.clock.now();
    let reason =
        "the job stopped on an internal error (the server's log says where); it was failed"
            .to_owned();
    let failed = app
        .commits
        .write(move |tx| {
            let Some(mut r) = requests::get(tx, id)? else {
                return Ok(false);
            };
            if r.kind == Kind::FeatureRequest {
                if r.job.is_none() {
                    return Ok(false);
                }
                r.job = None;
                r.redispatch = false;
                r.conversation.push(system_message(reason, now));
            } else {
                if r.status.is_final() {
                    return Ok(false);
                }
                r.status = Status::Failed;
                r.result = Some(reason);
            }
            r.updated_at = now;
            requests::put(tx, &r)?;
            tx.delete(ACTIVE_RUNS, &key::id(id))?;
            Ok::<bool, StoreError>(r.kind == Kind::Run)
        })
        .await;
    match failed {
        Ok(true) => app.metrics.runs_finished(Status::Failed.as_str(), 0.0),
        Ok(false) => {}
        Err(e) => tracing::error!(run = id, error = %e, "could not fail a run after a panic"),
    }
}

/// Collects a run's events: the `result` text decides success.
#[derive(Default)]
struct RunSink {
    result: Option<String>,
    messages: Vec<String>,
}

impl EventSink for RunSink {
    fn event(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Result { text } => self.result = Some(text),
            AgentEvent::Message { text } => self.messages.push(text),
            // A run has nobody to answer questions and no status list of its own.
            AgentEvent::Question { .. } | AgentEvent::Status { .. } => {}
        }
    }
}

/// Most events one feature job may add: a runaway agent cannot grow a request without bound.
const MAX_FEATURE_EVENTS: usize = 100;

/// Collects a feature agent's events in order; they are applied together when it ends.
#[derive(Default)]
struct FeatureSink {
    events: Vec<AgentEvent>,
    dropped: usize,
}

impl EventSink for FeatureSink {
    fn event(&mut self, event: AgentEvent) {
        if self.events.len() < MAX_FEATURE_EVENTS {
            self.events.push(event);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}

enum Claim {
    Run(Box<(Request, Job, Agent)>),
    Feature(Box<(Job, Agent)>),
    /// Already final or not a run: nothing to do.
    Skip,
    /// The agent or organisation vanished; the run was failed.
    Failed,
}

async fn execute_run(app: &Arc<App>, id: u64) {
    app.metrics.run_queue.dec();
    // Claims and results share the group commit with webhook deliveries: fewer fsyncs.
    let now = app.clock.now();
    let claim = app
        .commits
        .write(move |tx| {
            let Some(mut run) = requests::get(tx, id)? else {
                return Ok(Claim::Skip);
            };
            if run.kind == Kind::FeatureRequest {
                return claim_feature(tx, run, now);
            }
            if run.status != Status::Queued {
                return Ok(Claim::Skip);
            }
            let agent: Option<Agent> = tx.get(crate::store::AGENTS, &key::id(run.agent_id))?;
            let org: Option<identity::Org> = tx.get(crate::store::ORGS, &key::id(run.org_id))?;
            let (Some(agent), Some(org)) = (agent, org) else {
                run.status = Status::Failed;
                run.result = Some("the run's agent no longer exists".into());
                run.updated_at = now;
                requests::put(tx, &run)?;
                tx.delete(ACTIVE_RUNS, &key::id(id))?;
                return Ok(Claim::Failed);
            };
            run.status = Status::Running;
            run.attempts = run.attempts.saturating_add(1);
            run.started_at = Some(now);
            run.updated_at = now;
            requests::put(tx, &run)?;
            let job = Job {
                job_id: run.id,
                kind: "run",
                organisation: org.slug,
                agent: JobAgent {
                    id: agent.id,
                    name: agent.name.clone(),
                },
                instructions: run.instructions.clone(),
                extra: Default::default(),
            };
            Ok::<_, StoreError>(Claim::Run(Box::new((run, job, agent))))
        })
        .await;
    let (run, job, agent) = match claim {
        Ok(Claim::Run(b)) => *b,
        Ok(Claim::Feature(b)) => {
            let (job, agent) = *b;
            return execute_feature(app, job, agent).await;
        }
        Ok(Claim::Skip) => return,
        Ok(Claim::Failed) => {
            app.metrics.runs_finished(Status::Failed.as_str(), 0.0);
            return;
        }
        Err(e) => {
            tracing::error!(run = id, error = %e, "could not start a run");
            return;
        }
    };
    let started = Instant::now();
    let mut sink = RunSink::default();
    let ctx = JobContext::new(app);
    let stop = app.runs.enter(run.id);
    let outcome = tokio::select! {
        outcome = guarded(dispatch(&ctx, &agent, &job, &mut sink)) => Some(outcome),
        _ = stop.notified() => None,
    };
    app.runs.leave(run.id);
    let Some(outcome) = outcome else {
        // Cancelled: the run is final already; keep what it did.
        let mut done = ctx.take_transcript();
        note_end(
            app,
            &mut done,
            started,
            Status::Cancelled,
            "the run was cancelled; its executor was stopped",
        );
        save_transcript(app, run.id, done).await;
        app.metrics
            .runs_finished(Status::Cancelled.as_str(), started.elapsed().as_secs_f64());
        return;
    };
    let (status, result) = match outcome {
        Outcome::Completed => match sink.result {
            Some(text) => (Status::Succeeded, text),
            None => (
                Status::Failed,
                match sink.messages.last() {
                    Some(m) => {
                        format!("the agent ended without a result event; its last message: {m}")
                    }
                    None => "the agent ended without a result event".to_owned(),
                },
            ),
        },
        Outcome::Failed(reason) => (Status::Failed, reason),
        Outcome::TimedOut => (
            Status::TimedOut,
            format!(
                "the agent did not finish within {} seconds and was stopped",
                agent.timeout_secs
            ),
        ),
    };
    let elapsed = started.elapsed().as_secs_f64();
    let run_id = run.id;
    let mut done = ctx.take_transcript();
    note_end(app, &mut done, started, status, &result);
    let now = app.clock.now();
    let saved = app
        .commits
        .write(move |tx| {
            let Some(mut run) = requests::get(tx, run_id)? else {
                return Ok(());
            };
            transcript::append(tx, run_id, done)?;
            if run.status.is_final() {
                return Ok(());
            }
            run.status = status;
            run.result = Some(result);
            run.updated_at = now;
            requests::put(tx, &run)?;
            tx.delete(ACTIVE_RUNS, &key::id(run_id))?;
            Ok::<(), StoreError>(())
        })
        .await;
    match saved {
        Ok(()) => app.metrics.runs_finished(status.as_str(), elapsed),
        Err(e) => tracing::error!(run = run_id, error = %e, "could not store a run's result"),
    }
}

/// Closes a job's transcript with how it ended.
fn note_end(app: &App, t: &mut Transcript, started: Instant, status: Status, note: &str) {
    t.push(
        app.clock.now(),
        started.elapsed().as_millis() as u64,
        Step::End {
            status: status.as_str().to_owned(),
            note: transcript::shorten(note, transcript::TEXT_KEPT),
        },
    );
}

async fn save_transcript(app: &App, id: u64, t: Transcript) {
    let saved = app
        .commits
        .write(move |tx| transcript::append(tx, id, t))
        .await;
    if let Err(e) = saved {
        tracing::error!(run = id, error = %e, "could not store a run's transcript");
    }
}

/// Starts the feature agent's queued job on a request: marks it running and builds the job
/// with the request, its conversation and every answer so far.
fn claim_feature(
    tx: &mut crate::store::WriteTx,
    mut r: Request,
    now: jiff::Timestamp,
) -> Result<Claim, StoreError> {
    if r.job != Some(JobState::Queued) {
        return Ok(Claim::Skip);
    }
    let agent: Option<Agent> = tx.get(crate::store::AGENTS, &key::id(r.agent_id))?;
    let org: Option<identity::Org> = tx.get(crate::store::ORGS, &key::id(r.org_id))?;
    let (Some(agent), Some(org)) = (agent, org) else {
        r.job = None;
        r.conversation.push(system_message(
            "The feature agent of this request no longer exists; nobody is working on it.".into(),
            now,
        ));
        r.updated_at = now;
        requests::put(tx, &r)?;
        tx.delete(ACTIVE_RUNS, &key::id(r.id))?;
        return Ok(Claim::Failed);
    };
    r.job = Some(JobState::Running);
    r.redispatch = false;
    r.attempts = r.attempts.saturating_add(1);
    requests::put(tx, &r)?;
    let mut extra = serde_json::Map::new();
    extra.insert(
        "feature_request".into(),
        serde_json::json!({
            "id": r.id,
            "app_id": r.app_id,
            "title": r.title,
            "description": r.description,
            "status": r.status,
            "conversation": r.conversation,
            "answers": r.answers,
        }),
    );
    let job = Job {
        job_id: r.id,
        kind: "feature_request",
        organisation: org.slug,
        agent: JobAgent {
            id: agent.id,
            name: agent.name.clone(),
        },
        instructions: format!(
            "Work on feature request {}: \"{}\". Read its description, conversation and answers. Ask a multiple-choice `question` event when something is unclear, report with `message` events, and move it along with `status` events (pending, clarifying, implementing, awaiting_feedback, review, completed, cancelled).",
            r.id, r.title
        ),
        extra,
    };
    Ok(Claim::Feature(Box::new((job, agent))))
}

/// Runs the feature agent on a request and applies what it said, in one transaction: its
/// messages and questions join the conversation, valid status changes are made, and anything
/// refused (or the agent failing) is noted in the conversation so people see it.
async fn execute_feature(app: &Arc<App>, job: Job, agent: Agent) {
    let mut sink = FeatureSink::default();
    let ctx = JobContext::new(app);
    let started = Instant::now();
    let outcome = guarded(dispatch(&ctx, &agent, &job, &mut sink)).await;
    let id = job.job_id;
    let mut done = ctx.take_transcript();
    let (end, note) = match &outcome {
        Outcome::Completed => (Status::Succeeded, "the job ended".to_owned()),
        Outcome::Failed(reason) => (Status::Failed, reason.clone()),
        Outcome::TimedOut => (Status::TimedOut, "the job timed out".to_owned()),
    };
    note_end(app, &mut done, started, end, &note);
    let now = app.clock.now();
    let saved = app
        .commits
        .write(move |tx| {
            let Some(mut r) = requests::get(tx, id)? else {
                return Ok(false);
            };
            transcript::append(tx, id, done)?;
            for event in &sink.events {
                if let Err(why) = feature::apply_event(&mut r, &agent.name, event, now) {
                    tracing::warn!(request = id, agent = agent.id, reason = %why, "agent event refused");
                    r.conversation.push(system_message(
                        format!("An event from agent {} was refused: {why}.", agent.name),
                        now,
                    ));
                }
            }
            if sink.dropped > 0 {
                r.conversation.push(system_message(
                    format!(
                        "Agent {} sent {} more events than the {MAX_FEATURE_EVENTS} one job may add; they were left out.",
                        agent.name, sink.dropped
                    ),
                    now,
                ));
            }
            match outcome {
                Outcome::Completed => {}
                Outcome::Failed(reason) => r.conversation.push(system_message(
                    format!("Agent {} failed: {reason}", agent.name),
                    now,
                )),
                Outcome::TimedOut => r.conversation.push(system_message(
                    format!(
                        "Agent {} did not finish within {} seconds and was stopped.",
                        agent.name, agent.timeout_secs
                    ),
                    now,
                )),
            }
            r.attempts = 0;
            r.updated_at = now;
            let again = r.redispatch && !r.status.is_final();
            r.redispatch = false;
            if again {
                r.job = Some(JobState::Queued);
            } else {
                r.job = None;
                tx.delete(ACTIVE_RUNS, &key::id(id))?;
            }
            requests::put(tx, &r)?;
            Ok::<bool, StoreError>(again)
        })
        .await;
    match saved {
        Ok(true) => app.enqueue(id),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(request = id, error = %e, "could not store a feature agent's events")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_executor_fails_its_job_instead_of_the_worker() {
        let out = guarded(async { panic!("index out of bounds: the len is 0") }).await;
        let Outcome::Failed(reason) = out else {
            panic!("{out:?}")
        };
        // Said to the run's readers (the hook's sender, the admins): no more than that.
        assert!(
            reason.contains("internal error") && !reason.contains("out of bounds"),
            "{reason}"
        );
        let owned = guarded(async { std::panic::panic_any(format!("{}", 42)) }).await;
        assert!(matches!(owned, Outcome::Failed(r) if !r.contains("42")));
        assert_eq!(
            guarded(async { Outcome::Completed }).await,
            Outcome::Completed
        );
    }

    #[test]
    fn recovery_requeues_once_then_fails() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let make = |status: Status, attempts: u32| {
            store
                .write(|tx| {
                    let mut r = requests::create_run(
                        tx,
                        1,
                        1,
                        uuid::Uuid::new_v4(),
                        None,
                        "x".into(),
                        now,
                    )?;
                    r.status = status;
                    r.attempts = attempts;
                    requests::put(tx, &r)?;
                    tx.put(ACTIVE_RUNS, &key::id(r.id), &true)?;
                    Ok::<_, StoreError>(r.id)
                })
                .unwrap()
        };
        let queued = make(Status::Queued, 0);
        let running_once = make(Status::Running, 1);
        let running_twice = make(Status::Running, 2);
        let ids = recover(&store, now).unwrap();
        assert_eq!(ids, vec![queued, running_once]);
        let get = |id| store.read(|tx| requests::get(tx, id)).unwrap().unwrap();
        assert_eq!(get(running_once).status, Status::Queued);
        let failed = get(running_twice);
        assert_eq!(failed.status, Status::Failed);
        assert!(failed.result.unwrap().contains("not retried"));
        // The failed run left the active index; the others are still there.
        let active = store.read(|tx| tx.count(ACTIVE_RUNS)).unwrap();
        assert_eq!(active, 2);
    }

    #[test]
    fn a_feature_job_is_recovered_but_the_request_keeps_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let app_id = requests::apps::add(&store, 1, "App", requests::apps::AppStatus::Live, now)
            .unwrap()
            .app_id;
        let make = |job: JobState, attempts: u32| {
            store
                .write(|tx| {
                    let new = feature::NewRequest {
                        app_id,
                        title: "t".into(),
                        description: "d".into(),
                    };
                    let (mut r, wake) = feature::create_in(tx, 1, 1, &new, 5, now)?;
                    assert!(wake, "a request with a feature agent queues a job");
                    r.status = Status::Implementing;
                    r.job = Some(job);
                    r.attempts = attempts;
                    requests::put(tx, &r)?;
                    Ok::<_, requests::RequestError>(r.id)
                })
                .unwrap()
        };
        let queued = make(JobState::Queued, 0);
        let once = make(JobState::Running, 1);
        let twice = make(JobState::Running, 2);
        assert_eq!(recover(&store, now).unwrap(), vec![queued, once]);
        let get = |id| store.read(|tx| requests::get(tx, id)).unwrap().unwrap();
        assert_eq!(get(once).job, Some(JobState::Queued));
        let given_up = get(twice);
        assert_eq!(
            (given_up.job, given_up.status),
            (None, Status::Implementing)
        );
        assert!(given_up.conversation[0].text.contains("server stopped"));
        assert_eq!(store.read(|tx| tx.count(ACTIVE_RUNS)).unwrap(), 2);
    }
}
