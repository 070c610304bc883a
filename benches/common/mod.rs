//! What several benchmarks share: where the real corpus is and how it is read.

use std::path::{Path, PathBuf};

use rand::Rng;

/// `KENNIS_CORPUS`, or `../shared/corpus` beside the checkout.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("KENNIS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"))
}

/// Every Markdown document under `dir` (but its README) as (relative path, text), sorted.
pub fn read_corpus(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "md")
                && p.file_name().is_some_and(|n| n != "README.md")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Writes the corpus below `dir`, copied until it holds about `target` bytes, each copy made
/// unique (its own folder and a line of its own in every document, so nothing deduplicates);
/// returns (documents, bytes).
#[allow(dead_code)]
pub fn write_scaled(docs: &[(String, String)], target: u64, dir: &Path) -> (usize, u64) {
    let one: u64 = docs.iter().map(|(_, t)| t.len() as u64).sum();
    let copies = target.div_ceil(one.max(1)).max(1);
    let mut bytes = 0;
    let mut n = 0;
    for k in 0..copies {
        for (path, text) in docs {
            let p = dir.join(format!("kopie-{k:02}")).join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let text = format!("{text}\nKopie {k} van {path}.\n");
            bytes += text.len() as u64;
            n += 1;
            std::fs::write(p, text).unwrap();
        }
    }
    (n, bytes)
}

/// The queries the search benchmarks time: common and rare words, phrases, accents, case.
#[allow(dead_code)]
pub const QUERIES: &[&str] = &[
    "tabel",
    "opmaak",
    "noot",
    "kozijn",
    "cel",
    "de",
    "invoeg",
    "werkblad",
    "afdrukken pagina",
    "lettertype grootte",
    "\"klik op\"",
    "\"de cel\"",
    "Café",
    "één",
    "geïnstalleerd",
    "DOCUMENT",
    "maat akkoord",
    "formule som",
];

/// 10,000 documents of ~10 KB each (~100 MB), built from the source documents' lines.
#[allow(dead_code)]
pub fn generated_corpus(
    source: &[(String, String)],
    rng: &mut rand::rngs::StdRng,
) -> Vec<(String, String)> {
    let lines: Vec<&str> = source
        .iter()
        .flat_map(|(_, t)| t.lines())
        .filter(|l| !l.trim().is_empty())
        .collect();
    (0..10_000)
        .map(|i| {
            let target = rng.gen_range(5_000..15_000);
            let mut text = String::with_capacity(target + 200);
            while text.len() < target {
                text.push_str(lines[rng.gen_range(0..lines.len())]);
                text.push('\n');
            }
            (format!("gen/{:02}/doc{i:05}.md", i % 50), text)
        })
        .collect()
}
