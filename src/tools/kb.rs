//! The knowledge-base tools: `kennisbank_list`, `kennisbank_read`, `kennisbank_search`,
//! `kennisbank_write`, and ChatGPT's `search` and `fetch` built on search and read. Each
//! returns the structured result of DESIGN.md and a readable text.

use serde_json::{Value, json};

use super::args::{Args, opt_int, opt_str, req_str};
use super::{Caller, ToolError, ToolOk};
use crate::app::App;
use crate::kb::search;
use crate::kb::{self, Expect, KbError, link, path};

pub const DEFAULT_MAX_CHARS: i64 = 8000;
pub const MAX_MAX_CHARS: i64 = 20_000;
/// Documents larger than this are read with [`App::long_work`]: decompressing and counting
/// their text takes about a millisecond per MB, too long to hold an async worker.
const INLINE_TEXT_BYTES: u64 = 256 * 1024;

pub fn list(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let requested = opt_str(args, "path")?;
    let folder = path::normalize_folder(requested.as_deref())?;
    let entries = app
        .store
        .read(|tx| kb::list(tx, caller.org_id, folder.as_deref()))?;
    let shown = folder.clone().unwrap_or_default();
    let mut text = format!(
        "Contents of {}:\n",
        if shown.is_empty() {
            "the top level"
        } else {
            &shown
        }
    );
    if entries.is_empty() {
        text.push_str("(empty)\n");
    }
    for e in &entries {
        match e.kind {
            "folder" => text.push_str(&format!("folder    {}/\n", e.path)),
            _ => text.push_str(&format!(
                "document  {} (version {}, {} bytes)\n",
                e.path,
                e.version.unwrap_or(0),
                e.size.unwrap_or(0)
            )),
        }
    }
    Ok(ToolOk {
        structured: json!({"path": shown, "entries": entries}),
        text,
        target: Some(shown),
    })
}

pub fn read(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let p = path::normalize(&req_str(args, "path")?)?;
    let max_chars =
        opt_int(args, "maxChars", 1, MAX_MAX_CHARS)?.unwrap_or(DEFAULT_MAX_CHARS) as usize;
    let with_extracted = app.kb_index.with_extracted();
    let (doc, text) = app.store.read(|tx| {
        let doc = kb::get_document(tx, caller.org_id, &p)?.ok_or_else(|| {
            KbError::NotFound(format!(
                "no document `{p}`; use kennisbank_list to see what exists"
            ))
        })?;
        // Read inline (a quick tool): a large document's text is decompressed with the
        // async worker's other tasks handed off first.
        let text = if doc.size > INLINE_TEXT_BYTES {
            App::long_work(|| kb::text_of(tx, &doc, with_extracted))?
        } else {
            kb::text_of(tx, &doc, with_extracted)?
        };
        Ok::<_, KbError>((doc, text))
    })?;
    let now = app.clock.now();
    let (token, expires) = link::sign(&app.server_key, caller.org_id, &doc.path, doc.version, now);
    let download_url = format!("{}/files/{token}", app.public_url);
    let mut out = json!({
        "path": doc.path,
        "version": doc.version,
        "size": doc.size,
        "kind": doc.kind,
        "content_type": doc.content_type,
        "download_url": download_url,
        "download_expires_at": expires.to_string(),
    });
    let text = match text {
        Some(kb::DocText {
            text: content,
            extracted,
        }) => {
            let total = content.chars().count();
            // A text of at most `max_chars` characters is shown whole, without walking it.
            let cut = if total <= max_chars {
                content.len()
            } else {
                content
                    .char_indices()
                    .nth(max_chars)
                    .map_or(content.len(), |(at, _)| at)
            };
            let excerpt = content.get(..cut).unwrap_or_default();
            let truncated = total > max_chars;
            super::args::set(&mut out, "excerpt", json!(excerpt));
            super::args::set(&mut out, "truncated", json!(truncated));
            super::args::set(&mut out, "total_chars", json!(total));
            if extracted {
                super::args::set(&mut out, "extracted", json!(true));
            }
            let more = if truncated {
                format!(
                    "\n\n[… shortened: {max_chars} of {total} characters shown; raise maxChars (max {MAX_MAX_CHARS}) or download the whole document]"
                )
            } else {
                String::new()
            };
            let source = if extracted {
                format!(
                    "\nThis is a binary file ({}); below is the text taken from it (layout and images are not kept).",
                    doc.content_type
                )
            } else {
                String::new()
            };
            format!(
                "{} (version {}, {} bytes){source}\nDownload (valid 15 minutes): {download_url}\n\n{excerpt}{more}",
                doc.path, doc.version, doc.size
            )
        }
        None => format!(
            "{} is a binary document ({}, {} bytes, version {}); its content cannot be shown here.\nDownload (valid 15 minutes): {download_url}",
            doc.path, doc.content_type, doc.size, doc.version
        ),
    };
    Ok(ToolOk {
        structured: out,
        text,
        target: Some(doc.path),
    })
}

pub fn search(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let raw = req_str(args, "query")?;
    let folder = opt_str(args, "path")?;
    let limit = opt_int(args, "limit", 1, search::MAX_LIMIT as i64)?
        .unwrap_or(search::DEFAULT_LIMIT as i64) as usize;
    let out = search::search_text(
        &app.store,
        &app.kb_index,
        caller.org_id,
        &raw,
        folder.as_deref(),
        limit,
    )?;
    let mut text = if out.results.is_empty() {
        format!("No documents match `{raw}`.\n")
    } else {
        format!("{} document(s) match `{raw}`:\n\n", out.results.len())
    };
    for hit in &out.results {
        text.push_str(&search::render_hit(hit));
    }
    if out.truncated {
        text.push_str("[more results were left out to keep the answer short; narrow the search]\n");
    }
    if let Some(ns) = &out.not_searched {
        text.push_str(&format!(
            "{} document(s) were not searched: {}\n",
            ns.documents, ns.reason
        ));
    }
    Ok(ToolOk {
        structured: serde_json::to_value(&out).unwrap_or_default(),
        text,
        target: folder,
    })
}

/// The portal page of a document of the caller's organisation, as an absolute URL builder.
fn portal_pages(app: &App, caller: &Caller) -> Result<impl Fn(&str) -> String, ToolError> {
    let slug = app
        .store
        .read(|tx| crate::identity::org(tx, caller.org_id))?
        .map(|o| o.slug)
        .ok_or_else(|| ToolError::Internal(format!("organisation {} is gone", caller.org_id)))?;
    let base = app.public_url.clone();
    Ok(move |doc_path: &str| format!("{base}{}", path::portal_page(&slug, doc_path)))
}

/// A document's title for `search` and `fetch`: its file name.
fn title_of(doc_path: &str) -> String {
    doc_path.rsplit('/').next().unwrap_or(doc_path).to_owned()
}

/// ChatGPT's `search` (company knowledge, deep research): `kennisbank_search` with the
/// results as `{id, title, url}`, `id` being the document's path. The same object is the
/// structured content and the text.
pub fn chatgpt_search(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let raw = req_str(args, "query")?;
    let out = search::search_text(
        &app.store,
        &app.kb_index,
        caller.org_id,
        &raw,
        None,
        search::DEFAULT_LIMIT,
    )?;
    let page = portal_pages(app, caller)?;
    let results: Vec<Value> = out
        .results
        .iter()
        .map(|hit| json!({"id": hit.path, "title": title_of(&hit.path), "url": page(&hit.path)}))
        .collect();
    let structured = json!({ "results": results });
    Ok(ToolOk {
        text: structured.to_string(),
        structured,
        target: None,
    })
}

/// ChatGPT's `fetch`: `kennisbank_read` of the document whose path is `id`, at the read
/// tool's largest `maxChars`, as `{id, title, text, url, metadata}`. `text` is the document's
/// text (for PDF and Office files the extracted text); `metadata.truncated` says whether it was
/// cut. A binary file without text gets a sentence with its download link instead.
pub fn chatgpt_fetch(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let id = req_str(args, "id")?;
    let mut read_args = Args::new();
    read_args.insert("path".into(), json!(id));
    read_args.insert("maxChars".into(), json!(MAX_MAX_CHARS));
    let doc = read(app, caller, &read_args)
        .map_err(|e| match e {
            ToolError::Kb(KbError::NotFound(_)) => ToolError::NotFound(format!(
                "no document with id `{id}`; use search to find documents and their ids"
            )),
            other => other,
        })?
        .structured;
    let field = |name: &str| doc.get(name).cloned().unwrap_or(Value::Null);
    let doc_path = field("path").as_str().unwrap_or(&id).to_owned();
    let text = match doc.get("excerpt").and_then(Value::as_str) {
        Some(excerpt) => excerpt.to_owned(),
        None => format!(
            "{doc_path} is a binary document ({}) without text that can be shown; download it (link valid 15 minutes): {}",
            field("content_type").as_str().unwrap_or("unknown type"),
            field("download_url").as_str().unwrap_or_default()
        ),
    };
    let structured = json!({
        "id": doc_path,
        "title": title_of(&doc_path),
        "text": text,
        "url": portal_pages(app, caller)?(&doc_path),
        "metadata": {
            "version": field("version"),
            "size": field("size"),
            "kind": field("kind"),
            "content_type": field("content_type"),
            "extracted": field("extracted").as_bool().unwrap_or(false),
            "truncated": field("truncated").as_bool().unwrap_or(false),
            "total_chars": field("total_chars"),
            "download_url": field("download_url"),
            "download_expires_at": field("download_expires_at"),
        },
    });
    Ok(ToolOk {
        text: structured.to_string(),
        structured,
        target: Some(doc_path),
    })
}

pub fn write(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let p = path::check_write_path(&req_str(args, "path")?)?;
    let content = req_str(args, "content")?;
    let expected = opt_int(args, "expected_version", 1, i64::MAX)?;
    if content.len() > kb::MAX_WRITE_BYTES {
        return Err(KbError::TooLarge(format!(
            "content is {} bytes; at most {} (256 KB) can be written",
            content.len(),
            kb::MAX_WRITE_BYTES
        ))
        .into());
    }
    if content.contains('\0') {
        return Err(KbError::UnsupportedType(
            "content contains NUL bytes; only text can be written".into(),
        )
        .into());
    }
    let expect = match expected {
        Some(v) => Expect::Version(v as u64),
        None => Expect::Create,
    };
    let outcome = kb::write(
        &app.store,
        &app.kb_index,
        kb::NewVersion {
            org_id: caller.org_id,
            path: &p,
            bytes: content.as_bytes(),
            expect,
            by: caller.person_id(),
            now: app.clock.now(),
        },
    )?;
    let text = format!(
        "{} {} (version {}, {} bytes).",
        if outcome.created {
            "Created"
        } else {
            "Revised"
        },
        outcome.path,
        outcome.version,
        outcome.size
    );
    Ok(ToolOk {
        structured: json!({"path": outcome.path, "version": outcome.version, "created": outcome.created, "size": outcome.size}),
        text,
        target: Some(p),
    })
}

/// How `kennisbank_read` and `kennisbank_search` describe documents: with the text of PDF and
/// Office files (`[kb] extract_text`), or without it (the specification's rule 8).
macro_rules! read_start {
    () => {
        "Read one document. For a text document (Markdown, plain text) you get an excerpt of at most `maxChars` characters (default 8000, max 20000) plus a download link valid 15 minutes. "
    };
}
macro_rules! search_rest {
    () => {
        "The material is mostly Dutch: search with Dutch words as they appear in the documents (e.g. `kozijn`, not `window frame`). Case and accents are ignored; each word also matches inside longer words (`kozijn` finds `kozijnen`); put a phrase in double quotes to search it as one term. All terms must occur within 3 consecutive lines. 2 to 200 characters, at most 10 terms. Use `path` to search one folder."
    };
}
const READ_EXTRACTED: &str = concat!(
    read_start!(),
    "For a PDF, Word, Excel, PowerPoint or OpenDocument file whose text could be taken you get an excerpt of that text (`extracted: true`) and the link; for other binary documents (images, CAD) only their details and the link."
);
const READ_TEXT_ONLY: &str = concat!(
    read_start!(),
    "For a binary document (PDF, Office files, images, CAD) you get only its details and the link."
);
const SEARCH_EXTRACTED: &str = concat!(
    "Keyword search in the latest version of the documents: text documents, and the text taken from PDF and Office files (a result from such a file carries `extracted: true`, its line counted in that text). ",
    search_rest!()
);
const SEARCH_TEXT_ONLY: &str = concat!(
    "Keyword search in the latest version of the text documents (binary files such as PDF and Office documents are not searched). ",
    search_rest!()
);

/// Tool definitions: name, description, input schema, output schema. `with_extracted`: the
/// server searches and reads the text of PDF and Office files (`[kb] extract_text`).
pub fn definitions(with_extracted: bool) -> Vec<(&'static str, &'static str, Value, Value)> {
    let entry = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "path": {"type": "string"},
        "kind": {"type": "string", "enum": ["folder", "document"]},
        "version": {"type": "integer"}, "size": {"type": "integer"}},
        "required": ["name", "path", "kind"]});
    vec![
        (
            "kennisbank_list",
            "List the folders and documents of the organisation's knowledge base. Without `path` it lists the top level; with a folder path, that folder. Documents show their version and size. The knowledge base is mostly in Dutch.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Folder to list, e.g. `handleidingen/kozijnen`; omit for the top level."}}}),
            json!({"type": "object", "properties": {"path": {"type": "string"}, "entries": {"type": "array", "items": entry}}, "required": ["path", "entries"]}),
        ),
        (
            "kennisbank_read",
            if with_extracted {
                READ_EXTRACTED
            } else {
                READ_TEXT_ONLY
            },
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Document path, e.g. `handleidingen/onderhoud.md`."},
                "maxChars": {"type": "integer", "minimum": 1, "maximum": 20000, "default": 8000}},
                "required": ["path"]}),
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "version": {"type": "integer"}, "size": {"type": "integer"},
                "kind": {"type": "string", "enum": ["text", "binary"]}, "content_type": {"type": "string"},
                "excerpt": {"type": "string"}, "truncated": {"type": "boolean"}, "total_chars": {"type": "integer"},
                "extracted": {"type": "boolean", "description": "The excerpt is text taken from a binary file."},
                "download_url": {"type": "string"}, "download_expires_at": {"type": "string"}},
                "required": ["path", "version", "size", "kind", "content_type", "download_url", "download_expires_at"]}),
        ),
        (
            "kennisbank_search",
            if with_extracted {
                SEARCH_EXTRACTED
            } else {
                SEARCH_TEXT_ONLY
            },
            json!({"type": "object", "properties": {
                "query": {"type": "string", "minLength": 2, "maxLength": 200, "description": "Search terms in the language of the documents (mostly Dutch)."},
                "path": {"type": "string", "description": "Only search this folder (or this one document)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20}},
                "required": ["query"]}),
            json!({"type": "object", "properties": {
                "query": {"type": "string"},
                "results": {"type": "array", "items": {"type": "object", "properties": {
                    "path": {"type": "string"}, "version": {"type": "integer"}, "line": {"type": "integer"}, "snippet": {"type": "string"},
                    "extracted": {"type": "boolean"}},
                    "required": ["path", "version", "line", "snippet"]}},
                "searched_documents": {"type": "integer"},
                "not_searched": {"type": "object", "properties": {"documents": {"type": "integer"}, "reason": {"type": "string"}}},
                "truncated": {"type": "boolean"}},
                "required": ["query", "results", "searched_documents", "truncated"]}),
        ),
        (
            "kennisbank_write",
            "Create or revise a Markdown or plain-text document inside `aangeleverd/` (e.g. `aangeleverd/notities/overleg.md`; folder names lower case). Write in the language of the material (mostly Dutch). Omit `expected_version` to create a new document; to revise one, pass its current version (from kennisbank_read or kennisbank_list). At most 256 KB; PDF, Word, Excel and CAD files cannot be written.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "`aangeleverd/<name>.md`, subfolders allowed."},
                "content": {"type": "string", "description": "Markdown or plain text, at most 256 KB."},
                "expected_version": {"type": "integer", "minimum": 1, "description": "Current version when revising; omit to create."}},
                "required": ["path", "content"]}),
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "version": {"type": "integer"}, "created": {"type": "boolean"}, "size": {"type": "integer"}},
                "required": ["path", "version", "created", "size"]}),
        ),
        (
            "search",
            "Search the organisation's knowledge base (for ChatGPT's company knowledge and deep research; the same search as kennisbank_search). Returns matching documents as `{id, title, url}`; pass an `id` to `fetch` to read the document. The material is mostly Dutch: search with a few Dutch keywords as they appear in the documents (e.g. `kozijn onderhoud`), not a question. Case and accents are ignored, a word also matches inside longer words, all terms must occur within 3 consecutive lines; 2 to 200 characters, at most 10 terms.",
            json!({"type": "object", "properties": {
                "query": {"type": "string", "minLength": 2, "maxLength": 200, "description": "A few keywords in the language of the documents (mostly Dutch)."}},
                "required": ["query"]}),
            json!({"type": "object", "properties": {
                "results": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"}, "title": {"type": "string"}, "url": {"type": "string"}},
                    "required": ["id", "title", "url"]}}},
                "required": ["results"]}),
        ),
        (
            "fetch",
            "Fetch one knowledge-base document by the `id` that `search` returned: its text (for PDF and Office files the text taken from them; at most 20000 characters, `metadata.truncated` says whether it was cut), title, portal URL and metadata (version, size, content type, a download link valid 15 minutes).",
            json!({"type": "object", "properties": {
                "id": {"type": "string", "description": "A document id from `search` (the document's path)."}},
                "required": ["id"]}),
            json!({"type": "object", "properties": {
                "id": {"type": "string"}, "title": {"type": "string"}, "text": {"type": "string"},
                "url": {"type": "string"}, "metadata": {"type": "object"}},
                "required": ["id", "title", "text", "url", "metadata"]}),
        ),
    ]
}
