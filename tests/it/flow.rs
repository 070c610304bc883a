//! A scripted browser and OAuth client for the HTTP tests of the authorization server and the
//! portal: cookies by hand (the test client keeps none), CSRF tokens read from the forms.

#![allow(dead_code)]

use std::collections::HashMap;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::fixture::{Seeded, TestServer};

pub struct Browser<'a> {
    pub t: &'a TestServer,
    pub cookies: HashMap<String, String>,
}

pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    /// The value of the first `csrf_token` hidden input.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf_token\" value=\"")
            .unwrap_or_else(|| panic!("no csrf_token in page: {}", self.body));
        let rest = &self.body[at + "name=\"csrf_token\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl<'a> Browser<'a> {
    pub fn new(t: &'a TestServer) -> Self {
        Browser {
            t,
            cookies: HashMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&mut self, resp: reqwest::Response) -> Page {
        for v in resp.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (k, val) = pair.split_once('=').unwrap();
            if val.is_empty() {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_owned(), val.to_owned());
            }
        }
        Page {
            status: resp.status().as_u16(),
            location: resp
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned()),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap(),
        }
    }

    pub fn abs(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_owned()
        } else {
            self.t.url(path)
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let resp = self
            .t
            .client
            .get(self.abs(path))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let resp = self
            .t
            .client
            .post(self.abs(path))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        self.finish(resp).await
    }

    /// Logs in with password and second factor; ends on the page `next` leads to.
    pub async fn login(&mut self, s: &Seeded, next: &str) -> Page {
        let q = form_urlencoded::Serializer::new(String::new())
            .append_pair("next", next)
            .finish();
        let p = self.get(&format!("/login?{q}")).await;
        assert_eq!(p.status, 200);
        assert!(p.body.contains("id=\"login-form\""));
        let csrf = p.csrf();
        let p = self
            .post(
                &format!("/login?{q}"),
                &[
                    ("csrf_token", &csrf),
                    ("email", &s.person.email),
                    ("password", &s.password),
                ],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.body);
        let totp_url = p.location.unwrap();
        assert!(totp_url.starts_with("/login/totp"));
        let p = self.get(&totp_url).await;
        assert!(p.body.contains("id=\"totp-form\""), "{}", p.body);
        let csrf = p.csrf();
        // A fresh time step: the seeding used the current one.
        self.t.clock.advance(jiff::SignedDuration::from_secs(30));
        let code = kennis::identity::code_at(&s.totp_secret, self.t.app().clock.now());
        let p = self
            .post(&totp_url, &[("csrf_token", &csrf), ("code", &code)])
            .await;
        assert_eq!(p.status, 303, "{}", p.body);
        let to = p.location.unwrap();
        self.get(&to).await
    }
}

/// PKCE pair: (verifier, S256 challenge).
pub fn pkce() -> (String, String) {
    let verifier = kennis::oauth::new_secret("v-");
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

pub const REDIRECT: &str = "http://127.0.0.1:45678/callback";

/// Registers a public client with the loopback redirect; returns its id.
pub async fn register_public(t: &TestServer) -> String {
    let r = t
        .client
        .post(t.url("/register"))
        .json(&serde_json::json!({
            "client_name": "Test Assistant",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    v["client_id"].as_str().unwrap().to_owned()
}

pub fn authorize_path(client_id: &str, challenge: &str, extra: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", REDIRECT)
        .append_pair("state", "st-123")
        .append_pair("code_challenge", challenge)
        .append_pair("code_challenge_method", "S256");
    for (k, v) in extra {
        q.append_pair(k, v);
    }
    format!("/authorize?{}", q.finish())
}

/// Query parameters of a redirect URL.
pub fn query_of(url: &str) -> HashMap<String, String> {
    let u = url::Url::parse(url).unwrap();
    u.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Approves the consent page (already loaded in `page`) with `scopes`; returns the redirect.
pub async fn approve(b: &mut Browser<'_>, page: &Page, org: &str, scopes: &[&str]) -> Page {
    assert!(page.body.contains("id=\"consent-form\""), "{}", page.body);
    let mut form: Vec<(String, String)> = hidden_fields(&page.body);
    form.push(("org".into(), org.into()));
    for s in scopes {
        form.push(("scope".into(), (*s).into()));
    }
    form.push(("decision".into(), "approve".into()));
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    b.post("/authorize", &pairs).await
}

/// Every hidden input of a page, as (name, value), HTML entities of values decoded.
pub fn hidden_fields(body: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in body.split("<input type=\"hidden\" ").skip(1) {
        let name = between(part, "name=\"", "\"");
        let value = between(part, "value=\"", "\"");
        out.push((name, unescape(&value)));
    }
    out
}

fn between(s: &str, a: &str, b: &str) -> String {
    let i = s.find(a).unwrap() + a.len();
    let j = s[i..].find(b).unwrap();
    s[i..i + j].to_owned()
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The whole flow up to a code: register, log in, consent. Returns (client_id, verifier, code).
pub async fn code_for(t: &TestServer, s: &Seeded, scopes: &[&str]) -> (String, String, String) {
    let client_id = register_public(t).await;
    let (verifier, challenge) = pkce();
    let mut b = Browser::new(t);
    let path = authorize_path(&client_id, &challenge, &[]);
    let first = b.get(&path).await;
    assert_eq!(first.status, 303, "{}", first.body);
    let consent = b.login(s, &path).await;
    let p = approve(&mut b, &consent, &s.org.slug, scopes).await;
    assert_eq!(p.status, 302, "{}", p.body);
    let loc = p.location.unwrap();
    assert!(loc.starts_with(REDIRECT), "{loc}");
    let q = query_of(&loc);
    assert_eq!(q["state"], "st-123");
    assert_eq!(q["iss"], t.base);
    (client_id, verifier, q["code"].clone())
}

/// POST /token with a form; returns (status, JSON).
pub async fn token(t: &TestServer, form: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let r = t
        .client
        .post(t.url("/token"))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status == 200 {
        assert_eq!(r.headers()["cache-control"], "no-store");
    }
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

pub async fn exchange(
    t: &TestServer,
    client_id: &str,
    verifier: &str,
    code: &str,
) -> (u16, serde_json::Value) {
    token(
        t,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", client_id),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier),
        ],
    )
    .await
}
