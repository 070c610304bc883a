//! The portal's languages: Dutch and English, with Fluent messages in `locales/<lang>/*.ftl`
//! (compiled into the binary by `fluent-templates`).
//!
//! The language of a request is the person's own choice (account page), else the browser's
//! `Accept-Language` (Dutch when it prefers `nl`), else English. A middleware decides it once
//! per request and keeps it in a task-local, so pages call [`t`] / [`ta`] without passing it
//! around; [`current`] names it (for `<html lang>`). Only the request's own task knows its
//! language: word messages before handing work to `App::blocking`, not inside it. Dates and
//! numbers follow the language too — one format for a moment ([`date_time`], as `<time>`:
//! [`moment`]), [`number`], [`decimal`], [`bytes`] — and so do statuses ([`status_label`],
//! [`status_badge`]); [`tc`] chooses a message's plural.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use fluent_templates::fluent_bundle::FluentValue;
use fluent_templates::{LanguageIdentifier, Loader, langid};
use jiff::Timestamp;

use crate::app::App;

fluent_templates::static_loader! {
    static LOCALES = {
        locales: "./locales",
        fallback_language: "en",
        // No Unicode isolation marks around arguments: the pages are plain left-to-right text.
        customise: |bundle| bundle.set_use_isolating(false),
    };
}

static EN: LanguageIdentifier = langid!("en");
static NL: LanguageIdentifier = langid!("nl");

/// A language of the portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    Nl,
}

impl Lang {
    /// Every language, in the order the account page offers them.
    pub const ALL: [Lang; 2] = [Lang::Nl, Lang::En];

    /// The BCP 47 code (`<html lang>`, stored choice).
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Nl => "nl",
        }
    }

    /// The language's own name, as a language picker shows it.
    pub fn native_name(self) -> &'static str {
        match self {
            Lang::En => "English",
            Lang::Nl => "Nederlands",
        }
    }

    fn id(self) -> &'static LanguageIdentifier {
        match self {
            Lang::En => &EN,
            Lang::Nl => &NL,
        }
    }

    /// A stored or submitted language code.
    pub fn parse(code: &str) -> Option<Lang> {
        match code {
            "en" => Some(Lang::En),
            "nl" => Some(Lang::Nl),
            _ => None,
        }
    }

    /// The language an `Accept-Language` header prefers among ours (highest quality first,
    /// the first listed among equals); English when it names neither.
    pub fn from_accept_language(header: Option<&str>) -> Lang {
        let mut best: Option<(f32, usize, Lang)> = None;
        for (i, item) in header.unwrap_or_default().split(',').enumerate() {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let primary = tag.split('-').next().unwrap_or_default();
            let Some(lang) = Lang::parse(primary) else {
                continue;
            };
            if q > 0.0 && best.is_none_or(|(bq, bi, _)| q > bq || (q == bq && i < bi)) {
                best = Some((q, i, lang));
            }
        }
        best.map(|(_, _, l)| l).unwrap_or(Lang::En)
    }
}

tokio::task_local! {
    static CURRENT: Lang;
}

/// The language of the request being answered (English outside a request).
pub fn current() -> Lang {
    CURRENT.try_with(|l| *l).unwrap_or(Lang::En)
}

/// Runs `f` with `lang` as the current language (tests, and work outside the middleware).
pub async fn scope<F: Future>(lang: Lang, f: F) -> F::Output {
    CURRENT.scope(lang, f).await
}

/// The message `key` in the current language. A key without a message shows as itself, so
/// a missing translation is visible rather than fatal (the tests make sure there is none).
pub fn t(key: &str) -> String {
    LOCALES
        .try_lookup(current().id(), key)
        .unwrap_or_else(|| key.to_owned())
}

/// The message `key` with arguments (`{ $name }` in the message).
pub fn ta(key: &str, args: &[(&'static str, String)]) -> String {
    lookup(key, args, None)
}

/// The message `key` with arguments and a count: `$count` is a number, so the message can
/// choose its plural (`{ $count -> [one] … *[other] … }`), and `$n` is the count as the
/// language writes it.
pub fn tc(key: &str, count: u64, args: &[(&'static str, String)]) -> String {
    lookup(key, args, Some(count))
}

fn lookup(key: &str, args: &[(&'static str, String)], count: Option<u64>) -> String {
    let mut map: HashMap<Cow<'static, str>, FluentValue<'_>> = args
        .iter()
        .map(|(k, v)| (Cow::Borrowed(*k), FluentValue::from(v.clone())))
        .collect();
    if let Some(c) = count {
        map.insert(Cow::Borrowed("count"), FluentValue::from(c as f64));
        map.insert(Cow::Borrowed("n"), FluentValue::from(number(c)));
    }
    LOCALES
        .try_lookup_with_args(current().id(), key, &map)
        .unwrap_or_else(|| key.to_owned())
}

/// Whether the current language has a message `key` that takes no arguments (for optional
/// messages, such as a translation of a refusal's code).
pub fn has(key: &str) -> bool {
    LOCALES.try_lookup(current().id(), key).is_some()
}

/// An integer with the language's thousands separator: `12,345` / `12.345`.
pub fn number(n: u64) -> String {
    let sep = match current() {
        Lang::En => ',',
        Lang::Nl => '.',
    };
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(sep);
        }
        out.push(c);
    }
    out
}

/// A number with `places` decimals in the language's notation: `1,234.5` / `1.234,5`.
pub fn decimal(x: f64, places: usize) -> String {
    let x = if x.is_finite() { x.max(0.0) } else { 0.0 };
    let fixed = format!("{x:.places$}");
    let (whole, frac) = fixed.split_once('.').unwrap_or((fixed.as_str(), ""));
    let whole = number(whole.parse().unwrap_or(0));
    if frac.is_empty() {
        return whole;
    }
    let point = match current() {
        Lang::En => '.',
        Lang::Nl => ',',
    };
    format!("{whole}{point}{frac}")
}

/// A size for people: bytes, kB or MB with one decimal in the language's notation.
pub fn bytes(n: u64) -> String {
    match n {
        0..1_000 => format!("{} B", number(n)),
        1_000..1_000_000 => format!("{} kB", decimal(n as f64 / 1_000.0, 1)),
        _ => format!("{} MB", decimal(n as f64 / 1_000_000.0, 1)),
    }
}

/// A moment as the language writes it, in UTC: `1 Jun 2026 09:00 UTC` / `1 jun. 2026 09:00
/// UTC`. The one date format of the portal; [`moment`] puts it in a `<time>` element.
pub fn date_time(at: Timestamp) -> String {
    let z = at.to_zoned(jiff::tz::TimeZone::UTC);
    let month = t(&format!("month-short-{}", z.month()));
    format!(
        "{} {} {} {:02}:{:02} UTC",
        z.day(),
        month,
        z.year(),
        z.hour(),
        z.minute()
    )
}

/// [`date_time`] as a `<time>` element with the machine-readable moment.
pub fn moment(at: Timestamp) -> maud::Markup {
    maud::html! { time datetime=(at.to_string()) { (date_time(at)) } }
}

/// A status as people read it (`status-<value>` in `locales/`); the value itself stays what
/// forms, URLs and the API use.
pub fn status_label(value: &str) -> String {
    let key = format!("status-{value}");
    if has(&key) { t(&key) } else { value.to_owned() }
}

/// A status badge: the class is the status value (the stylesheet colours it), the text its
/// label in the current language.
pub fn status_badge(value: &str) -> maud::Markup {
    maud::html! { span class={ "badge " (value) } { (status_label(value)) } }
}

/// Decides the language of each portal request: the logged-in person's choice, else
/// `Accept-Language`. Also tells caches that the answer depends on `Accept-Language`.
pub async fn middleware(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    // A store that fails here fails the page too, which says so: the language falls back.
    let read = super::request_session(&app, None, req.headers()).await.ok();
    let chosen = read
        .as_ref()
        .and_then(|s| s.as_ref())
        .and_then(|s| s.person.language.as_deref().and_then(Lang::parse));
    let lang = chosen.unwrap_or_else(|| from_headers(req.headers()));
    if let Some(s) = read {
        req.extensions_mut().insert(super::ReadSession(s));
    }
    let mut resp = CURRENT.scope(lang, next.run(req)).await;
    resp.headers_mut()
        .append(header::VARY, header::ACCEPT_LANGUAGE.into());
    resp
}

fn from_headers(headers: &HeaderMap) -> Lang {
    Lang::from_accept_language(
        headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeSet;

    use fluent_templates::fluent_bundle::FluentResource;

    use super::*;

    /// The ids of the messages in `locales/<dir>/` (read from the files, so messages with
    /// arguments count too).
    pub(in crate::portal) fn ids(dir: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("locales")
            .join(dir);
        for f in std::fs::read_dir(&root).unwrap() {
            let path = f.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err((_, e)) = FluentResource::try_new(text.clone()) {
                panic!("{}: {e:?}", path.display());
            }
            // A message starts at the line's beginning: `id = …`.
            for line in text.lines() {
                let Some((id, _)) = line.split_once(" =") else {
                    continue;
                };
                if id.starts_with(|c: char| c.is_ascii_lowercase())
                    && id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    assert!(out.insert(id.to_owned()), "{id} defined twice in {dir}");
                }
            }
        }
        out
    }

    #[test]
    fn every_message_exists_in_both_languages() {
        let (en, nl) = (ids("en"), ids("nl"));
        let only_en: Vec<_> = en.difference(&nl).collect();
        let only_nl: Vec<_> = nl.difference(&en).collect();
        assert!(
            only_en.is_empty() && only_nl.is_empty(),
            "only in English: {only_en:?}; only in Dutch: {only_nl:?}"
        );
        assert!(en.len() > 50, "the portal's messages are in locales/");
    }

    /// Every `t("…")` / `ta("…")` / `until("…")` key and navigation label in the portal's code
    /// has a message.
    #[test]
    fn every_key_the_pages_use_has_a_message() {
        let en = ids("en");
        let mut missing = Vec::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/portal");
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for f in std::fs::read_dir(&dir).unwrap() {
                let path = f.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for pat in ["t(\"", "ta(\"", "tc(\"", "has(\"", "until(\"", "(\"nav-"] {
                    for (at, _) in text.match_indices(pat) {
                        let before = text[..at].chars().next_back().unwrap_or(' ');
                        if before.is_alphanumeric() || before == '_' || before == '.' {
                            continue;
                        }
                        let start = at + pat.len() - if pat.starts_with("(\"nav") { 4 } else { 0 };
                        let Some(len) = text[start..].find('"') else {
                            continue;
                        };
                        let key = &text[start..start + len];
                        let is_key = !key.is_empty()
                            && key
                                .chars()
                                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                        if is_key && !en.contains(key) {
                            missing.push(format!("{}: {key}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(missing.is_empty(), "keys without a message: {missing:?}");
    }

    #[test]
    fn accept_language_picks_dutch_only_when_preferred() {
        assert_eq!(
            Lang::from_accept_language(Some("nl-NL,nl;q=0.9,en;q=0.8")),
            Lang::Nl
        );
        assert_eq!(Lang::from_accept_language(Some("en-GB,nl;q=0.5")), Lang::En);
        assert_eq!(Lang::from_accept_language(Some("de,nl;q=0.3")), Lang::Nl);
        assert_eq!(Lang::from_accept_language(Some("fr")), Lang::En);
        assert_eq!(Lang::from_accept_language(Some("nl;q=0")), Lang::En);
        assert_eq!(Lang::from_accept_language(None), Lang::En);
    }

    #[tokio::test]
    async fn numbers_dates_and_messages_follow_the_language() {
        let at: Timestamp = "2026-06-01T09:05:00Z".parse().unwrap();
        let late: Timestamp = "2026-11-24T14:05:00Z".parse().unwrap();
        scope(Lang::Nl, async {
            assert_eq!(number(1_234_567), "1.234.567");
            assert_eq!(bytes(1_500), "1,5 kB");
            assert_eq!(bytes(2_345_678), "2,3 MB");
            assert_eq!(decimal(1234.56, 1), "1.234,6");
            assert_eq!(decimal(0.04, 1), "0,0");
            assert_eq!(date_time(at), "1 jun. 2026 09:05 UTC");
            assert_eq!(date_time(late), "24 nov. 2026 14:05 UTC");
            assert_eq!(
                moment(late).into_string(),
                "<time datetime=\"2026-11-24T14:05:00Z\">24 nov. 2026 14:05 UTC</time>"
            );
            assert_eq!(t("action-log-in"), "Inloggen");
            assert_eq!(tc("requests-total", 1, &[]), "1 wens");
            assert_eq!(tc("requests-total", 1234, &[]), "1.234 wensen");
            assert_eq!(status_label("awaiting_feedback"), "wacht op reactie");
        })
        .await;
        scope(Lang::En, async {
            assert_eq!(number(1_234_567), "1,234,567");
            assert_eq!(bytes(1_500), "1.5 kB");
            assert_eq!(decimal(1234.56, 1), "1,234.6");
            assert_eq!(date_time(at), "1 Jun 2026 09:05 UTC");
            assert_eq!(date_time(late), "24 Nov 2026 14:05 UTC");
            assert_eq!(t("action-log-in"), "Log in");
            assert_eq!(tc("requests-total", 1, &[]), "1 request");
            assert_eq!(tc("requests-total", 2, &[]), "2 requests");
            assert_eq!(status_label("awaiting_feedback"), "awaiting feedback");
            assert_eq!(
                status_badge("timed_out").into_string(),
                "<span class=\"badge timed_out\">timed out</span>"
            );
        })
        .await;
    }

    /// Every status the portal shows (requests, runs, apps) and every month has a label in
    /// both languages; these keys are made at run time, so the key scan cannot see them.
    #[tokio::test]
    async fn every_status_and_month_has_a_label() {
        use crate::requests::Status;
        let apps = ["live", "draft", "archived"];
        for lang in Lang::ALL {
            scope(lang, async {
                for s in Status::ALL.iter().map(|s| s.as_str()).chain(apps) {
                    assert!(has(&format!("status-{s}")), "no label for {s}");
                }
                for m in 1..=12 {
                    assert!(has(&format!("month-short-{m}")), "no month {m}");
                }
            })
            .await;
        }
    }
}
