//! One delivery to a trigger URL, in DESIGN.md's order of checks: unknown trigger 404; missing
//! or wrong secret (or signature) 401; bad event key or delivery id 400; body too large 413 or
//! not JSON 400; then paused, in flight, cooldown (200 skipped), duplicate delivery (200), or a
//! new run (202). The handler only takes the parts from the request and serialises the answer.

use std::future::Future;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;

use super::{
    Fired, Signature, Skip, TriggerError, authenticate, fire_in, instructions_with_payload, lookup,
    precheck, validate_delivery_id, validate_key, verify,
};
use crate::app::App;
use crate::audit::{self, Actor};

/// The event key as the delivery carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawKey {
    /// No key: the delivery uses the trigger's shared slot.
    Absent,
    Given(String),
    /// A header value that is not plain ASCII text.
    NotText,
}

/// A delivery as taken from the request, before any check.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The trigger id from the URL, unparsed.
    pub uuid: String,
    /// The secret (`Authorization: Bearer` or `?token=`), if any.
    pub secret: Option<String>,
    /// Signature headers; they authenticate the delivery only when no secret was sent.
    pub signature: Option<Signature>,
    pub key: RawKey,
    /// The sender's delivery id (`webhook-id`, `X-GitHub-Delivery`), unchecked.
    pub delivery_id: Option<String>,
    pub now: Timestamp,
}

/// What an accepted delivery did; refusals are [`TriggerError`]s.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivered {
    /// A run was created, stored durably and queued for the workers (202).
    Created(u64),
    /// The delivery id was seen before: the run it created (200).
    Duplicate(u64),
    /// No run (200): the reason, and the delivery's event key.
    Skipped { skip: Skip, key: Option<String> },
}

/// An empty body is taken as `null`: some senders ping without a payload.
fn parse_payload(bytes: &[u8]) -> Result<Value, TriggerError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| TriggerError::BadBody(e.to_string()))
}

/// Runs one delivery. `body` reads the request body with the size limit (answering
/// [`TriggerError::BodyTooLarge`] beyond it); it is awaited only once the delivery got that far,
/// so a refused delivery's body is not read: with a secret after the key check, with a
/// signature (which covers the body) before the signature check.
///
/// The trigger, the secret check and a read-only view of the delivery's fate come from one
/// snapshot; a delivery that may create a run then decides again, authoritatively, in one
/// write transaction through the group commit, durable before this returns. A created run is
/// queued for the workers with [`App::enqueue`].
pub async fn deliver<B, T>(app: &Arc<App>, d: Delivery, body: B) -> Result<Delivered, TriggerError>
where
    B: Future<Output = Result<T, TriggerError>>,
    T: AsRef<[u8]>,
{
    let Delivery {
        uuid,
        secret,
        signature,
        key,
        delivery_id,
        now,
    } = d;
    // Without a secret, a signature may authenticate the delivery instead.
    let signed = if secret.is_none() { signature } else { None };
    let has_sig = signed.is_some();
    // A signed delivery is known by what its signature covers (`Signature::delivery_id`), never
    // by an unsigned header: a captured delivery replayed under another event key or delivery
    // id is a duplicate, not another run.
    let delivery_id = match &signed {
        Some(sig) => Some(sig.delivery_id()),
        None => delivery_id,
    };
    // One short read transaction, run on the async worker: handing it to a blocking thread
    // and back cost more than the read (a quarter of a skipped delivery's time went to thread
    // switches; docs/performance.md, stop 33).
    let (trigger, checks, pre) = app.store.read(|tx| {
        let trigger = if has_sig {
            lookup(tx, &uuid)?
        } else {
            authenticate(tx, &uuid, secret.as_deref())?
        };
        let checks = match key {
            RawKey::Absent => Ok(None),
            RawKey::Given(k) => Ok(Some(k)),
            RawKey::NotText => Err(TriggerError::InvalidKey("it must be plain ASCII".into())),
        }
        .and_then(|k| validate_key(k.as_deref()))
        .and_then(|k| validate_delivery_id(delivery_id.as_deref()).map(|d| (k, d)));
        let pre = match &checks {
            Ok((k, d)) => precheck(tx, &trigger, k.as_deref(), d.as_deref(), now)?,
            Err(_) => None,
        };
        Ok::<_, TriggerError>((trigger, checks, pre))
    })?;
    // A signature covers the body, so the body is read before the signature check; otherwise
    // the key is checked first (401, 400 key, then the body).
    let (bytes, key, delivery) = match &signed {
        Some(sig) => {
            let bytes = body.await?;
            verify(&app.server_key, &trigger, sig, bytes.as_ref(), now)?;
            let (key, delivery) = checks?;
            (bytes, key, delivery)
        }
        None => {
            let (key, delivery) = checks?;
            (body.await?, key, delivery)
        }
    };
    let payload = parse_payload(bytes.as_ref())?;
    let fired = match pre {
        Some(fired) => fired,
        None => {
            let instructions = instructions_with_payload(&trigger.instructions, &payload);
            let (id, key) = (trigger.id, key.clone());
            app.commits
                .write(move |tx| fire_in(tx, id, key, delivery, instructions, now))
                .await?
        }
    };
    match fired {
        Fired::Created(run_id) => {
            app.metrics.run_created();
            app.enqueue(run_id);
            Ok(Delivered::Created(run_id))
        }
        Fired::Duplicate(run_id) => Ok(Delivered::Duplicate(run_id)),
        Fired::Skipped(skip) => Ok(Delivered::Skipped { skip, key }),
        Fired::Gone => Err(TriggerError::UnknownTrigger),
    }
}

/// "Run again" (portal): a new run of the trigger that started run `run_id` of the organisation
/// `org_id`, with the same instructions (the trigger's text with that run's payload) and event
/// key. The trigger's rules apply as to a delivery: a deleted trigger is
/// [`TriggerError::UnknownTrigger`]; paused, a run in flight in the slot, or the cooldown is
/// [`TriggerError::NotStarted`]. The new run is durable and queued before this returns.
pub async fn run_again(
    app: &Arc<App>,
    by: Actor,
    org_id: u64,
    run_id: u64,
    now: Timestamp,
) -> Result<u64, TriggerError> {
    let fired = app
        .commits
        .write(move |tx| {
            let Some((trigger, run)) = crate::requests::get(tx, run_id)?
                .filter(|r| r.org_id == org_id && r.kind == crate::requests::Kind::Run)
                .and_then(|r| Some((r.trigger_id?, r)))
            else {
                return Ok(None);
            };
            let fired = fire_in(tx, trigger, run.event_key, None, run.instructions, now)?;
            if let Fired::Created(new) = &fired {
                let target = format!("run {run_id} again as run {new}");
                audit::admin_in(tx, org_id, &by, "run.again", &target, now)?;
            }
            Ok(Some(fired))
        })
        .await?
        .ok_or(TriggerError::RunNotFound)?;
    match fired {
        Fired::Created(id) => {
            app.metrics.run_created();
            app.enqueue(id);
            Ok(id)
        }
        Fired::Skipped(skip) => Err(TriggerError::NotStarted(skip)),
        Fired::Duplicate(_) | Fired::Gone => Err(TriggerError::UnknownTrigger),
    }
}
