//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;

mod acme;
mod attacks;
mod backup;
mod boundary;
mod callbacks;
mod cimd;
mod cli;
mod conformance;
mod connector;
mod crash;
mod docs;
mod documents;
mod domain;
mod erase;
mod extract;
mod fuzz;
mod housekeeping;
mod kb;
mod layering;
mod llm;
mod members;
mod oauth;
mod outside;
mod portal;
mod portal_i18n;
mod portal_kb;
mod portal_requests;
mod proxy;
mod requests;
mod search_reference;
mod server;
mod soak;
mod trash;
mod triggers;
