//! What a refused operation says to people, in their language.
//!
//! The domain words its refusals in English, for the connector's assistants, the command line
//! and the logs; [`crate::http::error`] turns them into a [`Problem`] (status, code, message).
//! The portal shows a problem through `locales/`:
//!
//! 1. a sentence the domain is known to write (the table [`SENTENCES`]: the domain's words with
//!    `{name}` where they vary) becomes its own message, `refused-*`, with the varying parts
//!    carried over — so "`title` is empty" reads "Vul de titel in." in Dutch;
//! 2. else a code that says it all (`link_used`, `last_admin`, …) has its message
//!    `problem-<code>`;
//! 3. else the domain's words are shown after a general "not done" (`problem-other`).
//!
//! A unit test makes sure the sentences the portal's forms can cause are known, so a change of
//! wording in the domain shows up there rather than as English on a Dutch page.

use super::i18n::{self, has, t, ta};
use crate::http::error::Problem;

/// (code, the domain's sentence with `{name}` for each varying part, message key). A longer
/// sentence comes before a shorter one it starts with.
const SENTENCES: &[(&str, &str, &str)] = &[
    // Feature requests (`requests::feature`).
    ("invalid_input", "`{field}` is empty", "refused-empty"),
    (
        "invalid_input",
        "`{field}` has {n} characters; at most {max} are allowed",
        "refused-too-long",
    ),
    (
        "invalid_input",
        "`title` must be one line without control characters",
        "refused-title-one-line",
    ),
    (
        "invalid_input",
        "`{field}` contains NUL characters",
        "refused-nul",
    ),
    (
        "invalid_input",
        "`page` must be an integer from 1 to {max}",
        "refused-page",
    ),
    (
        "invalid_input",
        "give a `message`, `answers`, or both",
        "refused-reply-empty",
    ),
    (
        "invalid_input",
        "request {id} is {status}; it takes no more replies (file a new request instead)",
        "refused-request-closed",
    ),
    (
        "invalid_input",
        "request {id} has no question {question}; feature_request_read lists the open questions",
        "refused-no-question",
    ),
    (
        "invalid_input",
        "question {question} is already answered",
        "refused-answered",
    ),
    (
        "invalid_input",
        "question {question} is answered twice in one reply",
        "refused-answered-twice",
    ),
    (
        "invalid_input",
        "question {question} has no option `{option}`; its options are: {options}",
        "refused-no-option",
    ),
    (
        "invalid_input",
        "option `{option}` is given twice for question {question}",
        "refused-option-twice",
    ),
    (
        "invalid_input",
        "question {question} does not allow an `other` answer; choose from its options",
        "refused-no-other",
    ),
    (
        "invalid_input",
        "the answer to question {question} chooses no option{rest}",
        "refused-no-choice",
    ),
    (
        "app_closed",
        "app `{app}` is a draft and does not accept requests yet",
        "refused-app-draft",
    ),
    (
        "app_closed",
        "app `{app}` is archived and accepts no new requests",
        "refused-app-archived",
    ),
    (
        "not_found",
        "no app {id}; use app_list to see the apps",
        "refused-no-app",
    ),
    ("not_found", "no app {id}", "refused-no-app"),
    (
        "not_found",
        "no feature request {id}; use feature_request_list to see the requests",
        "refused-no-request",
    ),
    // Sign-in with a provider (`identity::oidc`) and invitations accepted through one.
    (
        "oidc_unknown_email",
        "there is no account for {email} here",
        "refused-oidc-unknown-email",
    ),
    (
        "oidc_unverified",
        "the provider has not verified the email address {email}",
        "refused-oidc-unverified",
    ),
    (
        "oidc_refused",
        "the provider ended the sign-in: {error}",
        "refused-oidc-refused",
    ),
    (
        "oidc_id_token",
        "the provider's ID token was refused: it has expired",
        "refused-oidc-expired",
    ),
    (
        "oidc_id_token",
        "the provider's ID token was refused: its nonce is not the one this sign-in sent",
        "refused-oidc-nonce",
    ),
    (
        "oidc_id_token",
        "the provider's ID token was refused: its signature does not verify with the provider's keys",
        "refused-oidc-signature",
    ),
    (
        "oidc_id_token",
        "the provider's ID token was refused: it is signed with a key the provider does not publish",
        "refused-oidc-signature",
    ),
    (
        "invitation_email",
        "this invitation is for {invited}, but the sign-in was as {signed_in}",
        "refused-invitation-email",
    ),
    // Attachments and settings (`requests::attachments`).
    (
        "invalid_input",
        "a file name of 1 to {max} characters without control characters is needed",
        "refused-file-name",
    ),
    ("invalid_input", "the file is empty", "refused-file-empty"),
    (
        "invalid_input",
        "the file is {size} bytes; at most {max} (10 MiB) are allowed",
        "refused-attachment-too-large",
    ),
    (
        "invalid_input",
        "a request has at most {max} attachments",
        "refused-attachments-full",
    ),
    (
        "invalid_input",
        "a setting name is 1 to {max} characters of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit",
        "refused-setting-name",
    ),
    (
        "invalid_input",
        "a setting's value is at most {max} characters",
        "refused-setting-value",
    ),
    (
        "invalid_input",
        "a request has at most {max} settings",
        "refused-settings-full",
    ),
    ("not_found", "no attachment {id}", "refused-no-attachment"),
    // Apps (`requests::apps`).
    (
        "invalid_input",
        "the organisation already has an app named `{app}`",
        "refused-app-taken",
    ),
    // Names of apps, triggers, agents, people and organisations.
    (
        "invalid_input",
        "{thing} must be 1 to {max} characters without control characters",
        "refused-name",
    ),
    // People (`identity`).
    (
        "weak_password",
        "password refused: it is empty",
        "refused-password-empty",
    ),
    (
        "weak_password",
        "password refused: it needs at least {n} characters",
        "refused-password-short",
    ),
    (
        "weak_password",
        "password refused: it may have at most {n} characters",
        "refused-password-long",
    ),
    (
        "weak_password",
        "password refused: it repeats too few different characters",
        "refused-password-repetitive",
    ),
    (
        "weak_password",
        "password refused: it contains the email address",
        "refused-password-email",
    ),
    (
        "weak_password",
        "password refused: it is a common password with digits added",
        "refused-password-common",
    ),
    (
        "weak_password",
        "password refused: digits only need at least 16 characters",
        "refused-password-digits",
    ),
    (
        "invalid_input",
        "`{email}` is not an email address",
        "refused-email",
    ),
    (
        "invalid_input",
        "role `{role}` is not admin or member",
        "refused-role",
    ),
    // Triggers and agents.
    (
        "invalid_input",
        "instructions must be 1 to {max} characters",
        "refused-instructions",
    ),
    (
        "invalid_input",
        "cooldown must be 0 to {max} seconds",
        "refused-cooldown",
    ),
    (
        "invalid_input",
        "--url must be an http:// or https:// URL",
        "refused-agent-url",
    ),
    (
        "invalid_input",
        "the llm executor needs --url BASE (e.g. https://api.openai.com/v1)",
        "refused-agent-url",
    ),
    (
        "invalid_input",
        "the llm executor needs --url BASE and --model M",
        "refused-agent-url",
    ),
    (
        "invalid_input",
        "the llm executor needs --model M",
        "refused-agent-model",
    ),
    (
        "invalid_input",
        "the model endpoint `{id}` is not offered to organisation {org}",
        "refused-agent-endpoint",
    ),
    (
        "invalid_input",
        "choose one of the model endpoints offered to this organisation",
        "refused-agent-choose-endpoint",
    ),
    (
        "invalid_input",
        "an organisation's admin chooses one of the operator's model endpoints; another URL or key is given only on the server's command line",
        "refused-agent-own-endpoint",
    ),
    (
        "invalid_input",
        "an organisation's admin adds language-model agents only",
        "refused-agent-llm-only",
    ),
    (
        "invalid_input",
        "--model must be 1 to 200 characters",
        "refused-agent-model",
    ),
    (
        "invalid_input",
        "--api-key-env must name an environment variable (A-Z, 0-9, _)",
        "refused-agent-key-env",
    ),
    (
        "invalid_input",
        "--max-steps must be 1 to {max}",
        "refused-agent-steps",
    ),
    (
        "invalid_input",
        "--max-tokens must be {min} to {max}",
        "refused-agent-tokens",
    ),
    (
        "invalid_input",
        "the system prompt is longer than {max} characters",
        "refused-agent-prompt",
    ),
    (
        "invalid_input",
        "--timeout must be 1 to {max} seconds",
        "refused-agent-timeout",
    ),
    // The knowledge base (`kb`): paths, folders, search.
    ("invalid_input", "path is empty", "refused-path-empty"),
    (
        "invalid_input",
        "path `{path}` must not start with a slash",
        "refused-path-slash",
    ),
    (
        "invalid_input",
        "path `{path}` is too long",
        "refused-path-long",
    ),
    (
        "invalid_input",
        "path `{path}` contains control characters",
        "refused-path-control",
    ),
    (
        "invalid_input",
        "path `{path}` contains a backslash; use / between folders",
        "refused-path-backslash",
    ),
    (
        "invalid_input",
        "path `{path}` has an empty segment",
        "refused-path-empty-segment",
    ),
    (
        "invalid_input",
        "path `{path}` has a `.` or `..` segment",
        "refused-path-dots",
    ),
    (
        "invalid_input",
        "path `{path}` has a segment starting or ending with a space",
        "refused-path-spaces",
    ),
    (
        "invalid_input",
        "`{path}` is a document, so it cannot also be a folder",
        "refused-document-folder",
    ),
    (
        "invalid_input",
        "`{path}` is a document, not a folder; read it with kennisbank_read",
        "refused-not-folder",
    ),
    (
        "not_found",
        "folder `{path}` does not exist",
        "refused-no-folder",
    ),
    // Trash, restore and move (`kb::trash`).
    (
        "not_found",
        "`{path}` does not exist",
        "refused-no-document",
    ),
    (
        "version_conflict",
        "`{path}` is taken by a live document (version {version}); move or delete that one first",
        "refused-path-taken",
    ),
    (
        "not_found",
        "`{path}` is not in the trash",
        "refused-not-in-trash",
    ),
    (
        "invalid_input",
        "`{path}` is already at that path",
        "refused-same-path",
    ),
    (
        "invalid_input",
        "query must be {min} to {max} characters (got {n})",
        "refused-query-length",
    ),
    (
        "invalid_input",
        "query has no search terms",
        "refused-query-empty",
    ),
    (
        "invalid_input",
        "query has {n} terms; at most {max} are allowed (a quoted phrase counts as one)",
        "refused-query-terms",
    ),
    // Personal access tokens (`oauth::pats`).
    (
        "invalid_input",
        "token name must be 1 to {max} characters without control characters",
        "refused-token-name",
    ),
    (
        "invalid_input",
        "a token expires in 1 to {max} days, not {n}",
        "refused-token-days",
    ),
    (
        "invalid_input",
        "unknown scope `{scope}`; choose from {scopes}",
        "refused-token-scope",
    ),
    (
        "invalid_input",
        "personal tokens `{value}` is not allow or deny",
        "refused-token-setting",
    ),
    (
        "not_found",
        "no such personal access token",
        "refused-token-unknown",
    ),
];

/// What a refusal says in the request's language (see the module's documentation).
pub fn problem_text(problem: &Problem) -> String {
    for (code, sentence, key) in SENTENCES {
        if *code == problem.code
            && let Some(parts) = parts_of(sentence, &problem.message)
        {
            let args: Vec<(&'static str, String)> = parts
                .into_iter()
                .map(|(name, value)| (name, for_people(name, value)))
                .collect();
            return ta(key, &args);
        }
    }
    let key = format!("problem-{}", problem.code);
    if has(&key) {
        t(&key)
    } else {
        ta("problem-other", &[("detail", problem.message.clone())])
    }
}

/// A varying part as people read it: field names and statuses in the language, counts with
/// the language's thousands separator.
fn for_people(name: &str, value: String) -> String {
    match name {
        "field" | "thing" => {
            let key = format!("input-{}", value.replace([' ', '_'], "-"));
            if has(&key) { t(&key) } else { value }
        }
        "status" => i18n::status_label(&value),
        "n" | "max" | "min" | "size" => match value.parse::<u64>() {
            Ok(n) => i18n::number(n),
            Err(_) => value,
        },
        _ => value,
    }
}

/// The varying parts of `text` if it is `sentence` with each `{name}` filled in; a part ends
/// where the words after it first occur (the last part, at the end, takes the rest).
fn parts_of(sentence: &'static str, text: &str) -> Option<Vec<(&'static str, String)>> {
    let mut parts = Vec::new();
    let (mut pattern, mut rest) = (sentence, text);
    loop {
        let Some(open) = pattern.find('{') else {
            return (pattern == rest).then_some(parts);
        };
        let (words, placeholder) = pattern.split_at(open);
        rest = rest.strip_prefix(words)?;
        let close = placeholder.find('}')?;
        let name = placeholder.get(1..close)?;
        pattern = placeholder.get(close + 1..)?;
        let next_words = pattern.split('{').next().unwrap_or_default();
        let len = if next_words.is_empty() {
            // Two parts side by side cannot be told apart; a part at the end takes the rest.
            if !pattern.is_empty() {
                return None;
            }
            rest.len()
        } else {
            rest.find(next_words)?
        };
        let (value, after) = rest.split_at(len);
        parts.push((name, value.to_owned()));
        rest = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::error::ToProblem;
    use crate::portal::i18n::{Lang, scope};

    #[test]
    fn sentences_are_taken_apart_at_their_varying_parts() {
        assert_eq!(
            parts_of(
                "`{field}` has {n} characters; at most {max} are allowed",
                "`title` has 250 characters; at most 200 are allowed"
            ),
            Some(vec![
                ("field", "title".into()),
                ("n", "250".into()),
                ("max", "200".into())
            ])
        );
        assert_eq!(
            parts_of(
                "the answer to question {question} chooses no option{rest}",
                "the answer to question 3 chooses no option"
            ),
            Some(vec![("question", "3".into()), ("rest", String::new())])
        );
        assert_eq!(
            parts_of("the file is empty", "the file is empty"),
            Some(vec![])
        );
        assert_eq!(parts_of("the file is empty", "the file is empty!"), None);
        assert_eq!(parts_of("no app {id}", "no feature request 4"), None);
        assert_eq!(parts_of("{a}{b}", "xy"), None);
    }

    /// Every message the table names exists in both languages (the key scan of the pages
    /// cannot see keys in a table).
    #[test]
    fn every_sentence_has_its_message() {
        for lang in ["en", "nl"] {
            let ids = crate::portal::i18n::tests::ids(lang);
            for (_, sentence, key) in SENTENCES {
                assert!(
                    ids.contains(*key),
                    "{key} ({sentence}) has no message in {lang}"
                );
            }
        }
    }

    /// Refusals the portal's forms can cause, made by the domain itself.
    fn refusals() -> Vec<crate::http::error::Problem> {
        use crate::identity::{self, IdentityError};
        use crate::kb::{KbError, path};
        use crate::requests::{attachments, feature};
        let mut out = Vec::new();
        let long = "x".repeat(feature::TITLE_MAX + 1);
        for e in [
            feature::check_title(""),
            feature::check_title(&long),
            feature::check_title("a\u{7}b"),
            feature::check_text("description", "  ", feature::DESCRIPTION_MAX),
            feature::check_text("message", "a\0b", feature::MESSAGE_MAX),
            attachments::clean_name("..").map(|_| String::new()),
        ] {
            out.push(e.unwrap_err().problem());
        }
        let too_long = "x1".repeat(600);
        for password in [
            "",
            "short",
            too_long.as_str(),
            "aaaaaaaaaaaa",
            "annie-annie-1234",
            "wachtwoord12345",
            "9081726354",
        ] {
            let e: IdentityError =
                identity::check_strength(password, "annie@example.org").unwrap_err();
            out.push(e.problem());
        }
        out.push(
            identity::normalize_email("not-an-address")
                .unwrap_err()
                .problem(),
        );
        out.push("boss".parse::<identity::Role>().unwrap_err().problem());
        out.push(
            crate::roster::endpoint_for(&[], "acme", "elsewhere")
                .unwrap_err()
                .problem(),
        );
        for e in [
            crate::kb::trash::missing("a.md"),
            crate::kb::trash::path_taken("a.md", 3),
            crate::kb::trash::not_in_trash("a.md"),
            crate::kb::trash::same_path("a.md"),
        ] {
            out.push(e.problem());
        }
        use crate::oauth::pats;
        for e in [
            pats::check_token_input("", &[], None),
            pats::check_token_input("x", &[], Some(400)),
            pats::check_token_input("x", &["admin".to_owned()], None),
        ] {
            out.push(e.unwrap_err().problem());
        }
        out.push(pats::PatError::Disabled.problem());
        use crate::identity::oidc::OidcError;
        for e in [
            OidcError::UnknownProvider("x".into()),
            OidcError::State,
            OidcError::Refused("access_denied".into()),
            OidcError::Unavailable {
                provider: "x".into(),
                reason: "down".into(),
            },
            OidcError::IdToken("it has expired".into()),
            OidcError::IdToken("its nonce is not the one this sign-in sent".into()),
            OidcError::IdToken("its signature does not verify with the provider's keys".into()),
            OidcError::IdToken("it is signed with a key the provider does not publish".into()),
            OidcError::IdToken("its audience (aud) is not this client".into()),
            OidcError::NoEmail,
            OidcError::Unverified("a@example.org".into()),
            OidcError::UnknownEmail("a@example.org".into()),
            OidcError::Identity(IdentityError::InvitationForOther {
                invited: "a@example.org".into(),
                signed_in: "b@example.org".into(),
            }),
        ] {
            out.push(e.problem());
        }
        out.push(pats::PatError::NotFound.problem());
        let e = "sometimes".parse::<identity::PersonalTokens>().unwrap_err();
        out.push(e.problem());
        for p in ["/a", "a\\b", "a//b", "a/../b", "a/ b /c", "a\u{1}"] {
            let e: KbError = path::normalize(p).unwrap_err();
            out.push(e.problem());
        }
        out
    }

    #[tokio::test]
    async fn refusals_of_the_portals_forms_read_as_dutch_in_dutch() {
        for p in refusals() {
            let nl = scope(Lang::Nl, async { problem_text(&p) }).await;
            let en = scope(Lang::En, async { problem_text(&p) }).await;
            assert!(
                !nl.starts_with("Niet gelukt") && !nl.contains('`') && !nl.starts_with("refused-"),
                "{:?} has no Dutch message: {nl}",
                p.message
            );
            assert!(!en.starts_with("refused-") && !en.contains('`'), "{en}");
        }
        let p = crate::requests::feature::check_title(&"x".repeat(1234))
            .unwrap_err()
            .problem();
        let nl = scope(Lang::Nl, async { problem_text(&p) }).await;
        assert_eq!(
            nl,
            "Te lang: de titel heeft 1.234 tekens; er mogen hoogstens 200."
        );
        // A sentence nobody foresaw is still shown, after a general word in the language.
        let p = Problem::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_input",
            "odd thing",
        );
        let nl = scope(Lang::Nl, async { problem_text(&p) }).await;
        assert!(
            nl.starts_with("Niet gelukt") && nl.contains("odd thing"),
            "{nl}"
        );
    }
}
