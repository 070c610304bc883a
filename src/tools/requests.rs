//! The feature-request tools: `app_list`, `feature_request_list`, `feature_request_read`,
//! `feature_request_create`, `feature_request_reply`. They act as the grant's person inside
//! the grant's organisation; every lookup goes through `requests::feature` / `requests::apps`,
//! which are bound to that organisation. Attachments and settings are never shown here.

use serde_json::{Value, json};

use super::args::{Args, opt_bool, opt_int, opt_str, req_str};
use super::{Caller, ToolError, ToolOk};
use crate::app::App;
use crate::requests::feature::{self, Filter, NewAnswer, NewRequest};
use crate::requests::{Message, Request, RequestError, apps, service};

/// How much of a request one read shows: the description, each message, and the most recent
/// messages. Longer text ends in a visible marker with its full length.
pub const DESCRIPTION_SHOWN: usize = 4000;
pub const MESSAGE_SHOWN: usize = 2000;
pub const MESSAGES_SHOWN: usize = 30;
/// Most answers one reply may carry.
pub const MAX_ANSWERS: usize = 20;

impl From<RequestError> for ToolError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::NotFound(m) => ToolError::NotFound(m),
            RequestError::InvalidInput(m) => ToolError::InvalidInput(m),
            RequestError::AppClosed(m) => ToolError::AppClosed(m),
            RequestError::UnknownOrg(o) => ToolError::NotFound(format!("unknown organisation {o}")),
            RequestError::Store(s) => ToolError::Internal(s.to_string()),
        }
    }
}

/// `text` cut to `max` characters with a marker naming the full length.
fn shorten(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… [shortened: {max} of {total} characters shown]")
}

fn id_arg(args: &Args) -> Result<u64, ToolError> {
    opt_int(args, "id", 1, i64::MAX)?
        .map(|v| v as u64)
        .ok_or_else(|| ToolError::InvalidInput("`id` is required".into()))
}

fn summary(r: &Request) -> Value {
    json!({
        "id": r.id,
        "app_id": r.app_id,
        "title": r.title,
        "status": r.status,
        "created_at": r.created_at.to_string(),
        "updated_at": r.updated_at.to_string(),
    })
}

pub fn app_list(app: &App, caller: &Caller, _args: &Args) -> Result<ToolOk, ToolError> {
    let list = app.store.read(|tx| apps::list(tx, caller.org_id))?;
    let mut text = if list.is_empty() {
        "This organisation has no apps yet.\n".to_owned()
    } else {
        format!("{} app(s):\n", list.len())
    };
    for a in &list {
        text.push_str(&format!(
            "app_id {}: {} ({}{})\n",
            a.app_id,
            a.name,
            a.status.as_str(),
            if a.accepts_requests() {
                ", accepts requests"
            } else {
                ", accepts no new requests"
            }
        ));
    }
    let apps: Vec<Value> = list
        .iter()
        .map(|a| json!({"app_id": a.app_id, "name": a.name, "accepts_requests": a.accepts_requests()}))
        .collect();
    Ok(ToolOk {
        structured: json!({ "apps": apps }),
        text,
        target: None,
    })
}

pub fn list(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let app_id = opt_int(args, "app_id", 1, i64::MAX)?.map(|v| v as u64);
    let status = match opt_str(args, "status")? {
        None => None,
        Some(s) => Some(feature::parse_status(&s).ok_or_else(|| {
            let names: Vec<&str> = feature::FEATURE_STATUSES
                .iter()
                .map(|s| s.as_str())
                .collect();
            ToolError::InvalidInput(format!("`status` must be one of: {}", names.join(", ")))
        })?),
    };
    let search = opt_str(args, "search")?.filter(|s| !s.trim().is_empty());
    let mine = opt_bool(args, "mine")?.unwrap_or(false);
    let page = opt_int(args, "page", 1, feature::MAX_PAGE as i64)?.unwrap_or(1) as u64;
    let filter = Filter {
        app_id,
        status,
        search,
        author_id: mine.then(|| caller.require_person()).transpose()?,
        page,
    };
    let out = app
        .store
        .read(|tx| feature::list(tx, caller.org_id, &filter))?;
    let pages = out.total.div_ceil(feature::PER_PAGE).max(1);
    let mut text = format!(
        "{} request(s) match; page {page} of {pages}, {} per page, newest first.\n",
        out.total,
        feature::PER_PAGE
    );
    for r in &out.requests {
        text.push_str(&format!(
            "#{} [{}] app {}: {} (updated {})\n",
            r.id,
            r.status.as_str(),
            r.app_id.unwrap_or(0),
            r.title,
            r.updated_at
        ));
    }
    if out.requests.is_empty() && out.total > 0 {
        text.push_str("This page is past the last one.\n");
    }
    let requests: Vec<Value> = out.requests.iter().map(summary).collect();
    Ok(ToolOk {
        structured: json!({
            "page": page,
            "per_page": feature::PER_PAGE,
            "total": out.total,
            "requests": requests,
        }),
        text,
        target: app_id.map(|a| format!("app {a}")),
    })
}

fn message_json(m: &Message) -> Value {
    json!({
        "author": m.author,
        "role": m.role,
        "text": shorten(&m.text, MESSAGE_SHOWN),
        "at": m.at.to_string(),
    })
}

pub fn read(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let id = id_arg(args)?;
    let r = app.store.read(|tx| feature::get(tx, caller.org_id, id))?;
    let total = r.conversation.len();
    let skipped = total.saturating_sub(MESSAGES_SHOWN);
    let shown = r.conversation.get(skipped..).unwrap_or_default();
    let open: Vec<Value> = r
        .open_questions()
        .map(|q| {
            json!({
                "question_id": q.question_id,
                "text": q.text,
                "options": q.options,
                "allow_other": q.allow_other,
            })
        })
        .collect();
    let description = shorten(&r.description, DESCRIPTION_SHOWN);
    let mut structured = summary(&r);
    super::args::set(&mut structured, "description", json!(description));
    super::args::set(
        &mut structured,
        "conversation",
        Value::Array(shown.iter().map(message_json).collect()),
    );
    super::args::set(&mut structured, "conversation_total", json!(total));
    super::args::set(&mut structured, "open_questions", Value::Array(open));

    let mut text = format!(
        "Feature request #{} for app {}: {}\nStatus: {}. Filed {}, updated {}.\n\nDescription:\n{}\n",
        r.id,
        r.app_id.unwrap_or(0),
        r.title,
        r.status.as_str(),
        r.created_at,
        r.updated_at,
        description
    );
    if total == 0 {
        text.push_str("\nNo conversation yet.\n");
    } else {
        text.push_str(&format!("\nConversation ({total} message(s)):\n"));
        if skipped > 0 {
            text.push_str(&format!(
                "[… {skipped} earlier message(s) left out; the {MESSAGES_SHOWN} most recent are shown]\n"
            ));
        }
        for m in shown {
            text.push_str(&format!(
                "- {} ({}, {}): {}\n",
                m.author,
                match m.role {
                    crate::requests::Role::Person => "person",
                    crate::requests::Role::Agent => "agent",
                },
                m.at,
                shorten(&m.text, MESSAGE_SHOWN)
            ));
        }
    }
    let questions: Vec<_> = r.open_questions().collect();
    if !questions.is_empty() {
        text.push_str("\nOpen questions (answer with feature_request_reply `answers`):\n");
        for q in questions {
            text.push_str(&format!("- question_id {}: {}\n", q.question_id, q.text));
            for o in &q.options {
                text.push_str(&format!("    option_id `{}`: {}\n", o.option_id, o.label));
            }
            if q.allow_other {
                text.push_str("    (another answer may be given in `other`)\n");
            }
        }
    }
    Ok(ToolOk {
        structured,
        text,
        target: Some(format!("request {id}")),
    })
}

pub fn create(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let app_id = opt_int(args, "app_id", 1, i64::MAX)?
        .ok_or_else(|| ToolError::InvalidInput("`app_id` is required".into()))?
        as u64;
    let new = NewRequest {
        app_id,
        title: req_str(args, "title")?,
        description: req_str(args, "description")?,
    };
    let r = service::create(app, caller.org_id, caller.require_person()?, &new)?;
    let agent_note = if r.job.is_some() {
        "The organisation's feature agent has been asked to work on it."
    } else {
        "This organisation has no feature agent yet; the request waits until one is set up."
    };
    Ok(ToolOk {
        structured: json!({"id": r.id, "status": r.status}),
        text: format!(
            "Filed feature request #{} ({}). {agent_note} Follow it with feature_request_read.",
            r.id,
            r.status.as_str()
        ),
        target: Some(format!("request {}", r.id)),
    })
}

/// `answers` as given: a list of `{question_id, option_ids, other}`.
fn answers_arg(args: &Args) -> Result<Vec<NewAnswer>, ToolError> {
    let bad = |m: &str| ToolError::InvalidInput(m.to_owned());
    let list = match args.get("answers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("`answers` must be a list of answer objects")),
    };
    if list.len() > MAX_ANSWERS {
        return Err(bad("at most 20 answers per reply"));
    }
    list.iter()
        .map(|a| {
            let Value::Object(a) = a else {
                return Err(bad(
                    "each answer is an object with `question_id`, `option_ids` and optionally `other`",
                ));
            };
            let question_id = match a.get("question_id") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.trim().parse().ok(),
                _ => None,
            }
            .ok_or_else(|| bad("each answer needs a `question_id` (an integer)"))?;
            let option_ids = match a.get("option_ids") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s.trim().to_owned()),
                        Value::Number(n) => Ok(n.to_string()),
                        _ => Err(bad("`option_ids` must be a list of option ids")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(bad("`option_ids` must be a list of option ids")),
            };
            let other = match a.get("other") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(bad("`other` must be a string")),
            };
            Ok(NewAnswer {
                question_id,
                option_ids,
                other,
            })
        })
        .collect()
}

pub fn reply(app: &App, caller: &Caller, args: &Args) -> Result<ToolOk, ToolError> {
    let id = id_arg(args)?;
    let message = opt_str(args, "message")?;
    let answers = answers_arg(args)?;
    let (r, accepted) = service::reply(
        app,
        caller.org_id,
        caller.require_person()?,
        id,
        message.as_deref(),
        &answers,
    )?;
    let mut parts = Vec::new();
    if accepted.message {
        parts.push("your message".to_owned());
    }
    if !accepted.answers.is_empty() {
        let ids: Vec<String> = accepted.answers.iter().map(u64::to_string).collect();
        parts.push(format!("answers to question(s) {}", ids.join(", ")));
    }
    Ok(ToolOk {
        structured: json!({
            "id": r.id,
            "status": r.status,
            "accepted": {"message": accepted.message, "answers": accepted.answers},
        }),
        text: format!(
            "Added {} to request #{} ({}). {}",
            parts.join(" and "),
            r.id,
            r.status.as_str(),
            if r.job.is_some() {
                "The feature agent will read it; check back with feature_request_read."
            } else {
                "No feature agent is set up for this organisation."
            }
        ),
        target: Some(format!("request {id}")),
    })
}

/// Tool definitions: name, description, input schema, output schema.
pub fn definitions() -> Vec<(&'static str, &'static str, Value, Value)> {
    let statuses: Vec<&str> = feature::FEATURE_STATUSES
        .iter()
        .map(|s| s.as_str())
        .collect();
    let summary_schema = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "app_id": {"type": "integer"}, "title": {"type": "string"},
        "status": {"type": "string", "enum": statuses}, "created_at": {"type": "string"},
        "updated_at": {"type": "string"}},
        "required": ["id", "app_id", "title", "status", "created_at", "updated_at"]});
    vec![
        (
            "app_list",
            "List the organisation's apps that feature requests are filed for, with `app_id` and whether each accepts new requests (only live apps do).",
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {"apps": {"type": "array", "items": {"type": "object", "properties": {
                "app_id": {"type": "integer"}, "name": {"type": "string"}, "accepts_requests": {"type": "boolean"}},
                "required": ["app_id", "name", "accepts_requests"]}}}, "required": ["apps"]}),
        ),
        (
            "feature_request_list",
            "List the organisation's feature requests, newest first, 25 per page, with the total. Filter by `app_id`, `status`, `search` (words in title or description; case and accents ignored; the requests are mostly written in Dutch, so search in Dutch) and `mine` (only requests you filed).",
            json!({"type": "object", "properties": {
                "app_id": {"type": "integer", "minimum": 1},
                "status": {"type": "string", "enum": statuses},
                "search": {"type": "string", "maxLength": 200, "description": "Words that must all occur in the title or description, in the language of the requests (mostly Dutch)."},
                "mine": {"type": "boolean", "description": "Only requests filed by you."},
                "page": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1}}}),
            json!({"type": "object", "properties": {
                "page": {"type": "integer"}, "per_page": {"type": "integer"}, "total": {"type": "integer"},
                "requests": {"type": "array", "items": summary_schema}},
                "required": ["page", "per_page", "total", "requests"]}),
        ),
        (
            "feature_request_read",
            "Read one feature request: its description, status, conversation (the most recent 30 messages; long texts are shortened with a marker giving the full length) and its open multiple-choice questions, which you can answer with feature_request_reply.",
            json!({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}),
            json!({"type": "object", "properties": {
                "id": {"type": "integer"}, "app_id": {"type": "integer"}, "title": {"type": "string"},
                "description": {"type": "string"}, "status": {"type": "string", "enum": statuses},
                "created_at": {"type": "string"}, "updated_at": {"type": "string"},
                "conversation": {"type": "array", "items": {"type": "object", "properties": {
                    "author": {"type": "string"}, "role": {"type": "string", "enum": ["person", "agent"]},
                    "text": {"type": "string"}, "at": {"type": "string"}},
                    "required": ["author", "role", "text", "at"]}},
                "conversation_total": {"type": "integer"},
                "open_questions": {"type": "array", "items": {"type": "object", "properties": {
                    "question_id": {"type": "integer"}, "text": {"type": "string"},
                    "options": {"type": "array", "items": {"type": "object", "properties": {
                        "option_id": {"type": "string"}, "label": {"type": "string"}}, "required": ["option_id", "label"]}},
                    "allow_other": {"type": "boolean"}},
                    "required": ["question_id", "text", "options", "allow_other"]}}},
                "required": ["id", "app_id", "title", "description", "status", "created_at", "updated_at", "conversation", "open_questions"]}),
        ),
        (
            "feature_request_create",
            "File a feature request for a live app (see app_list) on behalf of the person who connected you. Write the title and description in the language of the organisation (mostly Dutch). An agent starts working on it and may ask questions; follow it with feature_request_read.",
            json!({"type": "object", "properties": {
                "app_id": {"type": "integer", "minimum": 1},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "description": {"type": "string", "minLength": 1, "maxLength": 20000}},
                "required": ["app_id", "title", "description"]}),
            json!({"type": "object", "properties": {"id": {"type": "integer"}, "status": {"type": "string", "enum": statuses}}, "required": ["id", "status"]}),
        ),
        (
            "feature_request_reply",
            "Reply on a feature request: a `message` (in the language of the request, mostly Dutch), `answers` to its open multiple-choice questions, or both. Each answer names the `question_id`, the chosen `option_ids`, and `other` text where the question allows it (at most 1000 characters). The agent then continues with the new information.",
            json!({"type": "object", "properties": {
                "id": {"type": "integer", "minimum": 1},
                "message": {"type": "string", "maxLength": 20000},
                "answers": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": {
                    "question_id": {"type": "integer"},
                    "option_ids": {"type": "array", "items": {"type": "string"}},
                    "other": {"type": "string", "maxLength": 1000}},
                    "required": ["question_id"]}}},
                "required": ["id"]}),
            json!({"type": "object", "properties": {
                "id": {"type": "integer"}, "status": {"type": "string", "enum": statuses},
                "accepted": {"type": "object", "properties": {
                    "message": {"type": "boolean"}, "answers": {"type": "array", "items": {"type": "integer"}}},
                    "required": ["message", "answers"]}},
                "required": ["id", "status", "accepted"]}),
        ),
    ]
}
