//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;

mod backup;
mod cli;
mod crash;
mod server;
mod triggers;
