//! The rules that keep password and second-factor checks safe under parallel attack, in one
//! service the portal holds through `App`:
//!
//! - **Reserve, then judge.** A failure is counted *before* the password is hashed (the
//!   reservation) and given back when the check succeeds, so a burst of parallel guesses cannot
//!   all pass a "not blocked yet" check: at most [`FAILURES_PER_WINDOW`] are ever judged.
//! - **Per account and address.** Failures count per (account, client address): a stranger
//!   who fails against someone's account blocks only their own address, never the owner.
//!   Each address may also post the login and the second-factor form only
//!   [`ATTEMPTS_PER_WINDOW`] times per window, whatever the account.
//! - **Second factor per account too.** Only someone who knows the password reaches it, so a
//!   per-account cap ([`CODE_FAILURES_PER_ACCOUNT`]) cannot be used by a stranger.
//! - **A bounded pool for argon2.** Each hash takes ~19 MiB; at most [`hashers`] run at once,
//!   others wait up to [`HASH_WAIT`] and are then refused as busy (503), so parallel logins
//!   cannot grow memory without bound. Unknown emails hash too (same time), inside the pool.

use std::net::IpAddr;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{IdentityError, Person, sessions};
use crate::clock::SharedClock;
use crate::ratelimit::{Limiter, WINDOW};
use crate::store::{Store, StoreError, WriteTx};

/// Login and second-factor form posts per client address per window (each form counted on
/// its own).
pub const ATTEMPTS_PER_WINDOW: u32 = 50;
/// Failed passwords (and, separately, failed codes) per account and address per window.
pub const FAILURES_PER_WINDOW: u32 = 10;
/// Failed second-factor codes per account per window, from all addresses together.
pub const CODE_FAILURES_PER_ACCOUNT: u32 = 30;
/// How long a login waits for a free hasher before it is refused as busy.
pub const HASH_WAIT: Duration = Duration::from_secs(5);

/// Password hashes computed at once: the machine's cores, 2 to 4.
pub fn hashers() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(2)
        .clamp(2, 4)
}

/// The account a login names, as the failure counts key it (normalised, capped).
pub fn account_key(email: &str) -> String {
    super::normalize_email(email).unwrap_or_else(|_| {
        let lower = email.trim().to_lowercase();
        lower.chars().take(320).collect()
    })
}

pub struct LoginGuard {
    clock: SharedClock,
    password_posts: Limiter<IpAddr>,
    code_posts: Limiter<IpAddr>,
    password_failures: Limiter<(String, IpAddr)>,
    code_failures: Limiter<(String, IpAddr)>,
    code_failures_account: Limiter<String>,
    hashing: Arc<Semaphore>,
    hash_wait: Duration,
    hashers: Hashers,
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads that run every password hash. Fixed, not tokio's blocking pool:
/// each thread that ever ran argon2 keeps its ~19 MiB in its malloc arena, so hashing on up to
/// 512 blocking threads grew the process by gigabytes under a burst of logins; a few
/// dedicated threads keep that to a few of those.
struct Hashers {
    jobs: Mutex<Sender<Job>>,
}

impl Hashers {
    fn start(n: usize) -> Hashers {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n.max(1) {
            let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("kennis-hash-{i}"))
                .spawn(move || {
                    loop {
                        // The lock is held only while taking a job, not while running it.
                        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break, // the guard is gone
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a password-hashing thread");
            }
        }
        Hashers {
            jobs: Mutex::new(tx),
        }
    }

    /// Runs `f` on a hashing thread; `None` when no thread took it (the service is stopping).
    async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .ok()?;
        result.await.ok()
    }
}

fn too_many(wait: Duration) -> IdentityError {
    IdentityError::TooManyAttempts { retry_after: wait }
}

impl LoginGuard {
    pub fn new(clock: SharedClock, hashers: usize) -> LoginGuard {
        LoginGuard {
            password_posts: Limiter::new(ATTEMPTS_PER_WINDOW, WINDOW, clock.clone()),
            code_posts: Limiter::new(ATTEMPTS_PER_WINDOW, WINDOW, clock.clone()),
            password_failures: Limiter::new(FAILURES_PER_WINDOW, WINDOW, clock.clone()),
            code_failures: Limiter::new(FAILURES_PER_WINDOW, WINDOW, clock.clone()),
            code_failures_account: Limiter::new(CODE_FAILURES_PER_ACCOUNT, WINDOW, clock.clone()),
            hashing: Arc::new(Semaphore::new(hashers.max(1))),
            hash_wait: HASH_WAIT,
            hashers: Hashers::start(hashers),
            clock,
        }
    }

    /// Runs password hashing work (`f`) in the bounded pool of hashing threads, off the async
    /// workers; waits at most [`HASH_WAIT`] for a free one.
    pub async fn hash<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, IdentityError> {
        let permit = tokio::time::timeout(self.hash_wait, self.hashing.clone().acquire_owned())
            .await
            .map_err(|_| IdentityError::Busy {
                retry_after: Duration::from_secs(2),
            })?
            .map_err(|_| IdentityError::Interrupted)?;
        let out = self
            .hashers
            .run(f)
            .await
            .ok_or(IdentityError::Interrupted)?;
        drop(permit);
        Ok(out)
    }

    /// Checks a password login from `ip` and starts a session: the session token and person.
    pub async fn password_login(
        &self,
        store: &Store,
        email: &str,
        password: &str,
        ip: IpAddr,
    ) -> Result<(String, Person), IdentityError> {
        let (s, e, p) = (store.clone(), email.to_owned(), password.to_owned());
        let person = self
            .password_step(email, ip, move || super::verify_login(&s, &e, &p))
            .await?;
        let token = sessions::create(store, person.id, self.clock.now())?;
        Ok((token, person))
    }

    /// Runs `f`, a step that checks or sets `email`'s password (a login, a one-time link's
    /// form), on the hashing threads under the login limits: posts per address, and wrong passwords per
    /// account and address — a wrong one ([`IdentityError::BadCredentials`]) counts as a
    /// failed login, anything else does not.
    pub async fn password_step<T: Send + 'static>(
        &self,
        email: &str,
        ip: IpAddr,
        f: impl FnOnce() -> Result<T, IdentityError> + Send + 'static,
    ) -> Result<T, IdentityError> {
        self.password_posts.check(&ip).map_err(too_many)?;
        let reserved = (account_key(email), ip);
        self.password_failures.check(&reserved).map_err(too_many)?;
        let judged = self.hash(f).await.and_then(|r| r);
        if !matches!(judged, Err(IdentityError::BadCredentials)) {
            self.password_failures.refund(&reserved);
        }
        judged
    }

    /// Checks a second-factor code for a session from `ip`; on success the session has
    /// passed the second factor. Returns the person as now stored.
    pub async fn second_factor(
        &self,
        store: &Store,
        session: [u8; 32],
        person: &Person,
        code: &str,
        ip: IpAddr,
    ) -> Result<Person, IdentityError> {
        self.code_posts.check(&ip).map_err(too_many)?;
        let account = account_key(&person.email);
        let reserved = (account.clone(), ip);
        self.code_failures.check(&reserved).map_err(too_many)?;
        if let Err(wait) = self.code_failures_account.check(&account) {
            self.code_failures.refund(&reserved);
            return Err(too_many(wait));
        }
        let (s, id, code, now) = (store.clone(), person.id, code.to_owned(), self.clock.now());
        let judged = tokio::task::spawn_blocking(move || {
            super::verify_totp(&s, id, &code, now)?;
            sessions::update(&s, &session, |s| s.second_factor = true)?;
            s.read(|tx| tx.get::<Person>(crate::store::PEOPLE, &crate::store::key::id(id)))?
                .ok_or_else(|| IdentityError::UnknownPerson(format!("#{id}")))
        })
        .await
        .map_err(|_| IdentityError::Interrupted)
        .and_then(|r| r);
        if !matches!(judged, Err(IdentityError::BadSecondFactor)) {
            self.code_failures.refund(&reserved);
            self.code_failures_account.refund(&account);
        }
        judged
    }

    /// Changes a person's password from one of their sessions: the current password is
    /// checked (counted like a login failure when wrong), the new one must be strong, and
    /// `revoke` ends the person's other credentials in the same transaction (every other
    /// session, their grants: `oauth::change_password`). Returns what `revoke` says ended.
    pub async fn change_password(
        &self,
        store: &Store,
        person: &Person,
        current: &str,
        new: &str,
        ip: IpAddr,
        revoke: impl FnOnce(&mut WriteTx, u64) -> Result<usize, StoreError> + Send + 'static,
    ) -> Result<usize, IdentityError> {
        let reserved = (account_key(&person.email), ip);
        self.password_failures.check(&reserved).map_err(too_many)?;
        let (s, email, id) = (store.clone(), person.email.clone(), person.id);
        let (current, new) = (current.to_owned(), new.to_owned());
        let judged = self
            .hash(move || {
                super::verify_login(&s, &email, &current)?;
                let hash = super::new_password_hash(&new, &email)?;
                s.write(|tx| {
                    super::set_password_in(tx, id, hash)?;
                    Ok(revoke(tx, id)?)
                })
            })
            .await
            .and_then(|r| r);
        if !matches!(judged, Err(IdentityError::BadCredentials)) {
            self.password_failures.refund(&reserved);
        }
        judged
    }
}
