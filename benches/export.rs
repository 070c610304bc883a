//! Export of an organisation's knowledge base (issue 24): the shared corpus (`../shared/corpus`,
//! or `KENNIS_CORPUS`) copied to about 100 MB (`KENNIS_STORE_MB`) plus a few incompressible
//! binary files, imported with the release binary, then
//!
//! 1. `kennis kb export ORG DIR` (the release binary, no server): wall time, MB/s of document
//!    bytes, and the process's peak resident memory (`VmHWM`, sampled from `/proc` while it
//!    runs) — it must stay far below the knowledge base's size;
//! 2. the portal's zip (`kb::export::export_zip`) in process into a sink: MB/s.
//!
//! The exported tree is compared with the source (same files, same bytes).
//! `cargo build --release && cargo bench --bench export`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Every file under `dir` by relative path, with the BLAKE3 of its bytes.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(
                    rel,
                    blake3::hash(&std::fs::read(&p).unwrap())
                        .to_hex()
                        .to_string(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The peak resident memory of a running process in kB, from `/proc/<pid>/status`.
fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn main() {
    let corpus = common::read_corpus(&common::corpus_dir());
    if corpus.is_empty() {
        println!(
            "corpus not found at {} (set KENNIS_CORPUS); nothing measured",
            common::corpus_dir().display()
        );
        return;
    }
    let target_mb: u64 = std::env::var("KENNIS_STORE_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("documents");
    let (mut n, mut bytes) = common::write_scaled(&corpus, target_mb * 1_000_000, &src);
    // Binary files, stored as they are (not compressible): a few MB of them.
    std::fs::create_dir_all(src.join("tekeningen")).unwrap();
    for i in 0..4 {
        let noise: Vec<u8> = (0..2_000_000).map(|_| rand::random::<u8>()).collect();
        std::fs::write(src.join(format!("tekeningen/scan-{i}.pdf")), &noise).unwrap();
        n += 1;
        bytes += noise.len() as u64;
    }
    common::flush_to_disk();
    println!("\n## Export: {n} documents, {:.1} MB", mb(bytes));
    let data = work.path().join("data");
    let kennis = env!("CARGO_BIN_EXE_kennis");
    let command = |args: &[&str]| {
        let mut c = Command::new(kennis);
        c.arg("--data-dir")
            .arg(&data)
            .args(args)
            .env("KENNIS_LOG", "warn")
            .env("KENNIS_EXTRACT_TEXT", "false");
        c
    };
    let run = |args: &[&str]| {
        let out = command(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(&["org", "create", "Bench", "--json"]);
    run(&["kb", "import", "bench", src.to_str().unwrap(), "--json"]);

    let dest = work.path().join("export");
    let t = Instant::now();
    let mut child = command(&["kb", "export", "bench", dest.to_str().unwrap(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut peak_kb = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(kb) = vm_hwm(child.id()) {
            peak_kb = peak_kb.max(kb);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = t.elapsed();
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["documents"].as_u64(), Some(n as u64), "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(bytes), "{v}");
    assert_eq!(
        tree(&dest),
        tree(&src),
        "the export differs from the source"
    );
    println!(
        "kb export: {:.2} s, {:.1} MB/s, peak memory {:.1} MB ({:.2}x the documents)",
        took.as_secs_f64(),
        mb(bytes) / took.as_secs_f64(),
        peak_kb as f64 / 1000.0,
        peak_kb as f64 * 1000.0 / bytes as f64
    );

    let store = kennis::store::Store::open(&data).unwrap();
    let t = Instant::now();
    let s = kennis::kb::export::export_zip(&store, 1, std::io::sink()).unwrap();
    let took = t.elapsed();
    assert_eq!(s.bytes, bytes);
    println!(
        "zip (in process, into a sink): {:.2} s, {:.1} MB/s",
        took.as_secs_f64(),
        mb(bytes) / took.as_secs_f64()
    );
}
