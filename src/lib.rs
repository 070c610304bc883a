//! kennis: a self-hosted knowledge-base connector (MCP), its OAuth 2.1 login, and event
//! triggers that start agent runs — one binary and one data directory.
//!
//! The binary (`src/main.rs`) only parses the command line and calls into this library; the
//! integration tests drive the same library and binary.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod admin;
pub mod agents;
pub mod app;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connector;
pub mod demo;
pub mod erase;
pub mod extraction;
pub mod hooks;
pub mod housekeeping;
pub mod http;
pub mod identity;
pub mod kb;
pub mod logging;
pub mod metrics;
pub mod oauth;
pub mod outbound;
pub mod portal;
pub mod progress;
pub mod ratelimit;
pub mod requests;
pub mod roster;
pub mod server;
pub mod store;
pub mod tools;
pub mod triggers;
