//! The knowledge base in the portal: browse folders, search (the connector's search, with
//! snippet and line), read a document (`/portal/o/<org>/kb/<path>`: Markdown rendered with raw
//! HTML escaped, plain text as text), its versions with who wrote each and a diff between two,
//! upload several files at once (drag and drop when scripts run), download, and the audit log
//! with the assistant behind each call. Uploads may be large, so these routes have their own
//! body limit instead of the portal's 64 KB.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;

use super::form::CsrfForm;
use super::i18n::{bytes as fmt_bytes, decimal, moment, number, t, ta};
use super::{OrgAdmin, OrgMember, csrf_field, csrf_rejected, layout, page, see_other, verify_csrf};
use crate::app::App;
use crate::audit;
use crate::http::error::ToProblem;
use crate::identity;
use crate::kb::{self, DocKind, Entry, KbError, Version, link, path, search};
use crate::oauth;
use crate::store::StoreError;

/// Largest file the portal accepts.
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/portal/o/{slug}/kb", get(browse))
        // The old address of a document page (`?path=`) still leads there.
        .route(
            "/portal/o/{slug}/kb/doc",
            get(old_document_url).post(doc_named_document_action),
        )
        .route(
            "/portal/o/{slug}/kb/{*path}",
            get(document).post(document_action),
        )
        .route("/portal/o/{slug}/trash", get(trash_page).post(trash_action))
        .route("/portal/o/{slug}/export", get(export_zip))
        .route(
            "/portal/o/{slug}/kb/upload",
            get(upload_named_document)
                .post(upload_or_document_action)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_UPLOAD + 64 * 1024)),
        )
        .route("/portal/o/{slug}/audit", get(audit_page))
}

#[derive(Deserialize)]
pub(super) struct BrowseQuery {
    path: Option<String>,
    /// With `path`: search only in that folder.
    q: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct DocQuery {
    path: Option<String>,
    /// Versions to compare; kept as text so a wrong one compares nothing rather than failing
    /// the page.
    from: Option<String>,
    to: Option<String>,
    /// Show a Markdown document's text line by line (where search results point) instead of
    /// rendered.
    lines: Option<String>,
}

/// A refused operation (or a failure), as `http::error` maps it.
fn refused(m: &OrgMember, e: &impl ToProblem) -> Response {
    let p = e.problem();
    if p.is_internal() {
        return super::problem_page(&t("nav-kb"), Some(&m.user), Some(&m.org), &p);
    }
    error_page(m, p.status, &super::problem_text(&p))
}

/// A knowledge-base page that says what went wrong, with the search box (every
/// knowledge-base page has one).
fn error_page(m: &OrgMember, status: StatusCode, msg: &str) -> Response {
    page(
        status,
        layout(
            &t("nav-kb"),
            Some(&m.user),
            Some(&m.org),
            html! {
                (search_form(&m.org.slug, "", "", false))
                p.notice.error #error role="alert" { (msg) }
                p { a href=(kb_url(&m.org.slug, "")) { (t("kb-back")) } }
            },
        ),
    )
}

fn kb_url(slug: &str, folder: &str) -> String {
    if folder.is_empty() {
        format!("/portal/o/{slug}/kb")
    } else {
        format!("/portal/o/{slug}/kb?path={}", url_escape(folder))
    }
}

/// A document's page: `/portal/o/<org>/kb/<path>`, each segment percent-encoded.
pub fn doc_url(slug: &str, doc_path: &str) -> String {
    path::portal_page(slug, doc_path)
}

fn url_escape(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The search box of every knowledge-base page; `folder` offers to search only there.
fn search_form(slug: &str, q: &str, folder: &str, scoped: bool) -> Markup {
    html! {
        form #kb-search-form .search role="search" method="get" action={ "/portal/o/" (slug) "/kb" } {
            label for="kb-q" .visually-hidden { (t("search-label")) }
            input #kb-q type="search" name="q" value=(q) minlength="2" maxlength="200" placeholder=(t("search-placeholder")) aria-label=(t("search-label")) required;
            @if !folder.is_empty() {
                // Ticked, the folder is the search's `path` (as in `kennisbank_search`).
                label.check { input type="checkbox" name="path" value=(folder) checked[scoped]; (ta("search-in-folder", &[("folder", folder.to_owned())])) }
            }
            button type="submit" { (t("action-search")) }
        }
    }
}

/// Markdown is rendered; its lines are shown on request (`?lines=1`).
fn renders_as_markdown(content_type: &str) -> bool {
    content_type.starts_with("text/markdown")
}

/// Text line by line, each line a target (`#L1`, `#L2`, …) that search results link to.
fn numbered(text: &str) -> Markup {
    html! {
        @for (i, line) in text.lines().enumerate() {
            span.line id={ "L" (i + 1) } { (line) "\n" }
        }
    }
}

fn crumbs(slug: &str, here: &str) -> Markup {
    let parts: Vec<(&str, String)> = here
        .split('/')
        .filter(|s| !s.is_empty())
        .scan(String::new(), |acc, seg| {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(seg);
            Some((seg, acc.clone()))
        })
        .collect();
    html! {
        nav.crumbs aria-label=(t("crumbs-label")) {
            a href=(kb_url(slug, "")) { (t("kb-top")) }
            @for (seg, at) in &parts { " / " a href=(kb_url(slug, at)) { (seg) } }
        }
    }
}

async fn browse(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Query(q): Query<BrowseQuery>,
) -> Response {
    let folder = match path::normalize_folder(q.path.as_deref()) {
        Ok(f) => f,
        Err(e) => return refused(&m, &e),
    };
    let here = folder.clone().unwrap_or_default();
    let slug = m.org.slug.clone();
    if let Some(query) = q.q.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        // A search with a `path` is a search in that folder.
        let scoped = !here.is_empty();
        return search_page(&app, &m, query, &here, scoped).await;
    }
    let org_id = m.org.id;
    let f = folder.clone();
    let listed = app
        .blocking(move |app| app.store.read(|tx| kb::list(tx, org_id, f.as_deref())))
        .await;
    let entries: Vec<Entry> = match listed {
        Ok(e) => e,
        Err(KbError::NotFound(_)) if folder.is_none() => Vec::new(),
        Err(e) => return refused(&m, &e),
    };
    let body = html! {
        (search_form(&slug, "", &here, false))
        (crumbs(&slug, &here))
        @if entries.is_empty() { p.muted { (t("kb-empty")) } }
        @else {
            div.table-wrap {
                table #kb-entries {
                    thead { tr { th scope="col" { (t("col-name")) } th scope="col" .num { (t("col-version")) } th scope="col" .num { (t("col-size")) } } }
                    tbody {
                        @for e in &entries {
                            tr {
                                @if e.kind == "folder" {
                                    td { a href=(kb_url(&slug, &e.path)) { (e.name) "/" } } td {} td {}
                                } @else {
                                    td { a href=(doc_url(&slug, &e.path)) { (e.name) } }
                                    td.num { (e.version.unwrap_or(0)) }
                                    td.num { (fmt_bytes(e.size.unwrap_or(0))) }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 #upload { (t("upload-heading")) }
        form #upload-form .stack method="post" enctype="multipart/form-data" action={ "/portal/o/" (slug) "/kb/upload" } {
            (csrf_field(&m.user.csrf))
            input type="hidden" name="folder" value=(here);
            div.drop {
                label { (t("upload-files")) input type="file" name="file" multiple required; }
                p.muted { (t("upload-hint")) }
            }
            button type="submit" { (ta("upload-to", &[("folder", if here.is_empty() { t("kb-top") } else { here.clone() })])) }
        }
        @if m.is_admin() {
            p #kb-admin-links {
                a #kb-trash-link href={ "/portal/o/" (slug) "/trash" } { (t("kb-trash-link")) }
                " · "
                a #kb-export-link href={ "/portal/o/" (slug) "/export" } download { (t("kb-export-link")) }
            }
        }
        p.muted { (t("connector-url")) " " code { (app.connector_url()) } }
    };
    page(
        StatusCode::OK,
        layout(&t("nav-kb"), Some(&m.user), Some(&m.org), body),
    )
}

async fn search_page(
    app: &Arc<App>,
    m: &OrgMember,
    query: &str,
    here: &str,
    scoped: bool,
) -> Response {
    let (org_id, raw) = (m.org.id, query.to_owned());
    let folder = scoped.then(|| here.to_owned());
    let out = app
        .blocking(move |app| {
            search::search_text(
                &app.store,
                &app.kb_index,
                org_id,
                &raw,
                folder.as_deref(),
                search::MAX_LIMIT,
            )
        })
        .await;
    let slug = &m.org.slug;
    let terms = search::parse_query(query)
        .map(|q| q.terms)
        .unwrap_or_default();
    let body = match out {
        Ok(out) => html! {
            (search_form(slug, query, here, scoped))
            p role="status" { (ta("search-count", &[("count", number(out.results.len() as u64)), ("query", query.to_owned())])) }
            ol #kb-results .results {
                @for hit in &out.results {
                    li {
                        a href={ (doc_url(slug, &hit.path)) @if renders_as_markdown(path::text_type(&hit.path)) { "?lines=1" } "#L" (hit.line) } { (hit.path) }
                        " " span.muted { (ta("search-line", &[("line", number(hit.line as u64))])) }
                        @if hit.extracted { " " span.badge.extracted { (t("search-extracted")) } }
                        pre.snippet { (marked(&hit.snippet, &terms)) }
                    }
                }
            }
            @if out.truncated { p.muted { (t("search-truncated")) } }
            @if let Some(ns) = &out.not_searched {
                p.muted { (ta("search-not-searched", &[("count", number(ns.documents as u64))])) }
            }
        },
        Err(e) => {
            let p = e.problem();
            if p.is_internal() {
                return refused(m, &e);
            }
            html! {
                (search_form(slug, query, here, scoped))
                p.notice.error #error { (super::problem_text(&p)) }
            }
        }
    };
    page(
        StatusCode::OK,
        layout(&t("search-title"), Some(&m.user), Some(&m.org), body),
    )
}

/// A snippet with the query's words marked (`<mark>`), the rest as text.
fn marked(snippet: &str, terms: &[String]) -> Markup {
    let mut pieces = Vec::new();
    let mut at = 0;
    for r in search::marks(snippet, terms) {
        pieces.push((
            snippet.get(at..r.start).unwrap_or(""),
            snippet.get(r.clone()).unwrap_or(""),
        ));
        at = r.end;
    }
    html! {
        @for (plain, found) in pieces {
            (plain) mark { (found) }
        }
        (snippet.get(at..).unwrap_or(""))
    }
}

/// Why no text could be taken from a file, for the organisation's admins.
fn extraction_failure(error: &kb::extract::ExtractError) -> String {
    use kb::extract::ExtractError as E;
    let key = match error {
        E::NoText => "extract-no-text",
        E::Encrypted => "extract-encrypted",
        E::Damaged(_) => "extract-damaged",
        E::TooLarge(_) => "extract-too-large",
        E::ZipBomb(_) => "extract-zip-bomb",
        E::TooDeep(_) => "extract-too-deep",
        E::TimeLimit(_) => "extract-time-limit",
        E::MemoryLimit(_) => "extract-memory-limit",
        E::Unsupported(_) => "extract-unsupported",
        E::Crashed(_) => "extract-crashed",
    };
    ta("extract-failed", &[("reason", t(key))])
}

/// Markdown as HTML. Raw HTML in the document is shown as text, never passed through, and
/// links keep only safe schemes.
fn markdown(text: &str) -> String {
    use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};
    let safe = |url: &CowStr<'_>| -> bool {
        let lower = url.trim().to_ascii_lowercase();
        match lower.split_once(':') {
            Some((scheme, _))
                if !scheme.contains('/') && !scheme.contains('#') && !scheme.contains('?') =>
            {
                matches!(scheme, "http" | "https" | "mailto")
            }
            _ => true,
        }
    };
    let parser = Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    )
    .map(|ev| match ev {
        Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) if !safe(&dest_url) => Event::Start(Tag::Link {
            link_type,
            dest_url: "#".into(),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) if !safe(&dest_url) => Event::Start(Tag::Image {
            link_type,
            dest_url: "#".into(),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, parser);
    out
}

/// A unified diff of two texts, lines marked as added or removed.
fn diff(old: &str, new: &str) -> Markup {
    use similar::{ChangeTag, TextDiff};
    let d = TextDiff::from_lines(old, new);
    html! {
        pre #kb-diff .diff {
            @for group in d.grouped_ops(3) {
                @for op in &group {
                    @for change in d.iter_changes(op) {
                        @match change.tag() {
                            ChangeTag::Delete => span.del { "- " (change.value().trim_end_matches('\n')) }
                            ChangeTag::Insert => span.ins { "+ " (change.value().trim_end_matches('\n')) }
                            ChangeTag::Equal => span { "  " (change.value().trim_end_matches('\n')) "\n" }
                        }
                    }
                }
                "⋯\n"
            }
        }
    }
}

async fn old_document_url(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Query(q): Query<DocQuery>,
) -> Response {
    match &q.path {
        Some(p) => see_other(&doc_url(&m.org.slug, p)),
        None => show_document(&app, &m, "doc".into(), &q).await,
    }
}

async fn upload_named_document(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Query(q): Query<DocQuery>,
) -> Response {
    show_document(&app, &m, "upload".into(), &q).await
}

async fn document(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_, doc_path)): Path<(String, String)>,
    Query(q): Query<DocQuery>,
) -> Response {
    show_document(&app, &m, doc_path, &q).await
}

async fn show_document(app: &Arc<App>, m: &OrgMember, raw_path: String, q: &DocQuery) -> Response {
    let p = match path::normalize(&raw_path) {
        Ok(p) => p,
        Err(e) => return refused(m, &e),
    };
    let org_id = m.org.id;
    let version = |v: &Option<String>| v.as_deref().and_then(|v| v.trim().parse::<u64>().ok());
    let (from, to) = (version(&q.from), version(&q.to));
    let p2 = p.clone();
    let found = app
        .blocking(move |app| {
            app.store.read(|tx| {
                let Some(doc) = kb::get_document(tx, org_id, &p2)? else {
                    return Ok(None);
                };
                let versions = kb::versions(tx, org_id, &p2)?;
                let text_of = |v: &Version| -> Result<Option<String>, StoreError> {
                    Ok(kb::content(tx, &v.hash)?.map(|b| String::from_utf8_lossy(&b).into_owned()))
                };
                let with_extracted = app.kb_index.with_extracted();
                let text = kb::text_of(tx, &doc, with_extracted)?;
                let extraction = if doc.kind == DocKind::Binary && with_extracted {
                    kb::extracted::outcome(tx, &doc.hash)?
                } else {
                    None
                };
                let mut authors = HashMap::new();
                for v in &versions {
                    if let Some(id) = v.created_by
                        && let Some(person) = identity::person(tx, id)?
                    {
                        authors.insert(id, person);
                    }
                }
                let pick = |n: Option<u64>| versions.iter().find(|v| Some(v.version) == n);
                let compared = match (doc.kind == DocKind::Text, pick(from), pick(to)) {
                    (true, Some(a), Some(b)) => Some((
                        a.version,
                        b.version,
                        text_of(a)?.unwrap_or_default(),
                        text_of(b)?.unwrap_or_default(),
                    )),
                    _ => None,
                };
                Ok::<_, StoreError>(Some((doc, versions, text, extraction, authors, compared)))
            })
        })
        .await;
    let (doc, versions, text, extraction, authors, compared) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return error_page(m, StatusCode::NOT_FOUND, &t("kb-no-document")),
        Err(e) => return refused(m, &e),
    };
    let now = app.clock.now();
    let link_for = |v: &Version| {
        let (token, _) = link::sign(&app.server_key, org_id, &doc.path, v.version, now);
        format!("/files/{token}")
    };
    let slug = &m.org.slug;
    let folder = doc.path.rsplit_once('/').map(|(f, _)| f).unwrap_or("");
    let is_markdown = renders_as_markdown(&doc.content_type);
    let by_line = q.lines.is_some();
    let body = html! {
        (search_form(slug, "", folder, false))
        (crumbs(slug, folder))
        dl.facts {
            dt { (t("col-path")) } dd { code { (doc.path) } }
            dt { (t("col-type")) } dd { (doc.content_type) }
            dt { (t("col-size")) } dd { (fmt_bytes(doc.size)) }
            dt { (t("col-version")) } dd { (doc.version) " · " a href=(link_for(versions.last().unwrap_or(&Version { version: doc.version, size: doc.size, hash: doc.hash.clone(), created_at: now, created_by: None }))) { (t("action-download")) } }
        }
        @match &text {
            Some(kb::DocText { text, extracted: true }) => {
                p.muted #kb-extracted-note { (t("kb-extracted-note")) }
                pre #kb-document .pre-wrap .extracted { (numbered(text)) }
            }
            Some(kb::DocText { text, .. }) if is_markdown && !by_line => {
                p.muted { a href={ (doc_url(slug, &doc.path)) "?lines=1" } { (t("kb-show-lines")) } }
                article #kb-document .doc { (PreEscaped(markdown(text))) }
            }
            Some(kb::DocText { text, .. }) => {
                @if is_markdown { p.muted { a href=(doc_url(slug, &doc.path)) { (t("kb-show-formatted")) } } }
                pre #kb-document .pre-wrap { (numbered(text)) }
            }
            None => {
                p.muted { (t("kb-binary")) }
                @if let Some(error) = extraction.as_ref().and_then(|x| x.error.as_ref()).filter(|_| m.is_admin()) {
                    p.notice #kb-extraction-failed { (extraction_failure(error)) }
                }
            }
        }
        h2 #versions-heading { (t("versions-heading")) }
        div.table-wrap {
            table #versions {
                thead { tr { th scope="col" .num { (t("col-version")) } th scope="col" { (t("col-written-by")) } th scope="col" { (t("col-saved")) } th scope="col" .num { (t("col-size")) } th scope="col" { (t("col-download")) } } }
                tbody {
                    @for v in versions.iter().rev() {
                        tr {
                            td.num { (v.version) }
                            td { @match v.created_by.and_then(|id| authors.get(&id)) {
                                Some(p) => { (p.name) " " span.muted { "<" (p.email) ">" } }
                                None => span.muted { (t("unknown-author")) }
                            } }
                            td.date { (moment(v.created_at)) }
                            td.num { (fmt_bytes(v.size)) }
                            td { a href=(link_for(v)) { (ta("download-version", &[("version", v.version.to_string())])) } }
                        }
                    }
                }
            }
        }
        @if doc.kind == DocKind::Text && versions.len() > 1 {
            h2 { (t("compare-heading")) }
            form #diff-form .row method="get" action=(doc_url(slug, &doc.path)) {
                label { (t("compare-from"))
                    select name="from" { @for v in versions.iter().rev() { option value=(v.version) selected[Some(v.version) == from.or(Some(doc.version.saturating_sub(1)))] { (v.version) } } }
                }
                label { (t("compare-to"))
                    select name="to" { @for v in versions.iter().rev() { option value=(v.version) selected[Some(v.version) == to.or(Some(doc.version))] { (v.version) } } }
                }
                button type="submit" { (t("action-compare")) }
            }
            @if let Some((a, b, old, new)) = &compared {
                p { (ta("compare-shown", &[("from", a.to_string()), ("to", b.to_string())])) }
                (diff(old, new))
            }
        }
        @if m.is_admin() {
            h2 #manage-heading { (t("kb-manage-heading")) }
            form #move-form .row method="post" action=(doc_url(slug, &doc.path)) {
                (csrf_field(&m.user.csrf))
                input type="hidden" name="action" value="move";
                label { (t("kb-move-to")) " " input type="text" name="to" value=(doc.path) required maxlength="1024"; }
                button type="submit" { (t("action-move")) }
            }
            form #delete-form .row method="post" action=(doc_url(slug, &doc.path)) {
                (csrf_field(&m.user.csrf))
                p.muted { (t("kb-delete-explain")) }
                button.danger type="submit" name="action" value="delete" { (t("action-delete")) }
            }
        }
    };
    page(
        StatusCode::OK,
        layout(&doc.path, Some(&m.user), Some(&m.org), body),
    )
}

/// The forms of a document page for admins: `action=delete` (to the trash) and `action=move`
/// (with `to`).
async fn document_action(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    Path((_, doc_path)): Path<(String, String)>,
    form: CsrfForm,
) -> Response {
    act_on_document(app, m, doc_path, form).await
}

/// The same forms for a document named `doc`, whose address is also the old one of every
/// document page (`/kb/doc?path=`, which only reads).
async fn doc_named_document_action(
    State(app): State<Arc<App>>,
    m: OrgAdmin,
    form: CsrfForm,
) -> Response {
    act_on_document(app, m, "doc".into(), form).await
}

/// `/kb/upload` takes the upload form (multipart) and the forms of a document named `upload`
/// (URL-encoded), which share its address.
async fn upload_or_document_action(
    State(app): State<Arc<App>>,
    req: axum::extract::Request,
) -> Response {
    use axum::handler::Handler;
    let multipart = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    if multipart {
        Handler::call(upload, req, app).await
    } else {
        let named = |State(app): State<Arc<App>>, m: OrgAdmin, form: CsrfForm| async move {
            act_on_document(app, m, "upload".into(), form).await
        };
        Handler::call(named, req, app).await
    }
}

async fn act_on_document(
    app: Arc<App>,
    OrgAdmin(m): OrgAdmin,
    doc_path: String,
    form: CsrfForm,
) -> Response {
    match form.field("action") {
        Some("delete") => {
            trash_op(&app, &m, move |app, org_id, by, now| {
                let item =
                    kb::trash::delete(&app.store, &app.kb_index, org_id, &doc_path, by, now)?;
                let folder = item.path.rsplit_once('/').map(|(f, _)| f).unwrap_or("");
                Ok(Next::Folder(folder.to_owned()))
            })
            .await
        }
        Some("move") => {
            let to = form.field("to").unwrap_or_default().to_owned();
            trash_op(&app, &m, move |app, org_id, by, now| {
                let moved = kb::trash::move_document(
                    &app.store,
                    &app.kb_index,
                    org_id,
                    &doc_path,
                    &to,
                    by,
                    now,
                )?;
                Ok(Next::Document(moved.to))
            })
            .await
        }
        _ => error_page(&m, StatusCode::BAD_REQUEST, &t("kb-unknown-action")),
    }
}

/// `/portal/o/<org>/trash`: the deleted documents, each with a restore button (admins).
async fn trash_page(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin) -> Response {
    let org_id = m.org.id;
    let found = app
        .blocking(move |app| {
            app.store.read(|tx| {
                let items = kb::trash::trash(tx, org_id)?;
                let mut people = HashMap::new();
                for id in items.iter().filter_map(|i| i.deleted_by) {
                    if let Some(p) = identity::person(tx, id)? {
                        people.insert(id, p);
                    }
                }
                Ok::<_, StoreError>((items, people))
            })
        })
        .await;
    let (items, people) = match found {
        Ok(f) => f,
        Err(e) => return refused(&m, &e),
    };
    let slug = &m.org.slug;
    let body = html! {
        p.muted { (ta("trash-caption", &[("days", app.config.retention.trash_days.to_string())])) }
        @if items.is_empty() { p.muted #trash-empty { (t("trash-empty")) } }
        @else { div.table-wrap {
            table #trash {
                thead { tr {
                    th scope="col" { (t("col-path")) } th scope="col" .num { (t("col-version")) }
                    th scope="col" { (t("col-deleted")) } th scope="col" { (t("col-deleted-by")) } th scope="col" {}
                } }
                tbody {
                    @for item in &items {
                        tr {
                            td { code { (item.path) } }
                            td.num { (item.version) }
                            td.date { (moment(item.deleted_at)) }
                            td { @match item.deleted_by.and_then(|id| people.get(&id)) {
                                Some(p) => { (p.email) }
                                None => span.muted { (t("deleted-by-operator")) }
                            } }
                            td {
                                form.restore-form method="post" action={ "/portal/o/" (slug) "/trash" } {
                                    (csrf_field(&m.user.csrf))
                                    input type="hidden" name="path" value=(item.path);
                                    button type="submit" name="action" value="restore" { (t("action-restore")) }
                                }
                            }
                        }
                    }
                }
            }
        } }
        p { a href=(kb_url(slug, "")) { (t("kb-back")) } }
    };
    page(
        StatusCode::OK,
        layout(&t("trash-title"), Some(&m.user), Some(&m.org), body),
    )
}

/// `action=restore` with `path`: the document comes back with its whole history.
async fn trash_action(
    State(app): State<Arc<App>>,
    OrgAdmin(m): OrgAdmin,
    form: CsrfForm,
) -> Response {
    if form.field("action") != Some("restore") {
        return error_page(&m, StatusCode::BAD_REQUEST, &t("kb-unknown-action"));
    }
    let doc_path = form.field("path").unwrap_or_default().to_owned();
    trash_op(&app, &m, move |app, org_id, by, now| {
        let item = kb::trash::restore(&app.store, &app.kb_index, org_id, &doc_path, by, now)?;
        Ok(Next::Document(item.path))
    })
    .await
}

/// Runs one of `kb::trash`'s operations (delete, restore, move) for the admin's organisation,
/// as the admin, then sends them to the page it names, or shows the refusal.
async fn trash_op(
    app: &Arc<App>,
    m: &OrgMember,
    op: impl FnOnce(&App, u64, &audit::Actor, jiff::Timestamp) -> Result<Next, KbError> + Send + 'static,
) -> Response {
    let (org_id, by) = (m.org.id, m.actor());
    match app
        .blocking(move |app| op(app, org_id, &by, app.clock.now()))
        .await
    {
        Ok(Next::Folder(folder)) => see_other(&kb_url(&m.org.slug, &folder)),
        Ok(Next::Document(path)) => see_other(&doc_url(&m.org.slug, &path)),
        Err(e) => refused(m, &e),
    }
}

/// Where a trash operation sends the admin next.
enum Next {
    Folder(String),
    Document(String),
}

/// Bytes handed from the zip writer (a blocking thread) to the response body, a bounded queue
/// of chunks: the archive is never whole in memory, and a client that stops reading stops the
/// export.
struct ChunkSender {
    tx: tokio::sync::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

/// Bytes per chunk of the zip download.
const ZIP_CHUNK: usize = 64 * 1024;

impl std::io::Write for ChunkSender {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= ZIP_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = axum::body::Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "download ended"))
    }
}

/// `/portal/o/<org>/export`: every live document as one zip archive, streamed (admins).
async fn export_zip(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin) -> Response {
    use axum::response::IntoResponse;
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let org_id = m.org.id;
    let worker = app.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkSender {
            tx: tx.clone(),
            buf: Vec::with_capacity(ZIP_CHUNK),
        };
        let r = kb::export::export_zip(&worker.store, org_id, &mut out).and_then(|s| {
            std::io::Write::flush(&mut out)
                .map(|_| s)
                .map_err(|e| KbError::InvalidInput(e.to_string()))
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, org_id, "the zip export stopped");
            // The client sees a broken download rather than a short archive taken as whole.
            let _ = tx.blocking_send(Err(std::io::Error::other("export failed")));
        }
    });
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let name = format!("{}-kennisbank.zip", m.org.slug);
    (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/zip".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
            (axum::http::header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

async fn upload(State(app): State<Arc<App>>, m: OrgMember, mut form: Multipart) -> Response {
    let mut csrf = None;
    let mut folder = String::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    loop {
        match form.next_field().await {
            Ok(Some(f)) => {
                let name = f.name().unwrap_or_default().to_owned();
                match name.as_str() {
                    "csrf_token" => csrf = f.text().await.ok(),
                    "folder" => folder = f.text().await.unwrap_or_default(),
                    "file" => {
                        let file_name = f.file_name().unwrap_or_default().to_owned();
                        match f.bytes().await {
                            Ok(b) => files.push((file_name, b.to_vec())),
                            Err(_) => {
                                return error_page(
                                    &m,
                                    StatusCode::PAYLOAD_TOO_LARGE,
                                    &t("upload-too-large"),
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(_) => {
                return error_page(&m, StatusCode::BAD_REQUEST, &t("upload-unreadable"));
            }
        }
    }
    if !verify_csrf(&m.user.csrf, csrf.as_deref()) {
        return csrf_rejected();
    }
    files.retain(|(n, _)| !n.is_empty());
    if files.is_empty() {
        return error_page(&m, StatusCode::BAD_REQUEST, &t("upload-choose"));
    }
    let folder = folder.trim_matches('/').to_owned();
    // Only the last segment of the browser's file name counts.
    let targets: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(name, bytes)| {
            let name = name
                .rsplit(['/', '\\'])
                .next()
                .unwrap_or_default()
                .to_owned();
            let target = if folder.is_empty() {
                name
            } else {
                format!("{folder}/{name}")
            };
            (target, bytes)
        })
        .collect();
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    // Each file is its own version; the first refusal stops the rest and is shown with what
    // was stored before it.
    let stored = app
        .blocking(move |app| {
            let mut done = Vec::new();
            for (target, bytes) in &targets {
                let r = kb::write(
                    &app.store,
                    &app.kb_index,
                    kb::NewVersion {
                        org_id,
                        path: target,
                        bytes,
                        expect: kb::Expect::Any,
                        by: Some(person_id),
                        now: app.clock.now(),
                    },
                );
                match r {
                    Ok(_) => done.push(target.clone()),
                    Err(e) => return (done, Some((target.clone(), e))),
                }
            }
            (done, None)
        })
        .await;
    match stored {
        (_, None) => see_other(&kb_url(&m.org.slug, &folder)),
        (done, Some((target, e))) => {
            let p = e.problem();
            if p.is_internal() {
                return refused(&m, &e);
            }
            let msg = ta(
                "upload-partly",
                &[
                    ("file", target),
                    ("reason", super::problem_text(&p)),
                    (
                        "stored",
                        if done.is_empty() {
                            "-".into()
                        } else {
                            done.join(", ")
                        },
                    ),
                ],
            );
            error_page(&m, p.status, &msg)
        }
    }
}

async fn audit_page(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin) -> Response {
    let org_id = m.org.id;
    let me = m.user.person.id;
    let found = app
        .blocking(move |app| {
            let agents: HashMap<u64, String> = crate::roster::list_agents(&app.store, org_id)?
                .into_iter()
                .map(|a| (a.id, a.name))
                .collect();
            app.store.read(|tx| {
                let records = audit::records(tx, org_id, None)?;
                let by_grant: HashMap<u64, oauth::Connection> =
                    oauth::connections_visible_to(tx, org_id, me, true)?
                        .into_iter()
                        .map(|c| (c.grant.id, c))
                        .collect();
                let by_token: HashMap<u64, oauth::pats::TokenRow> =
                    oauth::pats::list(tx, org_id, None)?
                        .into_iter()
                        .map(|r| (r.token.id, r))
                        .collect();
                Ok::<_, StoreError>((records, by_grant, by_token, agents))
            })
        })
        .await;
    let (records, by_grant, by_token, agents) = match found {
        Ok(f) => f,
        Err(e) => return refused(&m, &e),
    };
    let slug = &m.org.slug;
    let body = html! {
        p.muted { (ta("audit-explain", &[("command", format!("kennis audit export {slug}"))])) }
        @if records.is_empty() { p.muted #audit-none { (t("audit-none")) } }
        @else { div.table-wrap {
            table #audit {
                thead { tr {
                    th scope="col" { (t("col-time")) } th scope="col" { (t("col-assistant")) } th scope="col" { (t("col-person")) }
                    th scope="col" { (t("col-tool")) } th scope="col" { (t("col-target")) } th scope="col" { (t("col-outcome")) }
                    th scope="col" .num { "ms" }
                } }
                tbody {
                    @for r in records.iter().rev().take(500) {
                        @let c = by_grant.get(&r.grant_id);
                        @let token = r.token_id.and_then(|id| by_token.get(&id));
                        tr {
                            td.date { (moment(r.at)) }
                            td {
                                @if r.action.is_some() {
                                    (t("audit-admin"))
                                } @else if let Some(agent) = r.agent_id {
                                    (ta("audit-agent", &[("name", agents.get(&agent).cloned().unwrap_or_else(|| format!("#{agent}")))]))
                                    @if let Some(run) = r.run_id {
                                        " · " a href={ "/portal/o/" (slug) "/runs/" (run) } { (ta("run-title", &[("id", run.to_string())])) }
                                    }
                                } @else if let Some(token) = token {
                                    (ta("audit-token", &[("name", token.token.name.clone())]))
                                } @else {
                                    (c.map(|c| c.client_name.clone()).unwrap_or_else(|| format!("#{}", r.grant_id)))
                                }
                            }
                            td {
                                @if let Some(actor) = &r.actor { (actor) }
                                @else if r.person_id == 0 { "—" }
                                @else { (c.map(|c| c.person_email.clone()).filter(|e| !e.is_empty()).or_else(|| token.map(|t| t.email.clone())).unwrap_or_else(|| crate::erase::pseudonym(r.person_id))) }
                            }
                            td { code { (r.action.as_deref().unwrap_or(&r.tool)) } }
                            td {
                                // An admin action's target is data (`role=admin`), not prose.
                                @if r.action.is_some() { code { (r.target.clone().unwrap_or_default()) } }
                                @else { (r.target.clone().unwrap_or_default()) }
                            }
                            td {
                                @match r.outcome {
                                    audit::Outcome::Ok => span.badge.ok { (t("outcome-ok")) },
                                    audit::Outcome::Refused => span.badge.paused { (t("outcome-refused")) },
                                    audit::Outcome::Error => span.badge.failed { (t("outcome-error")) },
                                }
                                @if let Some(e) = &r.error { " " span.muted lang="en" { (e) } }
                            }
                            td.num { (decimal(r.duration_ms, 1)) }
                        }
                    }
                }
            }
        } }
    };
    page(
        StatusCode::OK,
        layout(&t("nav-audit"), Some(&m.user), Some(&m.org), body),
    )
}
