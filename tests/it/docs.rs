//! Docs that stay true: every `kennis …` command line in `README.md` and `docs/*.md` parses
//! with the real clap definition, every TOML example parses as the configuration, and every
//! `KENNIS_*` variable and TOML key the docs name exists in the code.

use std::path::{Path, PathBuf};

use clap::Parser;
use kennis::cli::Cli;
use kennis::config::Settings;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every Markdown page under `docs/`.
fn pages() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(root()).unwrap().to_owned(), text)
        })
        .collect()
}

/// A fenced code block: its language tag, the line its first line is on, its lines.
struct Block {
    lang: String,
    first_line: usize,
    lines: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(tag) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(b) => out.push(b),
                None => {
                    open = Some(Block {
                        lang: tag.trim().to_owned(),
                        first_line: i + 2,
                        lines: Vec::new(),
                    })
                }
            }
            continue;
        }
        if let Some(b) = &mut open {
            b.lines.push(trimmed.to_owned());
        }
    }
    out
}

/// Splits a shell command line into words: quotes group, a `#` starting a word begins a
/// comment, `|`, `>`, `<`, `&&` and `;` end the command.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    word.push(n);
                    in_word = true;
                }
            }
            '#' if !in_word => break,
            '|' | '>' | '<' | ';' | '&' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The `kennis …` command lines of a page: shell blocks' lines (continuations joined) whose
/// command, after `$ `, `sudo -u USER` and `VAR=value` prefixes, is `kennis`.
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for b in blocks(text) {
        if !matches!(b.lang.as_str(), "" | "sh" | "shell" | "bash" | "console") {
            continue;
        }
        let mut pending: Option<(usize, String)> = None;
        for (i, line) in b.lines.iter().enumerate() {
            let (at, mut joined) = pending.take().unwrap_or((b.first_line + i, String::new()));
            if let Some(head) = line.strip_suffix('\\') {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((at, joined));
                continue;
            }
            joined.push_str(line);
            let mut words = shell_words(joined.trim_start_matches("$ "));
            loop {
                match words.first().map(String::as_str) {
                    Some("sudo") if words.get(1).map(String::as_str) == Some("-u") => {
                        words.drain(..3.min(words.len()));
                    }
                    Some(w)
                        if w.contains('=')
                            && w.split('=').next().is_some_and(|n| {
                                !n.is_empty()
                                    && n.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                            }) =>
                    {
                        words.remove(0);
                    }
                    _ => break,
                }
            }
            if words.first().map(String::as_str) == Some("kennis") {
                out.push((at, words));
            }
        }
    }
    out
}

#[test]
fn shell_words_split_like_a_shell() {
    assert_eq!(
        shell_words(r#"kennis trigger add acme "Failed build" --instructions 'Find it' # note"#),
        [
            "kennis",
            "trigger",
            "add",
            "acme",
            "Failed build",
            "--instructions",
            "Find it"
        ]
    );
    assert_eq!(
        shell_words("kennis audit export acme > audit.jsonl"),
        ["kennis", "audit", "export", "acme"]
    );
    let found = command_lines(
        "```sh\nKENNIS_X=1 kennis serve \\\n  --listen 127.0.0.1:9000\n$ kennis org list\necho kennis\n```\n",
    );
    assert_eq!(found.len(), 2);
    assert_eq!(
        found[0].1,
        ["kennis", "serve", "--listen", "127.0.0.1:9000"]
    );
    assert_eq!(found[0].0, 2);
}

#[test]
fn every_documented_command_parses() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        for (line, words) in command_lines(&text) {
            checked += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                let first = e.to_string().lines().next().unwrap_or("").to_owned();
                wrong.push(format!(
                    "{}:{line}: `{}`: {first}",
                    path.display(),
                    words.join(" ")
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} command lines found in the docs"
    );
    assert!(
        wrong.is_empty(),
        "documented commands that do not parse:\n{}",
        wrong.join("\n")
    );
}

/// The example organisation is Bouwbedrijf De Vries (`bouwbedrijf-de-vries`) on every page,
/// the demo's own is `demo-organisatie`, and otherwise a placeholder (`ORG`).
#[test]
fn every_documented_command_names_one_example_organisation() {
    use clap::CommandFactory;
    fn org_of(m: &clap::ArgMatches) -> Option<String> {
        let here = m.try_get_one::<String>("org").ok().flatten().cloned();
        here.or_else(|| m.subcommand().and_then(|(_, sub)| org_of(sub)))
    }
    let mut named = 0;
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        for (line, words) in command_lines(&text) {
            let Ok(m) = Cli::command().try_get_matches_from(&words) else {
                continue;
            };
            let Some(org) = org_of(&m) else { continue };
            named += 1;
            let placeholder = org.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            if !placeholder && org != "bouwbedrijf-de-vries" && org != "demo-organisatie" {
                wrong.push(format!("{}:{line}: organisation `{org}`", path.display()));
            }
        }
    }
    assert!(named >= 10, "only {named} commands name an organisation");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Each thing is said on one page: no run of twelve words of prose (code blocks aside) stands
/// on two pages; the others link to it.
#[test]
fn the_docs_say_each_thing_once() {
    let mut at: std::collections::HashMap<String, PathBuf> = std::collections::HashMap::new();
    let mut twice = std::collections::BTreeSet::new();
    for (path, text) in pages() {
        let prose: String = blocks_removed(&text);
        let words: Vec<String> = prose
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for run in words.windows(12) {
            let run = run.join(" ");
            match at.get(&run) {
                Some(other) if *other != path => {
                    twice.insert(format!(
                        "{} and {}: “{run}”",
                        other.display(),
                        path.display()
                    ));
                }
                Some(_) => {}
                None => {
                    at.insert(run, path.clone());
                }
            }
        }
    }
    assert!(at.len() > 5_000, "the docs were not read");
    assert!(
        twice.is_empty(),
        "said on two pages:\n{}",
        twice.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// A page without its fenced code blocks.
fn blocks_removed(text: &str) -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Links between pages go to files of this repository that exist, and no page sends the
/// reader to a file outside it.
#[test]
fn the_docs_link_only_inside_the_repository() {
    let mut wrong = Vec::new();
    let mut links = 0;
    for (path, text) in pages() {
        let dir = root().join(&path).parent().unwrap().to_owned();
        for (i, piece) in text.split("](").enumerate().skip(1) {
            let target = &piece[..piece.find(')').unwrap_or(piece.len())];
            let file = target.split('#').next().unwrap_or("");
            if file.is_empty() || file.contains("://") || file.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let resolved = std::path::absolute(dir.join(file)).unwrap();
            let inside = resolved.starts_with(root())
                && resolved
                    .components()
                    .all(|c| c != std::path::Component::ParentDir);
            if !inside || !resolved.exists() {
                wrong.push(format!("{} (link {i}): {target}", path.display()));
            }
        }
        for outside in ["../shared/DESIGN.md", "DESIGN.md", "/work/"] {
            if text.contains(outside) {
                wrong.push(format!("{}: names {outside}", path.display()));
            }
        }
    }
    assert!(links >= 10, "only {links} links between pages");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_documented_toml_example_is_a_valid_configuration() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        for b in blocks(&text) {
            if b.lang != "toml" {
                continue;
            }
            checked += 1;
            let toml_text = b.lines.join("\n");
            if let Err(e) = toml::from_str::<Settings>(&toml_text) {
                wrong.push(format!("{}:{}: {e}", path.display(), b.first_line));
            }
        }
    }
    assert!(
        checked >= 2,
        "only {checked} TOML examples found in the docs"
    );
    assert!(
        wrong.is_empty(),
        "TOML examples that are not a valid configuration:\n{}",
        wrong.join("\n")
    );
}

/// The configuration tables (`| field (TOML) | env | …`): each TOML key and table is a field
/// of the configuration, each variable is read by it.
#[test]
fn every_documented_setting_exists() {
    let config = std::fs::read_to_string(root().join("src/config.rs")).unwrap();
    let cli = std::fs::read_to_string(root().join("src/cli.rs")).unwrap();
    let mut rows = 0;
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        let mut in_table = false;
        for line in text.lines() {
            if line.starts_with("| field (TOML)") {
                in_table = true;
                continue;
            }
            if !line.starts_with('|') {
                in_table = false;
                continue;
            }
            if !in_table || line.starts_with("|---") {
                continue;
            }
            rows += 1;
            let mut cells = line.split('|').skip(1);
            let (field, env) = (cells.next().unwrap_or(""), cells.next().unwrap_or(""));
            for name in code_spans(field) {
                for part in name.split(|c: char| c == '[' || c == ']' || c.is_whitespace()) {
                    if !part.is_empty() && !config.contains(&format!("pub {part}:")) {
                        wrong.push(format!(
                            "{}: TOML key `{part}` is not in config.rs",
                            path.display()
                        ));
                    }
                }
            }
            for var in code_spans(env) {
                if var.starts_with("KENNIS_")
                    && !config.contains(&format!("\"{var}\""))
                    && !cli.contains(&format!("\"{var}\""))
                {
                    wrong.push(format!(
                        "{}: `{var}` is not read by config.rs",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(
        rows >= 10,
        "only {rows} configuration rows found in the docs"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every `KENNIS_*` variable the docs name exists in the code: the configuration's, the agent
/// protocol's (`KENNIS_RUN_*`), or a test switch of `.ci/run` and the tests. `KENNIS_LLM_*`
/// names are examples of the operator's own key variables.
#[test]
fn every_documented_variable_exists() {
    let mut code = String::new();
    for dir in ["src", "tests", "benches", ".ci"] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    if !p.ends_with("node_modules") {
                        stack.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == "rs" || x == "mjs")
                    || p.ends_with("run")
                {
                    if p.ends_with("docs.rs") {
                        continue;
                    }
                    code.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
                }
            }
        }
    }
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("KENNIS_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let var = tail[..end].trim_end_matches('_');
            rest = &tail[end..];
            if var.len() <= "KENNIS_".len() || var.starts_with("KENNIS_LLM_") {
                continue;
            }
            if !code.contains(var) {
                wrong.push(format!("{}: `{var}`", path.display()));
            }
        }
    }
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "variables named in the docs but not in the code:\n{}",
        wrong.join("\n")
    );
}

fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}
