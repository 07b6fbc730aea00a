use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::ops::secret::Secret;
use crate::ops::telemetry::LogFormat;

/// `mailroom --version`: the package version and the git commit it was built from ("unknown"
/// when built outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MAILROOM_BUILD_COMMIT"),
    ")"
);

/// Mailroom: the weekly digest and campaigns, each sent exactly once.
#[derive(Debug, Parser)]
#[command(name = "mailroom", version = VERSION, about)]
pub struct Cli {
    /// Where Mailroom keeps its embedded PostgreSQL cluster and captured mail.
    #[arg(
        long,
        global = true,
        env = "MAILROOM_DATA_DIR",
        default_value = "./mailroom-data"
    )]
    pub data_dir: PathBuf,

    /// An existing PostgreSQL database (postgres://…). Unset: the embedded cluster under
    /// --data-dir. `DATABASE_URL` is read too.
    #[arg(
        long,
        global = true,
        env = "MAILROOM_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<Secret>,

    /// Log format.
    #[arg(
        long,
        global = true,
        env = "MAILROOM_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// `--database-url`, else `MAILROOM_DATABASE_URL`, else `DATABASE_URL`.
    pub fn database_url(&self) -> Option<String> {
        self.database_url
            .as_ref()
            .map(|s| s.expose().to_owned())
            .or_else(|| std::env::var("DATABASE_URL").ok())
            .filter(|s| !s.trim().is_empty())
    }

    /// The database the command works against.
    pub fn database(&self) -> crate::ops::database::Location {
        crate::ops::database::Location {
            url: self.database_url(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// Where mail is captured when no SMTP server is configured.
    pub fn captured_dir(&self) -> PathBuf {
        self.data_dir.join("captured")
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The dashboard and every worker.
    Serve(Box<ServeArgs>),
    /// Every worker, no HTTP.
    Worker(Box<WorkerArgs>),
    /// Apply pending migrations; refuses a database with migrations this build does not know.
    Migrate,
    /// Seed two demo organisations (once) and print their logins.
    Demo,
    /// Manage organisations (the first step of a real install: `mailroom org add`).
    #[command(subcommand)]
    Org(OrgCommand),
    /// Manage dashboard users.
    #[command(subcommand)]
    User(UserCommand),
    /// Run one digest tick now and print what it did (the workers tick by themselves).
    DigestTick(DigestTickArgs),
    /// Write the embedded database to a file (pg_dump custom format); safe while Mailroom runs.
    Backup(BackupArgs),
    /// Load a `mailroom backup` file into the embedded database of --data-dir (stop every
    /// mailroom process on that data directory first).
    Restore(RestoreArgs),
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The file to write (replaced only once the dump is complete).
    #[arg(long, env = "MAILROOM_BACKUP_OUT")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file to load.
    #[arg(long, env = "MAILROOM_RESTORE_FROM")]
    pub from: PathBuf,

    /// Replace a database that already holds data (it is dropped once the restore succeeded).
    #[arg(long, env = "MAILROOM_RESTORE_FORCE")]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct DigestTickArgs {
    /// Tick as if the database clock read this instant (RFC 3339). For tests and benchmarks
    /// only, and refused unless MAILROOM_ALLOW_FAKE_CLOCK=1: a wrong clock would send a missed
    /// week late or claim a week early.
    #[arg(long, hide = true)]
    pub now: Option<chrono::DateTime<chrono::Utc>>,

    /// Orgs per chunk (one transaction each).
    #[arg(long, default_value_t = app::digest::CHUNK)]
    pub chunk: i64,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address the dashboard listens on.
    #[arg(long, env = "MAILROOM_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// Directory with the built site (pkg/mailroom.js, .wasm, .css). Default: `site` next to the
    /// executable's target directory, as `cargo leptos build` lays it out.
    #[arg(long, env = "MAILROOM_SITE_ROOT")]
    pub site_root: Option<PathBuf>,

    /// Mark session cookies `Secure` (set this when users reach Mailroom over HTTPS).
    #[arg(long, env = "MAILROOM_SECURE_COOKIES")]
    pub secure_cookies: bool,

    /// Serve the dashboard only: run no workers here (no sending, digests or leader jobs), for
    /// a replica that serves pages while `mailroom worker` processes do the work.
    #[arg(long, env = "MAILROOM_NO_WORKERS")]
    pub no_workers: bool,

    /// Mailroom is reached only through a reverse proxy that sets X-Forwarded-For and
    /// X-Forwarded-Proto: take the client's address (login throttling) from the last
    /// X-Forwarded-For entry, and mark cookies Secure when X-Forwarded-Proto is https.
    #[arg(long, env = "MAILROOM_TRUST_PROXY")]
    pub trust_proxy: bool,

    /// Seconds a request may take before its answer starts (408 after). Not applied to the live
    /// progress stream, nor to CSV imports (15 minutes).
    #[arg(long, env = "MAILROOM_REQUEST_TIMEOUT_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_seconds: u64,

    /// Seconds a connection may take to send a whole request head (from its start, or from the
    /// end of its previous request); it is closed after. Slow or idle clients cannot pile up.
    #[arg(long, env = "MAILROOM_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_seconds: u64,

    /// Connections one client address may hold at once; more are closed at once. 0: no cap.
    /// Not applied with --trust-proxy (every connection then comes from the proxy, which is
    /// where to cap them).
    #[arg(
        long,
        env = "MAILROOM_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 128
    )]
    pub max_connections_per_client: usize,

    /// More host names the dashboard answers for (comma-separated), besides the host of
    /// --public-url, localhost, 127.0.0.1 and ::1. Requests naming any other host get 421
    /// (against DNS rebinding). `*`: any host.
    #[arg(long, env = "MAILROOM_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// A scrape of /metrics must send `Authorization: Bearer <this>`. Unset: /metrics is open
    /// to whoever reaches the port.
    #[arg(long, env = "MAILROOM_METRICS_TOKEN")]
    pub metrics_token: Option<Secret>,

    /// Requests per second one API token may make to /api/v1, shared by all replicas (429 with
    /// Retry-After past it). At least 0.01 (one request every 100 seconds).
    #[arg(long, env = "MAILROOM_API_RATE_PER_SECOND", default_value_t = 20.0,
          value_parser = api_rate)]
    pub api_rate_per_second: f64,

    /// Requests one API token may make at once before --api-rate-per-second applies.
    #[arg(long, env = "MAILROOM_API_BURST", default_value_t = 100.0)]
    pub api_burst: f64,

    /// Sign-ups one client IP may send per hour on the public sign-up pages (/s/<list>),
    /// shared by all replicas (429 with Retry-After past it).
    #[arg(long, env = "MAILROOM_SIGNUP_PER_HOUR", default_value_t = 10.0)]
    pub signup_per_hour: f64,

    /// Sign-ups one client IP may send at once before --signup-per-hour applies.
    #[arg(long, env = "MAILROOM_SIGNUP_BURST", default_value_t = 10.0)]
    pub signup_burst: f64,

    /// Also listen for mailed bounces and complaints (SMTP) on this address, e.g. 0.0.0.0:25
    /// behind the MX of the orgs' bounce domains. Off by default.
    #[arg(long, env = "MAILROOM_BOUNCE_LISTEN")]
    pub bounce_listen: Option<SocketAddr>,

    /// The largest mailed report the bounce listener takes, in bytes.
    #[arg(long, env = "MAILROOM_BOUNCE_MAX_SIZE", default_value_t = app::bounce::mailed::MAX_REPORT_BYTES)]
    pub bounce_max_size: usize,

    /// Connections the bounce listener serves at once; more are answered 421 and closed.
    #[arg(long, env = "MAILROOM_BOUNCE_MAX_CONNECTIONS",
          default_value_t = crate::feedback::listener::MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub bounce_max_connections: u64,

    /// Connections one client address (an IPv6 client: its /64) may hold on the bounce
    /// listener at once; more are answered 421 and closed. Keep it well below
    /// --bounce-max-connections, or a few clients can take every place. 0: no cap (for a relay
    /// in front that forwards every bounce).
    #[arg(long, env = "MAILROOM_BOUNCE_MAX_CONNECTIONS_PER_CLIENT",
          default_value_t = crate::feedback::listener::PER_CLIENT)]
    pub bounce_max_connections_per_client: usize,

    /// Seconds a bounce listener connection may stay silent (for its first command, between
    /// commands, within a message) before it is closed.
    #[arg(long, env = "MAILROOM_BOUNCE_IDLE_SECONDS",
          default_value_t = crate::feedback::listener::IDLE_SECONDS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub bounce_idle_seconds: u64,

    #[command(flatten)]
    pub worker: WorkerArgs,
}

#[derive(Debug, Args, Clone)]
pub struct WorkerArgs {
    /// Seconds between worker heartbeats.
    #[arg(long, env = "MAILROOM_HEARTBEAT_SECONDS", default_value_t = 10)]
    pub heartbeat_seconds: u64,

    /// SMTP server that delivers the mail. Unset: mail is captured as `.eml` files under
    /// `<data dir>/captured`, readable in the dashboard.
    #[arg(long, env = "MAILROOM_SMTP_HOST")]
    pub smtp_host: Option<String>,

    #[arg(long, env = "MAILROOM_SMTP_PORT", default_value_t = 25)]
    pub smtp_port: u16,

    /// The SMTP server as one URL, instead of --smtp-host/--smtp-port:
    /// `smtp://user:pass@host:587?tls=starttls`, `smtps://user:pass@host:465`, `smtp://host:25`.
    #[arg(long, env = "MAILROOM_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<Secret>,

    /// Extra CA certificate (PEM) to trust for the SMTP server's TLS, besides the system's.
    #[arg(long, env = "MAILROOM_SMTP_CA_FILE")]
    pub smtp_ca_file: Option<PathBuf>,

    /// Read mailed bounces and complaints from this IMAP mailbox, for operators who cannot take
    /// inbound SMTP (--bounce-listen): `imaps://user:password@host/Bounces`, or
    /// `imap://user:password@host/INBOX` (STARTTLS; `?tls=none` allows clear text). Reports
    /// for our bounce addresses are recorded, then deleted; other mail is marked seen and left.
    /// One replica at a time polls. Off by default.
    #[arg(long, env = "MAILROOM_BOUNCE_IMAP", hide_env_values = true)]
    pub bounce_imap: Option<Secret>,

    /// Seconds between reads of the --bounce-imap mailbox.
    #[arg(long, env = "MAILROOM_BOUNCE_IMAP_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub bounce_imap_seconds: u64,

    /// Extra CA certificate (PEM) to trust for the --bounce-imap server's TLS.
    #[arg(long, env = "MAILROOM_BOUNCE_IMAP_CA_FILE")]
    pub bounce_imap_ca_file: Option<PathBuf>,

    /// Let webhook endpoints resolve to private, loopback or link-local addresses (an
    /// endpoint on the operator's own network). Off: only public addresses are called.
    #[arg(long, env = "MAILROOM_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,

    /// Seconds a webhook endpoint has to answer (connect, send and the start of its answer).
    #[arg(long, env = "MAILROOM_WEBHOOK_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub webhook_timeout_seconds: u64,

    /// Webhook requests this process keeps in flight at once, across every endpoint.
    #[arg(long, env = "MAILROOM_WEBHOOK_CONCURRENCY", default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub webhook_concurrency: u64,

    /// Parallel SMTP connections of this process.
    #[arg(long, env = "MAILROOM_SMTP_CONNECTIONS", default_value_t = 4)]
    pub smtp_connections: usize,

    /// Messages one SMTP connection carries before it is closed and a new one opened (many
    /// relays limit this; 0: no limit).
    #[arg(
        long,
        env = "MAILROOM_SMTP_MAX_MESSAGES_PER_CONNECTION",
        default_value_t = 1000
    )]
    pub smtp_max_messages_per_connection: u32,

    /// Seconds any one SMTP step may take.
    #[arg(long, env = "MAILROOM_SMTP_TIMEOUT_SECONDS", default_value_t = 30)]
    pub smtp_timeout_seconds: u64,

    /// Name this host gives in EHLO.
    #[arg(long, env = "MAILROOM_SMTP_HELLO_NAME", default_value = "localhost")]
    pub smtp_hello_name: String,

    /// Deliveries claimed ahead of the SMTP connections: at most this many wait for one.
    #[arg(long, env = "MAILROOM_DELIVERY_BATCH", default_value_t = 50)]
    pub delivery_batch: i64,

    /// Messages each SMTP connection marks as "body started" ahead of their bodies. 1 (the
    /// default) marks each message just before its body, so a killed process leaves only
    /// messages whose body may really have left `unknown`. K > 1 keeps a window of K messages
    /// per connection whose marks are written while the earlier ones are sent (no wait for the
    /// database per message): a killed process may leave up to K never-sent messages per
    /// connection `unknown`, and a pause, cancel or opt-out may let up to K more messages per
    /// connection out.
    #[arg(long, env = "MAILROOM_DELIVERY_MARKS_AHEAD", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub delivery_marks_ahead: u16,

    /// Milliseconds delivery outcomes that find no body-start mark waiting may wait for one, to
    /// be written in its statement (whose fixed cost more rows then share). Outcomes are off the
    /// messages' path, so this costs no throughput; a process killed within it leaves those
    /// already-sent messages `unknown`, as one killed during the write does.
    #[arg(long, env = "MAILROOM_DELIVERY_OUTCOME_GATHER_MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub delivery_outcome_gather_ms: u64,

    /// Seconds a claim is held before another process may take it back (a crashed worker's
    /// unsent mail is retried after this; mail whose body had started becomes `unknown`).
    #[arg(long, env = "MAILROOM_DELIVERY_LEASE_SECONDS", default_value_t = 120.0)]
    pub delivery_lease_seconds: f64,

    /// Domain part of every Message-ID. Unset: the domain of the organisation's From address,
    /// so messages carry a plausible Message-ID without configuration.
    #[arg(long, env = "MAILROOM_MESSAGE_ID_DOMAIN")]
    pub message_id_domain: Option<String>,

    /// Unknown outcomes or connection failures in a row after which the SMTP server counts as
    /// failing: nothing more is sent to it until a probe connection succeeds.
    #[arg(long, env = "MAILROOM_RELAY_FAILURES", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub relay_failures: u32,

    /// Seconds a failing SMTP server may stay failing before the campaigns sending through it
    /// are paused (resumed by themselves when it answers again).
    #[arg(
        long,
        env = "MAILROOM_RELAY_PAUSE_CAMPAIGNS_AFTER_SECONDS",
        default_value_t = 120
    )]
    pub relay_pause_campaigns_after_seconds: u64,

    /// Messages per second to the SMTP server, shared by all replicas (a token bucket in the
    /// database). Unset: no limit.
    #[arg(long, env = "MAILROOM_SMTP_RATE_PER_SECOND")]
    pub smtp_rate_per_second: Option<f64>,

    /// The dashboard's public address, used in links inside messages (unsubscribe).
    #[arg(
        long,
        env = "MAILROOM_PUBLIC_URL",
        default_value = "http://localhost:3000"
    )]
    pub public_url: String,

    /// Unsubscribe-link signing keys, comma-separated base64 (at least 16 bytes each), newest
    /// first; older ones still verify. Unset: one is generated and kept in the database.
    #[arg(long, env = "MAILROOM_UNSUBSCRIBE_KEYS", hide_env_values = true)]
    pub unsubscribe_keys: Option<Secret>,

    /// Seconds a leader's lease lasts (renewed every third of it). A leader that cannot renew
    /// stops acting before it expires; another replica takes over after it.
    #[arg(long, env = "MAILROOM_LEADER_LEASE_SECONDS", default_value_t = 15.0)]
    pub leader_lease_seconds: f64,

    /// Days message details (SMTP replies, captured files) are kept; ledger rows stay.
    #[arg(long, env = "MAILROOM_RETENTION_DAYS", default_value_t = 30.0)]
    pub retention_days: f64,

    /// Days a deleted campaign stays in the recycle bin before the leader purges it (with its
    /// recipients and delivery records).
    #[arg(long, env = "MAILROOM_CAMPAIGN_BIN_DAYS", default_value_t = 30.0)]
    pub campaign_bin_days: f64,

    /// Seconds between digest ticks (each claims the orgs whose digest is due).
    #[arg(long, env = "MAILROOM_DIGEST_TICK_SECONDS", default_value_t = 60)]
    pub digest_tick_seconds: u64,

    /// Every digest tick reads this instant (RFC 3339) as the database clock, so which weeks
    /// are due never depends on the day a test runs. For tests only, and refused unless
    /// MAILROOM_ALLOW_FAKE_CLOCK=1.
    #[arg(long, env = "MAILROOM_DIGEST_NOW", hide = true)]
    pub digest_now: Option<chrono::DateTime<chrono::Utc>>,

    /// The automation step runner reads this instant (RFC 3339) as the database clock. For
    /// tests only, and refused unless MAILROOM_ALLOW_FAKE_CLOCK=1.
    #[arg(long, env = "MAILROOM_AUTOMATION_NOW", hide = true)]
    pub automation_now: Option<chrono::DateTime<chrono::Utc>>,

    /// Milliseconds between the automation step runner's polls while no step is due.
    #[arg(long, env = "MAILROOM_AUTOMATION_POLL_MS", default_value_t = 1000)]
    pub automation_poll_ms: u64,

    /// Seconds between scans for automations' date triggers that fire today.
    #[arg(
        long,
        env = "MAILROOM_AUTOMATION_DATE_SCAN_SECONDS",
        default_value_t = 300
    )]
    pub automation_date_scan_seconds: u64,

    /// Seconds between segment scans: who entered a segment that triggers an automation, and
    /// who entered or left a segment an endpoint wants events of (each segment evaluated once
    /// per scan, on one replica at a time).
    #[arg(long, env = "MAILROOM_SEGMENT_SCAN_SECONDS", default_value_t = 60)]
    pub segment_scan_seconds: u64,

    /// Seconds between campaign worker ticks while nothing is sending (an approval wakes it).
    #[arg(long, env = "MAILROOM_CAMPAIGN_TICK_SECONDS", default_value_t = 5)]
    pub campaign_tick_seconds: u64,

    /// Recipients the campaign worker hands to the delivery queue per batch.
    #[arg(long, env = "MAILROOM_CAMPAIGN_BATCH", default_value_t = 20)]
    pub campaign_batch: i64,

    /// A campaign gets more recipients handed off only while fewer than this many of its
    /// deliveries are queued (`sends` stays the real queue; pause and cancel act fast). 0: no
    /// limit.
    #[arg(long, env = "MAILROOM_CAMPAIGN_WATERMARK", default_value_t = 1000)]
    pub campaign_watermark: i64,

    /// Seconds a stopping process waits for the batch in hand before it releases it.
    #[arg(long, env = "MAILROOM_SHUTDOWN_TIMEOUT_SECONDS", default_value_t = 20)]
    pub shutdown_timeout_seconds: u64,
}

impl WorkerArgs {
    /// Where the delivery worker sends: `--smtp-url`, else `--smtp-host`, else capture into
    /// `captured_dir`. Checked before anything starts, so a bad setting is one clear error.
    pub fn transport(
        &self,
        captured_dir: PathBuf,
    ) -> anyhow::Result<crate::workers::delivery::Transport> {
        let hello = &self.smtp_hello_name;
        let timeout = std::time::Duration::from_secs(self.smtp_timeout_seconds.max(1));
        let mut target = match (&self.smtp_url, &self.smtp_host) {
            (Some(url), _) => crate::smtp::Target::from_url(url.expose(), hello, timeout)
                .map_err(anyhow::Error::msg)?,
            (None, Some(host)) => {
                crate::smtp::Target::plain(host.clone(), self.smtp_port, hello, timeout)
            }
            (None, None) => return Ok(crate::workers::delivery::Transport::Capture(captured_dir)),
        };
        target.max_messages = Some(self.smtp_max_messages_per_connection).filter(|max| *max > 0);
        if let Some(path) = &self.smtp_ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                anyhow::anyhow!("cannot read the SMTP CA file {} ({e}): fix --smtp-ca-file / MAILROOM_SMTP_CA_FILE", path.display())
            })?;
            target.ca_pem = Some(pem);
        }
        Ok(crate::workers::delivery::Transport::Smtp(target))
    }

    /// The bounce mailbox poller's configuration, when --bounce-imap is set. Checked before
    /// anything starts, so a bad URL or CA file is one clear error.
    pub fn bounce_imap(&self) -> anyhow::Result<Option<crate::feedback::mailbox::Config>> {
        let Some(url) = &self.bounce_imap else {
            return Ok(None);
        };
        let mut mailbox = crate::feedback::mailbox::Mailbox::from_url(url.expose())
            .map_err(anyhow::Error::msg)?;
        if let Some(path) = &self.bounce_imap_ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                anyhow::anyhow!("cannot read the IMAP CA file {} ({e}): fix --bounce-imap-ca-file / MAILROOM_BOUNCE_IMAP_CA_FILE", path.display())
            })?;
            mailbox.ca_pem = Some(pem);
        }
        Ok(Some(crate::feedback::mailbox::Config {
            mailbox,
            every: std::time::Duration::from_secs(self.bounce_imap_seconds.max(1)),
            timeout: std::time::Duration::from_secs(self.smtp_timeout_seconds.max(1)),
        }))
    }

    /// The delivery worker's configuration.
    pub fn delivery(
        &self,
        transport: crate::workers::delivery::Transport,
        keys: app::unsubscribe::Keys,
    ) -> crate::workers::delivery::Config {
        crate::workers::delivery::Config {
            transport,
            connections: self.smtp_connections.max(1),
            batch: self.delivery_batch.max(1),
            lease_seconds: self.delivery_lease_seconds.max(1.0),
            idle: std::time::Duration::from_millis(500),
            backoff: app::domain::Backoff::default(),
            message_id_domain: self.message_id_domain.clone(),
            rate_per_second: self.smtp_rate_per_second.filter(|r| *r > 0.0),
            links: crate::workers::delivery::Links {
                public_url: self.public_url.clone(),
                keys,
            },
            progress: crate::workers::progress::Notifier::default(),
            held: Default::default(),
            marks_ahead: usize::from(self.delivery_marks_ahead),
            outcome_gather: std::time::Duration::from_millis(self.delivery_outcome_gather_ms),
            breaker: app::domain::relay::BreakerPolicy {
                failures: self.relay_failures,
                pause_campaigns_after: std::time::Duration::from_secs(
                    self.relay_pause_campaigns_after_seconds,
                ),
                ..Default::default()
            },
        }
    }

    /// What the worker host runs: every setting checked and converted once, here.
    pub fn plan(
        &self,
        transport: crate::workers::delivery::Transport,
        unsubscribe_keys: app::unsubscribe::Keys,
        captured_dir: PathBuf,
        bounce_imap: Option<crate::feedback::mailbox::Config>,
    ) -> crate::workers::host::Plan {
        use std::time::Duration;
        crate::workers::host::Plan {
            heartbeat: Duration::from_secs(self.heartbeat_seconds.max(1)),
            campaign: self.campaign(),
            leader: self.leader(),
            digest_tick: Duration::from_secs(self.digest_tick_seconds),
            digest_now: self.digest_now,
            automations: crate::workers::automations::Config {
                poll: Duration::from_millis(self.automation_poll_ms.max(10)),
                batch: 200,
                now: self.automation_now,
                date_scan: Duration::from_secs(self.automation_date_scan_seconds.max(1)),
                segment_scan: Duration::from_secs(self.segment_scan_seconds.max(1)),
            },
            shutdown_grace: Duration::from_secs(self.shutdown_timeout_seconds),
            delivery: self.delivery(transport, unsubscribe_keys),
            captured_dir,
            bounce_imap,
            webhooks: self.webhooks(),
        }
    }

    /// The webhook sender's configuration.
    pub fn webhooks(&self) -> crate::workers::webhooks::Config {
        crate::workers::webhooks::Config {
            allow_private: self.webhook_allow_private,
            timeout: std::time::Duration::from_secs(self.webhook_timeout_seconds),
            concurrency: self.webhook_concurrency as usize,
            ..Default::default()
        }
    }

    /// The campaign worker's configuration.
    pub fn campaign(&self) -> crate::workers::campaign::Config {
        crate::workers::campaign::Config {
            tick: std::time::Duration::from_secs(self.campaign_tick_seconds.max(1)),
            batch: self.campaign_batch.max(1),
            watermark: self.campaign_watermark.max(0),
        }
    }

    pub fn leader(&self) -> crate::workers::leader::Config {
        crate::workers::leader::Config {
            lease_seconds: self.leader_lease_seconds.max(1.0),
            retention_days: self.retention_days.max(1.0),
            bin_days: self.campaign_bin_days.max(0.0),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Create an organisation with its first owner; prints the owner's generated password once
    /// unless one is given.
    Add(OrgAddArgs),
}

#[derive(Debug, Args)]
pub struct OrgAddArgs {
    /// Short name (slug): lowercase letters, digits and '-', e.g. `acme`.
    #[arg(long, env = "MAILROOM_ORG_SLUG")]
    pub slug: String,
    /// The organisation's name, as the dashboard and the digest show it.
    #[arg(long, env = "MAILROOM_ORG_NAME")]
    pub name: String,
    /// Its time zone (the digest's schedule is local to it), e.g. Europe/Berlin.
    #[arg(long, env = "MAILROOM_ORG_TIMEZONE", default_value = "UTC")]
    pub timezone: String,
    /// The From address of its mail.
    #[arg(long, env = "MAILROOM_ORG_FROM_ADDRESS")]
    pub from_address: String,
    /// The From name of its mail. Default: the organisation's name.
    #[arg(long, env = "MAILROOM_ORG_FROM_NAME")]
    pub from_name: Option<String>,
    /// The first owner's e-mail address (their login).
    #[arg(long, env = "MAILROOM_ORG_OWNER_EMAIL")]
    pub owner_email: String,
    /// The first owner's display name.
    #[arg(long, env = "MAILROOM_ORG_OWNER_NAME")]
    pub owner_name: String,
    /// The owner's password (prefer the environment variable to keep it out of shell history).
    #[arg(long, env = "MAILROOM_ORG_OWNER_PASSWORD", hide_env_values = true)]
    pub owner_password: Option<Secret>,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a dashboard user to an organisation; prints a generated password unless one is given.
    Add(UserAddArgs),
    /// Give a user a new generated password (printed once); their sessions end.
    Password(UserPasswordArgs),
}

#[derive(Debug, Args)]
pub struct UserPasswordArgs {
    /// The user's e-mail address.
    #[arg(long, env = "MAILROOM_USER_EMAIL")]
    pub email: String,
}

#[derive(Debug, Args)]
pub struct UserAddArgs {
    /// The organisation's short name (slug), e.g. `acme`.
    #[arg(long, env = "MAILROOM_USER_ORG")]
    pub org: String,
    /// The user's e-mail address (their login).
    #[arg(long, env = "MAILROOM_USER_EMAIL")]
    pub email: String,
    /// Display name.
    #[arg(long, env = "MAILROOM_USER_NAME")]
    pub name: String,
    /// owner, admin or viewer.
    #[arg(long, env = "MAILROOM_USER_ROLE", default_value = "admin")]
    pub role: String,
    /// The password (prefer the environment variable to keep it out of shell history).
    #[arg(long, env = "MAILROOM_USER_PASSWORD", hide_env_values = true)]
    pub password: Option<Secret>,
}

/// The slowest rate `--api-rate-per-second` takes: one request every 100 seconds.
pub const MIN_API_RATE_PER_SECOND: f64 = 0.01;

/// `--api-rate-per-second`: a number of at least [`MIN_API_RATE_PER_SECOND`]. A smaller one is
/// refused at start-up rather than quietly raised (clap names the flag and the value).
fn api_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a number of requests a second: {s:?}"))?;
    if rate.is_finite() && rate >= MIN_API_RATE_PER_SECOND {
        Ok(rate)
    } else {
        Err(format!(
            "the API rate must be a number of requests a second of at least \
             {MIN_API_RATE_PER_SECOND} (one every 100 seconds)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn an_api_rate_below_the_slowest_is_refused_naming_the_flag() {
        for bad in ["0.001", "0", "-5", "NaN", "inf", "fast"] {
            let flag = format!("--api-rate-per-second={bad}");
            let e = Cli::try_parse_from(["mailroom", "serve", flag.as_str()])
                .expect_err(bad)
                .to_string();
            assert!(e.contains("--api-rate-per-second"), "{bad}: {e}");
        }
        for (given, rate) in [("0.01", 0.01), ("20", 20.0)] {
            let cli =
                Cli::try_parse_from(["mailroom", "serve", "--api-rate-per-second", given]).unwrap();
            let Command::Serve(args) = &cli.command else {
                panic!("not serve: {cli:?}");
            };
            assert_eq!(args.api_rate_per_second, rate);
        }
    }

    /// Every secret flag set to a recognisable value: none may show in the configuration's
    /// `Debug`, nor in the delivery worker's configuration built from it.
    #[test]
    fn debug_of_the_configuration_shows_no_secret() {
        let key = "Y2FuYXJ5LWhtYWMtMDEyMzQ1Njc4OQ=="; // base64 of canary-hmac-0123456789
        let cli = Cli::try_parse_from([
            "mailroom",
            "--database-url",
            "postgres://u:canary-db-pw@localhost/x",
            "worker",
            "--smtp-url",
            "smtp://u:canary-smtp-pw@relay.example:587?tls=starttls",
            "--unsubscribe-keys",
            key,
        ])
        .unwrap();
        let Command::Worker(args) = &cli.command else {
            panic!("not a worker: {cli:?}");
        };
        let transport = args.transport("/tmp/captured".into()).unwrap();
        let keys = app::unsubscribe::Keys::new(vec![b"canary-hmac-0123456789".to_vec()]).unwrap();
        let delivery = args.delivery(transport, keys);
        let shown = format!("{cli:?}\n{delivery:?}");
        for secret in ["canary-db-pw", "canary-smtp-pw", key, "canary-hmac"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert_eq!(
            cli.database_url().as_deref(),
            Some("postgres://u:canary-db-pw@localhost/x"),
            "the value itself still reaches its user"
        );

        let cli = Cli::try_parse_from([
            "mailroom",
            "user",
            "add",
            "--org",
            "acme",
            "--email",
            "a@acme.example",
            "--name",
            "A",
            "--password",
            "canary-user-pw",
        ])
        .unwrap();
        assert!(!format!("{cli:?}").contains("canary-user-pw"), "{cli:?}");
    }
}
