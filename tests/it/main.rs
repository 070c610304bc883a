//! Integration tests: one binary, a module per area, sharing one real-server fixture.

mod fixture;

mod acme;
mod attacks;
mod backup;
mod chatgpt;
mod cimd;
mod cli;
mod conformance;
mod connector;
mod crash;
mod documents;
mod domain;
mod extract;
mod fuzz;
mod kb;
mod layering;
mod llm;
mod members;
mod oauth;
mod outside;
mod pats;
mod portal;
mod portal_i18n;
mod portal_kb;
mod portal_requests;
mod proxy;
mod requests;
mod search_reference;
mod server;
mod soak;
mod triggers;
