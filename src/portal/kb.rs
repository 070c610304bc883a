//! The knowledge base in the portal: browse folders, upload text and binary files, download,
//! and a document's version history. Uploads may be large, so these routes have their own body
//! limit instead of the portal's 64 KB.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Multipart, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use maud::html;
use serde::Deserialize;

use super::{OrgAdmin, OrgMember, csrf_field, csrf_rejected, layout, page, see_other, verify_csrf};
use crate::app::App;
use crate::audit;
use crate::http::error::ToProblem;
use crate::kb::{self, DocKind, Entry, KbError, Version, link, path};
use crate::store::StoreError;

/// Largest file the portal accepts.
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;

pub fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/portal/o/{slug}/kb", get(browse))
        .route("/portal/o/{slug}/kb/doc", get(document))
        .route(
            "/portal/o/{slug}/kb/upload",
            post(upload).layer(axum::extract::DefaultBodyLimit::max(MAX_UPLOAD + 64 * 1024)),
        )
        .route("/portal/o/{slug}/audit", get(audit_page))
}

#[derive(Deserialize)]
pub(super) struct PathQuery {
    path: Option<String>,
}

/// A refused operation (or a failure), as `http::error` maps it.
fn refused(m: &OrgMember, e: &impl ToProblem) -> Response {
    let p = e.problem();
    error_page(m, p.status, &p.message)
}

fn error_page(m: &OrgMember, status: StatusCode, msg: &str) -> Response {
    page(
        status,
        layout(
            "Knowledge base",
            Some(&m.user),
            Some(&m.org),
            html! { p.error { (msg) } },
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

fn url_escape(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn browse(State(app): State<Arc<App>>, m: OrgMember, Query(q): Query<PathQuery>) -> Response {
    let folder = match path::normalize_folder(q.path.as_deref()) {
        Ok(f) => f,
        Err(e) => return refused(&m, &e),
    };
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
    let slug = &m.org.slug;
    let here = folder.clone().unwrap_or_default();
    let crumbs: Vec<(&str, String)> = here
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
    let body = html! {
        p { "Connector URL for assistants: " code { (app.connector_url()) } }
        p {
            a href=(kb_url(slug, "")) { "top" }
            @for (seg, at) in &crumbs {
                " / " a href=(kb_url(slug, at)) { (seg) }
            }
        }
        @if entries.is_empty() { p.muted { "No documents here yet." } }
        @else {
            table #kb-entries {
                tr { th { "Name" } th { "Version" } th { "Size" } }
                @for e in &entries {
                    tr {
                        @if e.kind == "folder" {
                            td { a href=(kb_url(slug, &e.path)) { (e.name) "/" } } td {} td {}
                        } @else {
                            td { a href={ "/portal/o/" (slug) "/kb/doc?path=" (url_escape(&e.path)) } { (e.name) } }
                            td { (e.version.unwrap_or(0)) }
                            td { (e.size.unwrap_or(0)) " bytes" }
                        }
                    }
                }
            }
        }
        h2 { "Upload" }
        form #upload-form method="post" enctype="multipart/form-data" action={ "/portal/o/" (slug) "/kb/upload" } {
            (csrf_field(&m.user.csrf))
            input type="hidden" name="folder" value=(here);
            label { "File (text, PDF, Office, image or CAD; at most 50 MB) " input type="file" name="file" required; }
            button type="submit" { "Upload to " (if here.is_empty() { "top level".to_owned() } else { here.clone() }) }
        }
    };
    page(
        StatusCode::OK,
        layout("Knowledge base", Some(&m.user), Some(&m.org), body),
    )
}

async fn document(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Query(q): Query<PathQuery>,
) -> Response {
    let p = match path::normalize(q.path.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return refused(&m, &e),
    };
    let org_id = m.org.id;
    let p2 = p.clone();
    let found = app
        .blocking(move |app| {
            app.store.read(|tx| {
                let Some(doc) = kb::get_document(tx, org_id, &p2)? else {
                    return Ok(None);
                };
                let versions = kb::versions(tx, org_id, &p2)?;
                let text = if doc.kind == DocKind::Text {
                    kb::content(tx, &doc.hash)?
                } else {
                    None
                };
                Ok::<_, StoreError>(Some((doc, versions, text)))
            })
        })
        .await;
    let (doc, versions, text) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return error_page(&m, StatusCode::NOT_FOUND, "No such document."),
        Err(e) => return refused(&m, &e),
    };
    let now = app.clock.now();
    let link_for = |v: &Version| {
        let (token, _) = link::sign(&app.server_key, org_id, &doc.path, v.version, now);
        format!("/files/{token}")
    };
    let preview: Option<String> =
        text.map(|t| String::from_utf8_lossy(&t).chars().take(20_000).collect());
    let body = html! {
        p { code { (doc.path) } " · " (doc.content_type) " · " (doc.size) " bytes · version " (doc.version) }
        h2 { "Versions" }
        table #versions {
            tr { th { "Version" } th { "Size" } th { "Saved" } th { "" } }
            @for v in versions.iter().rev() {
                tr {
                    td { (v.version) }
                    td { (v.size) " bytes" }
                    td { (v.created_at.strftime("%Y-%m-%d %H:%M UTC")) }
                    td { a href=(link_for(v)) { "Download" } }
                }
            }
        }
        @if let Some(t) = preview {
            h2 { "Content" }
            pre style="white-space:pre-wrap" { (t) }
        }
    };
    page(
        StatusCode::OK,
        layout(&doc.path, Some(&m.user), Some(&m.org), body),
    )
}

async fn upload(State(app): State<Arc<App>>, m: OrgMember, mut form: Multipart) -> Response {
    let mut csrf = None;
    let mut folder = String::new();
    let mut file: Option<(String, Vec<u8>)> = None;
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
                            Ok(b) => file = Some((file_name, b.to_vec())),
                            Err(_) => {
                                return error_page(
                                    &m,
                                    StatusCode::PAYLOAD_TOO_LARGE,
                                    "The file is larger than 50 MB.",
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(_) => {
                return error_page(&m, StatusCode::BAD_REQUEST, "The upload could not be read.");
            }
        }
    }
    if !verify_csrf(&m.user.csrf, csrf.as_deref()) {
        return csrf_rejected();
    }
    let Some((name, bytes)) = file.filter(|(n, _)| !n.is_empty()) else {
        return error_page(&m, StatusCode::BAD_REQUEST, "Choose a file to upload.");
    };
    // Only the last segment of the browser's file name counts.
    let name = name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .to_owned();
    let folder = folder.trim_matches('/').to_owned();
    let target = if folder.is_empty() {
        name
    } else {
        format!("{folder}/{name}")
    };
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let stored = app
        .blocking(move |app| {
            kb::write(
                &app.store,
                &app.kb_index,
                kb::NewVersion {
                    org_id,
                    path: &target,
                    bytes: &bytes,
                    expect: kb::Expect::Any,
                    by: Some(person_id),
                    now: app.clock.now(),
                },
            )
        })
        .await;
    match stored {
        Ok(_) => see_other(&kb_url(&m.org.slug, &folder)),
        Err(e) => refused(&m, &e),
    }
}

async fn audit_page(State(app): State<Arc<App>>, OrgAdmin(m): OrgAdmin) -> Response {
    let org_id = m.org.id;
    let records = app
        .blocking(move |app| app.store.read(|tx| audit::records(tx, org_id, None)))
        .await
        .unwrap_or_default();
    let body = html! {
        p.muted { "Every tool call through the connector, newest first (the last 500). Export all with " code { "kennis audit export " (m.org.slug) } "." }
        table #audit {
            tr { th { "Time" } th { "Person" } th { "Connection" } th { "Tool" } th { "Path or request" } th { "Outcome" } th { "Error" } th { "ms" } }
            @for r in records.iter().rev().take(500) {
                tr {
                    td { (r.at.strftime("%Y-%m-%d %H:%M:%S")) }
                    td { (r.person_id) }
                    td { (r.grant_id) }
                    td { (r.tool) }
                    td { (r.target.clone().unwrap_or_default()) }
                    td { (format!("{:?}", r.outcome).to_lowercase()) }
                    td { (r.error.clone().unwrap_or_default()) }
                    td { (format!("{:.1}", r.duration_ms)) }
                }
            }
        }
    };
    page(
        StatusCode::OK,
        layout("Audit log", Some(&m.user), Some(&m.org), body),
    )
}
