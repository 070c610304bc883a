//! Leaf helpers of the web layer, used by every area's routes: the client's address
//! ([`client_ip`]), one mapping of domain errors to responses ([`error`]), request logging with
//! redaction ([`observe`]), TLS ([`tls`]) with certificates from ACME ([`acme`]) and signed
//! downloads ([`files`]). Nothing here
//! imports a route module; the router is assembled in `crate::server`.

pub mod acme;
pub mod client_ip;
pub mod error;
pub mod files;
pub mod observe;
pub mod tls;

pub use client_ip::{PeerAddr, client_ip};
pub use observe::redact_query;
