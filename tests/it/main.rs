//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;
mod flow;

mod backup;
mod cli;
mod crash;
mod oauth;
mod outside;
mod portal;
mod server;
mod triggers;
