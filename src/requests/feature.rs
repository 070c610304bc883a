//! The rules of a feature request's life: input limits, listing with filters, replies with
//! answers validated against the open questions, the status transitions, and how an agent's
//! events change a request. Everything here works inside the caller's transaction and is bound
//! to one organisation: a request or app of another organisation is "not found", exactly like
//! an id that does not exist, so guessing ids reveals nothing.

use jiff::Timestamp;

use super::apps::{self, AppStatus};
use super::{
    AgentEvent, Answer, JobState, Kind, Message, Question, QuestionOption, Request, RequestError,
    Role, Status,
};
use crate::kb::fold::fold_text;
use crate::store::{ACTIVE_RUNS, FEATURE_REQUESTS, Read, ReadTx, WriteTx, key};

pub const TITLE_MAX: usize = 200;
pub const DESCRIPTION_MAX: usize = 20_000;
pub const MESSAGE_MAX: usize = 20_000;
pub const OTHER_MAX: usize = 1000;
pub const SEARCH_MAX: usize = 200;
pub const PER_PAGE: usize = 25;
pub const MAX_PAGE: u64 = 1000;
/// Limits on what an agent may ask: a question's text, its options and their labels.
pub const QUESTION_TEXT_MAX: usize = 2000;
pub const OPTIONS_MAX: usize = 20;
pub const OPTION_ID_MAX: usize = 100;
pub const OPTION_LABEL_MAX: usize = 500;
/// Most open questions at a time, so one read of a request stays small.
pub const OPEN_QUESTIONS_MAX: usize = 10;

/// The statuses a feature request can have, in the order of its life.
pub const FEATURE_STATUSES: [Status; 7] = [
    Status::Pending,
    Status::Clarifying,
    Status::Implementing,
    Status::AwaitingFeedback,
    Status::Review,
    Status::Completed,
    Status::Cancelled,
];

/// A feature-request status by name; `None` for anything else (including run statuses).
pub fn parse_status(name: &str) -> Option<Status> {
    FEATURE_STATUSES.into_iter().find(|s| s.as_str() == name)
}

/// Whether a request may move from `from` to `to`. The work goes forward along
/// `pending → clarifying → implementing → awaiting_feedback → review → completed`; an agent may
/// go back to clarifying or implementing while work is open (new questions, rework after
/// feedback or review), may cancel any open request, and nothing leaves `completed` or
/// `cancelled`. Completing needs work to have started: `pending` or `clarifying` cannot jump
/// to `completed`.
pub fn may_move(from: Status, to: Status) -> bool {
    use Status::*;
    match (from, to) {
        (Completed | Cancelled, _) => false,
        (_, Cancelled) => true,
        (Pending, Clarifying | Implementing) => true,
        (Clarifying, Implementing) => true,
        (Implementing, Clarifying | AwaitingFeedback | Review | Completed) => true,
        (AwaitingFeedback, Clarifying | Implementing | Review | Completed) => true,
        (Review, Implementing | AwaitingFeedback | Completed) => true,
        _ => false,
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A title: 1 to 200 characters after trimming, one line.
pub fn check_title(title: &str) -> Result<String, RequestError> {
    let t = title.trim();
    if t.is_empty() {
        return Err(RequestError::InvalidInput("`title` is empty".into()));
    }
    let n = chars(t);
    if n > TITLE_MAX {
        return Err(RequestError::InvalidInput(format!(
            "`title` has {n} characters; at most {TITLE_MAX} are allowed"
        )));
    }
    if t.chars().any(char::is_control) {
        return Err(RequestError::InvalidInput(
            "`title` must be one line without control characters".into(),
        ));
    }
    Ok(t.to_owned())
}

/// A longer text (`description`, `message`): not blank, at most `max` characters, no NUL.
pub fn check_text(name: &str, text: &str, max: usize) -> Result<String, RequestError> {
    if text.trim().is_empty() {
        return Err(RequestError::InvalidInput(format!("`{name}` is empty")));
    }
    let n = chars(text);
    if n > max {
        return Err(RequestError::InvalidInput(format!(
            "`{name}` has {n} characters; at most {max} are allowed"
        )));
    }
    if text.contains('\0') {
        return Err(RequestError::InvalidInput(format!(
            "`{name}` contains NUL characters"
        )));
    }
    Ok(text.trim_end().to_owned())
}

/// Filters of a list.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub app_id: Option<u64>,
    pub status: Option<Status>,
    /// Words that must all occur in the title or description (case and accents ignored).
    pub search: Option<String>,
    /// Only requests filed by this person.
    pub author_id: Option<u64>,
    /// 1-based.
    pub page: u64,
}

/// One page of a list, newest first, with the number of matching requests.
#[derive(Debug)]
pub struct Page {
    pub total: usize,
    pub requests: Vec<Request>,
}

/// The organisation's feature requests matching `filter`.
pub fn list(tx: &ReadTx, org_id: u64, filter: &Filter) -> Result<Page, RequestError> {
    if !(1..=MAX_PAGE).contains(&filter.page) {
        return Err(RequestError::InvalidInput(format!(
            "`page` must be an integer from 1 to {MAX_PAGE}"
        )));
    }
    if let Some(app_id) = filter.app_id
        && apps::get(tx, org_id, app_id)?.is_none()
    {
        return Err(RequestError::NotFound(format!(
            "no app {app_id}; use app_list to see the apps"
        )));
    }
    let terms: Vec<String> = match &filter.search {
        Some(s) => {
            let n = chars(s);
            if n > SEARCH_MAX {
                return Err(RequestError::InvalidInput(format!(
                    "`search` has {n} characters; at most {SEARCH_MAX} are allowed"
                )));
            }
            fold_text(s).split_whitespace().map(str::to_owned).collect()
        }
        None => Vec::new(),
    };
    let ids = org_request_ids(tx.scan_keys(FEATURE_REQUESTS, &key::id(org_id), usize::MAX)?);
    let skip = (filter.page as usize - 1) * PER_PAGE;
    let mut total = 0;
    let mut requests = Vec::new();
    // Ids grow with time: the highest id is the newest request.
    for id in ids.into_iter().rev() {
        let Some(r) = super::get(tx, id)? else {
            continue;
        };
        if r.org_id != org_id || r.kind != Kind::FeatureRequest {
            continue;
        }
        if filter.app_id.is_some_and(|a| r.app_id != Some(a))
            || filter.status.is_some_and(|s| r.status != s)
            || filter.author_id.is_some_and(|p| r.author_id != Some(p))
        {
            continue;
        }
        if !terms.is_empty() {
            let hay = fold_text(&format!("{}\n{}", r.title, r.description));
            if !terms.iter().all(|t| hay.contains(t.as_str())) {
                continue;
            }
        }
        if total >= skip && requests.len() < PER_PAGE {
            requests.push(r);
        }
        total += 1;
    }
    Ok(Page { total, requests })
}

/// The request ids of an organisation's `FEATURE_REQUESTS` keys, oldest first.
fn org_request_ids(keys: Vec<Vec<u8>>) -> Vec<u64> {
    keys.iter().filter_map(|k| key::id_at(k, 8)).collect()
}

fn not_found(id: u64) -> RequestError {
    RequestError::NotFound(format!(
        "no feature request {id}; use feature_request_list to see the requests"
    ))
}

fn visible(r: Option<Request>, org_id: u64, id: u64) -> Result<Request, RequestError> {
    match r {
        Some(r) if r.org_id == org_id && r.kind == Kind::FeatureRequest => Ok(r),
        _ => Err(not_found(id)),
    }
}

/// One feature request of the organisation.
pub fn get(tx: &impl Read, org_id: u64, id: u64) -> Result<Request, RequestError> {
    visible(super::get(tx, id)?, org_id, id)
}

/// What a person files.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub app_id: u64,
    pub title: String,
    pub description: String,
}

/// Queues the feature agent's job on `r` (or asks for another round if it is running).
/// Returns whether a worker must be woken.
fn queue_job(tx: &mut WriteTx, r: &mut Request) -> Result<bool, RequestError> {
    if r.agent_id == 0 {
        return Ok(false);
    }
    match r.job {
        None => {
            r.job = Some(JobState::Queued);
            tx.put(ACTIVE_RUNS, &key::id(r.id), &true)?;
            Ok(true)
        }
        Some(JobState::Queued) => Ok(false),
        Some(JobState::Running) => {
            r.redispatch = true;
            Ok(false)
        }
    }
}

/// Files a request for a live app. `agent_id` is the organisation's feature agent (0 when it
/// has none: the request then waits). Returns the request and whether to wake a worker.
pub fn create_in(
    tx: &mut WriteTx,
    org_id: u64,
    author_id: u64,
    new: &NewRequest,
    agent_id: u64,
    now: Timestamp,
) -> Result<(Request, bool), RequestError> {
    let title = check_title(&new.title)?;
    let description = check_text("description", &new.description, DESCRIPTION_MAX)?;
    let app = apps::get(tx, org_id, new.app_id)?.ok_or_else(|| {
        RequestError::NotFound(format!(
            "no app {}; use app_list to see the apps",
            new.app_id
        ))
    })?;
    match app.status {
        AppStatus::Live => {}
        AppStatus::Draft => {
            return Err(RequestError::AppClosed(format!(
                "app `{}` is a draft and does not accept requests yet",
                app.name
            )));
        }
        AppStatus::Archived => {
            return Err(RequestError::AppClosed(format!(
                "app `{}` is archived and accepts no new requests",
                app.name
            )));
        }
    }
    let mut r = Request {
        id: tx.next_id(super::SEQUENCE)?,
        org_id,
        kind: Kind::FeatureRequest,
        agent_id,
        instructions: String::new(),
        status: Status::Pending,
        created_at: now,
        updated_at: now,
        app_id: Some(app.app_id),
        title,
        description,
        author_id: Some(author_id),
        ..Request::blank()
    };
    let wake = queue_job(tx, &mut r)?;
    super::put(tx, &r)?;
    Ok((r, wake))
}

/// An answer as given, before it is checked against the question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAnswer {
    pub question_id: u64,
    pub option_ids: Vec<String>,
    pub other: Option<String>,
}

/// Checks every answer against the request's open questions; nothing is applied unless all
/// are valid.
fn check_answers(r: &Request, answers: &[NewAnswer]) -> Result<Vec<Answer>, RequestError> {
    let bad = |m: String| Err(RequestError::InvalidInput(m));
    let mut out: Vec<Answer> = Vec::new();
    for a in answers {
        let qid = a.question_id;
        let Some(q) = r.questions.iter().find(|q| q.question_id == qid) else {
            return bad(format!(
                "request {} has no question {qid}; feature_request_read lists the open questions",
                r.id
            ));
        };
        if q.answered {
            return bad(format!("question {qid} is already answered"));
        }
        if out.iter().any(|o| o.question_id == qid) {
            return bad(format!("question {qid} is answered twice in one reply"));
        }
        for (i, o) in a.option_ids.iter().enumerate() {
            if !q.options.iter().any(|opt| &opt.option_id == o) {
                let known: Vec<&str> = q.options.iter().map(|o| o.option_id.as_str()).collect();
                return bad(format!(
                    "question {qid} has no option `{o}`; its options are: {}",
                    known.join(", ")
                ));
            }
            if a.option_ids.iter().take(i).any(|p| p == o) {
                return bad(format!("option `{o}` is given twice for question {qid}"));
            }
        }
        let other = match a.other.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => {
                if !q.allow_other {
                    return bad(format!(
                        "question {qid} does not allow an `other` answer; choose from its options"
                    ));
                }
                let n = chars(text);
                if n > OTHER_MAX {
                    return bad(format!(
                        "`other` has {n} characters; at most {OTHER_MAX} are allowed"
                    ));
                }
                if text.contains('\0') {
                    return bad("`other` contains NUL characters".into());
                }
                Some(text.to_owned())
            }
        };
        if a.option_ids.is_empty() && other.is_none() {
            return bad(format!(
                "the answer to question {qid} chooses no option{}",
                if q.allow_other {
                    " and gives no `other`"
                } else {
                    ""
                }
            ));
        }
        out.push(Answer {
            question_id: qid,
            option_ids: a.option_ids.clone(),
            other,
        });
    }
    Ok(out)
}

/// How a question reads in the conversation (stored as written; the portal recognises it to
/// show it in the reader's language).
pub fn question_note(q: &Question) -> String {
    let labels: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
    format!(
        "Question {}: {} (options: {}{})",
        q.question_id,
        q.text,
        labels.join(" / "),
        if q.allow_other {
            ", or another answer"
        } else {
            ""
        }
    )
}

/// How an answer reads in the conversation (stored as written; the portal recognises it to
/// show it in the reader's language).
pub fn answer_note(q: &Question, a: &Answer) -> String {
    let mut chosen: Vec<String> = a
        .option_ids
        .iter()
        .filter_map(|id| q.options.iter().find(|o| &o.option_id == id))
        .map(|o| o.label.clone())
        .collect();
    if let Some(other) = &a.other {
        chosen.push(format!("other: {other}"));
    }
    format!("Answer to \"{}\": {}", q.text, chosen.join("; "))
}

/// What a reply consisted of.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub message: bool,
    pub answers: Vec<u64>,
}

/// Adds a person's message and/or answers. Returns the request, what was accepted and whether
/// to wake a worker (the agent is dispatched again with the new conversation).
/// `agent_id` is the organisation's feature agent now (0 for none): a request filed before it
/// had one is handed to it here.
#[allow(clippy::too_many_arguments)]
pub fn reply_in(
    tx: &mut WriteTx,
    org_id: u64,
    author: &str,
    id: u64,
    message: Option<&str>,
    answers: &[NewAnswer],
    agent_id: u64,
    now: Timestamp,
) -> Result<(Request, Accepted, bool), RequestError> {
    if message.is_none() && answers.is_empty() {
        return Err(RequestError::InvalidInput(
            "give a `message`, `answers`, or both".into(),
        ));
    }
    let message = message
        .map(|m| check_text("message", m, MESSAGE_MAX))
        .transpose()?;
    let mut r = get(tx, org_id, id)?;
    if r.status.is_final() {
        return Err(RequestError::InvalidInput(format!(
            "request {id} is {}; it takes no more replies (file a new request instead)",
            r.status.as_str()
        )));
    }
    let checked = check_answers(&r, answers)?;
    if let Some(text) = &message {
        r.conversation.push(Message {
            author: author.to_owned(),
            role: Role::Person,
            text: text.clone(),
            at: now,
        });
    }
    for a in &checked {
        // `check_answers` found each question; one that is not there is passed over.
        let Some(q) = r
            .questions
            .iter_mut()
            .find(|q| q.question_id == a.question_id)
        else {
            continue;
        };
        q.answered = true;
        let text = answer_note(q, a);
        r.conversation.push(Message {
            author: author.to_owned(),
            role: Role::Person,
            text,
            at: now,
        });
        r.answers.push(a.clone());
    }
    r.updated_at = now;
    if r.agent_id == 0 {
        r.agent_id = agent_id;
    }
    let wake = queue_job(tx, &mut r)?;
    super::put(tx, &r)?;
    let accepted = Accepted {
        message: message.is_some(),
        answers: checked.iter().map(|a| a.question_id).collect(),
    };
    Ok((r, accepted, wake))
}

/// Hands the organisation's open requests that have no agent (filed before it had a feature
/// agent) to `agent_id` and queues its job on each, so "the request waits until one is set up"
/// holds. Returns their ids, oldest first: the workers must be woken for each.
pub fn adopt_waiting(
    tx: &mut WriteTx,
    org_id: u64,
    agent_id: u64,
) -> Result<Vec<u64>, RequestError> {
    let mut adopted = Vec::new();
    if agent_id == 0 {
        return Ok(adopted);
    }
    for id in org_request_ids(tx.scan_keys(FEATURE_REQUESTS, &key::id(org_id), usize::MAX)?) {
        let Some(mut r) = super::get(tx, id)? else {
            continue;
        };
        if r.org_id != org_id
            || r.kind != Kind::FeatureRequest
            || r.agent_id != 0
            || r.status.is_final()
        {
            continue;
        }
        r.agent_id = agent_id;
        if queue_job(tx, &mut r)? {
            adopted.push(id);
        }
        super::put(tx, &r)?;
    }
    Ok(adopted)
}

/// Shortens an agent's text to `max` characters, saying so.
fn bounded(text: &str, max: usize) -> String {
    let n = chars(text);
    if n <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… [cut: the agent sent {n} characters, {max} are kept]")
}

fn option_of(v: &serde_json::Value) -> Result<QuestionOption, String> {
    let id = match v.get("option_id") {
        Some(serde_json::Value::String(s)) => s.trim().to_owned(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => return Err("an option has no `option_id` (a string)".into()),
    };
    let label = match v.get("label") {
        Some(serde_json::Value::String(s)) => s.trim().to_owned(),
        _ => return Err(format!("option `{id}` has no `label` (a string)")),
    };
    if id.is_empty() || chars(&id) > OPTION_ID_MAX || id.chars().any(char::is_control) {
        return Err(format!(
            "option ids must be 1 to {OPTION_ID_MAX} characters without control characters"
        ));
    }
    if label.is_empty() || chars(&label) > OPTION_LABEL_MAX {
        return Err(format!(
            "option `{id}` needs a label of 1 to {OPTION_LABEL_MAX} characters"
        ));
    }
    Ok(QuestionOption {
        option_id: id,
        label,
    })
}

/// Checks a question an agent asks.
fn question_of(
    text: &str,
    options: &[serde_json::Value],
    allow_other: bool,
) -> Result<(String, Vec<QuestionOption>), String> {
    let text = text.trim();
    if text.is_empty() || chars(text) > QUESTION_TEXT_MAX {
        return Err(format!(
            "a question needs a text of 1 to {QUESTION_TEXT_MAX} characters"
        ));
    }
    if options.len() > OPTIONS_MAX {
        return Err(format!("a question has at most {OPTIONS_MAX} options"));
    }
    if options.is_empty() && !allow_other {
        return Err("a question needs options, or `allow_other`".into());
    }
    let mut out: Vec<QuestionOption> = Vec::new();
    for v in options {
        let o = option_of(v)?;
        if out.iter().any(|p| p.option_id == o.option_id) {
            return Err(format!("option id `{}` is used twice", o.option_id));
        }
        out.push(o);
    }
    Ok((text.to_owned(), out))
}

/// Applies one agent event to `r`. A refused event (a transition that makes no sense, a
/// malformed question) changes nothing and returns why.
pub fn apply_event(
    r: &mut Request,
    agent: &str,
    event: &AgentEvent,
    now: Timestamp,
) -> Result<(), String> {
    let say = |r: &mut Request, text: String| {
        r.conversation.push(Message {
            author: agent.to_owned(),
            role: Role::Agent,
            text,
            at: now,
        })
    };
    match event {
        AgentEvent::Message { text } | AgentEvent::Result { text } => {
            if text.trim().is_empty() {
                return Err("an empty message was left out".into());
            }
            say(r, bounded(text, MESSAGE_MAX));
        }
        AgentEvent::Question {
            text,
            options,
            allow_other,
        } => {
            if r.status.is_final() {
                return Err(format!(
                    "a question cannot be asked on a {} request",
                    r.status.as_str()
                ));
            }
            if r.open_questions().count() >= OPEN_QUESTIONS_MAX {
                return Err(format!(
                    "a request has at most {OPEN_QUESTIONS_MAX} open questions; wait for answers"
                ));
            }
            let (text, options) = question_of(text, options, *allow_other)?;
            let question_id = r.questions.iter().map(|q| q.question_id).max().unwrap_or(0) + 1;
            let q = Question {
                question_id,
                text,
                options,
                allow_other: *allow_other,
                asked_at: now,
                answered: false,
            };
            say(r, question_note(&q));
            r.questions.push(q);
            if r.status != Status::Clarifying {
                r.status = Status::Clarifying;
            }
        }
        AgentEvent::Status { status } => {
            let Some(to) = parse_status(status) else {
                return Err(format!("`{status}` is not a feature-request status"));
            };
            if to == r.status {
                return Ok(());
            }
            if !may_move(r.status, to) {
                return Err(format!(
                    "status `{}` cannot follow `{}`",
                    to.as_str(),
                    r.status.as_str()
                ));
            }
            if to == Status::Implementing && r.open_questions().next().is_some() {
                return Err("status `implementing` needs every open question answered".into());
            }
            r.status = to;
        }
    }
    r.updated_at = now;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            id: 7,
            org_id: 1,
            ..Request::blank()
        }
    }

    #[test]
    fn transitions_follow_the_life_of_a_request() {
        use Status::*;
        let path = [
            Pending,
            Clarifying,
            Implementing,
            AwaitingFeedback,
            Review,
            Completed,
        ];
        for w in path.windows(2) {
            assert!(may_move(w[0], w[1]), "{:?} -> {:?}", w[0], w[1]);
        }
        assert!(!may_move(Pending, Completed));
        assert!(!may_move(Clarifying, Review));
        assert!(!may_move(Completed, Implementing));
        assert!(!may_move(Cancelled, Pending));
        assert!(may_move(Review, Implementing));
        assert!(may_move(Implementing, Cancelled));
        assert!(!may_move(Implementing, Pending));
        assert!(
            !may_move(Pending, Queued),
            "run statuses are not feature statuses"
        );
        assert_eq!(parse_status("queued"), None);
        assert_eq!(parse_status("awaiting_feedback"), Some(AwaitingFeedback));
    }

    #[test]
    fn agent_events_ask_move_and_refuse() {
        let now = Timestamp::UNIX_EPOCH;
        let mut r = req();
        let q = AgentEvent::Question {
            text: "Welke kleur?".into(),
            options: vec![
                serde_json::json!({"option_id": "a", "label": "Rood"}),
                serde_json::json!({"option_id": 2, "label": "Blauw"}),
            ],
            allow_other: false,
        };
        apply_event(&mut r, "bot", &q, now).unwrap();
        assert_eq!(r.status, Status::Clarifying);
        assert_eq!(r.questions[0].options[1].option_id, "2");
        let go = AgentEvent::Status {
            status: "implementing".into(),
        };
        assert!(
            apply_event(&mut r, "bot", &go, now).is_err(),
            "open question"
        );
        let done = AgentEvent::Status {
            status: "completed".into(),
        };
        assert!(apply_event(&mut r, "bot", &done, now).is_err());
        let bogus = AgentEvent::Status {
            status: "queued".into(),
        };
        assert!(apply_event(&mut r, "bot", &bogus, now).is_err());
        let dup = AgentEvent::Question {
            text: "x".into(),
            options: vec![
                serde_json::json!({"option_id": "a", "label": "A"}),
                serde_json::json!({"option_id": "a", "label": "B"}),
            ],
            allow_other: false,
        };
        assert!(apply_event(&mut r, "bot", &dup, now).is_err());
        assert_eq!(r.questions.len(), 1);
        let more = AgentEvent::Question {
            text: "Nog een?".into(),
            options: vec![serde_json::json!({"option_id": "j", "label": "Ja"})],
            allow_other: false,
        };
        for _ in 1..OPEN_QUESTIONS_MAX {
            apply_event(&mut r, "bot", &more, now).unwrap();
        }
        assert!(apply_event(&mut r, "bot", &more, now).is_err());
        assert_eq!(r.open_questions().count(), OPEN_QUESTIONS_MAX);
    }

    #[test]
    fn answers_are_checked_against_the_open_question() {
        let now = Timestamp::UNIX_EPOCH;
        let mut r = req();
        let q = AgentEvent::Question {
            text: "Welke?".into(),
            options: vec![serde_json::json!({"option_id": "a", "label": "A"})],
            allow_other: false,
        };
        apply_event(&mut r, "bot", &q, now).unwrap();
        let a = |qid, opts: &[&str], other: Option<&str>| NewAnswer {
            question_id: qid,
            option_ids: opts.iter().map(|s| s.to_string()).collect(),
            other: other.map(str::to_owned),
        };
        assert!(check_answers(&r, &[a(2, &["a"], None)]).is_err());
        assert!(check_answers(&r, &[a(1, &["b"], None)]).is_err());
        assert!(check_answers(&r, &[a(1, &[], Some("iets"))]).is_err());
        assert!(check_answers(&r, &[a(1, &[], None)]).is_err());
        assert!(check_answers(&r, &[a(1, &["a", "a"], None)]).is_err());
        assert!(check_answers(&r, &[a(1, &["a"], None), a(1, &["a"], None)]).is_err());
        assert_eq!(check_answers(&r, &[a(1, &["a"], None)]).unwrap().len(), 1);
    }
}
