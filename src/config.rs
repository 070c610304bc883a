//! One validated [`Config`], assembled from defaults, a TOML file, `KENNIS_*` environment
//! variables and command-line flags (later sources win). Validation happens once, at start, and
//! a bad value stops start-up with a message that names the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;

/// Where the MCP connector is served, under the public URL. The public URL plus this path is
/// the connector's URL: the OAuth audience, and what people paste into an assistant. Lives
/// here, with the public URL, so that `app` and `oauth` can name it without importing the
/// connector; `connector::CONNECTOR_PATH` is the same constant.
pub const CONNECTOR_PATH: &str = "/mcp/kennisbank";

/// Why a configuration could not be used. Every variant names the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("config field `{field}`: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// An on/off environment variable: `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
fn env_switch(
    name: &'static str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<bool>, ConfigError> {
    let Some(v) = get(name) else {
        return Ok(None);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(Some(true)),
        "0" | "false" | "no" | "off" => Ok(Some(false)),
        _ => Err(invalid(name, format!("`{v}` is neither true nor false"))),
    }
}

/// A setting written either as a TOML string or as a number (`agent_workers = 4`,
/// `terms_version = 1`), kept as its text: the environment gives text, so both read the same.
fn text_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrNumber {
        Text(String),
        Integer(i64),
        Float(f64),
    }
    Ok(Some(
        match TextOrNumber::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a string or a number"))?
        {
            TextOrNumber::Text(s) => s,
            TextOrNumber::Integer(n) => n.to_string(),
            TextOrNumber::Float(f) => f.to_string(),
        },
    ))
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Which redirect URIs a client may register. Each list belongs to one client kind of the
/// specification; an admin extends them in the `[redirect]` table of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedirectAllowList {
    /// Hosted assistants, first kind: `https://{host}/api/mcp/auth_callback`.
    pub assistant_hosts: Vec<String>,
    /// Hosted assistants, second kind: `https://{host}/connector_platform_oauth_redirect` and
    /// `https://{host}/connector/oauth/<id>`.
    pub platform_hosts: Vec<String>,
    /// Code editors: `<scheme>://…/oauth/callback`.
    pub editor_schemes: Vec<String>,
    /// Code editors: `https://{host}/agents/mcp/oauth/callback`.
    pub editor_hosts: Vec<String>,
    /// Exact URIs allowed as they are (e.g. `https://vscode.dev/redirect`).
    pub exact_uris: Vec<String>,
    /// Apps on the same computer: `http://localhost:<port>/…` and `http://127.0.0.1:<port>/…`.
    pub allow_loopback: bool,
}

impl Default for RedirectAllowList {
    fn default() -> Self {
        Self {
            assistant_hosts: vec!["claude.ai".into(), "claude.com".into()],
            platform_hosts: vec!["chatgpt.com".into()],
            editor_schemes: vec!["cursor".into()],
            editor_hosts: vec!["cursor.com".into(), "www.cursor.com".into()],
            exact_uris: Vec::new(),
            allow_loopback: true,
        }
    }
}

/// The validated configuration every component reads.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Issuer and base of every URL the service hands out, without a trailing slash. `None`
    /// means "derive from the address actually bound" (useful with port 0 in tests).
    pub public_url: Option<String>,
    pub data_dir: PathBuf,
    pub tls: Option<TlsFiles>,
    pub terms_version: String,
    pub redirect: RedirectAllowList,
    pub agent_workers: usize,
    pub trusted_proxies: Vec<IpNet>,
    /// `[proxy] header`: the one forwarding header family believed from `trusted_proxies`.
    pub proxy_header: ProxyHeader,
    pub log_format: LogFormat,
    /// Certificates from an ACME CA (TLS-ALPN-01 on `listen`); `None` without `[acme]`.
    pub acme: Option<Acme>,
    /// Tests only: Client ID Metadata Documents may also be `http://127.0.0.1:<port>/…`.
    pub cimd_allow_http_loopback: bool,
    /// Tests only: a trigger's `callback_url` may also be `http://127.0.0.1:<port>/…`.
    pub callback_allow_http_loopback: bool,
    /// `[[oidc]]`: the OpenID Connect providers people may sign in with, in the file's order.
    pub oidc: Vec<OidcProvider>,
    /// Tests only: an `[[oidc]]` issuer (and the endpoints its discovery document names) may
    /// also be `http://127.0.0.1:<port>`.
    pub oidc_allow_http_loopback: bool,
    /// `[kb] extract_text`: take the text of PDF and Office files when they are stored and
    /// search and show it; off restores the specification's rule 8 exactly.
    pub extract_text: bool,
    /// The program started as `kennis extract-worker`; `None`: this executable. Not a
    /// setting (tests, whose executable is not kennis, set it).
    pub extract_program: Option<PathBuf>,
    /// `[llm]`: the operator's model endpoints and the bounds of every `llm` run.
    pub llm: LlmConfig,
    /// `[retention]`: what housekeeping purges, and when.
    pub retention: Retention,
}

/// Default of `[llm] max_reply_bytes`: the largest answer read from a model endpoint.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 1024 * 1024;
/// Default of `[llm] max_conversation_bytes`: the largest conversation one run sends.
pub const DEFAULT_MAX_CONVERSATION_BYTES: u64 = 8 * 1024 * 1024;
/// The range allowed for both limits: 4 KiB to 256 MiB.
pub const LLM_BYTES_RANGE: std::ops::RangeInclusive<u64> = 4096..=256 * 1024 * 1024;

/// The validated `[llm]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmConfig {
    pub max_reply_bytes: u64,
    pub max_conversation_bytes: u64,
    /// `[[llm.endpoints]]`, in the file's order; ids are unique.
    pub endpoints: Vec<LlmEndpoint>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            max_conversation_bytes: DEFAULT_MAX_CONVERSATION_BYTES,
            endpoints: Vec::new(),
        }
    }
}

impl LlmConfig {
    /// The endpoint with this id, if the operator defined it.
    pub fn endpoint(&self, id: &str) -> Option<&LlmEndpoint> {
        self.endpoints.iter().find(|e| e.id == id)
    }

    /// The endpoints organisation `slug` may use, in the file's order.
    pub fn endpoints_for<'a>(&'a self, slug: &'a str) -> impl Iterator<Item = &'a LlmEndpoint> {
        self.endpoints.iter().filter(move |e| e.allows(slug))
    }
}

/// One `[[llm.endpoints]]` table: a model endpoint the operator offers to organisations. Its
/// key is read at run time from `api_key_env` or `api_key_file` and sent only to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmEndpoint {
    /// What agents and the portal name it by: `a-z`, `0-9`, `-`, `_`.
    pub id: String,
    /// Base URL (`POST {url}/chat/completions`), without trailing slash once validated.
    pub url: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Organisation slugs that may use it, or `["*"]` for every organisation.
    pub orgs: Vec<String>,
}

impl LlmEndpoint {
    /// Whether organisation `slug` may use this endpoint.
    pub fn allows(&self, slug: &str) -> bool {
        self.orgs.iter().any(|o| o == "*" || o == slug)
    }
}

/// The `[llm]` table as one source gives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmTable {
    pub max_reply_bytes: Option<u64>,
    pub max_conversation_bytes: Option<u64>,
    pub endpoints: Option<Vec<LlmEndpoint>>,
}

impl LlmTable {
    fn overlay(self, over: LlmTable) -> LlmTable {
        LlmTable {
            max_reply_bytes: over.max_reply_bytes.or(self.max_reply_bytes),
            max_conversation_bytes: over.max_conversation_bytes.or(self.max_conversation_bytes),
            endpoints: over.endpoints.or(self.endpoints),
        }
    }
}

fn validate_llm(t: LlmTable) -> Result<LlmConfig, ConfigError> {
    let bytes = |field: &'static str, v: Option<u64>, default: u64| match v {
        None => Ok(default),
        Some(n) if LLM_BYTES_RANGE.contains(&n) => Ok(n),
        Some(n) => Err(invalid(
            field,
            format!(
                "{n} is not a number of bytes from {} to {}",
                LLM_BYTES_RANGE.start(),
                LLM_BYTES_RANGE.end()
            ),
        )),
    };
    let max_reply_bytes = bytes(
        "llm.max_reply_bytes",
        t.max_reply_bytes,
        DEFAULT_MAX_REPLY_BYTES,
    )?;
    let max_conversation_bytes = bytes(
        "llm.max_conversation_bytes",
        t.max_conversation_bytes,
        DEFAULT_MAX_CONVERSATION_BYTES,
    )?;
    let mut endpoints: Vec<LlmEndpoint> = Vec::new();
    for mut e in t.endpoints.unwrap_or_default() {
        let bad = |m: String| Err(invalid("llm.endpoints", m));
        e.id = e.id.trim().to_owned();
        if e.id.is_empty()
            || e.id.len() > 64
            || !e
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return bad(format!(
                "id `{}` must be 1 to 64 characters of a-z, 0-9, - and _",
                e.id
            ));
        }
        if endpoints.iter().any(|o| o.id == e.id) {
            return bad(format!("id `{}` is defined twice", e.id));
        }
        let url = e.url.trim().trim_end_matches('/').to_owned();
        let parsed = url::Url::parse(&url).ok();
        if !parsed.as_ref().is_some_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && u.username().is_empty()
                && u.password().is_none()
                && u.query().is_none()
                && u.fragment().is_none()
        }) {
            return bad(format!(
                "endpoint `{}`: url `{url}` is not an http:// or https:// base URL without user, query or fragment",
                e.id
            ));
        }
        e.url = url;
        match (&e.api_key_env, &e.api_key_file) {
            (Some(_), Some(_)) => {
                return bad(format!(
                    "endpoint `{}`: give api_key_env or api_key_file, not both",
                    e.id
                ));
            }
            (Some(var), None)
                if var.is_empty()
                    || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                return bad(format!(
                    "endpoint `{}`: api_key_env `{var}` is not an environment variable's name",
                    e.id
                ));
            }
            (None, Some(f)) if !f.is_absolute() => {
                return bad(format!(
                    "endpoint `{}`: api_key_file must be an absolute path",
                    e.id
                ));
            }
            _ => {}
        }
        e.orgs = e.orgs.iter().map(|o| o.trim().to_owned()).collect();
        if e.orgs.is_empty() || e.orgs.iter().any(String::is_empty) {
            return bad(format!(
                "endpoint `{}`: orgs must list organisation slugs, or be [\"*\"] for every organisation",
                e.id
            ));
        }
        endpoints.push(e);
    }
    Ok(LlmConfig {
        max_reply_bytes,
        max_conversation_bytes,
        endpoints,
    })
}

/// The longest secret file read (`api_key_file`, `client_secret_file`).
const MAX_SECRET_FILE: u64 = 16 * 1024;

/// Reads a secret the configuration names (`what`: "API key", "client secret") from the
/// server's environment or a file, when it is needed, trimmed. `Ok(None)` when neither is
/// named; an unset variable, an empty or unreadable file is an error that says which.
pub fn read_secret(
    what: &str,
    env: Option<&str>,
    file: Option<&str>,
) -> Result<Option<String>, String> {
    if let Some(var) = env {
        return match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_owned())),
            _ => Err(format!(
                "the environment variable {var} that should hold the {what} is not set in the server's environment"
            )),
        };
    }
    if let Some(path) = file {
        use std::io::Read;
        let mut text = String::new();
        let read = std::fs::File::open(path)
            .and_then(|f| f.take(MAX_SECRET_FILE).read_to_string(&mut text));
        return match read {
            Ok(_) if !text.trim().is_empty() => Ok(Some(text.trim().to_owned())),
            Ok(_) => Err(format!("the {what} file {path} is empty")),
            Err(e) => Err(format!("the {what} file {path} cannot be read: {e}")),
        };
    }
    Ok(None)
}

/// Let's Encrypt's production directory, the default ACME directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Validated ACME settings.
#[derive(Debug, Clone)]
pub struct Acme {
    pub domains: Vec<String>,
    pub email: String,
    pub directory: String,
    /// Extra PEM roots trusted for the directory's own TLS (private or test CAs).
    pub ca_root: Option<PathBuf>,
}

/// The `[acme]` table, and the same from env and flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeSettings {
    pub domains: Option<Vec<String>>,
    pub email: Option<String>,
    pub directory: Option<String>,
    pub ca_root: Option<PathBuf>,
}

impl AcmeSettings {
    fn overlay(self, over: AcmeSettings) -> AcmeSettings {
        AcmeSettings {
            domains: over.domains.or(self.domains),
            email: over.email.or(self.email),
            directory: over.directory.or(self.directory),
            ca_root: over.ca_root.or(self.ca_root),
        }
    }

    fn is_empty(&self) -> bool {
        self.domains.is_none()
            && self.email.is_none()
            && self.directory.is_none()
            && self.ca_root.is_none()
    }
}

/// The `[oauth]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    pub cimd_allow_http_loopback: Option<bool>,
    pub oidc_allow_http_loopback: Option<bool>,
}

impl OAuthSettings {
    fn overlay(self, over: OAuthSettings) -> OAuthSettings {
        OAuthSettings {
            cimd_allow_http_loopback: over
                .cimd_allow_http_loopback
                .or(self.cimd_allow_http_loopback),
            oidc_allow_http_loopback: over
                .oidc_allow_http_loopback
                .or(self.oidc_allow_http_loopback),
        }
    }

    fn is_empty(&self) -> bool {
        self.cimd_allow_http_loopback.is_none() && self.oidc_allow_http_loopback.is_none()
    }
}

/// The scopes asked of an OpenID Connect provider when a table names none.
pub const DEFAULT_OIDC_SCOPES: &str = "openid email profile";

fn default_oidc_scopes() -> String {
    DEFAULT_OIDC_SCOPES.to_owned()
}

/// One `[[oidc]]` table: an OpenID Connect provider (Entra ID, Google, Keycloak, Authentik …)
/// people may sign in with, beside their password. Its client secret is read when a sign-in
/// needs it, from `client_secret_env` or `client_secret_file`; with neither, kennis is a public
/// client (PKCE only).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcProvider {
    /// In the redirect URI (`/login/oidc/<id>/callback`) and the button's id: `a-z`, `0-9`,
    /// `-`, `_`.
    pub id: String,
    /// The button's text on the login page.
    pub name: String,
    /// The provider's issuer URL; discovery reads `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    pub client_id: String,
    #[serde(default)]
    pub client_secret_env: Option<String>,
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// Space-separated; must contain `openid`.
    #[serde(default = "default_oidc_scopes")]
    pub scopes: String,
    /// Trust the provider's own sign-in instead of asking for kennis's second factor.
    #[serde(default)]
    pub skip_second_factor: bool,
}

impl OidcProvider {
    /// Whether `url` (the issuer, or an endpoint its discovery names) may be used: https, or
    /// with the test switch `http://127.0.0.1:<port>`; no user information or fragment.
    pub fn usable_url(url: &str, allow_http_loopback: bool) -> Option<url::Url> {
        let u = url::Url::parse(url).ok()?;
        let scheme_ok = match u.scheme() {
            "https" => u.host_str().is_some_and(|h| !h.is_empty()),
            "http" => allow_http_loopback && u.host_str() == Some("127.0.0.1"),
            _ => false,
        };
        (scheme_ok && u.username().is_empty() && u.password().is_none() && u.fragment().is_none())
            .then_some(u)
    }
}

fn validate_oidc(
    providers: Vec<OidcProvider>,
    allow_http_loopback: bool,
) -> Result<Vec<OidcProvider>, ConfigError> {
    let mut out: Vec<OidcProvider> = Vec::new();
    for mut p in providers {
        let bad = |m: String| Err(invalid("oidc", m));
        p.id = p.id.trim().to_owned();
        if p.id.is_empty()
            || p.id.len() > 64
            || !p
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return bad(format!(
                "id `{}` must be 1 to 64 characters of a-z, 0-9, - and _",
                p.id
            ));
        }
        if out.iter().any(|o| o.id == p.id) {
            return bad(format!("id `{}` is defined twice", p.id));
        }
        p.name = p.name.trim().to_owned();
        if p.name.is_empty() || p.name.chars().count() > 100 || p.name.chars().any(char::is_control)
        {
            return bad(format!(
                "provider `{}`: name (the button's text) must be 1 to 100 characters",
                p.id
            ));
        }
        p.issuer = p.issuer.trim().to_owned();
        let Some(issuer) = OidcProvider::usable_url(&p.issuer, allow_http_loopback) else {
            return bad(format!(
                "provider `{}`: issuer `{}` is not an https:// URL without user, fragment or query{}",
                p.id,
                p.issuer,
                if allow_http_loopback {
                    " (or http://127.0.0.1:<port>)"
                } else {
                    ""
                }
            ));
        };
        if issuer.query().is_some() {
            return bad(format!(
                "provider `{}`: issuer `{}` must not have a query",
                p.id, p.issuer
            ));
        }
        p.client_id = p.client_id.trim().to_owned();
        if p.client_id.is_empty()
            || p.client_id.len() > 512
            || p.client_id.chars().any(char::is_control)
        {
            return bad(format!(
                "provider `{}`: client_id must be 1 to 512 characters",
                p.id
            ));
        }
        match (&p.client_secret_env, &p.client_secret_file) {
            (Some(_), Some(_)) => {
                return bad(format!(
                    "provider `{}`: give client_secret_env or client_secret_file, not both",
                    p.id
                ));
            }
            (Some(var), None)
                if var.is_empty()
                    || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                return bad(format!(
                    "provider `{}`: client_secret_env `{var}` is not an environment variable's name",
                    p.id
                ));
            }
            (None, Some(f)) if !f.is_absolute() => {
                return bad(format!(
                    "provider `{}`: client_secret_file must be an absolute path",
                    p.id
                ));
            }
            _ => {}
        }
        // RFC 6749's scope-token: printable ASCII but space, `"` and `\`.
        let scopes: Vec<&str> = p.scopes.split_whitespace().collect();
        if !scopes.contains(&"openid")
            || scopes.iter().any(|s| {
                !s.chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
            })
            || p.scopes.len() > 1000
        {
            return bad(format!(
                "provider `{}`: scopes `{}` must be space-separated scope names including `openid`",
                p.id, p.scopes
            ));
        }
        p.scopes = scopes.join(" ");
        out.push(p);
    }
    Ok(out)
}

/// The `[triggers]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSettings {
    pub callback_allow_http_loopback: Option<bool>,
}

/// The `[kb]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KbSettings {
    pub extract_text: Option<bool>,
}

/// Which forwarding headers a trusted proxy's word is taken from (`[proxy] header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For`, `X-Forwarded-Host`, `X-Forwarded-Proto` (nginx, Caddy).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded` (`for=`, `host=`, `proto=`).
    Forwarded,
}

/// The `[proxy]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySettings {
    pub header: Option<String>,
}

/// The `[retention]` table: how many days records are kept (0: for ever).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    pub runs_days: Option<u32>,
    pub audit_days: Option<u32>,
    pub trash_days: Option<u32>,
}

impl RetentionSettings {
    fn overlay(self, over: RetentionSettings) -> RetentionSettings {
        RetentionSettings {
            runs_days: over.runs_days.or(self.runs_days),
            audit_days: over.audit_days.or(self.audit_days),
            trash_days: over.trash_days.or(self.trash_days),
        }
    }

    fn is_empty(&self) -> bool {
        self.runs_days.is_none() && self.audit_days.is_none() && self.trash_days.is_none()
    }
}

/// How long housekeeping keeps finished runs, audit records and trashed documents, in days;
/// 0 keeps them for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub runs_days: u32,
    pub audit_days: u32,
    pub trash_days: u32,
}

/// The longest retention one can set: a century.
pub const MAX_RETENTION_DAYS: u32 = 36_500;

impl Default for Retention {
    fn default() -> Self {
        Retention {
            runs_days: 90,
            audit_days: 365,
            trash_days: 30,
        }
    }
}

fn validate_retention(r: RetentionSettings) -> Result<Retention, ConfigError> {
    let d = Retention::default();
    let days = |field: &'static str, v: Option<u32>, default: u32| match v {
        Some(n) if n > MAX_RETENTION_DAYS => Err(invalid(
            field,
            format!("{n} is more than {MAX_RETENTION_DAYS} days (0 keeps for ever)"),
        )),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    Ok(Retention {
        runs_days: days("retention.runs_days", r.runs_days, d.runs_days)?,
        audit_days: days("retention.audit_days", r.audit_days, d.audit_days)?,
        trash_days: days("retention.trash_days", r.trash_days, d.trash_days)?,
    })
}

/// A number of days from the environment, or an error naming the variable.
fn env_days(
    name: &'static str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<u32>, ConfigError> {
    get(name)
        .map(|v| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| invalid(name, format!("`{v}` is not a number of days")))
        })
        .transpose()
}

/// PEM files for TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every setting as it may come from one source; `None` means "this source does not say".
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub listen: Option<String>,
    pub public_url: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    #[serde(default, deserialize_with = "text_or_number")]
    pub terms_version: Option<String>,
    #[serde(default, deserialize_with = "text_or_number")]
    pub agent_workers: Option<String>,
    pub trusted_proxies: Option<Vec<String>>,
    pub log_format: Option<String>,
    pub redirect: Option<RedirectAllowList>,
    pub acme: Option<AcmeSettings>,
    pub oauth: Option<OAuthSettings>,
    pub kb: Option<KbSettings>,
    pub proxy: Option<ProxySettings>,
    pub llm: Option<LlmTable>,
    pub triggers: Option<TriggerSettings>,
    pub retention: Option<RetentionSettings>,
    pub oidc: Option<Vec<OidcProvider>>,
}

impl Settings {
    /// Reads a TOML config file; unknown keys are errors so typos do not go unnoticed.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Reads the `KENNIS_*` environment variables through `lookup` (injectable for tests). A
    /// switch that is neither on nor off is an error naming the variable.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let cimd_allow_http_loopback = env_switch("KENNIS_CIMD_ALLOW_HTTP_LOOPBACK", get)?;
        let extract_text = env_switch("KENNIS_EXTRACT_TEXT", get)?;
        let callback_allow_http_loopback = env_switch("KENNIS_CALLBACK_ALLOW_HTTP_LOOPBACK", get)?;
        let oidc_allow_http_loopback = env_switch("KENNIS_OIDC_ALLOW_HTTP_LOOPBACK", get)?;
        let retention = RetentionSettings {
            runs_days: env_days("KENNIS_RETENTION_RUNS_DAYS", get)?,
            audit_days: env_days("KENNIS_RETENTION_AUDIT_DAYS", get)?,
            trash_days: env_days("KENNIS_RETENTION_TRASH_DAYS", get)?,
        };
        Ok(Self {
            listen: get("KENNIS_LISTEN"),
            public_url: get("KENNIS_PUBLIC_URL"),
            data_dir: get("KENNIS_DATA_DIR").map(PathBuf::from),
            tls_cert: get("KENNIS_TLS_CERT").map(PathBuf::from),
            tls_key: get("KENNIS_TLS_KEY").map(PathBuf::from),
            terms_version: get("KENNIS_TERMS_VERSION"),
            agent_workers: get("KENNIS_AGENT_WORKERS"),
            trusted_proxies: get("KENNIS_TRUSTED_PROXIES")
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect()),
            log_format: get("KENNIS_LOG_FORMAT"),
            redirect: None,
            acme: Some(AcmeSettings {
                domains: get("KENNIS_ACME_DOMAINS").map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                }),
                email: get("KENNIS_ACME_EMAIL"),
                directory: get("KENNIS_ACME_DIRECTORY"),
                ca_root: get("KENNIS_ACME_CA_ROOT").map(PathBuf::from),
            })
            .filter(|a| !a.is_empty()),
            oauth: Some(OAuthSettings {
                cimd_allow_http_loopback,
                oidc_allow_http_loopback,
            })
            .filter(|o| !o.is_empty()),
            kb: extract_text.map(|on| KbSettings {
                extract_text: Some(on),
            }),
            proxy: get("KENNIS_PROXY_HEADER").map(|h| ProxySettings { header: Some(h) }),
            llm: None,
            triggers: callback_allow_http_loopback.map(|on| TriggerSettings {
                callback_allow_http_loopback: Some(on),
            }),
            retention: Some(retention).filter(|r| !r.is_empty()),
            oidc: None,
        })
    }

    /// Layers `over` on top of `self`: every value `over` sets wins.
    pub fn overlay(self, over: Settings) -> Settings {
        Settings {
            listen: over.listen.or(self.listen),
            public_url: over.public_url.or(self.public_url),
            data_dir: over.data_dir.or(self.data_dir),
            tls_cert: over.tls_cert.or(self.tls_cert),
            tls_key: over.tls_key.or(self.tls_key),
            terms_version: over.terms_version.or(self.terms_version),
            agent_workers: over.agent_workers.or(self.agent_workers),
            trusted_proxies: over.trusted_proxies.or(self.trusted_proxies),
            log_format: over.log_format.or(self.log_format),
            redirect: over.redirect.or(self.redirect),
            acme: match (self.acme, over.acme) {
                (Some(a), Some(b)) => Some(a.overlay(b)),
                (a, b) => b.or(a),
            },
            oauth: match (self.oauth, over.oauth) {
                (Some(a), Some(b)) => Some(a.overlay(b)),
                (a, b) => b.or(a),
            },
            kb: over.kb.filter(|k| k.extract_text.is_some()).or(self.kb),
            proxy: over.proxy.filter(|p| p.header.is_some()).or(self.proxy),
            llm: match (self.llm, over.llm) {
                (Some(a), Some(b)) => Some(a.overlay(b)),
                (a, b) => b.or(a),
            },
            triggers: over
                .triggers
                .filter(|t| t.callback_allow_http_loopback.is_some())
                .or(self.triggers),
            retention: match (self.retention, over.retention) {
                (Some(a), Some(b)) => Some(a.overlay(b)),
                (a, b) => b.or(a),
            },
            oidc: over.oidc.or(self.oidc),
        }
    }

    /// Validates and fills in defaults.
    pub fn validate(self) -> Result<Config, ConfigError> {
        let listen = match self.listen.as_deref() {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(s) => s.parse().map_err(|_| {
                invalid(
                    "listen",
                    format!("`{s}` is not an address with a port, e.g. 127.0.0.1:8080"),
                )
            })?,
        };
        let acme = self.acme.map(validate_acme).transpose()?;
        if acme.is_some() && (self.tls_cert.is_some() || self.tls_key.is_some()) {
            return Err(invalid(
                "acme",
                "ACME and tls_cert/tls_key exclude each other; use one of them",
            ));
        }
        let public_url = self
            .public_url
            .or_else(|| {
                let first = acme.as_ref().and_then(|a| a.domains.first());
                first.map(|d| format!("https://{d}"))
            })
            .map(|u| normalize_public_url(&u))
            .transpose()?;
        let data_dir = self.data_dir.unwrap_or_else(|| PathBuf::from("data"));
        if data_dir.as_os_str().is_empty() {
            return Err(invalid("data_dir", "must not be empty"));
        }
        let tls = match (self.tls_cert, self.tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (Some(_), None) => {
                return Err(invalid("tls_key", "tls_cert is set but tls_key is not"));
            }
            (None, Some(_)) => {
                return Err(invalid("tls_cert", "tls_key is set but tls_cert is not"));
            }
        };
        let terms_version = self.terms_version.unwrap_or_else(|| "1".into());
        if terms_version.trim().is_empty() || terms_version.len() > 64 {
            return Err(invalid("terms_version", "must be 1 to 64 characters"));
        }
        let agent_workers = match self.agent_workers.as_deref() {
            None => 4,
            Some(s) => match s.trim().parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => n,
                _ => {
                    return Err(invalid(
                        "agent_workers",
                        format!("`{s}` is not a number from 1 to 256"),
                    ));
                }
            },
        };
        let trusted_proxies = self
            .trusted_proxies
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(|s| parse_net(&s))
            .collect::<Result<Vec<_>, _>>()?;
        let proxy_header = match self
            .proxy
            .and_then(|p| p.header)
            .map(|h| h.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("x-forwarded-for") => ProxyHeader::XForwardedFor,
            Some("forwarded") => ProxyHeader::Forwarded,
            Some(other) => {
                return Err(invalid(
                    "proxy.header",
                    format!("`{other}` is not `x-forwarded-for` or `forwarded`"),
                ));
            }
        };
        let log_format = match self.log_format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(invalid(
                    "log_format",
                    format!("`{other}` is not `text` or `json`"),
                ));
            }
        };
        let redirect = self.redirect.unwrap_or_default();
        validate_redirect(&redirect)?;
        let llm = validate_llm(self.llm.unwrap_or_default())?;
        let retention = validate_retention(self.retention.unwrap_or_default())?;
        let oauth = self.oauth.unwrap_or_default();
        let oidc_allow_http_loopback = oauth.oidc_allow_http_loopback.unwrap_or(false);
        let oidc = validate_oidc(self.oidc.unwrap_or_default(), oidc_allow_http_loopback)?;
        Ok(Config {
            listen,
            public_url,
            data_dir,
            tls,
            terms_version,
            redirect,
            agent_workers,
            trusted_proxies,
            proxy_header,
            log_format,
            acme,
            cimd_allow_http_loopback: oauth.cimd_allow_http_loopback.unwrap_or(false),
            callback_allow_http_loopback: self
                .triggers
                .and_then(|t| t.callback_allow_http_loopback)
                .unwrap_or(false),
            extract_text: self.kb.and_then(|k| k.extract_text).unwrap_or(true),
            extract_program: None,
            llm,
            retention,
            oidc,
            oidc_allow_http_loopback,
        })
    }
}

fn validate_acme(a: AcmeSettings) -> Result<Acme, ConfigError> {
    let domains: Vec<String> = a
        .domains
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.trim().trim_end_matches('.').to_ascii_lowercase())
        .collect();
    if domains.is_empty() {
        return Err(invalid(
            "acme.domains",
            "name at least one domain (--acme-domain) that points to this server",
        ));
    }
    for d in &domains {
        let labels_ok = d.split('.').count() >= 2
            && d.len() <= 253
            && d.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !labels_ok || d.parse::<std::net::IpAddr>().is_ok() {
            return Err(invalid(
                "acme.domains",
                format!(
                    "`{d}` is not a DNS name (TLS-ALPN-01 cannot validate wildcards or IP addresses)"
                ),
            ));
        }
    }
    let email = a.email.map(|e| e.trim().to_owned()).unwrap_or_default();
    let at = email.find('@');
    if email.is_empty()
        || at.is_none_or(|i| i == 0 || i + 1 == email.len())
        || email.contains([' ', ',', '<', '>'])
    {
        return Err(invalid(
            "acme.email",
            "give an address the CA may write to about this certificate (--acme-email)",
        ));
    }
    let directory = a
        .directory
        .map(|d| d.trim().to_owned())
        .unwrap_or_else(|| LETS_ENCRYPT.to_owned());
    if url::Url::parse(&directory)
        .ok()
        .is_none_or(|u| u.scheme() != "https" || u.host_str().is_none())
    {
        return Err(invalid(
            "acme.directory",
            format!("`{directory}` is not an https:// URL of an ACME directory"),
        ));
    }
    let mut unique = Vec::new();
    for d in domains {
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    Ok(Acme {
        domains: unique,
        email,
        directory,
        ca_root: a.ca_root,
    })
}

impl Config {
    /// The configuration for a given data directory with every other value at its default.
    #[cfg(test)]
    pub fn for_data_dir(data_dir: impl Into<PathBuf>) -> Config {
        Settings {
            data_dir: Some(data_dir.into()),
            ..Settings::default()
        }
        .validate()
        .expect("defaults are valid")
    }
}

fn parse_net(s: &str) -> Result<IpNet, ConfigError> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| {
            invalid(
                "trusted_proxies",
                format!("`{s}` is not an IP address or CIDR range"),
            )
        })
}

/// Accepts `http(s)://host[:port][/path]`, returns it without a trailing slash.
fn normalize_public_url(url: &str) -> Result<String, ConfigError> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            invalid(
                "public_url",
                format!("`{url}` must start with http:// or https://"),
            )
        })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || url.contains(['?', '#', ' ']) || host.contains('@') {
        return Err(invalid(
            "public_url",
            format!("`{url}` is not a plain base URL"),
        ));
    }
    Ok(url.to_owned())
}

fn validate_redirect(r: &RedirectAllowList) -> Result<(), ConfigError> {
    let hosts = r
        .assistant_hosts
        .iter()
        .chain(&r.platform_hosts)
        .chain(&r.editor_hosts);
    for host in hosts {
        let ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !ok {
            return Err(invalid("redirect", format!("`{host}` is not a host name")));
        }
    }
    for scheme in &r.editor_schemes {
        let ok = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !matches!(
                scheme.as_str(),
                "http" | "https" | "javascript" | "data" | "file"
            );
        if !ok {
            return Err(invalid(
                "redirect",
                format!("`{scheme}` is not a custom URI scheme"),
            ));
        }
    }
    for uri in &r.exact_uris {
        if !(uri.starts_with("https://") || uri.contains("://")) || uri.contains('#') {
            return Err(invalid(
                "redirect",
                format!("`{uri}` is not an absolute URI without fragment"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration table (docs/configuration.md) shows `agent_workers` 4 and `terms_version` 1: written as TOML
    /// numbers they work like the strings the environment gives.
    #[test]
    fn numbers_and_strings_both_work_for_counted_settings() {
        let cfg = toml::from_str::<Settings>("agent_workers = 4\nterms_version = 1")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(cfg.agent_workers, 4);
        assert_eq!(cfg.terms_version, "1");
        let cfg = toml::from_str::<Settings>("agent_workers = \"6\"\nterms_version = \"2026-01\"")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(cfg.agent_workers, 6);
        assert_eq!(cfg.terms_version, "2026-01");
        let err = toml::from_str::<Settings>("agent_workers = [1]").unwrap_err();
        assert!(err.to_string().contains("a string or a number"), "{err}");
    }

    #[test]
    fn later_sources_win_and_defaults_fill_in() {
        let file: Settings =
            toml::from_str("listen = \"0.0.0.0:9000\"\nterms_version = \"3\"").unwrap();
        let env =
            Settings::from_env(|k| (k == "KENNIS_LISTEN").then(|| "127.0.0.1:9001".to_string()))
                .unwrap();
        let cfg = file.overlay(env).validate().unwrap();
        assert_eq!(cfg.listen.port(), 9001);
        assert_eq!(cfg.terms_version, "3");
        assert_eq!(cfg.agent_workers, 4);
        assert_eq!(cfg.redirect, RedirectAllowList::default());
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            ("listen = \"nope\"", "listen"),
            ("agent_workers = \"0\"", "agent_workers"),
            ("public_url = \"ftp://x\"", "public_url"),
            ("trusted_proxies = [\"10.0.0.0/99\"]", "trusted_proxies"),
            ("log_format = \"xml\"", "log_format"),
            ("tls_cert = \"/c.pem\"", "tls_key"),
            ("[redirect]\neditor_schemes = [\"javascript\"]", "redirect"),
        ];
        for (toml_text, field) in cases {
            let s: Settings = toml::from_str(toml_text).unwrap();
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("`{field}`")), "{toml_text}: {err}");
        }
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused() {
        assert!(toml::from_str::<Settings>("lisen = \"x\"").is_err());
        assert!(toml::from_str::<Settings>("[acme]\ndomain = [\"x\"]").is_err());
        assert!(toml::from_str::<Settings>("[oauth]\ncimd = true").is_err());
        assert!(toml::from_str::<Settings>("[kb]\nextract = false").is_err());
        assert!(toml::from_str::<Settings>("[retention]\nrun_days = 5").is_err());
        assert!(toml::from_str::<Settings>("[proxy]\nheaders = \"forwarded\"").is_err());
    }

    #[test]
    fn proxy_header_is_one_of_two_families() {
        assert_eq!(
            Settings::default().validate().unwrap().proxy_header,
            ProxyHeader::XForwardedFor
        );
        let file: Settings = toml::from_str("[proxy]\nheader = \"forwarded\"").unwrap();
        assert_eq!(
            file.clone().validate().unwrap().proxy_header,
            ProxyHeader::Forwarded
        );
        let env = |v: &'static str| {
            Settings::from_env(move |k| (k == "KENNIS_PROXY_HEADER").then(|| v.to_owned())).unwrap()
        };
        assert_eq!(
            file.clone()
                .overlay(env("X-Forwarded-For"))
                .validate()
                .unwrap()
                .proxy_header,
            ProxyHeader::XForwardedFor
        );
        assert_eq!(
            file.clone()
                .overlay(Settings::default())
                .validate()
                .unwrap()
                .proxy_header,
            ProxyHeader::Forwarded
        );
        for bad in ["x-real-ip", "both", ""] {
            let s: Settings = toml::from_str(&format!("[proxy]\nheader = \"{bad}\"")).unwrap();
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains("`proxy.header`"), "{bad}: {err}");
        }
        let err = Settings::default()
            .overlay(env("x-real-ip"))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`proxy.header`") && err.contains("x-real-ip"),
            "{err}"
        );
    }

    #[test]
    fn retention_defaults_file_env_and_limits() {
        let r = Settings::default().validate().unwrap().retention;
        assert_eq!((r.runs_days, r.audit_days, r.trash_days), (90, 365, 30));
        let file: Settings = toml::from_str("[retention]\nruns_days = 7\ntrash_days = 0").unwrap();
        let env = Settings::from_env(|k| {
            (k == "KENNIS_RETENTION_AUDIT_DAYS" || k == "KENNIS_RETENTION_RUNS_DAYS")
                .then(|| "14".to_owned())
        })
        .unwrap();
        let r = file.clone().validate().unwrap().retention;
        assert_eq!((r.runs_days, r.audit_days, r.trash_days), (7, 365, 0));
        let r = file.overlay(env).validate().unwrap().retention;
        assert_eq!((r.runs_days, r.audit_days, r.trash_days), (14, 14, 0));
        let err = Settings::from_env(|k| (k == "KENNIS_RETENTION_TRASH_DAYS").then(|| "-1".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("KENNIS_RETENTION_TRASH_DAYS"), "{err}");
        assert!(toml::from_str::<Settings>("[retention]\nruns_days = -3").is_err());
        let far: Settings = toml::from_str("[retention]\naudit_days = 99999").unwrap();
        let err = far.validate().unwrap_err().to_string();
        assert!(err.contains("retention.audit_days"), "{err}");
    }

    #[test]
    fn extract_text_is_on_unless_switched_off() {
        assert!(Settings::default().validate().unwrap().extract_text);
        let file: Settings = toml::from_str("[kb]\nextract_text = false").unwrap();
        assert!(!file.clone().validate().unwrap().extract_text);
        let env = |v: &'static str| {
            Settings::from_env(move |k| (k == "KENNIS_EXTRACT_TEXT").then(|| v.to_owned()))
        };
        let err = env("maybe").unwrap_err().to_string();
        assert!(
            err.contains("KENNIS_EXTRACT_TEXT") && err.contains("maybe"),
            "{err}"
        );
        let env = |v: &'static str| env(v).unwrap();
        assert!(
            file.clone()
                .overlay(env("true"))
                .validate()
                .unwrap()
                .extract_text
        );
        assert!(
            !Settings::default()
                .overlay(env("off"))
                .validate()
                .unwrap()
                .extract_text
        );
        assert!(
            !file
                .overlay(Settings::default())
                .validate()
                .unwrap()
                .extract_text
        );
    }

    #[test]
    fn callback_loopback_switch_from_file_and_env() {
        let file: Settings =
            toml::from_str("[triggers]\ncallback_allow_http_loopback = true").unwrap();
        assert!(
            file.clone()
                .validate()
                .unwrap()
                .callback_allow_http_loopback
        );
        assert!(
            !Settings::default()
                .validate()
                .unwrap()
                .callback_allow_http_loopback
        );
        let env = |v: &'static str| {
            Settings::from_env(move |k| {
                (k == "KENNIS_CALLBACK_ALLOW_HTTP_LOOPBACK").then(|| v.into())
            })
        };
        assert!(
            !file
                .overlay(env("false").unwrap())
                .validate()
                .unwrap()
                .callback_allow_http_loopback
        );
        assert!(env("yes please").is_err());
        assert!(toml::from_str::<Settings>("[triggers]\ncallback = true").is_err());
    }

    #[test]
    fn acme_from_file_env_and_flags() {
        let file: Settings = toml::from_str(
            "[acme]\ndomains = [\"kennis.example.org\"]\nemail = \"ops@example.org\"\n[oauth]\ncimd_allow_http_loopback = true",
        )
        .unwrap();
        let cfg = file.clone().validate().unwrap();
        let acme = cfg.acme.unwrap();
        assert_eq!(acme.directory, LETS_ENCRYPT);
        assert_eq!(
            cfg.public_url.as_deref(),
            Some("https://kennis.example.org")
        );
        assert!(cfg.cimd_allow_http_loopback);
        let env = Settings::from_env(|k| match k {
            "KENNIS_ACME_DOMAINS" => Some("a.example.org, b.example.org".into()),
            "KENNIS_ACME_DIRECTORY" => Some("https://localhost:14000/dir".into()),
            "KENNIS_CIMD_ALLOW_HTTP_LOOPBACK" => Some("false".into()),
            _ => None,
        })
        .unwrap();
        let cfg = file.overlay(env).validate().unwrap();
        let acme = cfg.acme.unwrap();
        assert_eq!(acme.domains, ["a.example.org", "b.example.org"]);
        assert_eq!(acme.email, "ops@example.org");
        assert_eq!(acme.directory, "https://localhost:14000/dir");
        assert_eq!(cfg.public_url.as_deref(), Some("https://a.example.org"));
        assert!(!cfg.cimd_allow_http_loopback);
        let cases = [
            ("[acme]\nemail = \"a@b.org\"", "acme.domains"),
            (
                "[acme]\ndomains = [\"*.example.org\"]\nemail = \"a@b.org\"",
                "acme.domains",
            ),
            (
                "[acme]\ndomains = [\"10.0.0.1\"]\nemail = \"a@b.org\"",
                "acme.domains",
            ),
            ("[acme]\ndomains = [\"k.example.org\"]", "acme.email"),
            (
                "[acme]\ndomains = [\"k.example.org\"]\nemail = \"a@b.org\"\ndirectory = \"http://x/d\"",
                "acme.directory",
            ),
            (
                "tls_cert = \"c\"\ntls_key = \"k\"\n[acme]\ndomains = [\"k.example.org\"]\nemail = \"a@b.org\"",
                "acme",
            ),
        ];
        for (toml_text, field) in cases {
            let s: Settings = toml::from_str(toml_text).unwrap();
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("`{field}`")), "{toml_text}: {err}");
        }
    }

    #[test]
    fn llm_endpoints_and_limits() {
        let cfg = Settings::default().validate().unwrap().llm;
        assert_eq!(
            (cfg.max_reply_bytes, cfg.max_conversation_bytes),
            (1024 * 1024, 8 * 1024 * 1024)
        );
        assert!(cfg.endpoints.is_empty());
        let file: Settings = toml::from_str(
            "[llm]\nmax_reply_bytes = 65536\n[[llm.endpoints]]\nid = \"openai\"\nurl = \"https://api.openai.com/v1/\"\napi_key_env = \"OPENAI_API_KEY\"\norgs = [\"*\"]\n[[llm.endpoints]]\nid = \"local\"\nurl = \"http://10.0.0.5:11434/v1\"\norgs = [\"acme\"]\n",
        )
        .unwrap();
        let cfg = file.validate().unwrap().llm;
        assert_eq!(cfg.max_reply_bytes, 65536);
        assert_eq!(cfg.endpoints[0].url, "https://api.openai.com/v1");
        let ids = |slug| {
            cfg.endpoints_for(slug)
                .map(|e| e.id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("acme"), ["openai", "local"]);
        assert_eq!(ids("other"), ["openai"]);
        let endpoint = "[[llm.endpoints]]\nid = \"e\"\nurl = \"https://x/v1\"\norgs = [\"*\"]\n";
        let cases = [
            "[llm]\nmax_reply_bytes = 0".to_owned(),
            "[llm]\nmax_conversation_bytes = 99999999999".to_owned(),
            endpoint.replace("id = \"e\"", "id = \"E x\""),
            endpoint.replace("https://x/v1", "ftp://x"),
            endpoint.replace("https://x/v1", "https://user:pw@x/v1"),
            endpoint.replace("orgs = [\"*\"]", "orgs = []"),
            endpoint.replace("orgs", "api_key_file = \"key\"\norgs"),
            endpoint.replace("orgs", "api_key_env = \"A\"\napi_key_file = \"/k\"\norgs"),
            format!("{endpoint}{endpoint}"),
        ];
        for text in cases {
            let s: Settings = toml::from_str(&text).unwrap();
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains("`llm."), "{text}: {err}");
        }
        assert!(toml::from_str::<Settings>("[llm]\nmax_reply = 1").is_err());
        // The example in docs/agents.md is valid as it stands.
        let readme = include_str!("../docs/agents.md");
        let example = readme
            .split("**Model endpoints are the operator's.**")
            .nth(1)
            .and_then(|rest| rest.split("```toml\n").nth(1))
            .and_then(|block| block.split("```").next())
            .unwrap();
        let s: Settings = toml::from_str(example).unwrap();
        let cfg = s.validate().unwrap().llm;
        assert_eq!(cfg.endpoints.len(), 2);
        assert_eq!(cfg.max_conversation_bytes, DEFAULT_MAX_CONVERSATION_BYTES);
        assert!(toml::from_str::<Settings>(&endpoint.replace("orgs", "key = 1\norgs")).is_err());
    }

    #[test]
    fn public_url_loses_trailing_slash() {
        let s = Settings {
            public_url: Some("https://kennis.example.org/".into()),
            ..Default::default()
        };
        assert_eq!(
            s.validate().unwrap().public_url.as_deref(),
            Some("https://kennis.example.org")
        );
    }
}
