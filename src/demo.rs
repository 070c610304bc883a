//! `kennis serve --demo`: a demo organisation and person, so a newcomer can connect an
//! assistant within a minute. Created once; later starts reuse them.

use serde_json::json;

use crate::app::App;
use crate::identity::{self, NewPerson, Role};
use crate::kb::{self, index::SearchIndex};
use crate::requests::RequestError;
use crate::requests::apps::{self, AppStatus};
use crate::store::{META, Store};
use crate::{roster, triggers};

pub const DEMO_ORG: &str = "Demo Organisatie";
pub const DEMO_SLUG: &str = "demo-organisatie";
pub const DEMO_EMAIL: &str = "demo@kennis.example";
const DEMO_MARKER: &[u8] = b"demo_created";

/// The demo knowledge base (`data/demo/`), written for this project and compiled in, so
/// `serve --demo` works from any directory.
pub const DEMO_DOCS: &[(&str, &str)] = &[
    ("README.md", include_str!("../data/demo/README.md")),
    (
        "aangeleverd/werkafspraken-keet.md",
        include_str!("../data/demo/aangeleverd/werkafspraken-keet.md"),
    ),
    (
        "beleid/inkoop-en-bestellen.md",
        include_str!("../data/demo/beleid/inkoop-en-bestellen.md"),
    ),
    (
        "beleid/leveranciers.txt",
        include_str!("../data/demo/beleid/leveranciers.txt"),
    ),
    (
        "beleid/veiligheid-op-de-bouwplaats.md",
        include_str!("../data/demo/beleid/veiligheid-op-de-bouwplaats.md"),
    ),
    (
        "beleid/verlof-aanvragen.md",
        include_str!("../data/demo/beleid/verlof-aanvragen.md"),
    ),
    (
        "handleidingen/gereedschap-uitlenen.md",
        include_str!("../data/demo/handleidingen/gereedschap-uitlenen.md"),
    ),
    (
        "handleidingen/kozijnen/houten-kozijnen-onderhouden.md",
        include_str!("../data/demo/handleidingen/kozijnen/houten-kozijnen-onderhouden.md"),
    ),
    (
        "handleidingen/kozijnen/kunststof-kozijn-plaatsen.md",
        include_str!("../data/demo/handleidingen/kozijnen/kunststof-kozijn-plaatsen.md"),
    ),
    (
        "handleidingen/steigerbouw.md",
        include_str!("../data/demo/handleidingen/steigerbouw.md"),
    ),
    (
        "projecten/badkamer-jansen.md",
        include_str!("../data/demo/projecten/badkamer-jansen.md"),
    ),
    (
        "projecten/cafe-de-hoek/overzicht.md",
        include_str!("../data/demo/projecten/cafe-de-hoek/overzicht.md"),
    ),
    (
        "projecten/cafe-de-hoek/verslag-bouwoverleg.md",
        include_str!("../data/demo/projecten/cafe-de-hoek/verslag-bouwoverleg.md"),
    ),
];

/// What `--demo` did.
pub enum DemoSetup {
    /// First start: the credentials, shown once.
    Created {
        email: String,
        password: String,
        otpauth_uri: String,
        totp_secret: String,
        /// The demo trigger and its secret.
        trigger_id: uuid::Uuid,
        trigger_secret: String,
    },
    /// The demo data already existed.
    Existing { email: String },
}

/// Creates the demo organisation, person and knowledge base (searchable at once) if this data
/// directory has none yet.
pub fn ensure(app: &App) -> Result<DemoSetup, identity::IdentityError> {
    let setup = create(&app.store, &app.kb_index, app.clock.now())?;
    demo_feature_requests(&app.store, app.clock.now())?;
    Ok(setup)
}

fn create(
    store: &Store,
    index: &SearchIndex,
    now: jiff::Timestamp,
) -> Result<DemoSetup, identity::IdentityError> {
    if store.read(|tx| tx.get::<bool>(META, DEMO_MARKER))? == Some(true) {
        return Ok(DemoSetup::Existing {
            email: DEMO_EMAIL.into(),
        });
    }
    let org = match identity::create_org(store, DEMO_ORG, now) {
        Ok(org) => org,
        Err(identity::IdentityError::DuplicateOrg(_)) => identity::find_org(store, DEMO_SLUG)?,
        Err(e) => return Err(e),
    };
    let password = random_password();
    let person = match identity::add_person(
        store,
        NewPerson {
            email: DEMO_EMAIL,
            name: Some("Demo Gebruiker"),
            password: &password,
        },
        now,
    ) {
        Ok(p) => p,
        Err(identity::IdentityError::DuplicateEmail(_)) => crate::oauth::set_password(
            store,
            &crate::audit::Actor::Operator,
            DEMO_EMAIL,
            &password,
            now,
        )?,
        Err(e) => return Err(e),
    };
    let enrolment = identity::reset_totp(store, DEMO_EMAIL)?;
    identity::confirm_totp_unchecked(store, person.id)?;
    identity::add_member(store, &org.slug, DEMO_EMAIL, Role::Admin, true, now)?;
    let mut writer = kb::Writer::new(store, index);
    for (path, text) in DEMO_DOCS {
        let version = kb::NewVersion {
            org_id: org.id,
            path,
            bytes: text.as_bytes(),
            expect: kb::Expect::Any,
            by: None,
            now,
        };
        writer.put(version).map_err(|e| {
            identity::IdentityError::InvalidInput(format!("demo document {path}: {e}"))
        })?;
    }
    writer.finish().map_err(|e| {
        identity::IdentityError::InvalidInput(format!("indexing the demo documents: {e}"))
    })?;
    let (trigger_id, trigger_secret) = demo_trigger(store, &org.slug, now)?;
    store.write(|tx| tx.put(META, DEMO_MARKER, &true))?;
    Ok(DemoSetup::Created {
        email: DEMO_EMAIL.into(),
        password,
        otpauth_uri: enrolment.otpauth_uri,
        totp_secret: enrolment.secret,
        trigger_id,
        trigger_secret,
    })
}

/// An `echo` generic agent, a ready project and one trigger with a short cooldown, so the hook
/// endpoints can be tried at once.
fn demo_trigger(
    store: &Store,
    org: &str,
    now: jiff::Timestamp,
) -> Result<(uuid::Uuid, String), identity::IdentityError> {
    let refused = |e: String| identity::IdentityError::InvalidInput(e);
    let agent = echo_agent(store, org, "Echo", roster::AgentKind::Generic, now)?;
    let project = roster::add_project(store, org, "Demo project", roster::Rollout::Ready, now)
        .map_err(|e| refused(e.to_string()))?;
    let created = triggers::add(
        store,
        org,
        &triggers::NewTrigger {
            name: "Demo trigger".into(),
            agent_id: agent.id,
            project_id: project.id,
            instructions: "Vat de melding samen en zeg wat er moet gebeuren.".into(),
            cooldown_secs: Some(10),
            callback_url: None,
        },
        now,
    )
    .map_err(|e| refused(e.to_string()))?;
    Ok((created.trigger.id, created.secret))
}

/// Marks that the demo apps and feature agent exist (kept apart from [`DEMO_MARKER`] so data
/// directories made before feature requests existed get them too).
const DEMO_APPS_MARKER: &[u8] = b"demo_apps_created";
pub const DEMO_LIVE_APP: &str = "Planning";
pub const DEMO_DRAFT_APP: &str = "Urenregistratie";

/// A live app, a draft app and the built-in echo agent as the organisation's feature agent,
/// so an assistant can file and follow a request at once (and see a draft app refuse one).
fn demo_feature_requests(
    store: &Store,
    now: jiff::Timestamp,
) -> Result<(), identity::IdentityError> {
    if store.read(|tx| tx.get::<bool>(META, DEMO_APPS_MARKER))? == Some(true) {
        return Ok(());
    }
    let refused = |e: String| identity::IdentityError::InvalidInput(e);
    let org = identity::find_org(store, DEMO_SLUG)?;
    for (name, status) in [
        (DEMO_LIVE_APP, AppStatus::Live),
        (DEMO_DRAFT_APP, AppStatus::Draft),
    ] {
        match apps::add(store, org.id, name, status, now) {
            Ok(_) | Err(RequestError::InvalidInput(_)) => {}
            Err(e) => return Err(refused(e.to_string())),
        }
    }
    echo_agent(
        store,
        &org.slug,
        "Echo (feature requests)",
        roster::AgentKind::Feature,
        now,
    )?;
    store.write(|tx| tx.put(META, DEMO_APPS_MARKER, &true))?;
    Ok(())
}

/// Adds a built-in echo agent of `kind` to the organisation with slug `org`.
fn echo_agent(
    store: &Store,
    org: &str,
    name: &str,
    kind: roster::AgentKind,
    now: jiff::Timestamp,
) -> Result<roster::Agent, identity::IdentityError> {
    roster::add_agent(
        store,
        org,
        &roster::NewAgent {
            name: name.into(),
            kind,
            exec: "echo".into(),
            program: None,
            args: vec![],
            url: None,
            timeout_secs: None,
        },
        now,
    )
    .map_err(|e| identity::IdentityError::InvalidInput(e.to_string()))
}

fn random_password() -> String {
    use base64::Engine;
    let bytes: [u8; 15] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The text printed at start-up.
pub fn describe(setup: &DemoSetup, connector_url: &str, public_url: &str) -> String {
    match setup {
        DemoSetup::Created {
            email,
            password,
            otpauth_uri,
            totp_secret,
            trigger_id,
            trigger_secret,
        } => {
            let url = triggers::trigger_url(public_url, *trigger_id);
            format!(
                "Demo data created. These credentials are shown only now:\n  \
                 portal:     {public_url}/login\n  \
                 email:      {email}\n  \
                 password:   {password}\n  \
                 second factor (add to an authenticator app):\n    {otpauth_uri}\n    secret: {totp_secret}\n\
                 Connector URL to paste into your assistant: {connector_url}\n\
                 Feature requests: app \"{DEMO_LIVE_APP}\" is live, \"{DEMO_DRAFT_APP}\" is a draft; the echo agent answers every request.\n\
                 Demo event trigger (echo agent; secret shown only now):\n  \
                 fire it:   curl -i -X POST -H 'Authorization: Bearer {trigger_secret}' -H 'Content-Type: application/json' -d '{{\"melding\": \"test\"}}' {url}\n  \
                 read a run (use featureRequestId from the answer):\n             \
                 curl -H 'Authorization: Bearer {trigger_secret}' {public_url}/api/hooks/runs/<featureRequestId>\n"
            )
        }
        DemoSetup::Existing { email } => format!(
            "Demo data already present (login {email}).\n  \
             Forgot the password?  kennis user passwd {email}\n  \
             New second factor:    kennis user totp {email}\n  \
             (or stop the server and remove the data directory to start over)\n\
             Connector URL to paste into your assistant: {connector_url}\n"
        ),
    }
}

/// The demo setup as JSON, for `--json` consumers and tests.
pub fn to_json(setup: &DemoSetup) -> serde_json::Value {
    match setup {
        DemoSetup::Created {
            email,
            password,
            otpauth_uri,
            totp_secret,
            trigger_id,
            trigger_secret,
        } => json!({"created": true, "email": email, "password": password,
                    "otpauth_uri": otpauth_uri, "totp_secret": totp_secret,
                    "trigger_id": trigger_id, "trigger_secret": trigger_secret}),
        DemoSetup::Existing { email } => json!({"created": false, "email": email}),
    }
}
