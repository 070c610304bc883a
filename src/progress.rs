//! Progress of long work (`kb import`, `reindex`, `backup`, `compact`): reported by the
//! domain as it goes, carried over the admin socket, and shown by the command line as a bar
//! when stderr is a terminal, as lines otherwise.

use serde::{Deserialize, Serialize};

/// One report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Progress {
    /// `done` of `total` units (files, documents, records) of one stage.
    Step {
        stage: String,
        done: u64,
        total: u64,
    },
    /// A line to show as it is.
    Note { text: String },
}

impl Progress {
    pub fn step(stage: &str, done: u64, total: u64) -> Progress {
        Progress::Step {
            stage: stage.to_owned(),
            done,
            total,
        }
    }

    pub fn note(text: impl Into<String>) -> Progress {
        Progress::Note { text: text.into() }
    }

    /// The report as one line, for logs and for output that is not a terminal.
    pub fn line(&self) -> String {
        match self {
            Progress::Step { stage, done, total } => format!("{stage}: {done} of {total}"),
            Progress::Note { text } => text.clone(),
        }
    }

    /// The last report of its stage (always worth passing on, however often reports come).
    pub fn is_final(&self) -> bool {
        match self {
            Progress::Step { done, total, .. } => done >= total,
            Progress::Note { .. } => true,
        }
    }
}

/// Where reports go.
pub type Report<'a> = &'a mut dyn FnMut(Progress);
