//! The `kennis` binary: parses the command line and dispatches to the library. Every command
//! but `serve` is a row of [`operation`]: what it asks (an admin operation, or a restore) and
//! how its answer is shown; [`run`] does the rest the same way for all.

// The library's rule (src/lib.rs) holds in this crate too; it has no tests to exempt.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]
#![deny(clippy::indexing_slicing, clippy::todo, clippy::unimplemented)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kennis::admin::AdminRequest;
use kennis::cli::{
    self, AgentCommand, AppCommand, AuditCommand, Cli, CliError, Command, GlobalArgs, KbCommand,
    MemberCommand, OrgCommand, Print, ProjectCommand, RunCommand, ServeArgs, Shown, TokenCommand,
    TriggerCommand, UserCommand,
};
use kennis::config::Settings;
use kennis::triggers::{Change, NewTrigger};
use serde_json::Value;

/// mimalloc rather than the system's malloc: measured faster for kennis's many small, short-lived
/// allocations (docs/performance.md). The extraction worker's memory limit is in force before
/// its image starts (`kb::extract`), so it binds this allocator's arenas too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_eager_commit`, which `libmimalloc-sys` does not name: two before
/// `allow_large_os_pages` in mimalloc 2's `mi_option_e` (`arena_eager_commit`,
/// `purge_decommits`, `allow_large_os_pages`). By default (2) an arena is committed whole when
/// reserved on Linux, and memory freed in it stays in the process's resident set: an idle
/// server held about 100 MB instead of the system malloc's 34 MB. At 0 arenas are committed as
/// used (59 MB idle; under load as fast, with less memory: docs/performance.md).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t =
    libmimalloc_sys::mi_option_large_os_pages - 2;

/// Commit mimalloc's arenas as used (see [`MI_OPTION_ARENA_EAGER_COMMIT`]). An environment
/// variable `MIMALLOC_ARENA_EAGER_COMMIT` still decides when it is set.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none() {
        // SAFETY: `mi_option_set` stores one integer in mimalloc's option table; the option
        // is read only when a new arena is reserved, and any value is valid.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
    }
}

/// [`tune_allocator`] before anything allocates: mimalloc reserves its first arena at the first
/// allocation, which Rust's runtime makes before `main`. A function in `.init_array` runs as the
/// program is loaded, before the runtime starts.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static TUNE_ALLOCATOR_AT_LOAD: extern "C" fn() = {
    extern "C" fn at_load() {
        tune_allocator();
    }
    at_load
};

fn main() -> ExitCode {
    #[cfg(not(target_os = "linux"))]
    tune_allocator();
    // Everything kennis creates (database, index, keys, backups, uploads) is for its own user.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    if let Command::ExtractWorker(args) = &cli.command {
        // Before any configuration is read: the child has an empty environment.
        return kennis::kb::extract::worker_main(args.limited.as_deref());
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(),
    }
}

/// What a command asks for.
enum Request {
    /// An admin operation: through a running server's admin socket, or on the store.
    Admin(AdminRequest),
    /// `kennis restore`: offline only.
    Restore(PathBuf),
}

/// One command: what it asks and how its answer is shown.
struct Operation {
    request: Request,
    shown: Shown,
}

fn run(cli: Cli) -> Result<(), CliError> {
    let Cli { global, command } = cli;
    if let Command::Serve(args) = command {
        return serve(&global, args);
    }
    let config = cli::load_config(&global, Settings::default())?;
    kennis::logging::init(config.log_format, "warn");
    let Operation { request, shown } = operation(command)?;
    let answer = match request {
        Request::Admin(req) => cli::run_admin(&config, req)?,
        Request::Restore(path) => cli::restore(&config, &path)?,
    };
    shown.print(&answer);
    Ok(())
}

fn serve(global: &GlobalArgs, args: ServeArgs) -> Result<(), CliError> {
    let acme = kennis::config::AcmeSettings {
        domains: (!args.acme_domains.is_empty()).then_some(args.acme_domains),
        email: args.acme_email,
        directory: args.acme_directory,
        ca_root: None,
    };
    let flags = Settings {
        listen: args.listen,
        public_url: args.public_url,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        acme: Some(acme)
            .filter(|a| a.domains.is_some() || a.email.is_some() || a.directory.is_some()),
        ..Settings::default()
    };
    cli::serve(cli::load_config(global, flags)?, args.demo)
}

/// An admin operation whose answer reads for people as `print`.
fn admin(request: AdminRequest, json: bool, print: Print) -> Result<Operation, CliError> {
    Ok(Operation {
        request: Request::Admin(request),
        shown: Shown {
            json,
            print,
            only: None,
        },
    })
}

/// The same, where `--json` prints only the `only` fields of the answer.
fn admin_only(
    request: AdminRequest,
    json: bool,
    only: &'static [&'static str],
    print: Print,
) -> Result<Operation, CliError> {
    let mut op = admin(request, json, print)?;
    op.shown.only = Some(only);
    Ok(op)
}

/// `--yes` or a usage error that says what the command would do.
fn confirmed(yes: bool, what: String) -> Result<(), CliError> {
    if yes {
        Ok(())
    } else {
        Err(CliError::Usage(format!("{what}; add --yes to confirm")))
    }
}

/// The table: each command, what it asks and how its answer is shown.
fn operation(command: Command) -> Result<Operation, CliError> {
    use AdminRequest as A;
    use Print::{List, Say, Text};
    match command {
        Command::Serve(_) | Command::ExtractWorker(_) => Err(CliError::Usage(
            "`serve` and `extract-worker` are not admin operations".into(),
        )),
        Command::Org(c) => match c {
            OrgCommand::Create { name, json } => admin(
                A::OrgCreate { name },
                json,
                Say("created organisation {slug} (id {id})"),
            ),
            OrgCommand::List(a) => admin(
                A::OrgList,
                a.json,
                List(&[
                    "id",
                    "slug",
                    "name",
                    "connector_access",
                    "require_second_factor",
                ]),
            ),
            OrgCommand::Delete { org, yes, json } => {
                confirmed(
                    yes,
                    format!(
                        "`org delete {org}` removes the organisation and everything of it for good"
                    ),
                )?;
                admin(
                    A::OrgDelete { org },
                    json,
                    Say(
                        "removed organisation {slug} (id {id}): {records} records, {content_removed} contents ({content_kept} kept: another organisation has them)",
                    ),
                )
            }
            OrgCommand::Set {
                org,
                connector_access,
                require_second_factor,
                personal_tokens,
                json,
            } => admin(
                A::OrgSet {
                    slug: org,
                    connector_access,
                    require_second_factor,
                    personal_tokens,
                },
                json,
                Text(org_set),
            ),
        },
        Command::User(c) => match c {
            UserCommand::Add {
                email,
                name,
                password_stdin,
                json,
            } => {
                let password = cli::read_password(password_stdin)?;
                let req = A::UserAdd {
                    email,
                    name,
                    password,
                };
                admin(req, json, Say("added {email} (id {id})"))
            }
            UserCommand::List(a) => admin(
                A::UserList,
                a.json,
                List(&["id", "email", "name", "second_factor"]),
            ),
            UserCommand::Disable(a) => admin(
                A::UserDisable { email: a.email },
                a.json,
                Say(
                    "disabled {email}: {sessions_ended} sessions ended, {grants_revoked} connections revoked",
                ),
            ),
            UserCommand::Enable(a) => admin(
                A::UserEnable { email: a.email },
                a.json,
                Say("enabled {email}"),
            ),
            UserCommand::Delete { email, yes, json } => {
                confirmed(
                    yes,
                    format!("`user delete {email}` erases the person for good"),
                )?;
                admin(
                    A::UserDelete { email },
                    json,
                    Say("erased person {id}; the audit names them {pseudonym}"),
                )
            }
            UserCommand::Totp(a) => admin(
                A::UserTotp { email: a.email },
                a.json,
                Say(
                    "Add this to an authenticator app (the first code confirms it):\n  {otpauth_uri}\n  secret: {secret}",
                ),
            ),
            UserCommand::Passwd {
                email,
                password_stdin,
                json,
            } => {
                let password = cli::read_password(password_stdin)?;
                admin(
                    A::UserPasswd { email, password },
                    json,
                    Say("password changed for {email}"),
                )
            }
            UserCommand::Invite {
                org,
                email,
                role,
                json,
            } => admin(
                A::UserInvite { org, email, role },
                json,
                Say("Pass this one-time link (valid 7 days) to {email}:\n  {url}"),
            ),
            UserCommand::Reset(a) => admin(
                A::UserReset { email: a.email },
                a.json,
                Say("Pass this one-time password-reset link (valid 24 hours):\n  {url}"),
            ),
        },
        Command::Member(c) => match c {
            MemberCommand::Add {
                org,
                email,
                role,
                may_connect,
                json,
            } => admin(
                A::MemberAdd {
                    org,
                    email,
                    role,
                    may_connect,
                },
                json,
                Text(member_added),
            ),
            MemberCommand::List(a) => admin(
                A::MemberList { org: a.org },
                a.json,
                List(&["email", "name", "role", "may_connect"]),
            ),
            MemberCommand::Set {
                org,
                email,
                role,
                may_connect,
                json,
            } => admin(
                A::MemberSet {
                    org,
                    email,
                    role,
                    may_connect,
                },
                json,
                Say("{email}: role {role}, may connect {may_connect}"),
            ),
            MemberCommand::Remove { org, email, json } => admin(
                A::MemberRemove { org, email },
                json,
                Say("removed {email}; {connections_revoked} connection(s) revoked"),
            ),
        },
        Command::Backup { path, json } => admin(
            A::Backup {
                path: cli::absolute(&path)?,
            },
            json,
            Say("backup written to {path} ({records} records)"),
        ),
        Command::Restore { path, json } => Ok(Operation {
            request: Request::Restore(path),
            shown: Shown {
                json,
                print: Say("restored into {path} ({records} records)"),
                only: None,
            },
        }),
        Command::Kb(c) => match c {
            KbCommand::Import {
                org,
                dir,
                prefix,
                json,
            } => admin(
                A::KbImport {
                    org,
                    dir: cli::absolute(&dir)?,
                    prefix,
                },
                json,
                Text(kb_imported),
            ),
            KbCommand::Delete { org, path, json } => admin(
                A::KbDelete { org, path },
                json,
                Say(
                    "{path} (version {version}) moved to the trash; `kennis kb restore` brings it back",
                ),
            ),
            KbCommand::Trash(a) => admin(
                A::KbTrash { org: a.org },
                a.json,
                List(&["path", "version", "deleted_at", "deleted_by"]),
            ),
            KbCommand::Restore { org, path, json } => admin(
                A::KbRestore { org, path },
                json,
                Say("{path} restored at version {version}"),
            ),
            KbCommand::Move {
                org,
                from,
                to,
                json,
            } => admin(
                A::KbMove { org, from, to },
                json,
                Say("{from} moved to {to}"),
            ),
            KbCommand::Export { org, dir, json } => admin(
                A::KbExport {
                    org,
                    dir: cli::absolute(&dir)?,
                },
                json,
                Say("{documents} documents exported, {bytes} bytes"),
            ),
        },
        Command::Reindex { org, json } => admin(A::Reindex { org }, json, Text(reindexed)),
        Command::Compact(a) => admin(
            A::Compact,
            a.json,
            Say("database file: {bytes_before} bytes before, {bytes_after} bytes after"),
        ),
        Command::Audit(AuditCommand::Export { org, since }) => {
            admin(A::AuditExport { org, since }, false, Text(cli::json_lines))
        }
        Command::Agent(c) => match c {
            AgentCommand::Add {
                org,
                name,
                kind,
                exec,
                program,
                args,
                url,
                endpoint,
                env,
                timeout,
                model,
                api_key_env,
                api_key_file,
                max_steps,
                max_tokens,
                system_prompt_file,
                json,
            } => {
                let llm = cli::llm_options(
                    &exec,
                    model,
                    endpoint,
                    api_key_env,
                    api_key_file,
                    max_steps,
                    max_tokens,
                    system_prompt_file,
                )?;
                let agent = kennis::roster::NewAgent {
                    name,
                    kind,
                    exec,
                    program,
                    args,
                    url,
                    timeout_secs: timeout,
                };
                let req = A::AgentAdd {
                    org,
                    agent,
                    llm: llm.map(Box::new),
                    env,
                };
                admin_only(req, json, &["id"], Text(agent_added))
            }
            AgentCommand::List(a) => admin(
                A::AgentList { org: a.org },
                a.json,
                List(&["id", "name", "kind", "exec"]),
            ),
        },
        Command::Project(c) => match c {
            ProjectCommand::Add {
                org,
                name,
                ready,
                json,
            } => admin_only(
                A::ProjectAdd { org, name, ready },
                json,
                &["id"],
                Say("added project {name} (id {id}, {rollout})"),
            ),
            ProjectCommand::List(a) => admin(
                A::ProjectList { org: a.org },
                a.json,
                List(&["id", "name", "rollout"]),
            ),
        },
        Command::App(c) => match c {
            AppCommand::Add {
                org,
                name,
                status,
                json,
            } => admin_only(
                A::AppAdd { org, name, status },
                json,
                &["app_id"],
                Say("added app {name} (app_id {app_id}, {status})"),
            ),
            AppCommand::List(a) => admin(
                A::AppList { org: a.org },
                a.json,
                List(&["app_id", "name", "status", "accepts_requests"]),
            ),
        },
        Command::Run(c) => match c {
            RunCommand::Show { id, json } => admin(A::RunShow { id }, json, Text(cli::human_run)),
            RunCommand::Cancel { id, json } => {
                admin(A::RunCancel { id }, json, Say("run {id} cancelled"))
            }
        },
        Command::Trigger(c) => match c {
            TriggerCommand::Add {
                org,
                name,
                agent,
                project,
                instructions,
                cooldown,
                callback_url,
                json,
            } => {
                let trigger = NewTrigger {
                    name,
                    agent_id: agent,
                    project_id: project,
                    instructions,
                    cooldown_secs: cooldown,
                    callback_url,
                };
                admin(A::TriggerAdd { org, trigger }, json, Text(trigger_added))
            }
            TriggerCommand::List(a) => admin(
                A::TriggerList { org: a.org },
                a.json,
                List(&[
                    "id",
                    "name",
                    "paused",
                    "cooldown_secs",
                    "url",
                    "callback_url",
                ]),
            ),
            TriggerCommand::Pause(a) => trigger_change(a, Change::Pause, Say("paused")),
            TriggerCommand::Resume(a) => trigger_change(a, Change::Resume, Say("resumed")),
            TriggerCommand::Delete(a) => trigger_change(a, Change::Delete, Say("deleted")),
            TriggerCommand::RenewSecret(a) => {
                let mut op = trigger_change(
                    a,
                    Change::RenewSecret,
                    Say(
                        "new secret (shown only now; the old one no longer works): {secret}\nnew signing secret: {signing_secret}",
                    ),
                )?;
                op.shown.only = Some(&["secret"]);
                Ok(op)
            }
        },
        Command::Token(c) => match c {
            TokenCommand::Create {
                org,
                email,
                name,
                scopes,
                expires_in_days,
                json,
            } => {
                let mut op = admin(
                    A::TokenCreate {
                        org,
                        email,
                        name,
                        scopes,
                        expires_in_days,
                    },
                    json,
                    Text(cli::human_token),
                )?;
                op.shown.only = Some(&["id", "token"]);
                Ok(op)
            }
            TokenCommand::List(a) => admin(
                A::TokenList { org: a.org },
                a.json,
                List(&[
                    "id",
                    "name",
                    "email",
                    "expires_at",
                    "last_used_at",
                    "revoked_at",
                ]),
            ),
            TokenCommand::Revoke { id, json } => {
                admin(A::TokenRevoke { id }, json, Say("token {id} revoked"))
            }
        },
    }
}

fn trigger_change(a: cli::TriggerId, change: Change, print: Print) -> Result<Operation, CliError> {
    admin(
        AdminRequest::TriggerChange { id: a.id, change },
        a.json,
        print,
    )
}

/// Whether a member may connect an assistant under the organisation's policy, and if not,
/// what would let them.
fn connects(v: &Value) -> &'static str {
    match (v["connects"].as_bool(), v["connector_access"].as_str()) {
        (Some(true), _) => "yes",
        (_, Some("nobody")) => {
            "no (the organisation lets nobody connect: `org set --connector-access`)"
        }
        _ => {
            "no (the organisation lets selected members connect: `member set ORG EMAIL --may-connect true`)"
        }
    }
}

fn member_added(v: &Value) -> String {
    let added = if v["created"] == true {
        "added"
    } else {
        "already a member, unchanged:"
    };
    cli::fill(
        &format!(
            "{added} person {{person_id}} in organisation {{org_id}} as {{role}}; may connect an assistant: {}",
            connects(v)
        ),
        v,
    )
}

/// The policy, and a warning when it leaves no member able to connect an assistant.
fn org_set(v: &Value) -> String {
    let mut said = cli::fill(
        "{slug}: connector_access={connector_access} require_second_factor={require_second_factor} personal_tokens={personal_tokens}",
        v,
    );
    if v["members_who_may_connect"] == 0 && v["connector_access"] != "nobody" {
        said.push_str(&cli::fill(
            "\nwarning: no member of {slug} may connect an assistant now; `kennis member set {slug} EMAIL --may-connect true` lets one",
            v,
        ));
    }
    said
}

fn kb_imported(v: &Value) -> String {
    let skipped = v["skipped"].as_array().map_or(0, Vec::len);
    let said = cli::fill(
        "{files} files: {created} created, {revised} revised, {unchanged} unchanged, ",
        v,
    );
    said + &format!("{skipped} skipped")
        + &cli::fill(
            "; text extracted from {extracted}, {extraction_failed} without text; {index_updates} index updates",
            v,
        )
        + &cli::human_failures(v)
}

fn reindexed(v: &Value) -> String {
    cli::fill(
        "search index rebuilt: {documents} documents; text extracted from {extracted} files, {extraction_failed} without text",
        v,
    ) + &cli::human_failures(v)
}

fn agent_added(v: &Value) -> String {
    let waiting = v["waiting_requests"].as_u64().unwrap_or(0);
    let mut said = cli::fill("added {kind} agent {name} (id {id}, executor {exec})", v);
    if waiting > 0 {
        said.push_str(&format!(
            "; it takes up {waiting} waiting feature request(s)"
        ));
    }
    said
}

fn trigger_added(v: &Value) -> String {
    let mut said = cli::fill(
        "trigger {id}\n  URL:    {url}\n  secret: {secret}   (shown only now)\n  \
         signing secret (Standard Webhooks / GitHub signatures instead of the secret): {signing_secret}\n\
         Fire it:\n  curl -X POST -H 'Authorization: Bearer {secret}' -H 'Content-Type: application/json' -d '{}' {url}",
        v,
    );
    if let Some(c) = v["callback_url"].as_str() {
        said.push_str(&format!(
            "\nResults are POSTed to {c}, signed with the signing secret (Standard Webhooks)."
        ));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option is set as the program loads (this test binary has the same `.init_array`
    /// entry), unless the environment sets it. Run without `MIMALLOC_ARENA_EAGER_COMMIT`.
    #[test]
    fn mimalloc_commits_arenas_as_used() {
        // SAFETY: reads integers from mimalloc's option table.
        let (tuned, delay) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(libmimalloc_sys::mi_option_eager_commit_delay),
            )
        };
        assert_eq!(tuned, 0);
        // A neighbour keeps its default: the numbering is mimalloc 2's.
        assert_eq!(delay, 1);
    }
}
