//! Attachments and settings of a feature request. Both are added in the portal and are
//! deliberately not reachable through the connector: files and configuration that people share
//! with the team do not flow to an assistant.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{RequestError, feature};
use crate::store::{ATTACHMENT_CONTENT, ATTACHMENTS, ReadTx, Store, key};

/// Largest attachment: 10 MiB.
pub const MAX_BYTES: usize = 10 * 1024 * 1024;
/// Most attachments on one request.
pub const MAX_PER_REQUEST: usize = 50;
/// Longest file name, in characters.
pub const NAME_MAX: usize = 200;
/// Most settings on one request, and their sizes.
pub const MAX_SETTINGS: usize = 50;
pub const SETTING_KEY_MAX: usize = 64;
pub const SETTING_VALUE_MAX: usize = 2000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub attachment_id: u64,
    pub request_id: u64,
    pub name: String,
    pub content_type: String,
    pub size: u64,
    /// BLAKE3 of the bytes, hex.
    pub hash: String,
    pub uploaded_by: u64,
    pub uploaded_at: Timestamp,
}

/// A file name as uploaded, reduced to its last path segment; refused if nothing sensible
/// remains.
pub fn clean_name(name: &str) -> Result<String, RequestError> {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("").trim();
    if last.is_empty()
        || last == "."
        || last == ".."
        || last.chars().count() > NAME_MAX
        || last.chars().any(char::is_control)
    {
        return Err(RequestError::InvalidInput(format!(
            "a file name of 1 to {NAME_MAX} characters without control characters is needed"
        )));
    }
    Ok(last.to_owned())
}

/// A declared content type if it looks like one (`type/subtype`), else
/// `application/octet-stream`. Only ever used with `Content-Disposition: attachment`.
pub fn clean_content_type(declared: Option<&str>) -> String {
    match declared {
        Some(t)
            if t.len() <= 100
                && t.split_once('/')
                    .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
                && t.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '+' | '-' | '_')
                }) =>
        {
            t.to_ascii_lowercase()
        }
        _ => "application/octet-stream".to_owned(),
    }
}

/// Stores an attachment on one of the organisation's feature requests.
#[allow(clippy::too_many_arguments)]
pub fn add(
    store: &Store,
    org_id: u64,
    request_id: u64,
    person_id: u64,
    name: &str,
    content_type: Option<&str>,
    bytes: &[u8],
    now: Timestamp,
) -> Result<Attachment, RequestError> {
    let name = clean_name(name)?;
    if bytes.is_empty() {
        return Err(RequestError::InvalidInput("the file is empty".into()));
    }
    if bytes.len() > MAX_BYTES {
        return Err(RequestError::InvalidInput(format!(
            "the file is {} bytes; at most {MAX_BYTES} (10 MiB) are allowed",
            bytes.len()
        )));
    }
    store.write(|tx| {
        let mut r = feature::get(tx, org_id, request_id)?;
        let existing = tx.scan_keys(ATTACHMENTS, &key::id(request_id), MAX_PER_REQUEST + 1)?;
        if existing.len() >= MAX_PER_REQUEST {
            return Err(RequestError::InvalidInput(format!(
                "a request has at most {MAX_PER_REQUEST} attachments"
            )));
        }
        let a = Attachment {
            attachment_id: tx.next_id("attachment")?,
            request_id,
            name,
            content_type: clean_content_type(content_type),
            size: bytes.len() as u64,
            hash: blake3::hash(bytes).to_hex().to_string(),
            uploaded_by: person_id,
            uploaded_at: now,
        };
        let k = key::pair(request_id, a.attachment_id);
        tx.put(ATTACHMENTS, &k, &a)?;
        tx.put_raw(ATTACHMENT_CONTENT, &k, bytes)?;
        r.updated_at = now;
        super::put(tx, &r)?;
        Ok(a)
    })
}

/// The attachments of one of the organisation's requests, oldest first.
pub fn list(tx: &ReadTx, org_id: u64, request_id: u64) -> Result<Vec<Attachment>, RequestError> {
    feature::get(tx, org_id, request_id)?;
    Ok(tx
        .scan::<Attachment>(ATTACHMENTS, &key::id(request_id))?
        .into_iter()
        .map(|r| r.1)
        .collect())
}

/// One attachment and its bytes; "not found" unless it belongs to one of the organisation's
/// requests.
pub fn get(
    tx: &ReadTx,
    org_id: u64,
    request_id: u64,
    attachment_id: u64,
) -> Result<(Attachment, Vec<u8>), RequestError> {
    feature::get(tx, org_id, request_id)?;
    let k = key::pair(request_id, attachment_id);
    let missing = || RequestError::NotFound(format!("no attachment {attachment_id}"));
    let a: Attachment = tx.get(ATTACHMENTS, &k)?.ok_or_else(missing)?;
    let bytes = tx.get_raw(ATTACHMENT_CONTENT, &k)?.ok_or_else(missing)?;
    Ok((a, bytes))
}

/// Removes an attachment.
pub fn delete(
    store: &Store,
    org_id: u64,
    request_id: u64,
    attachment_id: u64,
) -> Result<(), RequestError> {
    store.write(|tx| {
        feature::get(tx, org_id, request_id)?;
        let k = key::pair(request_id, attachment_id);
        if !tx.delete(ATTACHMENTS, &k)? {
            return Err(RequestError::NotFound(format!(
                "no attachment {attachment_id}"
            )));
        }
        tx.delete(ATTACHMENT_CONTENT, &k)?;
        Ok(())
    })
}

fn check_setting_key(k: &str) -> Result<(), RequestError> {
    let ok = !k.is_empty()
        && k.len() <= SETTING_KEY_MAX
        && k.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(RequestError::InvalidInput(format!(
            "a setting name is 1 to {SETTING_KEY_MAX} characters of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit"
        )))
    }
}

/// Sets (or, with an empty value, removes) one setting of a request.
pub fn set_setting(
    store: &Store,
    org_id: u64,
    request_id: u64,
    name: &str,
    value: &str,
    now: Timestamp,
) -> Result<(), RequestError> {
    let name = name.trim();
    check_setting_key(name)?;
    let value = value.trim();
    if value.chars().count() > SETTING_VALUE_MAX || value.contains('\0') {
        return Err(RequestError::InvalidInput(format!(
            "a setting's value is at most {SETTING_VALUE_MAX} characters"
        )));
    }
    store.write(|tx| {
        let mut r = feature::get(tx, org_id, request_id)?;
        if value.is_empty() {
            r.settings.remove(name);
        } else {
            if !r.settings.contains_key(name) && r.settings.len() >= MAX_SETTINGS {
                return Err(RequestError::InvalidInput(format!(
                    "a request has at most {MAX_SETTINGS} settings"
                )));
            }
            r.settings.insert(name.to_owned(), value.to_owned());
        }
        r.updated_at = now;
        super::put(tx, &r)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_types_are_cleaned() {
        assert_eq!(clean_name("C:\\x\\plan.pdf").unwrap(), "plan.pdf");
        assert_eq!(clean_name("../../etc/passwd").unwrap(), "passwd");
        assert!(clean_name("dir/..").is_err());
        assert!(clean_name("a\nb").is_err());
        assert_eq!(clean_content_type(Some("image/PNG")), "image/png");
        assert_eq!(
            clean_content_type(Some("text/html; charset=utf-8")),
            "application/octet-stream"
        );
        assert_eq!(clean_content_type(None), "application/octet-stream");
        assert!(check_setting_key("deploy.target").is_ok());
        assert!(check_setting_key("Deploy").is_err());
        assert!(check_setting_key("-x").is_err());
    }
}
