//! The apps of an organisation that feature requests are filed for. Only `live` apps accept new
//! requests. Apps are keyed by (organisation, app id), so a lookup can never reach another
//! organisation's app even with a guessed id.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::RequestError;
use crate::audit::{self, Actor};
use crate::identity;
use crate::store::{APPS, Read, ReadTx, Store, StoreError, key};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum AppStatus {
    /// In use: accepts new requests.
    Live,
    /// Not yet released: requests wait until it is live.
    Draft,
    /// Retired: keeps its requests, takes no new ones.
    Archived,
}

impl AppStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AppStatus::Live => "live",
            AppStatus::Draft => "draft",
            AppStatus::Archived => "archived",
        }
    }

    pub fn parse(s: &str) -> Option<AppStatus> {
        match s {
            "live" => Some(AppStatus::Live),
            "draft" => Some(AppStatus::Draft),
            "archived" => Some(AppStatus::Archived),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct App {
    pub app_id: u64,
    pub org_id: u64,
    pub name: String,
    pub status: AppStatus,
    pub created_at: Timestamp,
}

impl App {
    pub fn accepts_requests(&self) -> bool {
        self.status == AppStatus::Live
    }
}

/// Longest app name, in characters.
pub const NAME_MAX: usize = 100;

fn check_name(name: &str) -> Result<String, RequestError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX || name.chars().any(char::is_control) {
        return Err(RequestError::InvalidInput(format!(
            "app name must be 1 to {NAME_MAX} characters without control characters"
        )));
    }
    Ok(name.to_owned())
}

/// Adds an app to the organisation with id `org_id` (the operator's).
pub fn add(
    store: &Store,
    org_id: u64,
    name: &str,
    status: AppStatus,
    now: Timestamp,
) -> Result<App, RequestError> {
    add_by(store, &Actor::Operator, org_id, name, status, now)
}

/// Adds an app to the organisation with id `org_id`. Audited (`app.add`).
pub fn add_by(
    store: &Store,
    by: &Actor,
    org_id: u64,
    name: &str,
    status: AppStatus,
    now: Timestamp,
) -> Result<App, RequestError> {
    let name = check_name(name)?;
    store.write(|tx| {
        let taken = list_in(tx.scan::<App>(APPS, &key::id(org_id))?)
            .iter()
            .any(|a| a.name.to_lowercase() == name.to_lowercase());
        if taken {
            return Err(RequestError::InvalidInput(format!(
                "the organisation already has an app named `{name}`"
            )));
        }
        let app = App {
            app_id: tx.next_id("app")?,
            org_id,
            name,
            status,
            created_at: now,
        };
        tx.put(APPS, &key::pair(org_id, app.app_id), &app)?;
        let target = format!(
            "app {} {} status={}",
            app.app_id,
            app.name,
            app.status.as_str()
        );
        audit::admin_in(tx, org_id, by, "app.add", &target, now)?;
        Ok(app)
    })
}

/// Adds an app to the organisation with slug `org` (the command line).
pub fn add_by_slug(
    store: &Store,
    org: &str,
    name: &str,
    status: AppStatus,
    now: Timestamp,
) -> Result<App, RequestError> {
    let org_id = store
        .read(|tx| identity::org_by_slug(tx, org))?
        .ok_or_else(|| RequestError::UnknownOrg(org.to_owned()))?
        .id;
    add(store, org_id, name, status, now)
}

fn list_in(rows: Vec<(Vec<u8>, App)>) -> Vec<App> {
    rows.into_iter().map(|r| r.1).collect()
}

/// The organisation's apps, oldest first.
pub fn list(tx: &ReadTx, org_id: u64) -> Result<Vec<App>, StoreError> {
    Ok(list_in(tx.scan(APPS, &key::id(org_id))?))
}

/// One app of the organisation; `None` for an unknown id or another organisation's app.
pub fn get(tx: &impl Read, org_id: u64, app_id: u64) -> Result<Option<App>, StoreError> {
    tx.get(APPS, &key::pair(org_id, app_id))
}

/// Changes an app's status (the portal's app page); another organisation's app is
/// [`RequestError::NotFound`]. Audited (`app.status`).
pub fn set_status(
    store: &Store,
    by: &Actor,
    org_id: u64,
    app_id: u64,
    status: AppStatus,
    now: Timestamp,
) -> Result<App, RequestError> {
    store.write(|tx| {
        let mut app = get(tx, org_id, app_id)?
            .ok_or_else(|| RequestError::NotFound(format!("no app {app_id}")))?;
        app.status = status;
        tx.put(APPS, &key::pair(org_id, app_id), &app)?;
        let target = format!(
            "app {} {} status={}",
            app.app_id,
            app.name,
            app.status.as_str()
        );
        audit::admin_in(tx, org_id, by, "app.status", &target, now)?;
        Ok(app)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_are_bound_to_their_organisation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now = Timestamp::UNIX_EPOCH;
        let a = add(&store, 1, "Planner", AppStatus::Live, now).unwrap();
        let b = add(&store, 2, "Planner", AppStatus::Draft, now).unwrap();
        assert_ne!(a.app_id, b.app_id);
        assert!(matches!(
            add(&store, 1, " planner ", AppStatus::Live, now),
            Err(RequestError::InvalidInput(_))
        ));
        assert!(matches!(
            add(&store, 1, "", AppStatus::Live, now),
            Err(RequestError::InvalidInput(_))
        ));
        store
            .read(|tx| {
                assert_eq!(list(tx, 1)?, vec![a.clone()]);
                assert_eq!(get(tx, 1, b.app_id)?, None, "another organisation's app");
                assert!(get(tx, 2, b.app_id)?.is_some());
                Ok::<_, StoreError>(())
            })
            .unwrap();
        assert!(matches!(
            set_status(&store, &Actor::Operator, 1, b.app_id, AppStatus::Live, now),
            Err(RequestError::NotFound(_))
        ));
        let archived = set_status(
            &store,
            &Actor::Operator,
            1,
            a.app_id,
            AppStatus::Archived,
            now,
        )
        .unwrap();
        assert!(!archived.accepts_requests());
    }
}
