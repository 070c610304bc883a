//! Backups taken while the server writes, restored and served; damaged backups refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kennis::admin::{AdminRequest, try_send};

use crate::fixture::{ServeProcess, TestServer, run, run_json, stderr};

/// Keeps creating organisations through the admin socket; records each acknowledged one.
fn writer(data_dir: &Path, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<String>>>) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("Org {i:05}");
        let req = AdminRequest::OrgCreate { name: name.clone() };
        match try_send(data_dir, &req, &mut |_| {}) {
            Ok(Some(v)) => acked
                .lock()
                .unwrap()
                .push(v["slug"].as_str().unwrap().to_owned()),
            other => panic!("write failed: {other:?}"),
        }
        i += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_writing_restores_every_acknowledged_write() {
    let mut t = TestServer::start().await;
    let data = t.data_dir().to_owned();
    let out = tempfile::tempdir().unwrap();
    let backup_dir = out.path().join("backup");
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let w = {
        let (d, s, a) = (data.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || writer(&d, s, a))
    };
    while acked.lock().unwrap().len() < 50 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before: BTreeSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let (d, b) = (data.clone(), backup_dir.clone());
    let summary = tokio::task::spawn_blocking(move || {
        run_json(&d, &["backup", b.to_str().unwrap(), "--json"], None)
    })
    .await
    .unwrap();
    let during = acked.lock().unwrap().len();
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    assert!(summary["records"].as_u64().unwrap() > 0);
    assert!(
        during > before.len(),
        "the writer kept writing during the backup"
    );
    t.stop().await;

    // Restore into a new directory and serve it.
    let restored = out.path().join("restored");
    let (r, b) = (restored.clone(), backup_dir.clone());
    let res = tokio::task::spawn_blocking(move || run(&r, &["restore", b.to_str().unwrap()], None))
        .await
        .unwrap();
    assert!(res.status.success(), "{}", stderr(&res));
    assert!(
        stderr(&res).contains("restore complete"),
        "progress is printed: {}",
        stderr(&res)
    );
    let r = restored.clone();
    let slugs: BTreeSet<String> = tokio::task::spawn_blocking(move || {
        let p = ServeProcess::spawn(&r, &[], None);
        let list = run_json(&r, &["org", "list", "--json"], None);
        assert!(p.terminate().success());
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["slug"].as_str().unwrap().to_owned())
            .collect()
    })
    .await
    .unwrap();
    let missing: Vec<_> = before.difference(&slugs).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup but missing: {missing:?}"
    );
}

#[test]
fn damaged_backups_and_busy_targets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    run_json(&data, &["org", "create", "Acme", "--json"], None);
    let backup = dir.path().join("backup");
    run_json(&data, &["backup", backup.to_str().unwrap(), "--json"], None);

    // A backup into a non-empty directory is refused.
    let again = run(&data, &["backup", backup.to_str().unwrap()], None);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("backup refused: ") && stderr(&again).contains("not empty"),
        "{}",
        stderr(&again)
    );

    // Restoring onto the live data directory is refused, and leaves it alone. Restore
    // refusals say they are restore refusals.
    let out = run(&data, &["restore", backup.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("restore refused: ") && stderr(&out).contains("not empty"),
        "{}",
        stderr(&out)
    );

    // One flipped byte: refused, nothing restored.
    let db = backup.join("kennis.redb");
    let mut bytes = std::fs::read(&db).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x40;
    std::fs::write(&db, bytes).unwrap();
    let target = dir.path().join("target");
    let out = run(&target, &["restore", backup.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("restore refused: ")
            && stderr(&out).contains("does not match its manifest"),
        "{}",
        stderr(&out)
    );
    assert!(!target.join("kennis.redb").exists());

    // No manifest: refused.
    std::fs::remove_file(backup.join("manifest.json")).unwrap();
    let out = run(
        &dir.path().join("t2"),
        &["restore", backup.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("restore refused: ") && stderr(&out).contains("manifest"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("backup refused"), "{}", stderr(&out));
}
