//! Executors: how one job reaches an agent and how its events come back (DESIGN.md "Agent
//! protocol"). [`dispatch`] is the one entry point; trigger runs use it through the worker
//! pool, and feature requests (issue 6) call it with their own job and event sink.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::protocol::{AgentEvent, EventSink, Job, Outcome, http_client};
use super::transcript::{Step, Transcript};
use super::{Agent, Executor, llm};
use crate::app::App;

/// Longest line or response body we read from an agent: a misbehaving agent cannot make the
/// server buffer without bound.
const MAX_OUTPUT: usize = 1024 * 1024;
/// How much of stderr / an error body ends up in a failure reason.
const REASON_TAIL: usize = 2000;

/// What a job runs with: the app (the `llm` executor's tools act in it) and the job's
/// transcript, shared so that it survives a job that is stopped or times out.
#[derive(Clone)]
pub struct JobContext {
    pub app: Arc<App>,
    pub transcript: Arc<Mutex<Transcript>>,
}

impl JobContext {
    pub fn new(app: &Arc<App>) -> JobContext {
        JobContext {
            app: app.clone(),
            transcript: Arc::default(),
        }
    }

    /// The transcript so far, taken out of the context.
    pub fn take_transcript(&self) -> Transcript {
        std::mem::take(
            &mut *self
                .transcript
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// Notes every event of an agent in the transcript on its way to the sink.
struct Noting<'a> {
    inner: &'a mut dyn EventSink,
    ctx: &'a JobContext,
    started: Instant,
}

impl EventSink for Noting<'_> {
    fn event(&mut self, event: AgentEvent) {
        self.ctx
            .transcript
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(
                self.ctx.app.clock.now(),
                self.started.elapsed().as_millis() as u64,
                Step::Event {
                    event: event.clone(),
                },
            );
        self.inner.event(event);
    }
}

/// Executes `job` on `agent`, feeding events to `sink`, within the agent's timeout.
pub async fn dispatch(
    ctx: &JobContext,
    agent: &Agent,
    job: &Job,
    sink: &mut dyn EventSink,
) -> Outcome {
    let limit = Duration::from_secs(agent.timeout_secs);
    if let Executor::Llm(settings) = &agent.executor {
        let work = llm::run(&ctx.app, agent, settings, job, sink, &ctx.transcript);
        return match tokio::time::timeout(limit, work).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::TimedOut,
        };
    }
    let mut noting = Noting {
        inner: sink,
        ctx,
        started: Instant::now(),
    };
    let sink: &mut dyn EventSink = &mut noting;
    match &agent.executor {
        Executor::Llm(_) => unreachable!("handled above"),
        Executor::Echo => {
            sink.event(match job.extra.get("feature_request") {
                Some(request) => AgentEvent::Message {
                    text: echo_feature(request),
                },
                None => AgentEvent::Result {
                    text: echo_summary(job),
                },
            });
            Outcome::Completed
        }
        Executor::Command { program, args } => run_command(program, args, job, sink, limit).await,
        Executor::Http { url } => post_job(url, job, sink, limit).await,
    }
}

/// The built-in echo agent's answer: it does nothing but say what it received.
fn echo_summary(job: &Job) -> String {
    let total = job.instructions.chars().count();
    let shown: String = job.instructions.chars().take(300).collect();
    let more = if total > 300 { "…" } else { "" };
    format!(
        "Echo agent (built in; it takes no action). Job {} ({}) for {} received {} characters of instructions: \"{}{}\"",
        job.job_id, job.kind, job.organisation, total, shown, more
    )
}

/// The echo agent's reply on a feature request: it says what it received and, honestly, that
/// nobody works on the request until a real feature agent is set up. It changes no status.
fn echo_feature(request: &serde_json::Value) -> String {
    let count = |field: &str| request[field].as_array().map_or(0, Vec::len);
    let title = request["title"].as_str().unwrap_or("");
    let described = request["description"]
        .as_str()
        .map_or(0, |d| d.chars().count());
    format!(
        "Echo agent (built in, for trying kennis out): I received request {} \"{}\" with {} characters of description, {} conversation message(s) and {} answer(s). I only repeat what I receive and do not work on requests; an administrator can connect a real feature agent with `kennis agent add ORG NAME --kind feature --exec llm|command|http`.",
        request["id"],
        title,
        described,
        count("conversation"),
        count("answers")
    )
}

fn tail(text: &str) -> String {
    let text = text.trim();
    let count = text.chars().count();
    if count <= REASON_TAIL {
        return text.to_owned();
    }
    text.chars().skip(count - REASON_TAIL).collect()
}

enum Line {
    Text(String),
    TooLong,
}

/// Reads one line of at most [`MAX_OUTPUT`] bytes, never buffering more than that (a line
/// without an end is not read whole before it is refused).
async fn bounded_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<Line>> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(MAX_OUTPUT as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_OUTPUT {
        return Ok(Some(Line::TooLong));
    }
    String::from_utf8(buf)
        .map(|t| Some(Line::Text(t)))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Reads a response body of at most [`MAX_OUTPUT`] bytes, chunk by chunk: a larger one is
/// refused as soon as it passes the limit, not after it was read whole.
async fn bounded_body(mut response: reqwest::Response, url: &str) -> Result<Vec<u8>, String> {
    let too_large = || format!("the response of {url} is over 1 MB");
    if response
        .content_length()
        .is_some_and(|n| n > MAX_OUTPUT as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the response of {url}: {e}"))?
    {
        if body.len() + chunk.len() > MAX_OUTPUT {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn run_command(
    program: &str,
    args: &[String],
    job: &Job,
    sink: &mut dyn EventSink,
    limit: Duration,
) -> Outcome {
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("could not start {program}: {e}")),
    };
    let input = match serde_json::to_vec(job) {
        Ok(input) => input,
        Err(e) => return Outcome::Failed(format!("the job could not be written: {e}")),
    };
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Outcome::Failed(format!("{program} was started without its pipes"));
    };
    let work = async {
        // A program that does not read its stdin must not block us: write in the background.
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
        let err_reader = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = (&mut stderr)
                .take(MAX_OUTPUT as u64)
                .read_to_end(&mut buf)
                .await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        let mut out = BufReader::new(stdout);
        let mut bad_line = None;
        loop {
            match bounded_line(&mut out).await {
                Ok(Some(Line::TooLong)) => {
                    bad_line = Some("an output line is over 1 MB".to_owned());
                    break;
                }
                Ok(Some(Line::Text(line))) => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<AgentEvent>(&line) {
                        Ok(ev) => sink.event(ev),
                        Err(e) => {
                            bad_line =
                                Some(format!("unreadable event line ({e}): {}", tail(&line)));
                            break;
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    bad_line = Some(format!("reading the agent's output: {e}"));
                    break;
                }
            }
        }
        let _ = writer.await;
        if let Some(reason) = bad_line {
            return Outcome::Failed(reason);
        }
        let status = child.wait().await;
        let err_text = err_reader.await.unwrap_or_default();
        match status {
            Ok(s) if s.success() => Outcome::Completed,
            Ok(s) => {
                let t = tail(&err_text);
                Outcome::Failed(if t.is_empty() {
                    format!("the agent exited with {s}")
                } else {
                    format!("the agent exited with {s}: {t}")
                })
            }
            Err(e) => Outcome::Failed(format!("waiting for the agent: {e}")),
        }
    };
    // Dropping the unfinished future drops the child, which kills it (kill_on_drop).
    match tokio::time::timeout(limit, work).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::TimedOut,
    }
}

#[derive(Deserialize)]
struct HttpReply {
    #[serde(default)]
    events: Vec<AgentEvent>,
}

async fn post_job(url: &str, job: &Job, sink: &mut dyn EventSink, limit: Duration) -> Outcome {
    let work = async {
        let response = http_client()
            .post(url)
            .json(job)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = response.status();
        let body = bounded_body(response, url).await?;
        if !status.is_success() {
            return Err(format!(
                "{url} answered {status}: {}",
                tail(&String::from_utf8_lossy(&body))
            ));
        }
        let reply: HttpReply = serde_json::from_slice(&body)
            .map_err(|e| format!("{url} answered with no readable {{\"events\": [...]}}: {e}"))?;
        Ok(reply.events)
    };
    match tokio::time::timeout(limit, work).await {
        // DESIGN.md: for `http`, a timeout is a failure like a non-2xx answer.
        Err(_) => Outcome::Failed(format!("{url} gave no answer within {}s", limit.as_secs())),
        Ok(Err(reason)) => Outcome::Failed(reason),
        Ok(Ok(events)) => {
            events.into_iter().for_each(|e| sink.event(e));
            Outcome::Completed
        }
    }
}
