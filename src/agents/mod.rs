//! The runtime that executes agents: the workers that take jobs off the run queue
//! ([`runtime`]), the executors (`echo`, `command`, `http` in [`exec`]; `llm`, a language model
//! that works with the organisation's knowledge-base tools in-process, in [`llm`]), the agent
//! protocol's job and events ([`protocol`]) and the transcripts of runs ([`transcript`]). The
//! agents and projects themselves, as stored, are [`crate::roster`]'s.
//!
//! Nothing an agent, a model endpoint or an organisation's admin sends may stop a worker: no
//! unchecked arithmetic in this folder, beside the crate's own rule against `unwrap`, `expect`,
//! `panic!` and unchecked indexing (and a panic that slips through anyway fails its run, see
//! [`runtime`]).

#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

mod exec;
mod llm;
mod protocol;
mod runtime;
mod transcript;

pub use exec::{JobContext, dispatch};
pub use llm::read_api_key;
pub use protocol::{AgentEvent, EventSink, Job, JobAgent, Outcome};
pub use runtime::{CancelError, cancel_run, recover, start_workers};
pub use transcript::{Entry, Step, Transcript, get_transcript};
