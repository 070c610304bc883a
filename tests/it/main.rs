//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;
mod flow;

mod backup;
mod cli;
mod crash;
mod oauth;
mod portal;
mod server;
