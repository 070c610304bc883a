//! The MCP connector at `POST /mcp/kennisbank`: Streamable HTTP without sessions, JSON
//! replies, served by the official `rmcp` SDK. In front of it, [`http`] checks Host/Origin,
//! the body size and the bearer token (rechecking the person on every call); the SDK's handler
//! ([`mcp`]) lists and calls only the tools of the grant's scopes; a plain `tools/call` is
//! answered with the same handler code without the SDK's per-request tasks ([`direct`]). The
//! tools themselves, with their hourly limits and audit, are the domain's ([`crate::tools`]).
//! No `unwrap`, `expect` or indexing in this folder (the lints below hold for every file in it).

pub mod direct;
pub mod http;
pub mod mcp;

pub use crate::config::CONNECTOR_PATH;
pub use crate::tools::{Caller, SCOPE_KB, SCOPE_REQUESTS};
