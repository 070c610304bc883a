//! The house rules of `src/` as a test (docs/architecture.md): no import cycles between files, the
//! domain imports nothing of the web layer, `http/` imports no route module, and only the
//! command line imports `server`. Reads every `crate::`/`super::`/`self::` path (use lines,
//! groups and paths in code, test modules excluded) and resolves it to the deepest file that
//! exists, as `../shared/tools/import-cycles` does.

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

/// Edges from modules under one of `from` to modules under one of `to`.
fn crossings(tree: &Tree, from: &[&str], to: &[&str]) -> Vec<String> {
    let under = |m: &Module, roots: &[&str]| {
        let joined = m.join("/");
        roots
            .iter()
            .any(|r| joined == *r || joined.starts_with(&format!("{r}/")))
    };
    let mut out = Vec::new();
    for (a, targets) in &tree.edges {
        if !under(a, from) {
            continue;
        }
        for (b, names) in targets {
            if under(b, to) {
                out.push(format!("{} -> {}: {:?}", name(a), name(b), names));
            }
        }
    }
    out
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

/// The layers of the README's Layout, lowest first.
const DOMAIN: &[&str] = &[
    "tools",
    "progress",
    "store",
    "clock",
    "config",
    "ratelimit",
    "metrics",
    "outbound",
    "audit",
    "identity",
    "kb",
    "requests",
    "triggers",
    "agents",
    "app",
];
const WEB: &[&str] = &[
    "http",
    "portal",
    "connector",
    "oauth/routes",
    "hooks",
    "server",
    "cli",
    "main",
];
const ROUTES: &[&str] = &[
    "portal",
    "connector",
    "oauth/routes",
    "hooks",
    "server",
    "cli",
];

#[test]
fn the_domain_imports_nothing_of_the_web_layer() {
    let tree = scan(&src_dir());
    let bad = crossings(&tree, DOMAIN, WEB);
    assert!(bad.is_empty(), "domain imports the web layer: {bad:#?}");
}

#[test]
fn http_helpers_import_no_route_module() {
    let tree = scan(&src_dir());
    let bad = crossings(&tree, &["http"], ROUTES);
    assert!(bad.is_empty(), "http/ imports routes: {bad:#?}");
}

#[test]
fn only_the_command_line_imports_the_server() {
    let tree = scan(&src_dir());
    let everyone: Vec<String> = tree
        .files
        .keys()
        .filter(|m| !m.is_empty() && m[0] != "cli" && m[0] != "server")
        .map(|m| m.join("/"))
        .collect();
    let everyone: Vec<&str> = everyone.iter().map(String::as_str).collect();
    let bad = crossings(&tree, &everyone, &["server"]);
    assert!(bad.is_empty(), "server imported by: {bad:#?}");
}

/// The check itself finds a circle and a forbidden edge (so a broken scanner cannot pass).
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
    assert_eq!(
        crossings(&tree, &["kb"], &["portal"]),
        vec!["kb::search -> portal: {\"page\"}".to_owned()]
    );
}
