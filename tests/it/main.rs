//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;

mod backup;
mod cli;
mod connector;
mod crash;
mod kb;
mod search_reference;
mod oauth;
mod server;
