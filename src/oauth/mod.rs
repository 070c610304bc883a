//! TEMPORARY local stand-in (not committed): the interface the OAuth branch provides.
use std::collections::HashMap;
use std::sync::Mutex;

use crate::app::App;
use crate::identity::AccessDenied;

pub const SCOPES: [&str; 2] = ["kennisbank", "feature_requests"];

#[derive(Debug, Clone)]
pub struct AccessContext {
    pub grant_id: u64,
    pub org_id: u64,
    pub person_id: u64,
    pub client_id: String,
    pub scopes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BearerError {
    #[error("invalid token")]
    Invalid,
    #[error("token expired")]
    Expired,
    #[error("token revoked")]
    Revoked,
    #[error("{0}")]
    Denied(AccessDenied),
}

impl BearerError {
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("x")]
    X,
}

pub struct NewGrant {
    pub org_id: u64,
    pub person_id: u64,
    pub client_id: String,
    pub scopes: Vec<String>,
    pub resource: String,
}

pub struct TokenPair {
    pub grant_id: u64,
    pub access_token: String,
    pub refresh_token: String,
    pub expires_in: u64,
}

static TOKENS: Mutex<Option<HashMap<String, AccessContext>>> = Mutex::new(None);

pub fn check_bearer(app: &App, token: &str) -> Result<AccessContext, BearerError> {
    let g = TOKENS.lock().unwrap();
    let a = g
        .as_ref()
        .and_then(|m| m.get(token))
        .cloned()
        .ok_or(BearerError::Invalid)?;
    let denied = app
        .store
        .read(|tx| {
            crate::identity::connector_access(tx, a.org_id, a.person_id, &app.config.terms_version)
        })
        .map_err(|_| BearerError::Invalid)?;
    denied.map_err(BearerError::Denied)?;
    Ok(a)
}

pub fn issue_grant(_app: &App, g: NewGrant) -> Result<TokenPair, OAuthError> {
    let mut t = TOKENS.lock().unwrap();
    let m = t.get_or_insert_with(HashMap::new);
    let id = m.len() as u64 + 1;
    let tok = format!("kb_at_{}", uuid::Uuid::new_v4());
    m.insert(
        tok.clone(),
        AccessContext {
            grant_id: id,
            org_id: g.org_id,
            person_id: g.person_id,
            client_id: g.client_id,
            scopes: g.scopes,
        },
    );
    Ok(TokenPair {
        grant_id: id,
        access_token: tok,
        refresh_token: String::new(),
        expires_in: 3600,
    })
}
