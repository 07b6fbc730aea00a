//! Canary secrets and the run's log directory. Every secret the suite configures (the SMTP
//! password, the database password, the unsubscribe signing key, users' passwords) is a recognisable value made
//! fresh for this run, and every log of the run (each `mailroom` process, the test cluster's
//! server log, this process's own tracing) is a file under one directory, so
//! `scripts/scan-test-logs` can show afterwards that no secret reached a log.
//!
//! The directory is `MAILROOM_TEST_LOG_DIR` (kept for the scan), else a scratch directory
//! removed when this process exits. Each canary is written to `<dir>/canaries` with the
//! encodings it could leak in when it is first handed out, so a run that never used one fails
//! the scan instead of passing for want of anything to find.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;

/// The SMTP user of every relay in the suite (not a secret; part of the AUTH encodings).
pub const SMTP_USER: &str = "ann";

/// The database role that logs in with the canary password.
pub const DB_USER: &str = "mailroom_pw";

struct Run {
    dir: PathBuf,
    /// Unique per run; ':' so that the percent-encoded form differs from the raw one.
    tag: String,
    recorded: Mutex<HashSet<&'static str>>,
}

static RUN: OnceLock<Run> = OnceLock::new();
static NEXT_LOG: AtomicU32 = AtomicU32::new(0);

fn run() -> &'static Run {
    RUN.get_or_init(|| {
        let dir = match std::env::var_os("MAILROOM_TEST_LOG_DIR") {
            Some(d) => PathBuf::from(d),
            None => {
                let d =
                    std::env::temp_dir().join(format!("mailroom-test-logs.{}", std::process::id()));
                remove_at_exit(&d);
                d
            }
        };
        std::fs::create_dir_all(&dir).expect("create the test log directory");
        log_this_process(&dir);
        Run {
            dir,
            tag: format!("{:016x}", rand::random::<u64>()),
            recorded: Mutex::new(HashSet::new()),
        }
    })
}

/// This process's own tracing (the in-process app, workers and SMTP code) into the directory,
/// at debug for our crates: a leak at any level the operator might turn on is caught.
fn log_this_process(dir: &Path) {
    let file = std::fs::File::create(dir.join("in-process.log")).expect("create in-process.log");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,mailroom=debug,app=debug",
        ))
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .try_init();
}

/// Removes `dir` once this test process is gone.
fn remove_at_exit(dir: &Path) {
    crate::support::helpers::after_exit(&format!("rm -rf '{}'", dir.display()));
}

pub fn log_dir() -> &'static Path {
    &run().dir
}

/// A fresh log file for `what`, named after the running test (libtest names the thread).
pub fn log_file(what: &str) -> PathBuf {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("unnamed").replace("::", ".");
    let n = NEXT_LOG.fetch_add(1, Ordering::SeqCst);
    log_dir().join(format!("{test}.{what}.{n}.log"))
}

/// The forms in which `value`, a secret of `kind`, could reach a log: as given, inside a URL,
/// and as the encodings it travels in (SMTP AUTH, `MAILROOM_UNSUBSCRIBE_KEYS`).
pub fn encodings(kind: &str, value: &str) -> Vec<(&'static str, String)> {
    let mut forms = vec![
        ("raw", value.to_string()),
        ("percent-encoded", percent(value)),
    ];
    match kind {
        "smtp-password" => forms.extend([
            ("base64 (AUTH LOGIN)", STANDARD.encode(value)),
            (
                "base64 of user:pass",
                STANDARD.encode(format!("{SMTP_USER}:{value}")),
            ),
            (
                "base64 of AUTH PLAIN",
                STANDARD.encode(format!("\0{SMTP_USER}\0{value}")),
            ),
        ]),
        "unsubscribe-key" => forms.extend([
            ("base64", STANDARD.encode(value)),
            ("base64url", URL_SAFE_NO_PAD.encode(value)),
        ]),
        _ => {}
    }
    forms
}

/// Appends `kind`'s forms to `<dir>/canaries` the first time it is handed out:
/// `kind<TAB>encoding<TAB>value` lines.
fn record(kind: &'static str, value: &str) {
    let r = run();
    let mut recorded = r.recorded.lock().unwrap();
    if !recorded.insert(kind) {
        return;
    }
    append(r, kind, value);
}

/// An API token the server made (the suite cannot choose it): every one is recorded.
pub fn api_token(token: &str) {
    let r = run();
    let _held = r.recorded.lock().unwrap();
    append(r, "api-token", token);
}

fn append(r: &Run, kind: &str, value: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(r.dir.join("canaries"))
        .expect("open the canaries file");
    for (encoding, form) in encodings(kind, value) {
        writeln!(f, "{kind}\t{encoding}\t{form}").expect("record a canary");
    }
}

/// `s` as it appears inside a URL.
pub fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The SMTP relay's password.
pub fn smtp_password() -> String {
    let pass = format!("canary:smtp:{}", run().tag);
    record("smtp-password", &pass);
    pass
}

/// `smtp://ann:<canary>@host:port?<query>`, the password percent-encoded as a URL needs.
pub fn smtp_url(host: &str, port: u16, query: &str) -> String {
    format!(
        "smtp://{SMTP_USER}:{}@{host}:{port}?{query}",
        percent(&smtp_password())
    )
}

/// The bounce mailbox's IMAP password (no ':' in it: Dovecot's passwd-file splits on it).
pub fn imap_password() -> String {
    let pass = format!("canary-imap-{}", run().tag);
    record("imap-password", &pass);
    pass
}

/// The password of [`DB_USER`] on the test cluster.
pub fn db_password() -> String {
    let pass = format!("canary:db:{}", run().tag);
    record("db-password", &pass);
    pass
}

/// A `postgres://` URL with the canary password reaching `database` through `socket_dir`.
pub fn db_url(database: &str, socket_dir: &Path) -> String {
    format!(
        "postgres://{DB_USER}:{}@localhost/{database}?host={}",
        percent(&db_password()),
        socket_dir.display()
    )
}

/// The unsubscribe signing key (raw bytes; 28 of them, over the 16 required).
pub fn unsubscribe_key() -> Vec<u8> {
    let key = format!("canary:hmac:{}", run().tag);
    record("unsubscribe-key", &key);
    key.into_bytes()
}

/// The dashboard password of test user `n` of `org`. All share the run's prefix, which is what
/// is recorded (and found in a log wherever a whole password would be).
pub fn user_password(org: &str, n: usize) -> String {
    let prefix = format!("canary:user:{}", run().tag);
    record("user-password", &prefix);
    format!("{prefix}:{org}-{n}")
}

/// [`unsubscribe_key`] as `MAILROOM_UNSUBSCRIBE_KEYS` takes it.
pub fn unsubscribe_keys_env() -> String {
    STANDARD.encode(unsubscribe_key())
}
