//! TLS with rustls (ring provider). Handshakes run in their own tasks, so one slow client
//! cannot hold up the accept loop; finished connections are handed to axum through a channel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsFiles;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the acceptor from PEM files, with a message that names the file on failure; also
/// returns the certificate's `notAfter` (Unix seconds) for `/healthz` and `/metrics`.
pub fn acceptor(files: &TlsFiles) -> Result<(TlsAcceptor, Option<i64>), String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| format!("tls_cert {}: {e}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_cert {}: {e}", files.cert.display()))?;
    let Some(certs_first) = certs.first().cloned() else {
        return Err(format!(
            "tls_cert {}: no certificate found",
            files.cert.display()
        ));
    };
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("tls_key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_cert/tls_key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let expiry = x509_parser::parse_x509_certificate(&certs_first)
        .ok()
        .map(|(_, c)| c.validity().not_after.timestamp());
    Ok((TlsAcceptor::from(Arc::new(config)), expiry))
}

pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Serves TLS on `listener`, bound to `local`.
    pub fn new(listener: TcpListener, local: SocketAddr, acceptor: TlsAcceptor) -> TlsListener {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                // Stop as soon as the server is gone, so the port is free for a restart.
                let accepted = tokio::select! {
                    _ = tx.closed() => break,
                    a = listener.accept() => a,
                };
                let (tcp, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        // A TLS-ALPN-01 validation ends with the handshake (RFC 8737).
                        Ok(Ok(tls))
                            if tls.get_ref().1.alpn_protocol()
                                == Some(super::acme::ACME_TLS_ALPN) =>
                        {
                            tracing::info!(%peer, "answered an ACME TLS-ALPN-01 validation");
                        }
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { rx, local }
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for super::PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        super::PeerAddr(*stream.remote_addr())
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
