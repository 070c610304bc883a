//! Event triggers: an outside system POSTs to a trigger URL and, unless the trigger is paused,
//! a run is active in the delivery's slot or the slot is cooling down, a run is created for the
//! trigger's generic agent (DESIGN.md "Trigger firing order of checks").
//!
//! A slot is (trigger, event key); deliveries without a key share one slot. The slot check and
//! the run creation happen in one write transaction ([`fire_in`]), so concurrent deliveries
//! create at most one run per slot. A read-only [`precheck`] answers skipped deliveries without
//! touching the writer, which keeps skips cheap; the write transaction checks again.

pub mod callback;
mod deliver;
mod retention;
mod signature;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::audit::{self, Actor};
use crate::identity;
use crate::requests::{self, Request, Status};
use crate::roster::{self, AgentKind, Rollout};
use crate::store::by_org::{self, Kind};
use crate::store::memo::Memo;
use crate::store::{
    ACTIVE_RUNS, Read, Store, StoreError, TRIGGER_DELIVERIES, TRIGGER_RUNS, TRIGGER_SLOTS,
    TRIGGERS, WriteTx, key,
};

pub use deliver::{Delivered, Delivery, RawKey, deliver, run_again};
pub use retention::{DELIVERY_KEEP, purge_deliveries};
pub use signature::{Signature, TOLERANCE_SECS, signing_secret, validate_delivery_id, verify};

/// Cooldown when none is given: 300 seconds (spec "Limits").
pub const DEFAULT_COOLDOWN_SECS: u64 = 300;
/// Longest cooldown accepted: one week.
pub const MAX_COOLDOWN_SECS: u64 = 7 * 24 * 3600;
/// How much of the payload's JSON goes into the instructions (spec: "cut after 8 KB").
pub const PAYLOAD_LIMIT: usize = 8 * 1024;
/// Largest accepted delivery body.
pub const BODY_LIMIT: usize = 1024 * 1024;
/// Instructions longer than this are refused when a trigger is saved.
pub const MAX_INSTRUCTIONS: usize = 20_000;
const SECRET_PREFIX: &str = "kb_trg_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    pub id: Uuid,
    pub org_id: u64,
    pub name: String,
    pub instructions: String,
    pub agent_id: u64,
    pub project_id: u64,
    pub cooldown_secs: u64,
    /// SHA-256 of the secret, hex.
    pub secret_hash: String,
    pub paused: bool,
    pub deleted: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Where its runs' results are POSTed when they end (`callback`); checked when saved.
    #[serde(default)]
    pub callback_url: Option<String>,
}

/// State of one slot: the last run it started and when.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    pub run_id: Option<u64>,
    /// When the last run was created; the cooldown counts from the run's own `started_at`
    /// once a worker started it, from here only for a run that never started.
    pub started_at: Option<Timestamp>,
}

/// Why a delivery created no run (a 200 answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    Inactive,
    InFlight,
    Cooldown,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Inactive => "inactive",
            Skip::InFlight => "in_flight",
            Skip::Cooldown => "cooldown",
        }
    }

    /// Why no run was started, for people.
    pub fn reason(self) -> &'static str {
        match self {
            Skip::Inactive => "the trigger is paused",
            Skip::InFlight => "a run of this trigger is still queued or running",
            Skip::Cooldown => "the trigger is cooling down after its last run",
        }
    }
}

/// What the write transaction decided for one delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Fired {
    Created(u64),
    /// A delivery id seen before: the run it created.
    Duplicate(u64),
    Skipped(Skip),
    /// The trigger was deleted between the first check and the write.
    Gone,
}

/// Why a trigger operation or delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error("{0}")]
    InvalidInput(String),
    #[error("unknown organisation `{0}`")]
    UnknownOrg(String),
    #[error("unknown agent {0} in this organisation")]
    UnknownAgent(u64),
    #[error("agent {0} is a feature agent; triggers need a generic agent")]
    NotGeneric(u64),
    #[error("unknown project {0} in this organisation")]
    UnknownProject(u64),
    #[error(
        "project {0} is not fully rolled out (ready); triggers can only be saved for ready projects"
    )]
    ProjectNotReady(u64),
    /// Unknown or deleted trigger (404 "Unknown event trigger").
    #[error("Unknown event trigger")]
    UnknownTrigger,
    /// Missing or wrong secret (401 "Invalid token").
    #[error("Invalid token")]
    InvalidToken,
    /// Bad event key (400).
    #[error("invalid event key: {0}")]
    InvalidKey(String),
    /// Body not JSON (400).
    #[error("the body is not JSON: {0}")]
    BadBody(String),
    /// Body over 1 MB (413).
    #[error("the body is larger than 1 MB")]
    BodyTooLarge,
    /// A run that does not exist or is not a generic run (404 "Not found").
    #[error("Not found")]
    RunNotFound,
    /// The secret is not that of the run's trigger (403 "Access denied").
    #[error("Access denied")]
    AccessDenied,
    /// "Run again" was refused by the trigger's own rules (409).
    #[error("no new run: {}", .0.reason())]
    NotStarted(Skip),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn new_secret() -> (String, String) {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    let secret = format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = hex::encode(hash_secret(&secret));
    (secret, hash)
}

impl Trigger {
    /// Constant-time comparison of a presented secret with the stored hash.
    pub fn secret_matches(&self, presented: &str) -> bool {
        let Ok(stored) = hex::decode(&self.secret_hash) else {
            return false;
        };
        hash_secret(presented).ct_eq(stored.as_slice()).into()
    }
}

/// The trigger's public URL.
pub fn trigger_url(public_url: &str, id: Uuid) -> String {
    format!("{public_url}/api/hooks/events/{id}")
}

/// The URL a run is read at.
pub fn run_url(public_url: &str, run_id: u64) -> String {
    format!("{public_url}/api/hooks/runs/{run_id}")
}

/// Checks an event key against `^[A-Za-z0-9._:-]{1,100}$`.
pub fn validate_key(key: Option<&str>) -> Result<Option<String>, TriggerError> {
    let Some(k) = key else { return Ok(None) };
    if k.is_empty() || k.len() > 100 {
        return Err(TriggerError::InvalidKey(
            "it must be 1 to 100 characters".into(),
        ));
    }
    if !k
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(TriggerError::InvalidKey(
            "only letters, digits, '.', '_', ':' and '-' are allowed".into(),
        ));
    }
    Ok(Some(k.to_owned()))
}

/// The trigger's instructions with the payload appended as JSON, the JSON cut after 8 KB at
/// the last character boundary that fits.
pub fn instructions_with_payload(instructions: &str, payload: &Value) -> String {
    let json = payload.to_string();
    let mut out = String::with_capacity(instructions.len() + json.len().min(PAYLOAD_LIMIT) + 80);
    out.push_str(instructions);
    out.push_str("\n\nEvent payload (JSON):\n");
    if json.len() <= PAYLOAD_LIMIT {
        out.push_str(&json);
    } else {
        let mut end = PAYLOAD_LIMIT;
        while !json.is_char_boundary(end) {
            end -= 1;
        }
        out.push_str(&json[..end]);
        out.push_str(&format!(
            "\n[payload cut after {end} of {} bytes]",
            json.len()
        ));
    }
    out
}

fn slot_key(trigger: Uuid, key: Option<&str>) -> Vec<u8> {
    let mut k = trigger.as_bytes().to_vec();
    if let Some(key) = key {
        k.extend_from_slice(key.as_bytes());
    }
    k
}

/// Triggers as decoded, beside their stored bytes: every delivery reads its trigger, twice
/// when it creates a run.
static DECODED: Memo<Trigger> = Memo::new(256);

/// The runs slots last started, as decoded: a delivery to a slot in cooldown reads its run.
static SLOT_RUNS: Memo<Request> = Memo::new(256);

/// The run `slot` last started, if any.
fn slot_run(tx: &impl Read, slot: &Slot) -> Result<Option<Request>, StoreError> {
    match slot.run_id {
        Some(id) => requests::get_memo(tx, id, &SLOT_RUNS),
        None => Ok(None),
    }
}

/// A trigger that is not deleted, of any organisation: for deliveries, which name a trigger
/// by its UUID alone.
fn live(tx: &impl Read, id: Uuid) -> Result<Option<Trigger>, StoreError> {
    Ok(tx
        .get_memo(TRIGGERS, id.as_bytes(), &DECODED)?
        .filter(|t| !t.deleted))
}

/// Looks up a live trigger for a delivery (404 when unknown or deleted).
pub fn lookup(tx: &impl Read, uuid: &str) -> Result<Trigger, TriggerError> {
    let id = Uuid::parse_str(uuid).map_err(|_| TriggerError::UnknownTrigger)?;
    live(tx, id)?.ok_or(TriggerError::UnknownTrigger)
}

/// Looks up a trigger for a delivery and checks its secret: 404 before 401.
pub fn authenticate(
    tx: &impl Read,
    uuid: &str,
    secret: Option<&str>,
) -> Result<Trigger, TriggerError> {
    let trigger = lookup(tx, uuid)?;
    match secret {
        Some(s) if trigger.secret_matches(s) => Ok(trigger),
        _ => Err(TriggerError::InvalidToken),
    }
}

fn delivery_key(trigger: Uuid, delivery: &str) -> Vec<u8> {
    let mut k = trigger.as_bytes().to_vec();
    k.extend_from_slice(delivery.as_bytes());
    k
}

fn slot_skip(
    trigger: &Trigger,
    slot: &Slot,
    run: Option<&Request>,
    now: Timestamp,
) -> Option<Skip> {
    if trigger.paused {
        return Some(Skip::Inactive);
    }
    if run.is_some_and(|r| !r.status.is_final()) {
        return Some(Skip::InFlight);
    }
    // The cooldown starts when the run starts (spec), not when it was queued: a run that
    // waited for a busy worker pool cools down from the moment a worker took it.
    let started = run.and_then(|r| r.started_at).or(slot.started_at);
    if let Some(start) = started {
        let cooldown = SignedDuration::from_secs(trigger.cooldown_secs as i64);
        if now < start.saturating_add(cooldown).unwrap_or(start) {
            return Some(Skip::Cooldown);
        }
    }
    None
}

/// The read-only view of a delivery's fate: `Some(..)` means it creates no run.
pub fn precheck(
    tx: &impl Read,
    trigger: &Trigger,
    key: Option<&str>,
    delivery: Option<&str>,
    now: Timestamp,
) -> Result<Option<Fired>, StoreError> {
    if let Some(d) = delivery
        && let Some(run) = tx.get::<u64>(TRIGGER_DELIVERIES, &delivery_key(trigger.id, d))?
    {
        return Ok(Some(Fired::Duplicate(run)));
    }
    if trigger.paused {
        return Ok(Some(Fired::Skipped(Skip::Inactive)));
    }
    let slot: Slot = tx
        .get(TRIGGER_SLOTS, &slot_key(trigger.id, key))?
        .unwrap_or_default();
    let run = slot_run(tx, &slot)?;
    Ok(slot_skip(trigger, &slot, run.as_ref(), now).map(Fired::Skipped))
}

/// The authoritative slot check and run creation, in the caller's write transaction.
pub fn fire_in(
    tx: &mut WriteTx,
    trigger_id: Uuid,
    key: Option<String>,
    delivery: Option<String>,
    instructions: String,
    now: Timestamp,
) -> Result<Fired, StoreError> {
    let Some(trigger) = live(tx, trigger_id)? else {
        return Ok(Fired::Gone);
    };
    if let Some(d) = &delivery
        && let Some(run) = tx.get::<u64>(TRIGGER_DELIVERIES, &delivery_key(trigger_id, d))?
    {
        return Ok(Fired::Duplicate(run));
    }
    let skey = slot_key(trigger_id, key.as_deref());
    let slot: Slot = tx.get(TRIGGER_SLOTS, &skey)?.unwrap_or_default();
    let run = slot_run(tx, &slot)?;
    if let Some(skip) = slot_skip(&trigger, &slot, run.as_ref(), now) {
        return Ok(Fired::Skipped(skip));
    }
    let run = requests::create_run(
        tx,
        trigger.org_id,
        trigger.agent_id,
        trigger_id,
        key,
        instructions,
        now,
    )?;
    if let Some(url) = &trigger.callback_url {
        requests::callback::subscribe_in(tx, &run, url)?;
    }
    tx.put(
        TRIGGER_SLOTS,
        &skey,
        &Slot {
            run_id: Some(run.id),
            started_at: Some(now),
        },
    )?;
    tx.put(ACTIVE_RUNS, &key::id(run.id), &true)?;
    let mut rk = trigger_id.as_bytes().to_vec();
    rk.extend_from_slice(&key::id(run.id));
    tx.put(TRIGGER_RUNS, &rk, &true)?;
    if let Some(d) = &delivery {
        tx.put(TRIGGER_DELIVERIES, &delivery_key(trigger_id, d), &run.id)?;
    }
    Ok(Fired::Created(run.id))
}

/// A run as the read endpoint shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub id: u64,
    pub status: Status,
    #[serde(rename = "createdAt")]
    pub created_at: String,
    #[serde(rename = "updatedAt")]
    pub updated_at: String,
    pub result: Option<String>,
}

impl From<&Request> for RunView {
    fn from(r: &Request) -> Self {
        RunView {
            id: r.id,
            status: r.status,
            created_at: r.created_at.to_string(),
            updated_at: r.updated_at.to_string(),
            result: if r.status.is_final() {
                r.result.clone()
            } else {
                None
            },
        }
    }
}

/// `GET /api/hooks/runs/:id`: 404 for an unknown id or anything but a run of a generic agent;
/// 403 unless the secret is that of the run's live trigger. A deleted trigger (only marked, its
/// record kept for its runs) answers like an unknown one: its last secret reads nothing more.
pub fn read_run(tx: &impl Read, id: &str, secret: Option<&str>) -> Result<RunView, TriggerError> {
    let id: u64 = id.parse().map_err(|_| TriggerError::RunNotFound)?;
    let run = requests::get(tx, id)?.ok_or(TriggerError::RunNotFound)?;
    if run.kind != requests::Kind::Run {
        return Err(TriggerError::RunNotFound);
    }
    let generic =
        roster::get_agent(tx, run.agent_id)?.is_some_and(|a| a.kind == AgentKind::Generic);
    if !generic {
        return Err(TriggerError::RunNotFound);
    }
    let trigger = match run.trigger_id {
        Some(t) => live(tx, t)?,
        None => None,
    };
    match (trigger, secret) {
        (Some(t), Some(s)) if t.secret_matches(s) => Ok(RunView::from(&run)),
        _ => Err(TriggerError::AccessDenied),
    }
}

/// What `trigger add` asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewTrigger {
    pub name: String,
    pub agent_id: u64,
    pub project_id: u64,
    pub instructions: String,
    #[serde(default)]
    pub cooldown_secs: Option<u64>,
    /// Where the results of its runs are POSTed (https; see [`callback::check_url`]).
    #[serde(default)]
    pub callback_url: Option<String>,
}

/// A saved trigger and its secret, which is shown only now.
pub struct Created {
    pub trigger: Trigger,
    pub secret: String,
}

/// Saves a trigger for a generic agent and a ready project of the organisation `org` (the
/// operator's); a `callback_url` must pass [`callback::check_url`] without the test switch.
pub fn add(
    store: &Store,
    org: &str,
    new: &NewTrigger,
    now: Timestamp,
) -> Result<Created, TriggerError> {
    add_by(store, &Actor::Operator, org, new, false, now)
}

/// Saves a trigger for a generic agent and a ready project of the organisation `org`: an
/// agent or project of another organisation is unknown here. Audited (`trigger.add`).
/// `callback_allow_http_loopback` (tests only) lets an `http://127.0.0.1:<port>/…` callback
/// URL through.
pub fn add_by(
    store: &Store,
    by: &Actor,
    org: &str,
    new: &NewTrigger,
    callback_allow_http_loopback: bool,
    now: Timestamp,
) -> Result<Created, TriggerError> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(TriggerError::InvalidInput(
            "trigger name must be 1 to 100 characters without control characters".into(),
        ));
    }
    if new.instructions.trim().is_empty() || new.instructions.chars().count() > MAX_INSTRUCTIONS {
        return Err(TriggerError::InvalidInput(format!(
            "instructions must be 1 to {MAX_INSTRUCTIONS} characters"
        )));
    }
    let cooldown_secs = new.cooldown_secs.unwrap_or(DEFAULT_COOLDOWN_SECS);
    if cooldown_secs > MAX_COOLDOWN_SECS {
        return Err(TriggerError::InvalidInput(format!(
            "cooldown must be 0 to {MAX_COOLDOWN_SECS} seconds"
        )));
    }
    let callback_url = match new.callback_url.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(u) => Some(callback::check_url(u, callback_allow_http_loopback)?),
    };
    let (secret, secret_hash) = new_secret();
    store.write(|tx| {
        let org_id = identity::org_by_slug(tx, org)?
            .ok_or_else(|| TriggerError::UnknownOrg(org.to_owned()))?
            .id;
        let agent = roster::get_agent(tx, new.agent_id)?
            .filter(|a| a.org_id == org_id)
            .ok_or(TriggerError::UnknownAgent(new.agent_id))?;
        if agent.kind != AgentKind::Generic {
            return Err(TriggerError::NotGeneric(agent.id));
        }
        let project = roster::get_project(tx, new.project_id)?
            .filter(|p| p.org_id == org_id)
            .ok_or(TriggerError::UnknownProject(new.project_id))?;
        if project.rollout != Rollout::Ready {
            return Err(TriggerError::ProjectNotReady(project.id));
        }
        let trigger = Trigger {
            id: Uuid::new_v4(),
            org_id,
            name: name.to_owned(),
            instructions: new.instructions.clone(),
            agent_id: agent.id,
            project_id: project.id,
            cooldown_secs,
            secret_hash: secret_hash.clone(),
            paused: false,
            deleted: false,
            created_at: now,
            updated_at: now,
            callback_url: callback_url.clone(),
        };
        tx.put(TRIGGERS, trigger.id.as_bytes(), &trigger)?;
        by_org::add(tx, Kind::Trigger, trigger.org_id, trigger.id.as_bytes())?;
        let target = format!(
            "trigger {} {} agent={} project={}",
            trigger.id, trigger.name, trigger.agent_id, trigger.project_id
        );
        audit::admin_in(tx, org_id, by, "trigger.add", &target, now)?;
        Ok(Created {
            trigger,
            secret: secret.clone(),
        })
    })
}

/// The organisation's triggers (not deleted), oldest first.
pub fn list(store: &Store, org: &str) -> Result<Vec<Trigger>, TriggerError> {
    store.read(|tx| {
        let org = identity::org_by_slug(tx, org)?
            .ok_or_else(|| TriggerError::UnknownOrg(org.to_owned()))?;
        let mut all: Vec<Trigger> = by_org::records::<Trigger>(tx, Kind::Trigger, org.id)?
            .into_iter()
            .map(|r| r.1)
            .filter(|t| !t.deleted)
            .collect();
        all.sort_by_key(|t| t.created_at);
        Ok(all)
    })
}

/// One trigger (not deleted) of the organisation `org_id`; another organisation's trigger is
/// [`TriggerError::UnknownTrigger`], as an unknown one is.
pub fn get(tx: &impl Read, org_id: u64, id: Uuid) -> Result<Trigger, TriggerError> {
    live(tx, id)?
        .filter(|t| t.org_id == org_id)
        .ok_or(TriggerError::UnknownTrigger)
}

/// The most recent runs of the organisation's trigger `id`, newest first. A deleted trigger's
/// runs stay listed; another organisation's trigger is [`TriggerError::UnknownTrigger`].
pub fn recent_runs(
    tx: &impl Read,
    org_id: u64,
    id: Uuid,
    limit: usize,
) -> Result<Vec<Request>, TriggerError> {
    let owner = tx.get::<Trigger>(TRIGGERS, id.as_bytes())?;
    if owner.is_none_or(|t| t.org_id != org_id) {
        return Err(TriggerError::UnknownTrigger);
    }
    let keys = tx.scan::<bool>(TRIGGER_RUNS, id.as_bytes())?;
    let mut out = Vec::new();
    for (k, _) in keys.iter().rev().take(limit) {
        if let Some(run_id) = key::id_at(k, 16)
            && let Some(r) = requests::get(tx, run_id)?
        {
            out.push(r);
        }
    }
    Ok(out)
}

/// A change to a trigger's state (trigger state table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Pause,
    Resume,
    RenewSecret,
    Delete,
}

/// Applies a state change; returns the trigger and, for a renewal, the new secret (the old
/// one stops working with this commit). `org_id` is the organisation the caller acts for (a
/// portal admin): another organisation's trigger is [`TriggerError::UnknownTrigger`]. `None`
/// is the operator (the `kennis` command), who acts for every organisation.
pub fn change(
    store: &Store,
    org_id: Option<u64>,
    id: &str,
    what: Change,
    now: Timestamp,
) -> Result<(Trigger, Option<String>), TriggerError> {
    change_by(store, &Actor::Operator, org_id, id, what, now)
}

/// [`change`] by `by`, audited in the trigger's organisation (`trigger.pause`,
/// `trigger.resume`, `trigger.renew_secret`, `trigger.delete`).
pub fn change_by(
    store: &Store,
    by: &Actor,
    org_id: Option<u64>,
    id: &str,
    what: Change,
    now: Timestamp,
) -> Result<(Trigger, Option<String>), TriggerError> {
    let id = Uuid::parse_str(id).map_err(|_| TriggerError::UnknownTrigger)?;
    store.write(|tx| {
        let mut t = match org_id {
            Some(org_id) => get(tx, org_id, id)?,
            None => live(tx, id)?.ok_or(TriggerError::UnknownTrigger)?,
        };
        let mut secret = None;
        match what {
            Change::Pause => t.paused = true,
            Change::Resume => t.paused = false,
            Change::Delete => t.deleted = true,
            Change::RenewSecret => {
                let (s, h) = new_secret();
                t.secret_hash = h;
                secret = Some(s);
            }
        }
        t.updated_at = now;
        tx.put(TRIGGERS, id.as_bytes(), &t)?;
        let action = match what {
            Change::Pause => "trigger.pause",
            Change::Resume => "trigger.resume",
            Change::RenewSecret => "trigger.renew_secret",
            Change::Delete => "trigger.delete",
        };
        audit::admin_in(
            tx,
            t.org_id,
            by,
            action,
            &format!("trigger {} {}", t.id, t.name),
            now,
        )?;
        Ok((t, secret))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_pattern() {
        assert!(validate_key(Some("a.B_c:d-9")).is_ok());
        assert!(validate_key(Some(&"k".repeat(100))).is_ok());
        assert!(validate_key(Some(&"k".repeat(101))).is_err());
        assert!(validate_key(Some("")).is_err());
        assert!(validate_key(Some("a b")).is_err());
        assert!(validate_key(Some("é")).is_err());
        assert_eq!(validate_key(None).unwrap(), None);
    }

    #[test]
    fn payload_is_cut_on_a_character_boundary() {
        let s = "é".repeat(5000);
        let out = instructions_with_payload("Do it", &Value::String(s));
        let json_part = out.split("Event payload (JSON):\n").nth(1).unwrap();
        let cut = json_part.split("\n[payload cut").next().unwrap();
        assert!(cut.len() <= PAYLOAD_LIMIT && cut.len() >= PAYLOAD_LIMIT - 1);
        assert!(cut.starts_with("\"éé"));
    }

    #[test]
    fn secrets_compare_by_hash() {
        let (s, h) = new_secret();
        assert!(s.starts_with("kb_trg_"));
        let t = Trigger {
            id: Uuid::new_v4(),
            org_id: 1,
            name: "t".into(),
            instructions: "i".into(),
            agent_id: 1,
            project_id: 1,
            cooldown_secs: 0,
            secret_hash: h,
            paused: false,
            deleted: false,
            created_at: Timestamp::UNIX_EPOCH,
            updated_at: Timestamp::UNIX_EPOCH,
            callback_url: None,
        };
        assert!(t.secret_matches(&s));
        assert!(!t.secret_matches("kb_trg_wrong"));
    }
}
