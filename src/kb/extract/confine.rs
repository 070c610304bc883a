//! The extract-worker's sandbox: once its limits are set and before it reads the file, the
//! child gives up every file and every network connection for good, in two independent
//! layers (see `docs/extraction.md`, "The worker's sandbox"):
//!
//! - **landlock** (Linux 5.13+): a ruleset that handles every filesystem access right the
//!   kernel knows and grants none, so no file or directory can be opened, read, written,
//!   created, removed or executed; from ABI 4 (Linux 6.7) also TCP bind and connect, from
//!   ABI 6 (Linux 6.12) abstract UNIX sockets and signals to other processes. Best effort: on
//!   an older kernel, the rights it lacks are simply not handled.
//! - **seccomp** (every Linux kernel kennis runs on): a filter on the system calls of this
//!   architecture that answers `EPERM` to creating a socket, opening or changing a path,
//!   starting a program, io_uring (which would bypass the filter), tracing, signalling or
//!   reaching into other processes (every call that sends a signal, pidfds), mounts and
//!   namespaces, and raising the resource limits just set. Another architecture's
//!   calls (32-bit `int 0x80`) kill the child.
//!
//! seccomp is required: a worker that cannot install it refuses to extract. landlock is the
//! second wall: without it the worker still extracts (the filter alone denies files and
//! sockets) and says so in a warning, which the server logs once.

/// What the sandbox achieved; `warnings` are written to stderr as
/// `extract-worker: sandbox: …` lines.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Confined {
    /// `"enforced (ABI n)"`, `"enforced as far as this kernel's ABI n goes"`, or why landlock
    /// is not in force.
    pub landlock: String,
    /// Whether the seccomp filter is installed.
    pub seccomp: bool,
    pub warnings: Vec<String>,
}

/// The prefix of the warning lines the worker writes to stderr.
pub const WARNING_PREFIX: &str = "extract-worker: sandbox: ";

/// Which layers to apply: both, always, for an extraction. The worker's self-test may ask for
/// one alone, to show that each holds by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    Both,
    LandlockOnly,
    SeccompOnly,
}

/// Confines the calling process (single-threaded: the worker has no other threads yet) with
/// `layers` (an extraction: [`Layers::Both`]). An error means the required seccomp layer could
/// not be installed.
#[cfg(target_os = "linux")]
pub fn confine_layers(layers: Layers) -> Result<Confined, String> {
    let mut confined = Confined::default();
    if layers == Layers::SeccompOnly {
        confined.landlock = "left out (self-test)".into();
    } else {
        apply_landlock(&mut confined);
    }
    if layers != Layers::LandlockOnly {
        seccomp().map_err(|e| format!("the seccomp filter cannot be installed ({e})"))?;
        confined.seccomp = true;
    }
    Ok(confined)
}

#[cfg(target_os = "linux")]
fn apply_landlock(confined: &mut Confined) {
    match landlock() {
        Ok((text, full_fs)) => {
            if !full_fs {
                confined.warnings.push(format!(
                    "landlock is {text}; files are denied by the seccomp filter only"
                ));
            }
            confined.landlock = text;
        }
        Err(e) => {
            confined.warnings.push(format!(
                "landlock cannot be used ({e}); files are denied by the seccomp filter only"
            ));
            confined.landlock = format!("not in force ({e})");
        }
    }
}

/// Without Linux there is no sandbox beyond the resource limits; the worker says so.
#[cfg(not(target_os = "linux"))]
pub fn confine_layers(_layers: Layers) -> Result<Confined, String> {
    Ok(Confined {
        landlock: "not available on this system".into(),
        seccomp: false,
        warnings: vec![
            "no file or network sandbox on this system (Linux only); only resource limits apply"
                .into(),
        ],
    })
}

/// Applies the landlock ruleset that allows nothing. Returns a description and whether the
/// filesystem part is in force.
#[cfg(target_os = "linux")]
fn landlock() -> Result<(String, bool), landlock::RulesetError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, LandlockStatus, Ruleset, RulesetAttr, RulesetStatus,
        Scope,
    };
    // The newest ABI this crate knows; best effort keeps what the running kernel has.
    let abi = ABI::V10;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .restrict_self()?;
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi.map_or_else(|| effective_abi.to_string(), |k| k.to_string()),
        LandlockStatus::NotEnabled => {
            return Ok(("not enabled in this kernel".into(), false));
        }
        LandlockStatus::NotImplemented => {
            return Ok(("not built into this kernel".into(), false));
        }
    };
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => (format!("enforced (ABI {abi})"), true),
        // Best effort: every right the kernel's ABI knows is handled; newer ones do not exist.
        RulesetStatus::PartiallyEnforced => (
            format!("enforced as far as this kernel's ABI {abi} goes"),
            true,
        ),
        RulesetStatus::NotEnforced => (format!("not enforced (ABI {abi})"), false),
    })
}

/// The system calls answered with `EPERM`, for this architecture.
#[cfg(target_os = "linux")]
fn denied_calls() -> Vec<libc::c_long> {
    let mut calls = vec![
        // Network: no socket can be made, so none can connect or listen.
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_listen,
        libc::SYS_accept4,
        // Paths: nothing can be opened, made, changed, removed or run.
        libc::SYS_openat,
        libc::SYS_openat2,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_truncate,
        libc::SYS_unlinkat,
        libc::SYS_renameat2,
        libc::SYS_mkdirat,
        libc::SYS_linkat,
        libc::SYS_symlinkat,
        libc::SYS_mknodat,
        libc::SYS_fchmodat,
        libc::SYS_fchownat,
        libc::SYS_fchmod,
        libc::SYS_fchown,
        libc::SYS_ftruncate,
        libc::SYS_chdir,
        libc::SYS_fchdir,
        // Ways around the filter or out of the process.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_process_madvise,
        libc::SYS_kcmp,
        // Signals to other processes: `kill` here; `tkill`, `tgkill`, `rt_sigqueueinfo` and
        // `rt_tgsigqueueinfo` only towards itself (see `seccomp`); a pidfd reaches any.
        libc::SYS_kill,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_send_signal,
        libc::SYS_pidfd_getfd,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_setrlimit,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_open,
        libc::SYS_creat,
        libc::SYS_accept,
        libc::SYS_unlink,
        libc::SYS_rename,
        libc::SYS_renameat,
        libc::SYS_mkdir,
        libc::SYS_rmdir,
        libc::SYS_link,
        libc::SYS_symlink,
        libc::SYS_mknod,
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
    ]);
    calls
}

/// Installs the seccomp filter (it also sets no-new-privileges).
#[cfg(target_os = "linux")]
#[allow(
    clippy::useless_conversion,
    reason = "call numbers are `c_long`, i64 only on 64-bit targets"
)]
fn seccomp() -> Result<(), seccompiler::Error> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = denied_calls()
        .into_iter()
        .map(|call| (i64::from(call), Vec::new()))
        .collect();
    // Signals by thread or process id only to itself (`abort` signals itself with `tgkill`):
    // the first argument, a process or thread id, must be this process's (it has one thread).
    let own = u64::from(std::process::id());
    let other_than_own = || -> Result<Vec<SeccompRule>, seccompiler::Error> {
        Ok(vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            own,
        )?])?])
    };
    for call in [
        libc::SYS_tkill,
        libc::SYS_tgkill,
        libc::SYS_rt_sigqueueinfo,
        libc::SYS_rt_tgsigqueueinfo,
    ] {
        rules.insert(i64::from(call), other_than_own()?);
    }
    // `prlimit64` only to read a limit (its new-limit pointer is null), never to raise one.
    rules.insert(
        i64::from(libc::SYS_prlimit64),
        vec![SeccompRule::new(vec![SeccompCondition::new(
            2,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::Ne,
            0,
        )?])?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    let program: BpfProgram = filter.try_into()?;
    seccompiler::apply_filter(&program)
}
