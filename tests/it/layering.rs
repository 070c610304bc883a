//! The house rules of `src/` as a test, against docs/architecture.md: no import cycles between
//! files; no file imports from a floor above its own (the floors table); the layout table names
//! every file of `src/` and no other. Reads every `crate::`/`super::`/`self::` path (use
//! lines, groups and paths in code, test modules excluded) and resolves it to the deepest file
//! that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

struct Tree {
    /// Module path → file.
    files: BTreeMap<Module, PathBuf>,
    /// Importing module → imported module → names.
    edges: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>,
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Code without comments and without what follows the first `#[cfg(test)]`.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&s[start..i]).into_owned(), i)
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Reads `a::b::{c, d::e}` from `i`, adding every full path to `out`; returns where it ended.
fn read_path(s: &[u8], mut i: usize, prefix: &Module, out: &mut Vec<Module>) -> usize {
    let mut path = prefix.clone();
    loop {
        i = skip_ws(s, i);
        if i < s.len() && s[i] == b'{' {
            i += 1;
            loop {
                i = skip_ws(s, i);
                if i >= s.len() {
                    return i;
                }
                if s[i] == b'}' {
                    return i + 1;
                }
                if s[i] == b',' {
                    i += 1;
                    continue;
                }
                let before = i;
                i = read_path(s, i, &path, out);
                // `x as y`: skip the alias.
                let j = skip_ws(s, i);
                if s[j..].starts_with(b"as ") {
                    let (_, k) = ident(s, skip_ws(s, j + 3));
                    i = k;
                }
                if i == before {
                    i += 1;
                }
            }
        }
        let (name, j) = ident(s, i);
        if name.is_empty() {
            out.push(path);
            return i;
        }
        path.push(name);
        i = j;
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

fn scan(src: &Path) -> Tree {
    let mut paths = Vec::new();
    walk(src, &mut paths);
    let files: BTreeMap<Module, PathBuf> = paths
        .iter()
        .map(|p| (module_of(src, p), p.clone()))
        .collect();
    let resolve = |parts: &[String]| -> Option<Module> {
        (0..=parts.len())
            .rev()
            .map(|n| parts[..n].to_vec())
            .find(|m| files.contains_key(m))
    };
    let mut edges: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> = BTreeMap::new();
    for (module, file) in &files {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let is_dir_mod = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        let here: Module = if is_dir_mod {
            module.clone()
        } else {
            module[..module.len().saturating_sub(1)].to_vec()
        };
        let s = code.as_bytes();
        let mut refs: Vec<Module> = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let boundary = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_');
            let base = if !boundary {
                None
            } else if s[i..].starts_with(b"crate::") {
                Some((Vec::new(), 7))
            } else if s[i..].starts_with(b"super::") {
                Some((
                    if is_dir_mod {
                        here[..here.len().saturating_sub(1)].to_vec()
                    } else {
                        here.clone()
                    },
                    7,
                ))
            } else if s[i..].starts_with(b"self::") {
                Some((module.clone(), 6))
            } else {
                None
            };
            match base {
                Some((base, skip)) => i = read_path(s, i + skip, &base, &mut refs),
                None => i += 1,
            }
        }
        for parts in refs {
            let Some(target) = resolve(&parts) else {
                continue;
            };
            // A file using its own folder's face (or itself, or the crate root) is no circle.
            if target.is_empty() || module.starts_with(&target) {
                continue;
            }
            let name = parts.last().cloned().unwrap_or_default();
            edges
                .entry(module.clone())
                .or_default()
                .entry(target)
                .or_default()
                .insert(name);
        }
    }
    Tree { files, edges }
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(tree: &Tree) -> Vec<Vec<Module>> {
    struct State<'a> {
        tree: &'a Tree,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        out: Vec<Vec<Module>>,
    }
    fn strong(st: &mut State, v: &Module) {
        let n = st.index.len();
        st.index.insert(v.clone(), n);
        st.low.insert(v.clone(), n);
        st.stack.push(v.clone());
        st.on.insert(v.clone());
        let targets: Vec<Module> = st
            .tree
            .edges
            .get(v)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for w in targets {
            if !st.index.contains_key(&w) {
                strong(st, &w);
                let lw = st.low[&w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.on.contains(&w) {
                let iw = st.index[&w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = st.stack.pop().unwrap();
                st.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                st.out.push(comp);
            }
        }
    }
    let mut st = State {
        tree,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in tree.files.keys() {
        if !st.index.contains_key(v) {
            strong(&mut st, v);
        }
    }
    st.out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_import_cycles_between_files() {
    let tree = scan(&src_dir());
    assert!(tree.files.len() > 40, "src/ was not read");
    assert!(
        !tree.edges.is_empty() && tree.edges.values().map(|t| t.len()).sum::<usize>() > 100,
        "imports were not read"
    );
    let found: Vec<String> = cycles(&tree)
        .iter()
        .map(|c| c.iter().map(name).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

/// A section of `docs/architecture.md`: the table rows under `## {title}`, as cells.
fn doc_table(title: &str) -> Vec<Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let heading = format!("## {title}\n");
    let at = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("no `{heading}` in docs/architecture.md"));
    let section = &doc[at + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .skip(1)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The code spans of a cell.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The floors of docs/architecture.md, highest first: each floor's name and its modules
/// (`portal/` for a folder, `oauth/routes.rs` for a file).
fn floors() -> Vec<(String, Vec<String>)> {
    doc_table("Floors")
        .into_iter()
        .map(|cells| (cells[0].clone(), spans(&cells[1])))
        .collect()
}

/// The floor a module stands on: the one naming it, or its closest folder.
fn floor_of(floors: &[(String, Vec<String>)], m: &Module) -> Option<usize> {
    let path = |m: &[String]| m.join("/");
    let candidates: Vec<String> = if m.is_empty() {
        vec!["lib.rs".into()]
    } else {
        let mut c = vec![format!("{}.rs", path(m)), format!("{}/", path(m))];
        for n in (1..m.len()).rev() {
            c.push(format!("{}/", path(&m[..n])));
        }
        c
    };
    candidates
        .iter()
        .find_map(|c| floors.iter().position(|(_, names)| names.contains(c)))
}

/// Imports from a floor to one above it.
fn upward(tree: &Tree, floors: &[(String, Vec<String>)]) -> Vec<String> {
    let mut out = Vec::new();
    for (a, targets) in &tree.edges {
        let Some(fa) = floor_of(floors, a) else {
            continue;
        };
        for (b, names) in targets {
            let Some(fb) = floor_of(floors, b) else {
                continue;
            };
            if fb < fa {
                out.push(format!(
                    "{} ({}) -> {} ({}): {:?}",
                    name(a),
                    floors[fa].0,
                    name(b),
                    floors[fb].0,
                    names
                ));
            }
        }
    }
    out
}

/// Every file of `src/` stands on a floor of docs/architecture.md, every module a floor names
/// exists, and no file imports from a floor above its own.
#[test]
fn no_file_imports_from_a_floor_above_its_own() {
    let floors = floors();
    assert!(
        floors.len() >= 6,
        "the floors table was not read: {floors:?}"
    );
    let src = src_dir();
    let missing: Vec<&String> = floors
        .iter()
        .flat_map(|(_, names)| names)
        .filter(|n| !src.join(n).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "floors name modules that do not exist: {missing:?}"
    );
    let tree = scan(&src);
    let homeless: Vec<String> = tree
        .files
        .keys()
        .filter(|m| floor_of(&floors, m).is_none())
        .map(name)
        .collect();
    assert!(homeless.is_empty(), "files on no floor: {homeless:?}");
    let bad = upward(&tree, &floors);
    assert!(bad.is_empty(), "imports from a floor above: {bad:#?}");
}

/// The layout of docs/architecture.md names every file of `src/`, and only files that exist.
#[test]
fn the_layout_names_every_file_and_no_other() {
    let named: BTreeSet<String> = doc_table("Layout")
        .iter()
        .filter_map(|cells| spans(&cells[0]).into_iter().next())
        .collect();
    assert!(named.len() > 40, "the layout table was not read");
    let src = src_dir();
    let mut files = Vec::new();
    walk(&src, &mut files);
    let files: BTreeSet<String> = files
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap().to_string_lossy().into_owned())
        .collect();
    let unnamed: Vec<&String> = files.difference(&named).collect();
    let gone: Vec<&String> = named.difference(&files).collect();
    assert!(
        unnamed.is_empty() && gone.is_empty(),
        "files in src/ the layout does not name: {unnamed:?}; named but not in src/: {gone:?}"
    );
}

/// The check itself finds a circle and an upward import (so a broken scanner cannot pass).
#[test]
fn the_checker_sees_a_planted_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("kb")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod kb;\npub mod portal;\n",
    )
    .unwrap();
    std::fs::write(src.join("a.rs"), "use crate::kb::{self, search::Query};\n").unwrap();
    std::fs::write(src.join("kb/mod.rs"), "pub mod search;\n").unwrap();
    std::fs::write(
        src.join("kb/search.rs"),
        "fn f() { crate::a::x(); crate::portal::page(); }\n#[cfg(test)]\nuse crate::b;\n",
    )
    .unwrap();
    std::fs::write(src.join("portal.rs"), "").unwrap();
    let tree = scan(src);
    let found = cycles(&tree);
    assert_eq!(found.len(), 1, "{found:?}");
    let floors = vec![
        ("areas".to_owned(), vec!["portal.rs".to_owned()]),
        (
            "domain".to_owned(),
            vec!["a.rs".to_owned(), "kb/".to_owned()],
        ),
    ];
    assert_eq!(
        upward(&tree, &floors),
        vec!["kb::search (domain) -> portal (areas): {\"page\"}".to_owned()]
    );
}
