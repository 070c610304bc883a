//! The extraction child process. [`Extractor::extract`] starts `kennis extract-worker` with an
//! empty environment and only stdin/stdout/stderr open (everything else kennis opens is
//! close-on-exec), sends a JSON header line (format and limits) and the file's bytes on stdin,
//! and reads the result from stdout, at most a bounded amount. A watchdog kills the child at
//! the wall-clock limit. The child ([`worker_main`]) first limits itself — address space
//! (`RLIMIT_AS`), CPU seconds (`RLIMIT_CPU`), no core files, no file writes, few descriptors —
//! and executes itself again under those limits, then confines itself (no files, no network:
//! [`super::confine`]), then reads and extracts.
//! How a child ends is turned into an [`ExtractError`]: killed at the deadline or by SIGXCPU →
//! `TimeLimit`, an allocation refused → `MemoryLimit`, anything else → `Crashed` with the
//! reason.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::confine::{self, Confined, Layers, WARNING_PREFIX};
use super::{ExtractError, Extracted, Format, Limits, extract_in_process};

/// The hidden subcommand that runs [`worker_main`].
pub const WORKER_COMMAND: &str = "extract-worker";

/// Comes before the result on the child's stdout, so stray output of a library cannot be
/// taken for it.
const MARKER: &[u8] = b"\n\0kennis-extract-result\0\n";

/// Kept of the child's stderr (for crash reasons).
const STDERR_KEPT: usize = 8 * 1024;

/// Read only by `kennis extract-worker`: when set (to a JSON [`Probes`]), the worker confines
/// itself as for an extraction, tries the probes before and after, prints what was allowed
/// and denied, and exits. It reads nothing from stdin, extracts nothing and prints no file's
/// content. The server never passes it: its children start with an empty environment.
pub const SELFTEST_ENV: &str = "KENNIS_EXTRACT_WORKER_SELFTEST";

/// Whether the server has logged the worker's sandbox warning yet (once per process).
static WARNED: AtomicBool = AtomicBool::new(false);

#[derive(Serialize, Deserialize)]
struct Request {
    format: Format,
    limits: Limits,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Ok(Extracted),
    Err(ExtractError),
}

/// Runs extractions in child processes; safe to share between threads (each call has its own
/// child). Blocking: call it from a blocking thread.
#[derive(Debug, Clone)]
pub struct Extractor {
    program: PathBuf,
    limits: Limits,
}

impl Extractor {
    /// `program` is the kennis binary (`std::env::current_exe()` in the server,
    /// `env!("CARGO_BIN_EXE_kennis")` in tests).
    pub fn new(program: PathBuf, limits: Limits) -> Self {
        Extractor { program, limits }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Extracts the text of `bytes` as `format` in a child process, within the limits.
    pub fn extract(&self, format: Format, bytes: &[u8]) -> Result<Extracted, ExtractError> {
        let limits = &self.limits;
        if bytes.len() > limits.input_bytes {
            return Err(ExtractError::TooLarge(format!(
                "{} bytes, more than the limit of {}",
                bytes.len(),
                limits.input_bytes
            )));
        }
        let mut header = serde_json::to_vec(&Request {
            format,
            limits: limits.clone(),
        })
        .map_err(|e| ExtractError::Crashed(format!("the request cannot be written ({e})")))?;
        header.push(b'\n');
        let mut child = spawn(&self.program)?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExtractError::Crashed("its pipes were not set up".into()));
        };
        let started = Instant::now();
        let child = Mutex::new(child);
        let timed_out = AtomicBool::new(false);
        let (done, done_rx) = mpsc::channel::<()>();
        let most = (limits.output_bytes as u64)
            .saturating_mul(4)
            .saturating_add(64 * 1024);
        let (out, overflow, status, stderr) = thread::scope(|s| {
            let (child_ref, timed_out_ref) = (&child, &timed_out);
            s.spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limits.time) {
                    timed_out_ref.store(true, Ordering::SeqCst);
                    let _ = lock(child_ref).kill();
                }
            });
            s.spawn(move || {
                // A child that stops reading (it refused the input) closes the pipe: fine.
                let _ = stdin
                    .write_all(&header)
                    .and_then(|()| stdin.write_all(bytes));
            });
            let errors = s.spawn(move || {
                let mut stderr = stderr;
                let mut kept = Vec::new();
                let _ = (&mut stderr)
                    .take(STDERR_KEPT as u64)
                    .read_to_end(&mut kept);
                // Drain the rest so the child never blocks on a full pipe.
                let _ = std::io::copy(&mut stderr, &mut std::io::sink());
                kept
            });
            let mut out = Vec::new();
            let read = stdout.take(most + 1).read_to_end(&mut out);
            let overflow = out.len() as u64 > most;
            if overflow || read.is_err() {
                let _ = lock(&child).kill();
            }
            let status = wait(&child);
            let _ = done.send(());
            let stderr = errors.join().unwrap_or_default();
            (out, overflow, status, stderr)
        });
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            format = format.extension(),
            "extraction child done"
        );
        warn_once(&stderr);
        if timed_out.load(Ordering::SeqCst) {
            return Err(ExtractError::TimeLimit(whole_seconds(limits.time)));
        }
        if overflow {
            return Err(ExtractError::Crashed(
                "the worker wrote more than the output limit allows".into(),
            ));
        }
        if let Some(reply) = reply_of(&out) {
            return match reply {
                Reply::Ok(extracted) => Ok(extracted),
                Reply::Err(e) => Err(e),
            };
        }
        Err(judge(status, &stderr, limits))
    }
}

/// Logs the first sandbox warning a worker wrote (a kernel without landlock, say) once.
fn warn_once(stderr: &[u8]) {
    let stderr = String::from_utf8_lossy(stderr);
    let Some(warning) = stderr.lines().find_map(|l| l.strip_prefix(WARNING_PREFIX)) else {
        return;
    };
    if !WARNED.swap(true, Ordering::SeqCst) {
        tracing::warn!(
            warning,
            "the extraction worker is less confined than it could be (logged once)"
        );
    }
}

/// What a child that gave no result died of.
fn judge(status: Option<ExitStatus>, stderr: &[u8], limits: &Limits) -> ExtractError {
    let stderr = String::from_utf8_lossy(stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if stderr.contains("memory allocation of") {
        return ExtractError::MemoryLimit(limits.memory_bytes >> 20);
    }
    if stderr.contains("overflowed its stack") {
        return ExtractError::Crashed("the parser overflowed its stack".into());
    }
    let Some(status) = status else {
        return ExtractError::Crashed("its exit could not be observed".into());
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let xcpu = rustix::process::Signal::XCPU.as_raw();
            if signal == xcpu {
                return ExtractError::TimeLimit(whole_seconds(limits.time));
            }
            return ExtractError::Crashed(if last.is_empty() {
                format!("it was stopped by signal {signal}")
            } else {
                format!("it was stopped by signal {signal} ({last})")
            });
        }
    }
    ExtractError::Crashed(match (status.code(), last.is_empty()) {
        (Some(code), true) => format!("it exited with status {code} and no result"),
        (Some(code), false) => format!("it exited with status {code} ({last})"),
        (None, _) => "it ended without a result".into(),
    })
}

fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits for the child to end (the watchdog kills it at the deadline).
fn wait(child: &Mutex<Child>) -> Option<ExitStatus> {
    loop {
        match lock(child).try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn spawn(program: &Path) -> Result<Child, ExtractError> {
    Command::new(program)
        .arg(WORKER_COMMAND)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            // The reason is shown to an organisation's admins: the server's path goes to the
            // log only.
            tracing::warn!(program = %program.display(), error = %e, "the extraction worker cannot be started");
            ExtractError::Crashed(format!("the worker cannot be started ({})", e.kind()))
        })
}

fn reply_of(out: &[u8]) -> Option<Reply> {
    let at = memchr::memmem::rfind(out, MARKER)?;
    serde_json::from_slice(out.get(at + MARKER.len()..)?).ok()
}

/// Sets the child's own limits before it reads the file.
#[cfg(unix)]
fn limit_self(limits: &Limits) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let set = |resource, value: u64| {
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
    };
    set(Resource::As, limits.memory_bytes)?;
    let cpu = whole_seconds(limits.time).max(1);
    setrlimit(
        Resource::Cpu,
        Rlimit {
            current: Some(cpu),
            maximum: Some(cpu + 1),
        },
    )?;
    set(Resource::Core, 0)?;
    set(Resource::Fsize, 0)?;
    set(Resource::Nofile, 16)?;
    Ok(())
}

#[cfg(not(unix))]
fn limit_self(_limits: &Limits) -> std::io::Result<()> {
    Ok(())
}

/// The reply of a worker that could not extract: `Crashed(why)`.
fn crashed(why: String) -> ExitCode {
    reply(&Reply::Err(ExtractError::Crashed(why)))
}

fn reply(r: &Reply) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let body = serde_json::to_vec(r).unwrap_or_default();
    let written = stdout
        .write_all(MARKER)
        .and_then(|()| stdout.write_all(&body))
        .and_then(|()| stdout.flush());
    if written.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The longest request line the worker reads.
const HEADER_MOST: usize = 64 * 1024;

/// The child side (`kennis extract-worker`), in two steps of one process. First it reads the
/// request line, sets its limits and executes itself again as `extract-worker --limited
/// REQUEST` ([`start_limited`]): limits set before `exec` bind everything the new image maps,
/// its allocator's first arenas included (an allocator that reserves address space before
/// `main` would otherwise go on allocating inside it past `RLIMIT_AS`). The limited image
/// ([`run_limited`]) confines itself (no files, no network), reads the file from stdin,
/// extracts, and writes the result to stdout. With [`SELFTEST_ENV`] set it runs [`selftest`]
/// instead.
pub fn worker_main(limited: Option<&str>) -> ExitCode {
    if let Some(probes) = std::env::var_os(SELFTEST_ENV) {
        return selftest(&probes.to_string_lossy());
    }
    match limited {
        None => start_limited(),
        Some(header) => run_limited(header.as_bytes()),
    }
}

/// Reads the request line, limits itself and runs [`run_limited`] under those limits: in a new
/// image where the platform allows (`exec`), else in this one.
fn start_limited() -> ExitCode {
    let Ok(header) = read_header() else {
        return ExitCode::FAILURE;
    };
    if let Err(code) = request_of(&header).and_then(|r| limited(&r.limits)) {
        return code;
    }
    #[cfg(unix)]
    {
        let e = exec_limited(&header);
        crashed(format!("the worker cannot start under its limits ({e})"))
    }
    #[cfg(not(unix))]
    run_limited(&header)
}

/// The request the parent wrote as the first line, or the exit of a worker given a bad one.
fn request_of(header: &[u8]) -> Result<Request, ExitCode> {
    serde_json::from_slice(header).map_err(|_| {
        eprintln!("extract-worker: a bad request header");
        ExitCode::from(2)
    })
}

/// [`limit_self`], or the reply of a worker that cannot.
fn limited(limits: &Limits) -> Result<(), ExitCode> {
    limit_self(limits).map_err(|e| crashed(format!("the worker cannot limit itself ({e})")))
}

/// The request line from stdin, read a byte at a time from the descriptor itself, so nothing
/// past the line is taken from the pipe before `exec` (the file's bytes are for the next image).
#[cfg(unix)]
fn read_header() -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsFd;
    let stdin = std::io::stdin().as_fd().try_clone_to_owned()?;
    read_line(std::fs::File::from(stdin))
}

#[cfg(not(unix))]
fn read_header() -> std::io::Result<Vec<u8>> {
    read_line(std::io::stdin())
}

/// Up to [`HEADER_MOST`] bytes before the first line break (which is consumed, not kept).
fn read_line(mut from: impl Read) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while line.len() < HEADER_MOST {
        match from.read_exact(&mut byte) {
            Ok(()) if byte[0] == b'\n' => break,
            Ok(()) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
    }
    Ok(line)
}

/// Replaces this process with `extract-worker --limited REQUEST` of the same program, with an
/// empty environment and the same three descriptors (the rest are close-on-exec). Returns
/// only if that fails.
#[cfg(unix)]
fn exec_limited(header: &[u8]) -> std::io::Error {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    // The running program itself, even if its file was replaced since it started.
    let program = if cfg!(target_os = "linux") {
        PathBuf::from("/proc/self/exe")
    } else {
        match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => return e,
        }
    };
    Command::new(program)
        .arg(WORKER_COMMAND)
        .arg("--limited")
        .arg(OsStr::from_bytes(header))
        .env_clear()
        .exec()
}

/// The limited image: sets the limits again (the same values after [`start_limited`], so this
/// changes nothing then; it binds a worker started as `--limited` by hand), confines itself,
/// reads the file and extracts.
fn run_limited(header: &[u8]) -> ExitCode {
    let request = match request_of(header) {
        Ok(request) => request,
        Err(code) => return code,
    };
    let limits = request.limits;
    if let Err(code) = limited(&limits) {
        return code;
    }
    if let Err(e) = confine_self(Layers::Both) {
        return crashed(format!("the worker cannot confine itself: {e}"));
    }
    let mut bytes = Vec::new();
    let most = limits.input_bytes as u64;
    if let Err(e) = std::io::stdin()
        .lock()
        .take(most + 1)
        .read_to_end(&mut bytes)
    {
        return crashed(format!("the file could not be read ({e})"));
    }
    let r = match extract_in_process(request.format, &bytes, &limits) {
        Ok(x) => Reply::Ok(x),
        Err(e) => Reply::Err(e),
    };
    reply(&r)
}

/// [`confine::confine_layers`], with its warnings on stderr for the parent to log.
fn confine_self(layers: Layers) -> Result<Confined, String> {
    let confined = confine::confine_layers(layers)?;
    for w in &confined.warnings {
        eprintln!("{WARNING_PREFIX}{w}");
    }
    Ok(confined)
}

/// What the self-test tries: open and read these paths (a directory is listed), create a file
/// at these paths, open a TCP connection to these addresses, send a UDP datagram to these,
/// and ask whether these processes may be signalled (signal 0, which delivers nothing) by
/// every system call that sends one. `only` (`"landlock"` or `"seccomp"`) applies that layer
/// alone, to show each holds by itself.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Probes {
    only: Option<String>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    connect: Vec<String>,
    udp: Vec<String>,
    signal: Vec<i32>,
}

#[derive(Debug, Serialize)]
struct Outcome {
    probe: String,
    /// `"allowed"`, or `"denied: "` and the error.
    outcome: String,
}

#[derive(Serialize)]
struct SelftestReport {
    /// The sandbox's state, or why it could not be set up.
    sandbox: Result<Confined, String>,
    /// The read, connect and udp probes before the sandbox (writes are only tried after).
    before: Vec<Outcome>,
    after: Vec<Outcome>,
}

fn outcome(probe: String, result: std::io::Result<()>) -> Outcome {
    Outcome {
        probe,
        outcome: match result {
            Ok(()) => "allowed".into(),
            Err(e) => format!("denied: {e}"),
        },
    }
}

fn run_probes(probes: &Probes, writes: bool) -> Vec<Outcome> {
    use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
    let addr = |a: &str| {
        a.to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))
    };
    let mut out = Vec::new();
    for path in &probes.read {
        let result = if path.is_dir() {
            std::fs::read_dir(path).map(drop)
        } else {
            std::fs::File::open(path).and_then(|mut f| f.read(&mut [0u8; 1]).map(drop))
        };
        out.push(outcome(format!("read {}", path.display()), result));
    }
    if writes {
        for path in &probes.write {
            let result = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map(drop);
            out.push(outcome(format!("write {}", path.display()), result));
        }
    }
    for a in &probes.connect {
        let result = addr(a)
            .and_then(|to| TcpStream::connect_timeout(&to, Duration::from_secs(2)))
            .map(drop);
        out.push(outcome(format!("connect {a}"), result));
    }
    for a in &probes.udp {
        let result = addr(a).and_then(|to| {
            UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.send_to(b"kennis extract-worker selftest", to))
                .map(drop)
        });
        out.push(outcome(format!("udp {a}"), result));
    }
    for pid in &probes.signal {
        for (call, result) in signal_probes(*pid) {
            out.push(outcome(format!("{call} {pid}"), result));
        }
    }
    out
}

/// Signal 0 (a permission check that delivers nothing) to process `pid` — whose main thread
/// has the same id — by each system call that can send a signal to another process.
#[cfg(target_os = "linux")]
fn signal_probes(pid: i32) -> Vec<(&'static str, std::io::Result<()>)> {
    let done = |r: libc::c_long| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: plain system calls with integer arguments and a zeroed `siginfo_t` that lives
    // for the call; signal 0 changes nothing in the target.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        // As `sigqueue` sends it (another process refuses kernel or `kill` codes).
        info.si_code = libc::SI_QUEUE;
        let info: *mut libc::siginfo_t = &mut info;
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        let by_pidfd = if pidfd < 0 {
            done(pidfd)
        } else {
            let r = done(libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd,
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            ));
            libc::close(pidfd as libc::c_int);
            r
        };
        vec![
            ("kill", done(libc::syscall(libc::SYS_kill, pid, 0))),
            ("tkill", done(libc::syscall(libc::SYS_tkill, pid, 0))),
            ("tgkill", done(libc::syscall(libc::SYS_tgkill, pid, pid, 0))),
            (
                "rt_sigqueueinfo",
                done(libc::syscall(libc::SYS_rt_sigqueueinfo, pid, 0, info)),
            ),
            (
                "rt_tgsigqueueinfo",
                done(libc::syscall(
                    libc::SYS_rt_tgsigqueueinfo,
                    pid,
                    pid,
                    0,
                    info,
                )),
            ),
            ("pidfd_send_signal", by_pidfd),
        ]
    }
}

#[cfg(not(target_os = "linux"))]
fn signal_probes(_pid: i32) -> Vec<(&'static str, std::io::Result<()>)> {
    Vec::new()
}

/// The worker's self-check ([`SELFTEST_ENV`]): tries the probes, limits and confines itself
/// as for an extraction (without the second `exec`, which changes no permission), tries them
/// again and prints a JSON [`SelftestReport`]. It reports only allowed or denied, never what a
/// file holds.
fn selftest(probes: &str) -> ExitCode {
    let probes: Probes = match serde_json::from_str(probes) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("extract-worker: {SELFTEST_ENV} is not a valid probe list ({e})");
            return ExitCode::from(2);
        }
    };
    let layers = match probes.only.as_deref() {
        None => Layers::Both,
        Some("landlock") => Layers::LandlockOnly,
        Some("seccomp") => Layers::SeccompOnly,
        Some(other) => {
            eprintln!("extract-worker: unknown layer `{other}` (landlock or seccomp)");
            return ExitCode::from(2);
        }
    };
    let before = run_probes(&probes, false);
    let sandbox = limit_self(&Limits::DEFAULT)
        .map_err(|e| format!("the worker cannot limit itself ({e})"))
        .and_then(|()| confine_self(layers));
    let after = run_probes(&probes, true);
    let report = SelftestReport {
        sandbox,
        before,
        after,
    };
    let body = serde_json::to_string(&report).unwrap_or_default();
    println!("{body}");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request line is taken up to its line break and no further: what follows is the
    /// file, for the image the worker executes next.
    #[test]
    fn the_request_line_leaves_the_file_unread() {
        let mut input = std::io::Cursor::new(b"{\"format\":\"rtf\"}\n{\\rtf1 body}".to_vec());
        assert_eq!(read_line(&mut input).unwrap(), b"{\"format\":\"rtf\"}");
        let mut rest = Vec::new();
        input.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"{\\rtf1 body}");
        // No line break: all of it, at most HEADER_MOST bytes.
        let long = vec![b'x'; HEADER_MOST + 10];
        let mut input = std::io::Cursor::new(long);
        assert_eq!(read_line(&mut input).unwrap().len(), HEADER_MOST);
        assert_eq!(input.position(), HEADER_MOST as u64);
        assert!(read_line(std::io::empty()).unwrap().is_empty());
    }

    /// A request line that is not JSON, or lacks the limits, is refused before the worker
    /// limits itself.
    #[test]
    fn a_bad_request_line_is_refused() {
        assert!(request_of(b"not json").is_err());
        assert!(
            request_of(b"{\"format\":\"rtf\"}").is_err(),
            "limits are required"
        );
    }
}
