//! The admin socket: a Unix socket in the data directory (mode 0600) through which the command
//! line reaches a running server. One request per connection, JSON lines: the client writes
//! the request; the server answers with zero or more `{"progress": …}` lines and one final
//! `{"ok": …}` or `{"error": …, "refused": bool}` line.

use crate::progress::{Progress, Report};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{AdminContext, AdminError, AdminRequest, execute};

pub const SOCKET_FILE: &str = "admin.sock";

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("admin socket {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("admin socket: bad answer from the server: {0}")]
    Protocol(String),
    #[error("{0}")]
    Remote(String),
}

pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_FILE)
}

/// Sends `req` to a server listening on the data directory's socket. `Ok(None)` means no
/// server is listening there, so the caller may open the store itself.
pub fn try_send(
    data_dir: &Path,
    req: &AdminRequest,
    progress: Report<'_>,
) -> Result<Option<Value>, AdminError> {
    let path = socket_path(data_dir);
    let io = |source| SocketError::Io {
        path: path.clone(),
        source,
    };
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(io(e).into()),
    };
    let mut line = serde_json::to_vec(req).map_err(|e| SocketError::Protocol(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let line = line.map_err(io)?;
        let v: Value =
            serde_json::from_str(&line).map_err(|e| SocketError::Protocol(e.to_string()))?;
        if let Some(p) = v.get("progress") {
            match serde_json::from_value::<Progress>(p.clone()) {
                Ok(p) => progress(p),
                Err(_) => progress(Progress::note(p.as_str().unwrap_or_default())),
            }
        } else if let Some(ok) = v.get("ok") {
            return Ok(Some(ok.clone()));
        } else if let Some(err) = v.get("error").and_then(Value::as_str) {
            return Err(if v.get("refused").and_then(Value::as_bool) == Some(true) {
                AdminError::Refused(err.to_owned())
            } else {
                SocketError::Remote(err.to_owned()).into()
            });
        }
    }
    Err(SocketError::Protocol("connection closed without an answer".into()).into())
}

/// Binds the data directory's admin socket (mode 0600). Done before the server reports that
/// it is up, so a command run right after start-up finds the socket.
pub fn bind_socket(data_dir: &Path) -> Result<tokio::net::UnixListener, SocketError> {
    let path = socket_path(data_dir);
    let io = |source| SocketError::Io {
        path: path.clone(),
        source,
    };
    // A socket file left by a killed server would block the bind; we hold the database lock,
    // so no other server can be using it.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).map_err(io)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok(listener)
}

/// Serves admin requests on `listener` until `shutdown` resolves, then removes the socket.
pub async fn serve_socket(
    ctx: AdminContext,
    listener: tokio::net::UnixListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), SocketError> {
    let path = socket_path(&ctx.data_dir);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(ctx, stream).await {
                        tracing::warn!(error = %e, "admin socket connection failed");
                    }
                });
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

async fn handle(ctx: AdminContext, stream: tokio::net::UnixStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    let Some(line) = lines.next_line().await? else {
        return Ok(());
    };
    let req: AdminRequest = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            let msg = json!({"error": format!("bad request: {e}"), "refused": true});
            return write.write_all(format!("{msg}\n").as_bytes()).await;
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    // redb work blocks; keep it off the async workers.
    let work = tokio::task::spawn_blocking(move || {
        // A step is sent at most every 100 ms (and always the last of its stage).
        let mut last_step: Option<std::time::Instant> = None;
        let mut progress = |p: Progress| {
            if !p.is_final() && last_step.is_some_and(|t| t.elapsed().as_millis() < 100) {
                return;
            }
            if matches!(p, Progress::Step { .. }) {
                last_step = Some(std::time::Instant::now());
            }
            let _ = tx.send(json!({ "progress": p }).to_string());
        };
        execute(&ctx, req, &mut progress)
    });
    while let Some(p) = rx.recv().await {
        write.write_all(format!("{p}\n").as_bytes()).await?;
    }
    let answer = match work.await {
        Ok(Ok(v)) => json!({"ok": v}),
        Ok(Err(AdminError::Refused(m))) => json!({"error": m, "refused": true}),
        Ok(Err(e)) => json!({"error": e.to_string(), "refused": false}),
        Err(e) => json!({"error": format!("internal error: {e}"), "refused": false}),
    };
    write.write_all(format!("{answer}\n").as_bytes()).await?;
    write.shutdown().await
}
