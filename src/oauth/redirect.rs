//! The redirect-URI allow-list. At registration a URI must have one of the shapes of the
//! specification (or be listed exactly in the config); at `/authorize` the URI must be one the
//! client registered, exactly, except that loopback URIs match on any port (RFC 8252 §7.3).
//!
//! Parsing goes through the `url` crate so that tricks such as `..` segments, user info and
//! upper-case hosts are normalised before the shape is judged.

use url::Url;

use crate::config::RedirectAllowList;

/// Longest redirect URI accepted; real ones are far shorter.
pub const MAX_URI_LEN: usize = 2000;

const LOOPBACK_HOSTS: [&str; 2] = ["localhost", "127.0.0.1"];

fn parse(uri: &str) -> Option<Url> {
    if uri.len() > MAX_URI_LEN || uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return None;
    }
    let url = Url::parse(uri).ok()?;
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    Some(url)
}

/// The authority as written, so an explicit default port (`:80`) still counts as explicit.
fn written_port(uri: &str) -> Option<u16> {
    let rest = uri.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (_, port) = authority.rsplit_once(':')?;
    port.parse().ok()
}

fn is_loopback(url: &Url) -> bool {
    url.scheme() == "http" && url.host_str().is_some_and(|h| LOOPBACK_HOSTS.contains(&h))
}

fn is_id_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `uri` may be registered under `list`.
pub fn allowed_at_registration(list: &RedirectAllowList, uri: &str) -> bool {
    if list.exact_uris.iter().any(|e| e == uri) {
        return true;
    }
    let Some(url) = parse(uri) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    let path = url.path();
    match url.scheme() {
        "https" => {
            if url.port().is_some() || url.query().is_some() {
                return false;
            }
            let on = |hosts: &[String]| hosts.iter().any(|h| h.eq_ignore_ascii_case(host));
            (on(&list.assistant_hosts) && path == "/api/mcp/auth_callback")
                || (on(&list.platform_hosts)
                    && (path == "/connector_platform_oauth_redirect"
                        || path
                            .strip_prefix("/connector/oauth/")
                            .is_some_and(is_id_segment)))
                || (on(&list.editor_hosts) && path == "/agents/mcp/oauth/callback")
        }
        "http" => list.allow_loopback && is_loopback(&url) && written_port(uri).is_some(),
        scheme => {
            list.editor_schemes.iter().any(|s| s == scheme)
                && !host.is_empty()
                && path.ends_with("/oauth/callback")
                && url.query().is_none()
        }
    }
}

/// Whether `uri`, sent to `/authorize`, is one of the client's registered URIs.
pub fn matches_registered(registered: &[String], uri: &str) -> bool {
    if registered.iter().any(|r| r == uri) {
        return true;
    }
    let Some(asked) = parse(uri) else {
        return false;
    };
    if !is_loopback(&asked) {
        return false;
    }
    registered.iter().filter_map(|r| parse(r)).any(|r| {
        is_loopback(&r)
            && r.host_str() == asked.host_str()
            && r.path() == asked.path()
            && r.query() == asked.query()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_matches_on_any_port_only() {
        let reg = vec!["http://127.0.0.1:33418/callback".to_owned()];
        assert!(matches_registered(&reg, "http://127.0.0.1:33418/callback"));
        assert!(matches_registered(&reg, "http://127.0.0.1:50000/callback"));
        assert!(!matches_registered(&reg, "http://127.0.0.1:50000/other"));
        assert!(!matches_registered(&reg, "http://localhost:50000/callback"));
        let hosted = vec!["https://claude.ai/api/mcp/auth_callback".to_owned()];
        assert!(!matches_registered(
            &hosted,
            "https://claude.ai/api/mcp/auth_callback?x=1"
        ));
    }
}
