//! ACME against a real CA: Debian's `pebble`, with `pebble-challtestsrv` answering DNS with
//! 127.0.0.1, validating TLS-ALPN-01 against kennis's own port. Then a restart with the CA
//! gone serves the cached certificate, and the cache is private.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kennis::config::{AcmeSettings, Settings};

use crate::fixture::{KillOnDrop, TestServer, eventually, free_port, install_crypto, test_config};

const DOMAIN: &str = "kennis.test";

fn spawn(program: &'static str, args: &[&str], envs: &[(&str, &str)], log: &Path) -> KillOnDrop {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap_or_else(|e| panic!("{program} must be installed (.ci/run installs it): {e}"));
    KillOnDrop(child)
}

/// The CA: pebble (directory on `dir_port`, management on `mgmt_port`) validating
/// TLS-ALPN-01 on `tls_port`, with the challenge test server as its DNS.
struct Pebble {
    _dns: KillOnDrop,
    _ca: KillOnDrop,
    directory: String,
    mgmt: String,
    ca_root_file: std::path::PathBuf,
}

fn start_pebble(work: &Path, tls_port: u16) -> Pebble {
    // Pebble's own HTTPS certificate, from a throwaway CA kennis is told to trust.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kennis test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let ca_root_file = work.join("ca-root.pem");
    std::fs::write(&ca_root_file, ca.pem()).unwrap();
    std::fs::write(work.join("wfe-cert.pem"), leaf.pem()).unwrap();
    std::fs::write(work.join("wfe-key.pem"), leaf_key.serialize_pem()).unwrap();
    let dir_port = free_port();
    let mgmt_port = free_port();
    let dns_port = free_port();
    let config = serde_json::json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{dir_port}"),
        "managementListenAddress": format!("127.0.0.1:{mgmt_port}"),
        "certificate": work.join("wfe-cert.pem"),
        "privateKey": work.join("wfe-key.pem"),
        "httpPort": free_port(),
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false,
    }});
    std::fs::write(work.join("pebble.json"), config.to_string()).unwrap();
    let dns_addr = format!("127.0.0.1:{dns_port}");
    let dns = spawn(
        "pebble-challtestsrv",
        &[
            "-defaultIPv4",
            "127.0.0.1",
            "-defaultIPv6",
            "",
            "-dns01",
            &dns_addr,
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-management",
            &format!("127.0.0.1:{}", free_port()),
        ],
        &[],
        &work.join("challtestsrv.log"),
    );
    let ca = spawn(
        "pebble",
        &[
            "-config",
            work.join("pebble.json").to_str().unwrap(),
            "-dnsserver",
            &dns_addr,
        ],
        &[
            ("PEBBLE_VA_NOSLEEP", "1"),
            ("PEBBLE_WFE_NONCEREJECT", "0"),
            ("PEBBLE_AUTHZREUSE", "0"),
        ],
        &work.join("pebble.log"),
    );
    Pebble {
        _dns: dns,
        _ca: ca,
        directory: format!("https://localhost:{dir_port}/dir"),
        mgmt: format!("https://localhost:{mgmt_port}"),
        ca_root_file,
    }
}

fn trusting(root_pem: &[u8]) -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(root_pem).unwrap()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn acme_settings(port: u16, directory: &str, ca_root: &Path) -> Settings {
    Settings {
        listen: Some(format!("127.0.0.1:{port}")),
        acme: Some(AcmeSettings {
            domains: Some(vec![DOMAIN.into()]),
            email: Some("ops@example.org".into()),
            directory: Some(directory.to_owned()),
            ca_root: Some(ca_root.to_owned()),
        }),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble and pebble-challtestsrv; run by .ci/run"]
async fn certificate_from_a_real_acme_server_and_reused_after_restart() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info,kennis=debug")
        .with_test_writer()
        .try_init();
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let pebble = start_pebble(work.path(), port);
    let wfe = trusting(&std::fs::read(&pebble.ca_root_file).unwrap());
    eventually(20, "pebble's directory", || {
        let wfe = wfe.clone();
        let url = pebble.directory.clone();
        async move {
            wfe.get(&url)
                .send()
                .await
                .ok()
                .filter(|r| r.status() == 200)
        }
    })
    .await;

    let mut t =
        TestServer::start_with(acme_settings(port, &pebble.directory, &pebble.ca_root_file)).await;
    assert_eq!(
        t.base,
        format!("https://{DOMAIN}"),
        "public_url defaults to the domain"
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    // Pebble's issuing root changes on every start; fetch it from its management API.
    let root = eventually(20, "pebble's root", || {
        let wfe = wfe.clone();
        let url = format!("{}/roots/0", pebble.mgmt);
        async move { wfe.get(&url).send().await.ok()?.bytes().await.ok() }
    })
    .await;
    let kennis = {
        install_crypto();
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&root).unwrap()])
            .resolve(DOMAIN, addr)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let url = format!("https://{DOMAIN}:{port}/healthz");
    let got = {
        let until = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(r) = kennis.get(&url).send().await {
                break Some(r.json::<serde_json::Value>().await.unwrap());
            }
            if Instant::now() > until {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let health = got.unwrap_or_else(|| {
        let log = |n: &str| std::fs::read_to_string(work.path().join(n)).unwrap_or_default();
        panic!(
            "no certificate from pebble within 90 s\n--- pebble:\n{}\n--- challtestsrv:\n{}",
            log("pebble.log"),
            log("challtestsrv.log")
        )
    });
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["certificate"]["source"], "acme", "{health}");
    assert!(
        health["certificate"]["expiresAt"].as_str().is_some(),
        "{health}"
    );
    let metrics = kennis
        .get(format!("https://{DOMAIN}:{port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let expiry_line = metrics
        .lines()
        .find(|l| l.starts_with("kennis_tls_certificate_expiry_timestamp_seconds "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(!expiry_line.ends_with(" 0"), "{expiry_line}");

    // The account key and the certificate are cached, private to the service.
    {
        use std::os::unix::fs::PermissionsExt;
        let cache = t.data_dir().join("acme");
        let files: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(
            files.iter().any(|f| f.to_string_lossy().contains("cert-")),
            "{files:?}"
        );
        assert!(
            files
                .iter()
                .any(|f| f.to_string_lossy().contains("account-")),
            "{files:?}"
        );
        for f in files {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }

    // Restart with the CA gone: the cached certificate is served at once, no CA needed.
    t.stop().await;
    let directory = pebble.directory.clone();
    drop(pebble);
    let config = test_config(
        t.data_dir(),
        acme_settings(port, &directory, &work.path().join("ca-root.pem")),
    );
    let server = kennis::server::start(config, t.clock.clone())
        .await
        .expect("restarts");
    t.server = Some(server);
    let health: serde_json::Value = eventually(10, "the cached certificate", || {
        let kennis = kennis.clone();
        let url = url.clone();
        async move { kennis.get(&url).send().await.ok()?.json().await.ok() }
    })
    .await;
    assert_eq!(health["certificate"]["source"], "acme", "{health}");
    t.stop().await;
}
