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
    pub log_format: LogFormat,
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
    pub terms_version: Option<String>,
    pub agent_workers: Option<String>,
    pub trusted_proxies: Option<Vec<String>>,
    pub log_format: Option<String>,
    pub redirect: Option<RedirectAllowList>,
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

    /// Reads the `KENNIS_*` environment variables through `lookup` (injectable for tests).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        Self {
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
        }
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
        let public_url = self
            .public_url
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
        Ok(Config {
            listen,
            public_url,
            data_dir,
            tls,
            terms_version,
            redirect,
            agent_workers,
            trusted_proxies,
            log_format,
        })
    }
}

impl Config {
    /// The configuration for a given data directory with every other value at its default.
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

    #[test]
    fn later_sources_win_and_defaults_fill_in() {
        let file: Settings =
            toml::from_str("listen = \"0.0.0.0:9000\"\nterms_version = \"3\"").unwrap();
        let env =
            Settings::from_env(|k| (k == "KENNIS_LISTEN").then(|| "127.0.0.1:9001".to_string()));
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
