//! Feature-request operations shared by the connector and the portal: they store the change
//! and wake the agent workers when the organisation's feature agent has new work. Blocking
//! (redb); call them from `App::blocking`.

use super::feature::{self, Accepted, NewAnswer, NewRequest};
use super::{Request, RequestError};
use crate::app::App;
use crate::roster::{self, AgentKind};
use crate::store::by_org::{self, Kind};
use crate::store::{ReadTx, Store, StoreError};

/// The organisation's feature agent: its first (oldest) agent of kind `feature`.
pub fn feature_agent(tx: &ReadTx, org_id: u64) -> Result<Option<roster::Agent>, StoreError> {
    Ok(by_org::records::<roster::Agent>(tx, Kind::Agent, org_id)?
        .into_iter()
        .map(|r| r.1)
        .find(|a| a.kind == AgentKind::Feature))
}

/// How a person is named in a conversation: their name, or their email without one.
pub fn person_label(tx: &ReadTx, person_id: u64) -> Result<String, StoreError> {
    let person: Option<crate::identity::Person> =
        tx.get(crate::store::PEOPLE, &crate::store::key::id(person_id))?;
    Ok(match person {
        Some(p) if !p.name.trim().is_empty() => p.name,
        Some(p) => p.email,
        // Erased (`kennis user delete`): the pseudonym the audit uses too.
        None => crate::identity::pseudonym(person_id),
    })
}

/// Files a request as `person_id`; the feature agent is dispatched on it.
pub fn create(
    app: &App,
    org_id: u64,
    person_id: u64,
    new: &NewRequest,
) -> Result<Request, RequestError> {
    let agent_id = app
        .store
        .read(|tx| feature_agent(tx, org_id))?
        .map_or(0, |a| a.id);
    let now = app.clock.now();
    let (request, wake) = app
        .store
        .write(|tx| feature::create_in(tx, org_id, person_id, new, agent_id, now))?;
    if wake {
        app.enqueue(request.id);
    }
    Ok(request)
}

/// Adds `person_id`'s message and/or answers; the agent is dispatched again.
pub fn reply(
    app: &App,
    org_id: u64,
    person_id: u64,
    id: u64,
    message: Option<&str>,
    answers: &[NewAnswer],
) -> Result<(Request, Accepted), RequestError> {
    let (author, agent) = app.store.read(|tx| {
        Ok::<_, StoreError>((person_label(tx, person_id)?, feature_agent(tx, org_id)?))
    })?;
    let agent_id = agent.map_or(0, |a| a.id);
    let now = app.clock.now();
    let (request, accepted, wake) = app
        .store
        .write(|tx| feature::reply_in(tx, org_id, &author, id, message, answers, agent_id, now))?;
    if wake {
        app.enqueue(request.id);
    }
    Ok((request, accepted))
}

/// Hands the organisation's requests that wait for a feature agent to the one it has now
/// (called when a feature agent is added). Works on the store alone, so the command line can
/// call it with no server running: the queued jobs are then picked up at the next start.
/// Returns the ids whose jobs were queued; a running server must wake its workers for them.
pub fn adopt_waiting(store: &Store, org_id: u64) -> Result<Vec<u64>, RequestError> {
    let Some(agent) = store.read(|tx| feature_agent(tx, org_id))? else {
        return Ok(Vec::new());
    };
    store.write(|tx| feature::adopt_waiting(tx, org_id, agent.id))
}
