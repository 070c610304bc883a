//! An organisation's agents, projects, triggers, connector grants and personal access tokens,
//! found without reading every organisation's ([`BY_ORG`]): those tables are keyed by the
//! record's own id, so listing one organisation's records (a portal page, the feature agent of
//! `feature_request_create`, a member's grants when they leave) decoded all of them. Each entry
//! is (kind, organisation id, the record's key) with an empty value, written in the transaction
//! that creates the record and removed in the one that deletes it.
//!
//! The table is derived: every start compares its keys with those of the five tables and
//! rebuilds a kind that differs (a store written by a binary from before it, a restored backup,
//! a record written by an older binary since).

use std::collections::BTreeSet;

use redb::TableHandle;
use serde::Deserialize;

use super::{
    AGENTS, BY_ORG, OAUTH_GRANTS, PATS, PROJECTS, Read, Store, StoreError, TRIGGERS, Table, WriteTx,
};

/// What [`BY_ORG`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Agent,
    Project,
    Trigger,
    Grant,
    PersonalToken,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Agent,
        Kind::Project,
        Kind::Trigger,
        Kind::Grant,
        Kind::PersonalToken,
    ];

    fn tag(self) -> u8 {
        match self {
            Kind::Agent => b'a',
            Kind::Project => b'p',
            Kind::Trigger => b't',
            Kind::Grant => b'g',
            Kind::PersonalToken => b'k',
        }
    }

    /// The table of the records themselves.
    pub fn table(self) -> Table {
        match self {
            Kind::Agent => AGENTS,
            Kind::Project => PROJECTS,
            Kind::Trigger => TRIGGERS,
            Kind::Grant => OAUTH_GRANTS,
            Kind::PersonalToken => PATS,
        }
    }
}

/// The key prefix of an organisation's entries of one kind.
pub fn prefix(kind: Kind, org_id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(kind.tag());
    k.extend_from_slice(&org_id.to_be_bytes());
    k
}

/// Records that a new record of `kind` under `key` belongs to `org_id`.
pub fn add(tx: &mut WriteTx, kind: Kind, org_id: u64, key: &[u8]) -> Result<(), StoreError> {
    let mut k = prefix(kind, org_id);
    k.extend_from_slice(key);
    tx.put_raw(BY_ORG, &k, &[])
}

/// Takes a deleted record of `kind` under `key` off its organisation's list.
pub fn remove(tx: &mut WriteTx, kind: Kind, org_id: u64, key: &[u8]) -> Result<(), StoreError> {
    let mut k = prefix(kind, org_id);
    k.extend_from_slice(key);
    tx.delete(BY_ORG, &k).map(|_| ())
}

/// The organisation's records of `kind`, in the order of their keys.
pub fn records<R: serde::de::DeserializeOwned>(
    tx: &impl Read,
    kind: Kind,
    org_id: u64,
) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
    let p = prefix(kind, org_id);
    let mut out = Vec::new();
    for k in tx.scan_keys(BY_ORG, &p, usize::MAX)? {
        let key = k.get(p.len()..).unwrap_or_default();
        if let Some(r) = tx.get::<R>(kind.table(), key)? {
            out.push((key.to_vec(), r));
        }
    }
    Ok(out)
}

/// [`records`] of the organisation `org_id`, or with `None` every record of the kind's table
/// (a person's, across organisations).
pub fn records_in<R: serde::de::DeserializeOwned>(
    tx: &impl Read,
    kind: Kind,
    org_id: Option<u64>,
) -> Result<Vec<(Vec<u8>, R)>, StoreError> {
    match org_id {
        Some(org) => records(tx, kind, org),
        None => tx.scan(kind.table(), b""),
    }
}

#[derive(Deserialize)]
struct OrgOf {
    org_id: u64,
}

/// Makes [`BY_ORG`] agree with the tables it lists, kind by kind. Returns the kinds rebuilt.
pub(super) fn check(store: &Store) -> Result<Vec<Kind>, StoreError> {
    let stale: Vec<Kind> = store.read(|tx| {
        let mut stale = Vec::new();
        for kind in Kind::ALL {
            let listed: BTreeSet<Vec<u8>> = tx
                .scan_keys(BY_ORG, &[kind.tag()], usize::MAX)?
                .into_iter()
                .map(|k| k.get(9..).unwrap_or_default().to_vec())
                .collect();
            let held: BTreeSet<Vec<u8>> = tx
                .scan_keys(kind.table(), b"", usize::MAX)?
                .into_iter()
                .collect();
            if listed != held {
                stale.push(kind);
            }
        }
        Ok::<_, StoreError>(stale)
    })?;
    if stale.is_empty() {
        return Ok(stale);
    }
    store.write(|tx| {
        for kind in &stale {
            for k in tx.scan_keys(BY_ORG, &[kind.tag()], usize::MAX)? {
                tx.delete(BY_ORG, &k)?;
            }
            for k in tx.scan_keys(kind.table(), b"", usize::MAX)? {
                // A record that cannot be read is left off the list rather than keeping the
                // store from opening; reading it anywhere else fails as before.
                match tx.get::<OrgOf>(kind.table(), &k) {
                    Ok(Some(r)) => add(tx, *kind, r.org_id, &k)?,
                    Ok(None) => {}
                    Err(e) => tracing::warn!(
                        table = kind.table().name(),
                        error = %e,
                        "a record without a readable organisation is left off the per-organisation list"
                    ),
                }
            }
        }
        Ok::<_, StoreError>(())
    })?;
    tracing::info!(kinds = ?stale, "rebuilt the per-organisation list of these kinds of record");
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Rec {
        org_id: u64,
        name: String,
    }

    fn rec(org_id: u64, name: &str) -> Rec {
        Rec {
            org_id,
            name: name.into(),
        }
    }

    #[test]
    fn lists_one_organisations_records_and_is_rebuilt_when_out_of_step() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .write(|tx| {
                for (id, org, name) in [(1, 7, "a"), (2, 8, "b"), (3, 7, "c")] {
                    tx.put(AGENTS, &key::id(id), &rec(org, name))?;
                    add(tx, Kind::Agent, org, &key::id(id))?;
                }
                // Written as a binary from before the list would: no entry.
                tx.put(PROJECTS, &key::id(4), &rec(7, "p"))?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
        let names = |kind| {
            store
                .read(|tx| records::<Rec>(tx, kind, 7))
                .unwrap()
                .into_iter()
                .map(|(_, r)| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Kind::Agent), ["a", "c"]);
        assert!(names(Kind::Project).is_empty());
        assert_eq!(check(&store).unwrap(), [Kind::Project]);
        assert_eq!(names(Kind::Project), ["p"]);
        assert_eq!(names(Kind::Agent), ["a", "c"]);
        // In step: nothing to do.
        assert!(check(&store).unwrap().is_empty());
        // A record removed behind the list's back (an older binary's organisation removal).
        store
            .write(|tx| tx.delete(AGENTS, &key::id(3)).map(|_| ()))
            .unwrap();
        assert_eq!(check(&store).unwrap(), [Kind::Agent]);
        assert_eq!(names(Kind::Agent), ["a"]);
        let left: Vec<Vec<u8>> = store
            .read(|tx| tx.scan_keys(BY_ORG, b"", usize::MAX))
            .unwrap();
        assert_eq!(left.len(), 3, "agents 1 and 2, project 4");
        // A damaged record does not keep the store from opening: it is left off.
        store
            .write(|tx| tx.put_raw(TRIGGERS, b"damaged", b"\x01not a frame"))
            .unwrap();
        assert_eq!(check(&store).unwrap(), [Kind::Trigger]);
        assert!(names(Kind::Trigger).is_empty());
        assert_eq!(names(Kind::Agent), ["a"]);
    }
}
