//! `kennis org delete ORG --yes`: an organisation and everything of it, table by table
//! ([`TABLES`]). People stay people; content another organisation also holds stays.
//!
//! 1. One transaction hides it: the organisation record moves to [`ERASING`] (its slug stays
//!    taken, so no new organisation can be mistaken for it until the removal ends), its
//!    memberships go (no one can act in it), its triggers are marked deleted (no delivery
//!    starts a run) and its queued and running jobs leave the queue (their executors are
//!    stopped).
//!    Then the running server's in-flight calls of it end (none starts any more) and the
//!    records they queued for the batch writer are committed ([`crate::audit::gate`]).
//! 2. Records are deleted in batches, children before the parents that lead to them (a run's
//!    attachments and transcript before the run, a grant's tokens before the grant, content
//!    before the versions that name it), so a rerun after a crash still finds every child.
//! 3. The search index drops the organisation's entries; the last transaction ends the
//!    removal and frees the slug.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{BATCH, EraseError, Owner, erasing_key, pending, sweep, sweep_prefix};
use crate::identity::{IdentityError, Membership, Org};
use crate::kb::index::SearchIndex;
use crate::progress::{Progress, Report};
use crate::store::by_org::{self, Kind};
use crate::store::{
    ACTIVE_RUNS, AGENTS, APPS, ATTACHMENT_CONTENT, ATTACHMENTS, AUDIT, BY_ORG, ERASING,
    FEATURE_REQUESTS, INVITATIONS, KB_CHANGES, KB_CONTENT, KB_DOCS, KB_EXTRACTION, KB_TEXT,
    KB_TRASH, KB_VERSIONS, MEMBERSHIPS, MEMBERSHIPS_BY_PERSON, OAUTH_CODES, OAUTH_GRANTS,
    OAUTH_LAST_USED, OAUTH_TOKENS, ORG_SLUGS, ORGS, PROJECTS, REQUESTS, RUN_CALLBACKS,
    RUN_CALLBACKS_DUE, RUN_TRANSCRIPTS, Store, StoreError, TRIGGER_DELIVERIES, TRIGGER_RUNS,
    TRIGGER_SLOTS, TRIGGERS, Table, WriteTx, key,
};
use crate::triggers::Trigger;

/// Every table of the store and what of an organisation it holds, as the removal finds it.
/// A table added to the store must be added here (a unit test checks), so a removal never
/// forgets one.
pub const TABLES: &[(&str, &str)] = &[
    ("meta", "nothing of an organisation"),
    ("sequences", "nothing of an organisation (counters)"),
    ("orgs", "the organisation, by id"),
    ("org_slugs", "its slug"),
    ("people", "nothing: people stay"),
    ("people_by_email", "nothing: people stay"),
    ("memberships", "key starts with the organisation"),
    ("memberships_by_person", "key ends with the organisation"),
    ("invitations", "org_id"),
    ("reset_links", "nothing: a person's"),
    ("audit", "key starts with the organisation"),
    ("kb_docs", "key starts with the organisation"),
    ("kb_versions", "key starts with the organisation"),
    ("kb_trash", "key starts with the organisation"),
    (
        "kb_content",
        "content its versions name that no other organisation's do",
    ),
    ("kb_content_data", "the content kb_content locates, with it"),
    ("kb_text", "as kb_content"),
    ("kb_extraction", "as kb_content"),
    ("kb_changes", "org_id"),
    ("requests", "org_id"),
    ("active_runs", "its requests"),
    ("run_transcripts", "its requests"),
    ("run_callbacks", "its requests (runs)"),
    ("run_callbacks_due", "key starts with the organisation"),
    ("feature_requests", "key starts with the organisation"),
    ("apps", "key starts with the organisation"),
    ("attachments", "its requests"),
    ("attachment_content", "its requests"),
    ("agents", "org_id"),
    ("projects", "org_id"),
    ("triggers", "org_id"),
    ("by_org", "key holds the organisation after the kind"),
    ("trigger_slots", "its triggers"),
    ("trigger_runs", "its triggers"),
    ("trigger_deliveries", "its triggers"),
    ("oauth_clients", "nothing: clients are the server's"),
    ("oauth_codes", "org_id"),
    ("oauth_grants", "org_id"),
    ("oauth_tokens", "its grants"),
    ("oauth_last_used", "its grants"),
    ("personal_tokens", "org_id"),
    ("personal_token_hashes", "its tokens"),
    ("personal_token_last_used", "its tokens"),
    ("sessions", "nothing: a person's"),
    ("erasing", "the removal itself, until it ends"),
];

/// What `org delete` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrgRemoved {
    pub id: u64,
    pub slug: String,
    /// Records deleted from the store (this run; a resumed removal counts what was left).
    pub records: u64,
    /// Contents (documents' bytes) deleted, and kept because another organisation has them.
    pub content_removed: u64,
    pub content_kept: u64,
}

/// The removal's record in [`ERASING`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Removal {
    org: Org,
}

const ORG: u8 = b'o';

/// Removes organisation `slug` and everything of it, or finishes a removal an interruption
/// left (the slug stays taken until the removal ends). `stop` stops the executor of a job of
/// the organisation that was running; `close` (a running server's
/// [`App::close_org`](crate::app::App::close_org)) is called once the organisation is hidden
/// and returns when its in-flight calls have ended and their queued records are committed, so
/// the sweeps that follow find them.
pub fn delete_org(
    store: &Store,
    index: &SearchIndex,
    slug: &str,
    stop: &dyn Fn(u64),
    close: &dyn Fn(u64),
    progress: Report<'_>,
) -> Result<OrgRemoved, EraseError> {
    let id = store
        .read(|tx| tx.get::<u64>(ORG_SLUGS, slug.as_bytes()))?
        .ok_or_else(|| IdentityError::UnknownOrg(slug.to_owned()))?;
    finish(store, index, id, stop, close, progress)
}

/// Hides organisation `id` (or finds its removal begun) and removes everything of it.
pub(super) fn finish(
    store: &Store,
    index: &SearchIndex,
    id: u64,
    stop: &dyn Fn(u64),
    close: &dyn Fn(u64),
    progress: Report<'_>,
) -> Result<OrgRemoved, EraseError> {
    let (org, jobs) = store.write(|tx| hide(tx, id))?;
    jobs.iter().for_each(|j| stop(*j));
    close(id);
    progress(Progress::note(format!(
        "removing organisation {} (id {id})",
        org.slug
    )));
    let mut done = Removed::default();
    let mut step = |stage: &str, n: u64, progress: Report<'_>| {
        done.records += n;
        progress(Progress::step(
            "removing records",
            done.records,
            done.records,
        ));
        tracing::debug!(org = id, stage, n, "removed");
    };

    // Children of the triggers, the requests and the grants, while their parents still lead
    // to them.
    let triggers = ids_where::<Trigger, _>(store, TRIGGERS, id, |_, t| t.id.as_bytes().to_vec())?;
    for t in &triggers {
        for table in [TRIGGER_SLOTS, TRIGGER_RUNS, TRIGGER_DELIVERIES] {
            let n = sweep_prefix(store, table, t)?;
            step(table_name(table), n, progress);
        }
    }
    let requests = ids_where::<Owner, _>(store, REQUESTS, id, |k, _| k.to_vec())?;
    for chunk in requests.chunks(BATCH / 4) {
        let n = store.write(|tx| {
            let mut n = 0u64;
            for r in chunk {
                n += u64::from(tx.delete(ACTIVE_RUNS, r)?);
                n += u64::from(tx.delete(RUN_TRANSCRIPTS, r)?);
                n += u64::from(tx.delete(RUN_CALLBACKS, r)?);
                for table in [ATTACHMENTS, ATTACHMENT_CONTENT] {
                    for k in tx.scan_keys(table, r, usize::MAX)? {
                        n += u64::from(tx.delete(table, &k)?);
                    }
                }
            }
            Ok::<_, StoreError>(n)
        })?;
        step("requests' records", n, progress);
    }
    let grants: HashSet<Vec<u8>> =
        ids_where::<Owner, _>(store, OAUTH_GRANTS, id, |k, _| k.to_vec())?
            .into_iter()
            .collect();
    if !grants.is_empty() {
        #[derive(Deserialize)]
        struct OfGrant {
            grant_id: u64,
        }
        let n = sweep::<OfGrant>(store, OAUTH_TOKENS, |tx, k, t| {
            if grants.contains(key::id(t.grant_id).as_slice()) {
                tx.delete(OAUTH_TOKENS, k)
            } else {
                Ok(false)
            }
        })?;
        step("tokens", n, progress);
        let n = store.write(|tx| {
            let mut n = 0u64;
            for g in &grants {
                n += u64::from(tx.delete(OAUTH_LAST_USED, g)?);
            }
            Ok::<_, StoreError>(n)
        })?;
        step("grant uses", n, progress);
    }
    let n = store.write(|tx| crate::oauth::pats::delete_in(tx, |t| t.org_id == id))?;
    step("personal access tokens", n as u64, progress);
    let (content_removed, content_kept) = remove_content(store, id, progress)?;
    step("content", content_removed, progress);

    // The records themselves.
    let n = sweep::<Owner>(store, KB_CHANGES, |tx, k, c| {
        owned(tx, KB_CHANGES, k, c, id)
    })?;
    step("change log", n, progress);
    for table in [
        KB_VERSIONS,
        KB_TRASH,
        KB_DOCS,
        AUDIT,
        RUN_CALLBACKS_DUE,
        FEATURE_REQUESTS,
        APPS,
        MEMBERSHIPS,
    ] {
        let n = sweep_prefix(store, table, &key::id(id))?;
        step(table_name(table), n, progress);
    }
    let n = sweep::<()>(store, MEMBERSHIPS_BY_PERSON, |tx, k, ()| {
        if key::id_at(k, 8) == Some(id) {
            tx.delete(MEMBERSHIPS_BY_PERSON, k)
        } else {
            Ok(false)
        }
    })?;
    step("memberships", n, progress);
    for table in [
        INVITATIONS,
        AGENTS,
        PROJECTS,
        OAUTH_CODES,
        OAUTH_GRANTS,
        REQUESTS,
        TRIGGERS,
    ] {
        let n = sweep::<Owner>(store, table, |tx, k, r| owned(tx, table, k, r, id))?;
        step(table_name(table), n, progress);
    }
    for kind in Kind::ALL {
        let n = sweep_prefix(store, BY_ORG, &by_org::prefix(kind, id))?;
        step(table_name(BY_ORG), n, progress);
    }

    index.remove_org(id)?;
    store.write(|tx| {
        tx.delete(ERASING, &erasing_key(ORG, id))?;
        if tx.get::<u64>(ORG_SLUGS, org.slug.as_bytes())? == Some(id) {
            tx.delete(ORG_SLUGS, org.slug.as_bytes())?;
        }
        Ok::<_, StoreError>(())
    })?;
    progress(Progress::note(format!(
        "organisation {} removed: {} records, {content_removed} contents ({content_kept} kept: another organisation has them)",
        org.slug, done.records
    )));
    Ok(OrgRemoved {
        id,
        slug: org.slug,
        records: done.records,
        content_removed,
        content_kept,
    })
}

#[derive(Default)]
struct Removed {
    records: u64,
}

fn table_name(table: Table) -> &'static str {
    use redb::TableHandle;
    TABLES
        .iter()
        .find(|(name, _)| *name == table.name())
        .map_or("records", |(name, _)| name)
}

/// Deletes the record when it belongs to organisation `id`.
fn owned(tx: &mut WriteTx, table: Table, k: &[u8], r: Owner, id: u64) -> Result<bool, StoreError> {
    if r.org_id == Some(id) {
        tx.delete(table, k)
    } else {
        Ok(false)
    }
}

/// The first step, in one transaction: the organisation becomes invisible and inert. Returns
/// it and the jobs taken off the queue. A removal already begun is found and goes on.
fn hide(tx: &mut WriteTx, id: u64) -> Result<(Org, Vec<u64>), EraseError> {
    let org = match tx.get::<Org>(ORGS, &key::id(id))? {
        Some(org) => org,
        None => pending::<Removal>(tx, ORG, id)?
            .map(|r| r.org)
            .ok_or_else(|| IdentityError::UnknownOrg(format!("#{id}")))?,
    };
    tx.put(
        ERASING,
        &erasing_key(ORG, id),
        &Removal { org: org.clone() },
    )?;
    tx.delete(ORGS, &key::id(id))?;
    for (k, m) in tx.scan::<Membership>(MEMBERSHIPS, &key::id(id))? {
        tx.delete(MEMBERSHIPS, &k)?;
        tx.delete(MEMBERSHIPS_BY_PERSON, &key::pair(m.person_id, id))?;
    }
    for (k, mut t) in tx.scan::<Trigger>(TRIGGERS, b"")? {
        if t.org_id == id && !t.deleted {
            t.deleted = true;
            tx.put(TRIGGERS, &k, &t)?;
        }
    }
    let mut jobs = Vec::new();
    for k in tx.scan_keys(ACTIVE_RUNS, b"", usize::MAX)? {
        let owner: Option<Owner> = tx.get(REQUESTS, &k)?;
        if owner.is_some_and(|o| o.org_id == Some(id)) {
            tx.delete(ACTIVE_RUNS, &k)?;
            jobs.extend(key::id_at(&k, 0));
        }
    }
    Ok((org, jobs))
}

/// The keys (as `pick` makes them) of the records of `table` that belong to organisation `id`.
fn ids_where<R: serde::de::DeserializeOwned + HasOwner, F: Fn(&[u8], &R) -> Vec<u8>>(
    store: &Store,
    table: Table,
    id: u64,
    pick: F,
) -> Result<Vec<Vec<u8>>, StoreError> {
    store.read(|tx| {
        Ok(tx
            .scan::<R>(table, b"")?
            .into_iter()
            .filter(|(_, r)| r.owner() == Some(id))
            .map(|(k, r)| pick(&k, &r))
            .collect())
    })
}

/// A record that names its organisation.
trait HasOwner {
    fn owner(&self) -> Option<u64>;
}

impl HasOwner for Owner {
    fn owner(&self) -> Option<u64> {
        self.org_id
    }
}

impl HasOwner for Trigger {
    fn owner(&self) -> Option<u64> {
        Some(self.org_id)
    }
}

#[derive(Deserialize)]
struct HashOf {
    hash: String,
}

/// The hashes of a trashed document's versions (`kb::trash::Trashed`, read in part).
#[derive(Deserialize)]
struct TrashedHashes {
    versions: Vec<HashOf>,
}

/// Deletes the content (and its extracted text and extraction record) that the
/// organisation's versions name and no other organisation's do. Content written by another
/// organisation meanwhile is seen through the change log, in the same transaction as each
/// deletion: the changed documents' versions, and the trash of each organisation that changed
/// something (a document written and deleted meanwhile keeps its versions there), so nothing
/// another organisation refers to is ever deleted. Returns (removed, kept).
fn remove_content(store: &Store, id: u64, progress: Report<'_>) -> Result<(u64, u64), StoreError> {
    let prefix = key::id(id);
    let (mine, mut shared, mut seen_change) = store.read(|tx| {
        let mut mine = HashSet::new();
        let mut shared = HashSet::new();
        // The change log's end first: anything written after it is looked at below.
        let seen = crate::kb::last_change(tx)?;
        for (k, v) in tx.scan::<HashOf>(KB_VERSIONS, b"")? {
            if k.starts_with(&prefix) {
                mine.insert(v.hash);
            } else {
                shared.insert(v.hash);
            }
        }
        // Trashed documents keep their versions in `kb_trash`: another organisation's may be
        // restored and needs its content.
        for (k, t) in tx.scan::<TrashedHashes>(KB_TRASH, b"")? {
            let set = if k.starts_with(&prefix) {
                &mut mine
            } else {
                &mut shared
            };
            set.extend(t.versions.into_iter().map(|v| v.hash));
        }
        Ok::<_, StoreError>((mine, shared, seen))
    })?;
    let candidates: Vec<String> = mine.into_iter().collect();
    progress(Progress::note(format!(
        "{} contents to remove unless another organisation has them",
        candidates.len()
    )));
    let (mut removed, mut kept) = (0u64, 0u64);
    for chunk in candidates.chunks(BATCH / 4) {
        let (r, k, seen) = store.write(|tx| {
            // Versions other organisations wrote since the scan.
            let mut seen = seen_change;
            loop {
                let rows = tx.range::<crate::kb::Change>(KB_CHANGES, &key::id(seen + 1), BATCH)?;
                let Some(last) = rows.last().and_then(|(k, _)| key::id_at(k, 0)) else {
                    break;
                };
                let mut changed_orgs = HashSet::new();
                for (_, c) in &rows {
                    if c.org_id != id {
                        for v in crate::kb::versions(tx, c.org_id, &c.path)? {
                            shared.insert(v.hash);
                        }
                        changed_orgs.insert(c.org_id);
                    }
                }
                for org in changed_orgs {
                    for (_, t) in tx.scan::<TrashedHashes>(KB_TRASH, &key::id(org))? {
                        shared.extend(t.versions.into_iter().map(|v| v.hash));
                    }
                }
                seen = last;
            }
            let (mut r, mut k) = (0u64, 0u64);
            for hash in chunk {
                if shared.contains(hash) {
                    k += 1;
                    continue;
                }
                let Ok(h) = blake3::Hash::from_hex(hash) else {
                    continue;
                };
                if tx.delete_blob(KB_CONTENT, h.as_bytes())? {
                    r += 1;
                }
                tx.delete_blob(KB_TEXT, h.as_bytes())?;
                tx.delete(KB_EXTRACTION, h.as_bytes())?;
            }
            Ok::<_, StoreError>((r, k, seen))
        })?;
        removed += r;
        kept += k;
        seen_change = seen;
    }
    Ok((removed, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableHandle;

    #[test]
    fn every_table_of_the_store_is_named() {
        for t in crate::store::ALL_TABLES {
            assert!(
                TABLES.iter().any(|(name, _)| *name == t.name()),
                "table `{}` is not in erase::TABLES: say how an organisation's records are found in it",
                t.name()
            );
        }
        assert_eq!(TABLES.len(), crate::store::ALL_TABLES.len());
    }
}
