//! The `kennis` binary: parses the command line and dispatches to the library.

use std::process::ExitCode;

use clap::Parser;
use kennis::admin::AdminRequest;
use kennis::cli::{
    self, AgentCommand, AppCommand, AuditCommand, Cli, CliError, Command, KbCommand, MemberCommand,
    OrgCommand, ProjectCommand, RunCommand, TokenCommand, TriggerCommand, UserCommand,
};
use kennis::config::Settings;
use kennis::triggers::{Change, NewTrigger};

fn main() -> ExitCode {
    // Everything kennis creates (database, index, keys, backups, uploads) is for its own user.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    if matches!(cli.command, Command::ExtractWorker) {
        // Before any configuration is read: the child has an empty environment.
        return kennis::kb::extract::worker_main();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.exit(),
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let Cli { global, command } = cli;
    if let Command::Serve(args) = command {
        let config = cli::load_config(
            &global,
            Settings {
                listen: args.listen,
                public_url: args.public_url,
                tls_cert: args.tls_cert,
                tls_key: args.tls_key,
                acme: Some(kennis::config::AcmeSettings {
                    domains: (!args.acme_domains.is_empty()).then_some(args.acme_domains),
                    email: args.acme_email,
                    directory: args.acme_directory,
                    ca_root: None,
                })
                .filter(|a| a.domains.is_some() || a.email.is_some() || a.directory.is_some()),
                ..Settings::default()
            },
        )?;
        return cli::serve(config, args.demo);
    }
    let config = cli::load_config(&global, Settings::default())?;
    cli::init_logging(config.log_format, "warn");
    match command {
        Command::Serve(_) | Command::ExtractWorker => unreachable!("handled above"),
        Command::Org(OrgCommand::Create { name, json }) => {
            let v = cli::run_admin(&config, AdminRequest::OrgCreate { name })?;
            cli::output(json, &v, |v| {
                format!(
                    "created organisation {} (id {})",
                    v["slug"].as_str().unwrap_or(""),
                    v["id"]
                )
            });
        }
        Command::Org(OrgCommand::List { json }) => {
            let v = cli::run_admin(&config, AdminRequest::OrgList)?;
            cli::output(json, &v, |v| {
                cli::human_list(
                    v,
                    &[
                        "id",
                        "slug",
                        "name",
                        "connector_access",
                        "require_second_factor",
                    ],
                )
            });
        }
        Command::Org(OrgCommand::Delete { org, yes, json }) => {
            if !yes {
                return Err(CliError::Usage(format!(
                    "`org delete {org}` removes the organisation and everything of it for good; add --yes to confirm"
                )));
            }
            let v = cli::run_admin(&config, AdminRequest::OrgDelete { org })?;
            cli::output(json, &v, |v| {
                format!(
                    "removed organisation {} (id {}): {} records, {} contents ({} kept: another organisation has them)",
                    v["slug"].as_str().unwrap_or(""),
                    v["id"],
                    v["records"],
                    v["content_removed"],
                    v["content_kept"]
                )
            });
        }
        Command::User(UserCommand::Disable { email, json }) => {
            let v = cli::run_admin(&config, AdminRequest::UserDisable { email })?;
            cli::output(json, &v, |v| {
                format!(
                    "disabled {}: {} sessions ended, {} connections revoked",
                    v["email"].as_str().unwrap_or(""),
                    v["sessions_ended"],
                    v["grants_revoked"]
                )
            });
        }
        Command::User(UserCommand::Enable { email, json }) => {
            let v = cli::run_admin(&config, AdminRequest::UserEnable { email })?;
            cli::output(json, &v, |v| {
                format!("enabled {}", v["email"].as_str().unwrap_or(""))
            });
        }
        Command::User(UserCommand::Delete { email, yes, json }) => {
            if !yes {
                return Err(CliError::Usage(format!(
                    "`user delete {email}` erases the person for good; add --yes to confirm"
                )));
            }
            let v = cli::run_admin(&config, AdminRequest::UserDelete { email })?;
            cli::output(json, &v, |v| {
                format!(
                    "erased person {}; the audit names them {}",
                    v["id"],
                    v["pseudonym"].as_str().unwrap_or("")
                )
            });
        }
        Command::Org(OrgCommand::Set {
            org,
            connector_access,
            require_second_factor,
            personal_tokens,
            json,
        }) => {
            let req = AdminRequest::OrgSet {
                slug: org,
                connector_access,
                require_second_factor,
                personal_tokens,
            };
            let v = cli::run_admin(&config, req)?;
            cli::output(json, &v, |v| {
                format!(
                    "{}: connector_access={} require_second_factor={} personal_tokens={}",
                    v["slug"].as_str().unwrap_or(""),
                    v["connector_access"],
                    v["require_second_factor"],
                    v["personal_tokens"]
                )
            });
        }
        Command::User(UserCommand::Add {
            email,
            name,
            password_stdin,
            json,
        }) => {
            let password = cli::read_password(password_stdin)?;
            let v = cli::run_admin(
                &config,
                AdminRequest::UserAdd {
                    email,
                    name,
                    password,
                },
            )?;
            cli::output(json, &v, |v| {
                format!(
                    "added {} (id {})",
                    v["email"].as_str().unwrap_or(""),
                    v["id"]
                )
            });
        }
        Command::User(UserCommand::List { json }) => {
            let v = cli::run_admin(&config, AdminRequest::UserList)?;
            cli::output(json, &v, |v| {
                cli::human_list(v, &["id", "email", "name", "second_factor"])
            });
        }
        Command::User(UserCommand::Totp { email, json }) => {
            let v = cli::run_admin(&config, AdminRequest::UserTotp { email })?;
            cli::output(json, &v, |v| {
                format!(
                    "Add this to an authenticator app (the first code confirms it):\n  {}\n  secret: {}",
                    v["otpauth_uri"].as_str().unwrap_or(""),
                    v["secret"].as_str().unwrap_or("")
                )
            });
        }
        Command::User(UserCommand::Passwd {
            email,
            password_stdin,
            json,
        }) => {
            let password = cli::read_password(password_stdin)?;
            let v = cli::run_admin(&config, AdminRequest::UserPasswd { email, password })?;
            cli::output(json, &v, |v| {
                format!("password changed for {}", v["email"].as_str().unwrap_or(""))
            });
        }
        Command::User(UserCommand::Invite {
            org,
            email,
            role,
            json,
        }) => {
            let v = cli::run_admin(&config, AdminRequest::UserInvite { org, email, role })?;
            cli::output(json, &v, |v| {
                format!(
                    "Pass this one-time link (valid 7 days) to {}:\n  {}",
                    v["email"].as_str().unwrap_or(""),
                    v["url"].as_str().unwrap_or("")
                )
            });
        }
        Command::User(UserCommand::Reset { email, json }) => {
            let v = cli::run_admin(&config, AdminRequest::UserReset { email })?;
            cli::output(json, &v, |v| {
                format!(
                    "Pass this one-time password-reset link (valid 24 hours):\n  {}",
                    v["url"].as_str().unwrap_or("")
                )
            });
        }
        Command::Member(MemberCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::MemberList { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(v, &["email", "name", "role", "may_connect"])
            });
        }
        Command::Member(MemberCommand::Set {
            org,
            email,
            role,
            may_connect,
            json,
        }) => {
            let v = cli::run_admin(
                &config,
                AdminRequest::MemberSet {
                    org,
                    email,
                    role,
                    may_connect,
                },
            )?;
            cli::output(json, &v, |v| {
                format!(
                    "{}: role {}, may connect {}",
                    v["email"].as_str().unwrap_or(""),
                    v["role"].as_str().unwrap_or(""),
                    v["may_connect"]
                )
            });
        }
        Command::Member(MemberCommand::Remove { org, email, json }) => {
            let v = cli::run_admin(&config, AdminRequest::MemberRemove { org, email })?;
            cli::output(json, &v, |v| {
                format!(
                    "removed {}; {} connection(s) revoked",
                    v["email"].as_str().unwrap_or(""),
                    v["connections_revoked"]
                )
            });
        }
        Command::Member(MemberCommand::Add {
            org,
            email,
            role,
            may_connect,
            json,
        }) => {
            let v = cli::run_admin(
                &config,
                AdminRequest::MemberAdd {
                    org,
                    email,
                    role,
                    may_connect,
                },
            )?;
            cli::output(json, &v, |v| {
                format!(
                    "{} person {} in organisation {} as {}; may connect an assistant: {}",
                    if v["created"] == true {
                        "added"
                    } else {
                        "already a member, unchanged:"
                    },
                    v["person_id"],
                    v["org_id"],
                    v["role"].as_str().unwrap_or(""),
                    if v["may_connect"] == true {
                        "yes"
                    } else {
                        "no"
                    }
                )
            });
        }
        Command::Backup { path, json } => {
            let path = cli::absolute(&path)?;
            let v = cli::run_admin(&config, AdminRequest::Backup { path })?;
            cli::output(json, &v, |v| {
                format!(
                    "backup written to {} ({} records)",
                    v["path"].as_str().unwrap_or(""),
                    v["records"]
                )
            });
        }
        Command::Kb(KbCommand::Import {
            org,
            dir,
            prefix,
            json,
        }) => {
            let dir = cli::absolute(&dir)?;
            let v = cli::run_admin(&config, AdminRequest::KbImport { org, dir, prefix })?;
            cli::output(json, &v, |v| {
                format!(
                    "{} files: {} created, {} revised, {} unchanged, {} skipped; text extracted from {}, {} without text{}",
                    v["files"],
                    v["created"],
                    v["revised"],
                    v["unchanged"],
                    v["skipped"].as_array().map_or(0, |a| a.len()),
                    v["extracted"],
                    v["extraction_failed"],
                    cli::human_failures(v)
                )
            });
        }
        Command::Kb(KbCommand::Delete { org, path, json }) => {
            let v = cli::run_admin(&config, AdminRequest::KbDelete { org, path })?;
            cli::output(json, &v, |v| {
                format!(
                    "{} (version {}) moved to the trash; `kennis kb restore` brings it back",
                    v["path"].as_str().unwrap_or(""),
                    v["version"]
                )
            });
        }
        Command::Kb(KbCommand::Trash { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::KbTrash { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(v, &["path", "version", "deleted_at", "deleted_by"])
            });
        }
        Command::Kb(KbCommand::Restore { org, path, json }) => {
            let v = cli::run_admin(&config, AdminRequest::KbRestore { org, path })?;
            cli::output(json, &v, |v| {
                format!(
                    "{} restored at version {}",
                    v["path"].as_str().unwrap_or(""),
                    v["version"]
                )
            });
        }
        Command::Kb(KbCommand::Move {
            org,
            from,
            to,
            json,
        }) => {
            let v = cli::run_admin(&config, AdminRequest::KbMove { org, from, to })?;
            cli::output(json, &v, |v| {
                format!(
                    "{} moved to {}",
                    v["from"].as_str().unwrap_or(""),
                    v["to"].as_str().unwrap_or("")
                )
            });
        }
        Command::Kb(KbCommand::Export { org, dir, json }) => {
            let dir = cli::absolute(&dir)?;
            let v = cli::run_admin(&config, AdminRequest::KbExport { org, dir })?;
            cli::output(json, &v, |v| {
                format!(
                    "{} documents exported, {} bytes",
                    v["documents"], v["bytes"]
                )
            });
        }
        Command::Reindex { org, json } => {
            let v = cli::run_admin(&config, AdminRequest::Reindex { org })?;
            cli::output(json, &v, |v| {
                format!(
                    "search index rebuilt: {} documents; text extracted from {} files, {} without text{}",
                    v["documents"],
                    v["extracted"],
                    v["extraction_failed"],
                    cli::human_failures(v)
                )
            });
        }
        Command::Compact { json } => {
            let v = cli::run_admin(&config, AdminRequest::Compact)?;
            cli::output(json, &v, |v| {
                format!(
                    "database file: {} bytes before, {} bytes after",
                    v["bytes_before"], v["bytes_after"]
                )
            });
        }
        Command::Audit(AuditCommand::Export { org, since }) => {
            let v = cli::run_admin(&config, AdminRequest::AuditExport { org, since })?;
            cli::print_json_lines(&v);
        }
        Command::Agent(AgentCommand::Add {
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
        }) => {
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
            let v = cli::run_admin(
                &config,
                AdminRequest::AgentAdd {
                    org,
                    agent,
                    llm: llm.map(Box::new),
                    env,
                },
            )?;
            cli::output(json, &serde_json::json!({"id": v["id"]}), |_| {
                let waiting = v["waiting_requests"].as_u64().unwrap_or(0);
                format!(
                    "added {} agent {} (id {}, executor {}){}",
                    v["kind"].as_str().unwrap_or(""),
                    v["name"].as_str().unwrap_or(""),
                    v["id"],
                    v["exec"].as_str().unwrap_or(""),
                    if waiting > 0 {
                        format!("; it takes up {waiting} waiting feature request(s)")
                    } else {
                        String::new()
                    }
                )
            });
        }
        Command::Run(RunCommand::Show { id, json }) => {
            let v = cli::run_admin(&config, AdminRequest::RunShow { id })?;
            cli::output(json, &v, cli::human_run);
        }
        Command::Run(RunCommand::Cancel { id, json }) => {
            let v = cli::run_admin(&config, AdminRequest::RunCancel { id })?;
            cli::output(json, &v, |v| format!("run {} cancelled", v["id"]));
        }
        Command::App(AppCommand::Add {
            org,
            name,
            status,
            json,
        }) => {
            let v = cli::run_admin(&config, AdminRequest::AppAdd { org, name, status })?;
            cli::output(json, &serde_json::json!({"app_id": v["app_id"]}), |_| {
                format!(
                    "added app {} (app_id {}, {})",
                    v["name"].as_str().unwrap_or(""),
                    v["app_id"],
                    v["status"].as_str().unwrap_or("")
                )
            });
        }
        Command::Agent(AgentCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::AgentList { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(v, &["id", "name", "kind", "exec"])
            });
        }
        Command::Project(ProjectCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::ProjectList { org })?;
            cli::output(json, &v, |v| cli::human_list(v, &["id", "name", "rollout"]));
        }
        Command::App(AppCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::AppList { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(v, &["app_id", "name", "status", "accepts_requests"])
            });
        }
        Command::Project(ProjectCommand::Add {
            org,
            name,
            ready,
            json,
        }) => {
            let v = cli::run_admin(&config, AdminRequest::ProjectAdd { org, name, ready })?;
            cli::output(json, &serde_json::json!({"id": v["id"]}), |_| {
                format!(
                    "added project {} (id {}, {})",
                    v["name"].as_str().unwrap_or(""),
                    v["id"],
                    v["rollout"].as_str().unwrap_or("")
                )
            });
        }
        Command::Trigger(TriggerCommand::Add {
            org,
            name,
            agent,
            project,
            instructions,
            cooldown,
            callback_url,
            json,
        }) => {
            let trigger = NewTrigger {
                name,
                agent_id: agent,
                project_id: project,
                instructions,
                cooldown_secs: cooldown,
                callback_url,
            };
            let v = cli::run_admin(&config, AdminRequest::TriggerAdd { org, trigger })?;
            cli::output(json, &v, |v| {
                let url = v["url"].as_str().unwrap_or("");
                let secret = v["secret"].as_str().unwrap_or("");
                format!(
                    "trigger {id}\n  URL:    {url}\n  secret: {secret}   (shown only now)\n  \
                     signing secret (Standard Webhooks / GitHub signatures instead of the secret): {signing}\n\
                     Fire it:\n  curl -X POST -H 'Authorization: Bearer {secret}' -H 'Content-Type: application/json' -d '{{}}' {url}{callback}",
                    id = v["id"].as_str().unwrap_or(""),
                    signing = v["signing_secret"].as_str().unwrap_or(""),
                    callback = match v["callback_url"].as_str() {
                        Some(c) => format!(
                            "\nResults are POSTed to {c}, signed with the signing secret (Standard Webhooks)."
                        ),
                        None => String::new(),
                    }
                )
            });
        }
        Command::Trigger(TriggerCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::TriggerList { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(
                    v,
                    &[
                        "id",
                        "name",
                        "paused",
                        "cooldown_secs",
                        "url",
                        "callback_url",
                    ],
                )
            });
        }
        Command::Trigger(cmd) => {
            let (id, change, json) = match cmd {
                TriggerCommand::Pause { id, json } => (id, Change::Pause, json),
                TriggerCommand::Resume { id, json } => (id, Change::Resume, json),
                TriggerCommand::RenewSecret { id, json } => (id, Change::RenewSecret, json),
                TriggerCommand::Delete { id, json } => (id, Change::Delete, json),
                TriggerCommand::Add { .. } | TriggerCommand::List { .. } => {
                    unreachable!("handled above")
                }
            };
            let v = cli::run_admin(&config, AdminRequest::TriggerChange { id, change })?;
            let shown = if change == Change::RenewSecret {
                serde_json::json!({"secret": v["secret"]})
            } else {
                v.clone()
            };
            cli::output(json, &shown, |_| match change {
                Change::RenewSecret => format!(
                    "new secret (shown only now; the old one no longer works): {}\nnew signing secret: {}",
                    v["secret"].as_str().unwrap_or(""),
                    v["signing_secret"].as_str().unwrap_or("")
                ),
                Change::Pause => "paused".into(),
                Change::Resume => "resumed".into(),
                Change::Delete => "deleted".into(),
            });
        }
        Command::Token(TokenCommand::Create {
            org,
            email,
            name,
            scopes,
            expires_in_days,
            json,
        }) => {
            let req = AdminRequest::TokenCreate {
                org,
                email,
                name,
                scopes,
                expires_in_days,
            };
            let v = cli::run_admin(&config, req)?;
            cli::output(json, &v, |v| {
                format!(
                    "{}\n(token {}; shown only now: store it where your script reads it)",
                    v["token"].as_str().unwrap_or(""),
                    v["id"]
                )
            });
        }
        Command::Token(TokenCommand::List { org, json }) => {
            let v = cli::run_admin(&config, AdminRequest::TokenList { org })?;
            cli::output(json, &v, |v| {
                cli::human_list(
                    v,
                    &[
                        "id",
                        "name",
                        "email",
                        "expires_at",
                        "last_used_at",
                        "revoked_at",
                    ],
                )
            });
        }
        Command::Token(TokenCommand::Revoke { id, json }) => {
            let v = cli::run_admin(&config, AdminRequest::TokenRevoke { id })?;
            cli::output(json, &v, |v| format!("token {} revoked", v["id"]));
        }
        Command::Restore { path, json } => {
            let v = cli::restore(&config, &path)?;
            cli::output(json, &v, |v| {
                format!(
                    "restored into {} ({} records)",
                    v["path"].as_str().unwrap_or(""),
                    v["records"]
                )
            });
        }
    }
    Ok(())
}
