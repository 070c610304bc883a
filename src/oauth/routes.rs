//! HTTP endpoints of the authorization server.
