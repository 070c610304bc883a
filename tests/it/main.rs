//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;
mod flow;

mod backup;
mod cli;
mod connector;
mod crash;
mod kb;
mod search_reference;
mod oauth;
mod outside;
mod portal;
mod server;
