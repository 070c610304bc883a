//! Executors: how one job reaches an agent and how its events come back (DESIGN.md "Agent
//! protocol"). [`dispatch`] is the one entry point; trigger runs use it through the worker
//! pool, and feature requests (issue 6) call it with their own job and event sink.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::llm;
use super::protocol::{
    AgentEvent, BodyError, EventSink, Job, Outcome, bounded_body, describe, http_client,
};
use super::transcript::{Step, Transcript};
use crate::app::App;
use crate::roster::{Agent, Executor};

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
    let executor = match &agent.executor {
        Executor::Llm(settings) => {
            let work = llm::run(&ctx.app, agent, settings, job, sink, &ctx.transcript);
            return match tokio::time::timeout(limit, work).await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::TimedOut,
            };
        }
        other => other,
    };
    let mut noting = Noting {
        inner: sink,
        ctx,
        started: Instant::now(),
    };
    let sink: &mut dyn EventSink = &mut noting;
    match executor {
        // The model notes its own steps (above).
        Executor::Llm(_) => Outcome::Failed("the llm executor was dispatched twice".into()),
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
        Executor::Command { program, args, env } => {
            run_command(program, args, env, job, sink, limit).await
        }
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
    let field = |name: &str| request.get(name).unwrap_or(&serde_json::Value::Null);
    let title = field("title").as_str().unwrap_or("");
    let described = field("description")
        .as_str()
        .map_or(0, |d| d.chars().count());
    format!(
        "Echo agent (built in, for trying kennis out): I received request {} \"{}\" with {} characters of description, {} conversation message(s) and {} answer(s). I only repeat what I receive and do not work on requests; an administrator can connect a real feature agent with `kennis agent add ORG NAME --kind feature --exec llm|command|http`.",
        field("id"),
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
    text.chars()
        .skip(count.saturating_sub(REASON_TAIL))
        .collect()
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
        .take((MAX_OUTPUT as u64).saturating_add(1))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::JobAgent;

    #[test]
    fn a_command_agent_gets_only_path_home_lang_its_run_and_what_it_was_given() {
        let job = Job {
            job_id: 7,
            kind: "run",
            organisation: "acme".into(),
            agent: JobAgent {
                id: 3,
                name: "A".into(),
            },
            instructions: String::new(),
            extra: Default::default(),
        };
        let server = |name: &str| -> Option<OsString> {
            match name {
                "HOME" => Some("/home/kennis".into()),
                "FOO" => Some("foo".into()),
                "KENNIS_LLM_SECRET" => Some("sk-geheim".into()),
                _ => None,
            }
        };
        let names = [
            "FOO".to_owned(),
            "KENNIS_LLM_SECRET".to_owned(),
            "BAR".to_owned(),
        ];
        let env = agent_env(&job, &names, server);
        let shown: Vec<(&str, &str)> = env
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("PATH", DEFAULT_PATH),
                ("LANG", "C.UTF-8"),
                ("HOME", "/home/kennis"),
                ("KENNIS_RUN_ID", "7"),
                ("KENNIS_RUN_KIND", "run"),
                ("KENNIS_RUN_ORG", "acme"),
                ("KENNIS_RUN_AGENT_ID", "3"),
                ("FOO", "foo"),
            ]
        );
    }
}

/// `PATH` of a `command` agent when the server has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The environment a `command` agent starts with (DESIGN.md "Trust between organisations and
/// behind proxies"): nothing of the server's but `PATH`, `HOME` and `LANG` (a plain `PATH` and
/// `C.UTF-8` when the server has none), the job's `KENNIS_RUN_*` variables, and the variables
/// the agent was given with `--env`, read from the server's environment (`get`) at run time.
/// No other `KENNIS_*` variable of the server — its settings, model keys — reaches an agent.
fn agent_env(
    job: &Job,
    names: &[String],
    get: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut env = vec![
        (
            "PATH".to_owned(),
            get("PATH").unwrap_or_else(|| DEFAULT_PATH.into()),
        ),
        (
            "LANG".to_owned(),
            get("LANG").unwrap_or_else(|| "C.UTF-8".into()),
        ),
    ];
    if let Some(home) = get("HOME") {
        env.push(("HOME".to_owned(), home));
    }
    for (name, value) in [
        ("KENNIS_RUN_ID", job.job_id.to_string()),
        ("KENNIS_RUN_KIND", job.kind.to_owned()),
        ("KENNIS_RUN_ORG", job.organisation.clone()),
        ("KENNIS_RUN_AGENT_ID", job.agent.id.to_string()),
    ] {
        env.push((name.to_owned(), value.into()));
    }
    for name in names {
        // `agent add` refuses these names; a record written otherwise does not pass them.
        if name.starts_with("KENNIS_") || env.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(value) = get(name) {
            env.push((name.clone(), value));
        }
    }
    env
}

async fn run_command(
    program: &str,
    args: &[String],
    env: &[String],
    job: &Job,
    sink: &mut dyn EventSink,
    limit: Duration,
) -> Outcome {
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(agent_env(job, env, |name| std::env::var_os(name)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            // The program's path is the operator's: it goes to the log, not to the result.
            tracing::warn!(job = job.job_id, %program, error = %e, "an agent's program could not be started");
            return Outcome::Failed(format!(
                "the agent's program could not be started ({})",
                e.kind()
            ));
        }
    };
    let input = match serde_json::to_vec(job) {
        Ok(input) => input,
        Err(e) => return Outcome::Failed(format!("the job could not be written: {e}")),
    };
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Outcome::Failed("the agent's program was started without its pipes".into());
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
    // The address is the operator's: a failure names it in the log, not in the result.
    let work = async {
        let response = http_client()?
            .post(url)
            .json(job)
            .send()
            .await
            .map_err(|e| format!("the agent's address: {}", describe(e)))?;
        let status = response.status();
        let body = bounded_body(response, MAX_OUTPUT as u64)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge => "the agent's answer is over 1 MB".to_owned(),
                BodyError::Read(e) => format!("the agent's answer could not be read: {e}"),
            })?;
        if !status.is_success() {
            return Err(format!(
                "the agent's address answered {status}: {}",
                tail(&String::from_utf8_lossy(&body))
            ));
        }
        let reply: HttpReply = serde_json::from_slice(&body).map_err(|e| {
            format!("the agent's answer has no readable {{\"events\": [...]}}: {e}")
        })?;
        Ok(reply.events)
    };
    let failed = |reason: String| {
        let url = crate::roster::without_secrets(url);
        tracing::warn!(job = job.job_id, %url, %reason, "an http agent's job failed");
        Outcome::Failed(reason)
    };
    match tokio::time::timeout(limit, work).await {
        // DESIGN.md: for `http`, a timeout is a failure like a non-2xx answer.
        Err(_) => failed(format!(
            "the agent gave no answer within {}s",
            limit.as_secs()
        )),
        Ok(Err(reason)) => failed(reason),
        Ok(Ok(events)) => {
            events.into_iter().for_each(|e| sink.event(e));
            Outcome::Completed
        }
    }
}
