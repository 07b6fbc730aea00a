//! The bounce mailbox over IMAP against a real Dovecot and a real PostgreSQL: reports appended
//! to the mailbox are recorded once and removed, other mail is left (seen), two pollers racing
//! on one mailbox record each report once, a new UIDVALIDITY re-reads without duplicates, and
//! `mailroom worker` processes SIGKILLed again and again while they read lose and double
//! nothing.

use std::time::Duration;

use app::domain::Role;
use mailroom::feedback::attribution::BounceMail;
use mailroom::feedback::mailbox::{poll_once, Config, Mailbox, Pass};
use mailroom::ops::shutdown::Shutdown;
use nix::sys::signal::Signal;
use sqlx::PgPool;
use testkit::reports::{arf, dsn};

use crate::support::bounces::{delivered_campaign, set_bounce_domain, tally};
use crate::support::dovecot::Dovecot;
use crate::support::helpers::{data_dir, migrated_db_with_url, test_db};
use crate::support::org::TestOrg;
use crate::support::procs::{wait_until, Proc};

const DOMAIN: &str = "bounce.acme.test";

fn config(server: &Dovecot, folder: &str) -> Config {
    Config {
        mailbox: Mailbox::from_url(&server.url(folder)).unwrap(),
        every: Duration::from_secs(1),
        timeout: Duration::from_secs(30),
    }
}

/// One pass of a poller of its own.
async fn pass(pool: &PgPool, cfg: &Config) -> Pass {
    let (_keep, shutdown) = Shutdown::manual();
    poll_once(pool, cfg, &mut BounceMail::new(pool.clone()), &shutdown)
        .await
        .unwrap()
}

/// Each delivery's DSN as its MTA would leave it in the mailbox (`Delivered-To` is the VERP
/// address it came to).
async fn dsns_for(pool: &PgPool, org: i64, jobs: &[(app::domain::JobId, String)]) -> Vec<String> {
    let key = app::signing::Purpose::Verp.key(pool).await.unwrap();
    jobs.iter()
        .enumerate()
        .map(|(i, (job, to))| {
            let rcpt = app::verp::address(&key, org, job, DOMAIN).unwrap();
            format!(
                "Delivered-To: {rcpt}\r\n{}",
                dsn(&format!("imap-{i}"), &rcpt, to, "5.1.1", None)
            )
        })
        .collect()
}

async fn cursor(pool: &PgPool, cfg: &Config) -> app::db::imap_cursor::Cursor {
    app::db::imap_cursor::get(pool, &cfg.mailbox.key())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn reports_are_recorded_once_and_removed_and_other_mail_is_left_seen() {
    let server = Dovecot::start();
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, DOMAIN).await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", 51).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let mut imap = server.client().await;
    imap.create("Bounces").await;
    for m in dsns_for(&pool, org, &jobs[..50]).await {
        imap.append("Bounces", &m).await;
    }
    // A complaint to the feedback-loop address, proved by the token in Original-Mail-From.
    let (job, to) = &jobs[50];
    let verp = app::verp::address(&key, org, job, DOMAIN).unwrap();
    imap.append(
        "Bounces",
        &format!(
            "Delivered-To: fbl@{DOMAIN}\r\n{}",
            arf("fbl-1", &format!("fbl@{DOMAIN}"), &verp, to)
        ),
    )
    .await;
    // Not ours: a DSN to an address at another domain, one to a forged token at ours, and a
    // letter from a person.
    let forged = verp.replacen(".", ".0", 1);
    imap.append(
        "Bounces",
        &format!(
            "Delivered-To: b+x@elsewhere.test\r\n{}",
            dsn("x-1", "b+x@elsewhere.test", to, "5.1.1", None)
        ),
    )
    .await;
    imap.append(
        "Bounces",
        &format!(
            "Delivered-To: {forged}\r\n{}",
            dsn("x-2", &forged, to, "5.1.1", None)
        ),
    )
    .await;
    imap.append(
        "Bounces",
        "From: jane@example.com\r\nTo: ops@acme.test\r\nSubject: hi\r\n\r\nHello.\r\n",
    )
    .await;

    let cfg = config(&server, "Bounces");
    let p = pass(&pool, &cfg).await;
    assert_eq!(
        (p.read, p.reports, p.new_events, p.left, p.overtaken),
        (54, 51, 51, 3, false)
    );
    let (events, jobs_hit, verified, hard) = tally(&pool, org).await;
    assert_eq!((events, jobs_hit, verified, hard), (51, 51, 51, 50));
    let complaints: i64 = sqlx::query_scalar(
        "select count(*) from suppressions where org_id = $1 and reason = 'complaint'",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(complaints, 1);
    let left = imap.messages("Bounces").await;
    assert_eq!(
        left.len(),
        3,
        "only the three that are not ours stay: {left:?}"
    );
    assert!(left.iter().all(|(_, f)| f.iter().any(|f| f == "Seen")));
    assert_eq!(cursor(&pool, &cfg).await.last_uid, 54);

    // Nothing new: nothing read. New mail: only it.
    assert_eq!(pass(&pool, &cfg).await, Pass::default());
    let (_, more) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", 5).await;
    for m in dsns_for(&pool, org, &more).await {
        imap.append("Bounces", &m.replace("imap-", "more-")).await;
    }
    let p = pass(&pool, &cfg).await;
    assert_eq!((p.read, p.reports, p.new_events), (5, 5, 5));
    assert_eq!(tally(&pool, org).await.0, 56);
    assert_eq!(imap.messages("Bounces").await.len(), 3);
}

#[tokio::test]
async fn two_pollers_racing_on_one_mailbox_record_each_report_once() {
    const N: usize = 200;
    let server = Dovecot::start();
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, DOMAIN).await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", N as i64).await;
    let mut imap = server.client().await;
    for m in dsns_for(&pool, org, &jobs).await {
        imap.append("INBOX", &m).await;
    }
    let cfg = config(&server, "INBOX");
    // Four passes at once, each its own IMAP session and transactions, until one finds the
    // mailbox read to its end.
    let mut reads = 0;
    let mut overtaken = 0;
    for _ in 0..20 {
        let passes = futures::future::join_all((0..4).map(|_| pass(&pool, &cfg))).await;
        reads += passes.iter().map(|p| p.reports).sum::<usize>();
        overtaken += passes.iter().filter(|p| p.overtaken).count();
        if imap.messages("INBOX").await.is_empty() {
            break;
        }
    }
    let (events, jobs_hit, _, hard) = tally(&pool, org).await;
    assert_eq!((events, jobs_hit, hard), (N as i64, N as i64, N as i64));
    assert!(imap.messages("INBOX").await.is_empty());
    assert!(reads >= N, "every report was taken by some pass: {reads}");
    assert!(overtaken > 0, "the passes did race on the cursor");
}

#[tokio::test]
async fn a_new_uidvalidity_reads_the_mailbox_again_without_duplicates() {
    let server = Dovecot::start();
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, DOMAIN).await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", 20).await;
    let mail = dsns_for(&pool, org, &jobs).await;
    let mut imap = server.client().await;
    imap.create("Bounces").await;
    for m in &mail {
        imap.append("Bounces", m).await;
    }
    let cfg = config(&server, "Bounces");
    assert_eq!(pass(&pool, &cfg).await.new_events, 20);
    let before = cursor(&pool, &cfg).await;

    // The folder is recreated (a restore, a migration to another server) and the same reports
    // arrive again: the UIDs start over under a new UIDVALIDITY.
    imap.delete("Bounces").await;
    imap.create("Bounces").await;
    for m in &mail {
        imap.append("Bounces", m).await;
    }
    let validity = imap.uid_validity("Bounces").await;
    assert_ne!(i64::from(validity), before.uid_validity);
    let p = pass(&pool, &cfg).await;
    assert_eq!((p.read, p.reports, p.new_events), (20, 20, 0));
    assert_eq!(tally(&pool, org).await.0, 20);
    assert_eq!(
        cursor(&pool, &cfg).await,
        app::db::imap_cursor::Cursor {
            uid_validity: i64::from(validity),
            last_uid: 20
        }
    );
    assert!(imap.messages("Bounces").await.is_empty());
}

/// `mailroom worker` polling the mailbox every second, SIGKILLed every few hundred
/// milliseconds while it reads (between a commit and its flag, among other places), then left
/// to finish: every report recorded once, and the mailbox emptied.
#[test]
fn worker_processes_killed_while_reading_lose_and_double_nothing() {
    const N: usize = 400;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = Dovecot::start();
    let (pool, url) = rt.block_on(migrated_db_with_url());
    let (org, jobs) = rt.block_on(async {
        let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
        let org = acme.id.0;
        set_bounce_domain(&pool, org, DOMAIN).await;
        let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", N as i64).await;
        (org, jobs)
    });
    rt.block_on(async {
        let mut imap = server.client().await;
        for m in dsns_for(&pool, org, &jobs).await {
            imap.append("INBOX", &m).await;
        }
    });
    let dir = data_dir();
    let imap_url = server.url("INBOX");
    let start = |name: &str| {
        Proc::start_with_env(
            name,
            dir.path(),
            &[
                "worker",
                "--bounce-imap-seconds",
                "1",
                "--heartbeat-seconds",
                "1",
            ],
            &[
                ("DATABASE_URL", url.as_str()),
                ("MAILROOM_BOUNCE_IMAP", imap_url.as_str()),
            ],
        )
    };
    let recorded = || rt.block_on(tally(&pool, org)).0;
    let mut kills = 0;
    for round in 0..30 {
        let before = recorded();
        if before as usize == N {
            break;
        }
        let mut w = start(&format!("poller-{round}"));
        // Killed once it has recorded something this round (or after 5 s, whichever first).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while recorded() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50 + 37 * (round % 5)));
        w.signal(Signal::SIGKILL);
        w.wait_exit(10);
        kills += 1;
        // Its lease outlives it: the next process may take the lease only after it expires.
        rt.block_on(
            sqlx::query("update leader_lease set expires_at = now() where name = $1")
                .bind(mailroom::feedback::mailbox::LEASE)
                .execute(&pool),
        )
        .unwrap();
    }
    assert!(kills >= 2, "the processes were killed mid-read: {kills}");
    // A last process finishes the mailbox, including what a kill left unflagged. The last
    // killed one may have finished it already: the SIGTERM below must still find this one up
    // (its handlers installed), or it dies of the signal instead of shutting down.
    let mut w = start("poller-last");
    w.wait_log("bounce mailbox poller started", 60);
    wait_until("every report recorded and the mailbox empty", 120, || {
        recorded() as usize == N
            && rt.block_on(async { server.client().await.messages("INBOX").await.is_empty() })
    });
    w.signal(Signal::SIGTERM);
    let status = w.wait_exit(30);
    assert!(status.success(), "{status}:\n{}", w.log_text());
    let (events, jobs_hit, verified, hard) = rt.block_on(tally(&pool, org));
    assert_eq!(
        (events, jobs_hit, verified, hard),
        (N as i64, N as i64, N as i64, N as i64),
        "each report once, after {kills} kills"
    );
}

/// What a crash leaves behind the cursor, made by hand: messages whose transaction committed
/// (the cursor is past them) but that were never flagged, and messages flagged deleted but
/// never expunged. The next pass finishes both.
#[tokio::test]
async fn what_a_crash_leaves_behind_the_cursor_is_finished_by_the_next_pass() {
    let server = Dovecot::start();
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, DOMAIN).await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", 12).await;
    let mut imap = server.client().await;
    for m in dsns_for(&pool, org, &jobs).await {
        imap.append("INBOX", &m).await;
    }
    let cfg = config(&server, "INBOX");
    let validity = imap.uid_validity("INBOX").await;
    // UIDs 1–4 flagged deleted (their reports' fate does not matter here), and the cursor at
    // 8: 5–8 are unseen behind it, 9–12 ahead of it.
    imap.0.select("INBOX").await.unwrap();
    futures::TryStreamExt::try_collect::<Vec<_>>(
        imap.0
            .uid_store("1:4", "+FLAGS.SILENT (\\Seen \\Deleted)")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let at = app::db::imap_cursor::Cursor {
        uid_validity: i64::from(validity),
        last_uid: 8,
    };
    assert!(
        app::db::imap_cursor::advance(&mut conn, &cfg.mailbox.key(), None, at)
            .await
            .unwrap()
    );
    let p = pass(&pool, &cfg).await;
    assert_eq!((p.read, p.reports, p.new_events), (8, 8, 8), "5–12 read");
    assert!(
        imap.messages("INBOX").await.is_empty(),
        "1–4 expunged, 5–12 too"
    );
    assert_eq!(cursor(&pool, &cfg).await.last_uid, 12);
    assert_eq!(tally(&pool, org).await.0, 8);
}
