//! SIGKILL in the middle of writes loses no acknowledged write, and the next start succeeds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kennis::admin::{AdminRequest, try_send};
use kennis::store::Store;

use crate::fixture::{ServeProcess, get_status};

#[test]
fn sigkill_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServeProcess::spawn(&data, &[], None);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let writer = {
        let (data, acked) = (data.clone(), acked.clone());
        std::thread::spawn(move || {
            for i in 0.. {
                let req = AdminRequest::OrgCreate {
                    name: format!("Crash {i:05}"),
                };
                match try_send(&data, &req, &mut |_| {}) {
                    Ok(Some(v)) => acked
                        .lock()
                        .unwrap()
                        .push(v["slug"].as_str().unwrap().to_owned()),
                    // The server died mid-request: that write was never acknowledged.
                    _ => break,
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.lock().unwrap().len() < 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill9();
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 100,
        "only {} writes acknowledged",
        acked.len()
    );

    {
        let store = Store::open(&data).expect("store opens after SIGKILL");
        let orgs = kennis::identity::list_orgs(&store).unwrap();
        let slugs: std::collections::HashSet<_> = orgs.iter().map(|o| o.slug.clone()).collect();
        let lost: Vec<_> = acked.iter().filter(|s| !slugs.contains(*s)).collect();
        assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    }
    // The stale admin socket does not stop the next start.
    let again = ServeProcess::spawn(&data, &[], None);
    assert_eq!(get_status(&format!("{}/healthz", again.base)), 200);
    assert!(again.terminate().success());
}
