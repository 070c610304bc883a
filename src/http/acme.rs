//! Certificates from an ACME CA (Let's Encrypt by default), with `rustls-acme`: it answers
//! TLS-ALPN-01 challenges in the TLS handshake on the listen address itself (no second port),
//! renews when two thirds of a certificate's life have passed, backs off after failures, and
//! keeps serving the last good certificate meanwhile. Chosen over `instant-acme` because it
//! brings the challenge resolver, renewal loop and backoff, and builds with ring alone.
//!
//! The account key and certificates are cached in `<data dir>/acme/` (directory 0700, files
//! 0600, written atomically); a restart serves the cached certificate without asking the CA
//! until renewal is due. Backups include the directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use rustls::ServerConfig;
use rustls_acme::{AccountCache, AcmeConfig, AcmeState, CertCache, EventOk};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

use crate::app::App;
use crate::config::Acme;

/// The cache directory under the data directory (carried by backups).
pub const CACHE_DIR: &str = crate::store::ACME_DIR;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737); a connection that negotiated it is closed
/// after the handshake.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The account key and certificates on disk, private to the service's user.
pub struct PrivateDirCache {
    dir: PathBuf,
}

impl PrivateDirCache {
    pub fn new(data_dir: &Path) -> PrivateDirCache {
        PrivateDirCache {
            dir: data_dir.join(CACHE_DIR),
        }
    }

    fn file(kind: &str, parts: &[String], directory_url: &str) -> String {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0]);
        }
        h.update(directory_url.as_bytes());
        format!("{kind}-{}.pem", &hex::encode(h.finalize())[..32])
    }

    async fn read(&self, name: String) -> std::io::Result<Option<Vec<u8>>> {
        let path = self.dir.join(name);
        match tokio::fs::read(&path).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            )),
        }
    }

    async fn write(&self, name: String, contents: Vec<u8>) -> std::io::Result<()> {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || write_private(&dir, &name, &contents))
            .await
            .map_err(std::io::Error::other)?
    }
}

/// Writes `dir/name` with mode 0600 through a temporary file and a rename, so a crash leaves
/// the old file or the new one, never half of one.
fn write_private(dir: &Path, name: &str, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[async_trait::async_trait]
impl CertCache for PrivateDirCache {
    type EC = std::io::Error;
    async fn load_cert(
        &self,
        domains: &[String],
        directory_url: &str,
    ) -> Result<Option<Vec<u8>>, Self::EC> {
        self.read(Self::file("cert", domains, directory_url)).await
    }
    async fn store_cert(
        &self,
        domains: &[String],
        directory_url: &str,
        cert: &[u8],
    ) -> Result<(), Self::EC> {
        self.write(Self::file("cert", domains, directory_url), cert.to_vec())
            .await
    }
}

#[async_trait::async_trait]
impl AccountCache for PrivateDirCache {
    type EA = std::io::Error;
    async fn load_account(
        &self,
        contact: &[String],
        directory_url: &str,
    ) -> Result<Option<Vec<u8>>, Self::EA> {
        self.read(Self::file("account", contact, directory_url))
            .await
    }
    async fn store_account(
        &self,
        contact: &[String],
        directory_url: &str,
        account: &[u8],
    ) -> Result<(), Self::EA> {
        self.write(
            Self::file("account", contact, directory_url),
            account.to_vec(),
        )
        .await
    }
}

/// A configured ACME client: the TLS configuration to serve with (its certificate resolver
/// answers challenges and serves the current certificate) and the state to drive.
pub struct AcmeTls {
    pub server_config: Arc<ServerConfig>,
    state: AcmeState<std::io::Error>,
    domains: Vec<String>,
    cache_dir: PathBuf,
}

/// Builds the ACME client. Errors name the setting to fix (the CA root file).
pub fn setup(acme: &Acme, data_dir: &Path) -> Result<AcmeTls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = &acme.ca_root {
        let extra: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| format!("KENNIS_ACME_CA_ROOT {}: {e}", path.display()))?;
        if extra.is_empty() {
            return Err(format!(
                "KENNIS_ACME_CA_ROOT {}: no certificate found",
                path.display()
            ));
        }
        for cert in extra {
            roots
                .add(cert)
                .map_err(|e| format!("KENNIS_ACME_CA_ROOT {}: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err(
            "no trusted roots to reach the ACME directory with (install ca-certificates)".into(),
        );
    }
    let client_config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let state = AcmeConfig::new_with_client_config(&acme.domains, Arc::new(client_config))
        .contact_push(format!("mailto:{}", acme.email))
        .directory(&acme.directory)
        .cache(PrivateDirCache::new(data_dir))
        .state();
    let mut server_config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(state.resolver());
    server_config.alpn_protocols = vec![b"http/1.1".to_vec(), ACME_TLS_ALPN.to_vec()];
    Ok(AcmeTls {
        server_config: Arc::new(server_config),
        state,
        domains: acme.domains.clone(),
        cache_dir: data_dir.join(CACHE_DIR),
    })
}

impl AcmeTls {
    /// Drives ordering and renewal for as long as the server runs: logs every step, records
    /// the certificate's expiry in the metrics, and says what to do when an order fails (the
    /// last good certificate stays in use; the next try comes after a growing pause).
    pub fn drive(self, app: Arc<App>) -> tokio::task::JoinHandle<()> {
        let AcmeTls {
            mut state,
            domains,
            cache_dir,
            ..
        } = self;
        let domains = domains.join(", ");
        tokio::spawn(async move {
            while let Some(event) = state.next().await {
                match event {
                    Ok(EventOk::DeployedNewCert) => {
                        tracing::info!(domains = %domains, "new TLS certificate issued");
                    }
                    // The cached certificate at start, or a new one once stored: its expiry
                    // goes to /healthz and /metrics.
                    Ok(EventOk::DeployedCachedCert) | Ok(EventOk::CertCacheStore) => {
                        let expiry = newest_expiry(&cache_dir);
                        if let Some(t) = expiry {
                            app.metrics.tls_cert_expiry.set(t);
                        }
                        let at = expiry
                            .and_then(|t| jiff::Timestamp::from_second(t).ok())
                            .map(|t| t.to_string())
                            .unwrap_or_default();
                        tracing::info!(domains = %domains, expires = %at, "TLS certificate in use");
                    }
                    Ok(other) => tracing::debug!(event = ?other, "ACME"),
                    Err(e) => {
                        app.metrics.acme_failures.inc();
                        let text = e.to_string();
                        tracing::error!(
                            domains = %domains,
                            error = %text,
                            advice = advice(&text),
                            "getting a TLS certificate failed; the last good certificate (if any) stays in use and kennis tries again later"
                        );
                    }
                }
            }
        })
    }
}

/// What to do about an ACME failure, from the text of the error.
fn advice(error: &str) -> &'static str {
    let e = error.to_ascii_lowercase();
    if e.contains("ratelimited") || e.contains("rate limit") || e.contains("too many") {
        "the CA's rate limit was hit: wait (see the CA's rate-limit documentation) and do not restart repeatedly; kennis retries by itself"
    } else if e.contains("bad auth")
        || e.contains("badauth")
        || e.contains("unauthorized")
        || e.contains("connection")
            && (e.contains("auth") || e.contains("challenge") || e.contains("tls-alpn"))
        || e.contains("dns")
    {
        "the CA could not validate the domain: make sure its DNS A/AAAA records point to this server and that port 443 reaches kennis directly (no TLS-terminating proxy in front)"
    } else if e.contains("io error")
        || e.contains("dns error")
        || e.contains("connect")
        || e.contains("timed out")
        || e.contains("directory")
    {
        "the ACME directory could not be reached: check the network, the --acme-directory URL and, for a private CA, KENNIS_ACME_CA_ROOT"
    } else if e.contains("cache") {
        "the certificate cache in the data directory could not be read or written: check its permissions"
    } else {
        "see the error; kennis retries with a growing pause"
    }
}

/// The latest `notAfter` (Unix seconds) of the certificates in the cache directory.
pub fn newest_expiry(cache_dir: &Path) -> Option<i64> {
    let entries = std::fs::read_dir(cache_dir).ok()?;
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("cert-"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|pem| first_cert_expiry(&pem))
        .max()
}

/// `notAfter` (Unix seconds) of the first certificate in a PEM bundle.
pub fn first_cert_expiry(pem: &[u8]) -> Option<i64> {
    let cert = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_files_are_private_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join(CACHE_DIR);
        write_private(&cache, "cert-x.pem", b"one").unwrap();
        write_private(&cache, "cert-x.pem", b"two").unwrap();
        assert_eq!(std::fs::read(cache.join("cert-x.pem")).unwrap(), b"two");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cache.join("cert-x.pem")), 0o600);
        assert_eq!(mode(&cache), 0o700);
        assert_eq!(
            std::fs::read_dir(&cache).unwrap().count(),
            1,
            "no temp left"
        );
    }

    #[test]
    fn advice_names_the_likely_cause() {
        assert!(advice("order: acme error: rateLimited").contains("rate limit"));
        assert!(advice("order: bad auth object: Auth { status: Invalid }").contains("DNS"));
        assert!(advice("order: acme error: io error: connection refused").contains("directory"));
    }
}
