//! Attachments of a request: upload (up to 10 MiB), a safe download, delete.

use std::sync::Arc;

use axum::extract::{Multipart, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::detail::after_refusal;
use super::{Shown, message_page, no_such_request, parse_id, request_url, shown};
use crate::app::App;
use crate::portal::i18n::t;
use crate::portal::{CsrfForm, OrgMember, csrf_rejected, see_other, verify_csrf};
use crate::requests::RequestError;
use crate::requests::attachments;

fn too_large() -> Shown {
    (StatusCode::PAYLOAD_TOO_LARGE, t("attachment-too-large"))
}

fn unreadable() -> Shown {
    (StatusCode::BAD_REQUEST, t("upload-unreadable"))
}

pub(super) async fn upload(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id)): Path<(String, String)>,
    mut form: Multipart,
) -> Response {
    let Some(id) = parse_id(&id) else {
        return no_such_request(&m);
    };
    let mut csrf = None;
    let mut file: Option<(String, Option<String>, Vec<u8>)> = None;
    let mut oversize = false;
    loop {
        let f = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            // Past the route's body limit (which can surface as an incomplete field once the
            // file already went over), or a malformed body.
            Err(e) if oversize || e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                oversize = true;
                break;
            }
            Err(_) => return after_refusal(&app, &m, id, unreadable(), String::new()).await,
        };
        match f.name().unwrap_or_default() {
            "csrf_token" => csrf = f.text().await.ok(),
            "file" => {
                let name = f.file_name().unwrap_or_default().to_owned();
                let content_type = f.content_type().map(str::to_owned);
                let mut f = f;
                let mut bytes = Vec::new();
                loop {
                    match f.chunk().await {
                        // Past the limit the rest is read and dropped (the route's body
                        // limit bounds it), so the client gets the answer, not a reset.
                        Ok(Some(c)) => {
                            if oversize || bytes.len() + c.len() > attachments::MAX_BYTES {
                                oversize = true;
                                bytes = Vec::new();
                            } else {
                                bytes.extend_from_slice(&c);
                            }
                        }
                        Ok(None) => break,
                        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                            oversize = true;
                            break;
                        }
                        Err(_) => {
                            return after_refusal(&app, &m, id, unreadable(), String::new()).await;
                        }
                    }
                }
                if !oversize {
                    file = Some((name, content_type, bytes));
                }
            }
            _ => {}
        }
    }
    if oversize {
        // Whatever the token, nothing is stored; the page says why.
        let page = after_refusal(&app, &m, id, too_large(), String::new()).await;
        return with_status(page, StatusCode::PAYLOAD_TOO_LARGE);
    }
    if !verify_csrf(&m.user.csrf, csrf.as_deref()) {
        return csrf_rejected();
    }
    let Some((name, content_type, bytes)) = file.filter(|(n, _, _)| !n.is_empty()) else {
        let e = (StatusCode::BAD_REQUEST, t("upload-choose-one"));
        return after_refusal(&app, &m, id, e, String::new()).await;
    };
    let (org_id, person_id) = (m.org.id, m.user.person.id);
    let added = app
        .blocking(move |app| {
            attachments::add(
                &app.store,
                org_id,
                id,
                person_id,
                &name,
                content_type.as_deref(),
                &bytes,
                app.clock.now(),
            )
        })
        .await;
    match added {
        Ok(_) => see_other(&format!("{}#attachments", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, shown(&e), String::new()).await,
    }
}

/// `resp` with another status, unless it already says "not found".
fn with_status(mut resp: Response, status: StatusCode) -> Response {
    if resp.status() != StatusCode::NOT_FOUND {
        *resp.status_mut() = status;
    }
    resp
}

/// `Content-Disposition` for a stored name: a plain ASCII fallback in quotes (no quote,
/// backslash, percent or control character can break out of it) and the exact name as RFC 8187
/// `filename*`.
fn content_disposition(name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| {
            if (c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '%')) || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

pub(super) async fn download(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id, attachment_id)): Path<(String, String, String)>,
) -> Response {
    let (Some(id), Some(attachment_id)) = (parse_id(&id), parse_id(&attachment_id)) else {
        return no_such_request(&m);
    };
    let org_id = m.org.id;
    let found = app
        .blocking(move |app| {
            app.store
                .read(|tx| attachments::get(tx, org_id, id, attachment_id))
        })
        .await;
    let (a, bytes) = match found {
        Ok(x) => x,
        Err(RequestError::NotFound(_)) => {
            return message_page(
                &m,
                StatusCode::NOT_FOUND,
                &t("not-found-title"),
                &t("attachment-not-found"),
            );
        }
        Err(e) => {
            let (status, text) = shown(&e);
            return message_page(&m, status, &t("request-attachments"), &text);
        }
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, a.content_type.clone()),
            (header::CONTENT_DISPOSITION, content_disposition(&a.name)),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            // Even if a browser rendered it, the file gets no scripts, no framing, no origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'; sandbox".to_owned(),
            ),
            (header::X_FRAME_OPTIONS, "DENY".to_owned()),
            (header::REFERRER_POLICY, "no-referrer".to_owned()),
            (header::CACHE_CONTROL, "private, no-store".to_owned()),
        ],
        bytes,
    )
        .into_response()
}

pub(super) async fn delete_attachment(
    State(app): State<Arc<App>>,
    m: OrgMember,
    Path((_slug, id, attachment_id)): Path<(String, String, String)>,
    _form: CsrfForm,
) -> Response {
    let (Some(id), Some(attachment_id)) = (parse_id(&id), parse_id(&attachment_id)) else {
        return no_such_request(&m);
    };
    let org_id = m.org.id;
    let deleted = app
        .blocking(move |app| attachments::delete(&app.store, org_id, id, attachment_id))
        .await;
    match deleted {
        Ok(()) => see_other(&format!("{}#attachments", request_url(&m.org.slug, id))),
        Err(e) => after_refusal(&app, &m, id, shown(&e), String::new()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_cannot_break_out_of_the_header() {
        assert_eq!(
            content_disposition("plan \"v2\".pdf"),
            "attachment; filename=\"plan _v2_.pdf\"; filename*=UTF-8''plan%20%22v2%22.pdf"
        );
        assert_eq!(
            content_disposition("één;x.txt"),
            "attachment; filename=\"__n;x.txt\"; filename*=UTF-8''%C3%A9%C3%A9n%3Bx.txt"
        );
    }
}
