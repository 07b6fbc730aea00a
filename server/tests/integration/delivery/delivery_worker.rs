//! The delivery worker end to end: several workers racing on one database and one SMTP sink.

use std::collections::HashSet;
use std::time::Duration;

use app::domain::{Backoff, JobId, Role};
use mailroom::smtp::Target;
use mailroom::workers::delivery::{Config, Transport, Worker};

use crate::support::fixtures::{config, config_for_capture};
use crate::support::helpers::{enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;
use crate::support::procs::wait_until;
use testkit::SmtpSink;

#[tokio::test]
async fn racing_workers_deliver_each_message_exactly_once_and_classify_refusals() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut addresses: Vec<String> = (0..150).map(|i| format!("r{i}@example.org")).collect();
    addresses.extend([
        "bounce@example.org".to_string(),
        "later@example.org".to_string(),
    ]);
    enqueue_test_mail_to(&pool, org, "w", &addresses).await;

    let sink = SmtpSink::start();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (pool, cfg) = (pool.clone(), config(&sink));
            tokio::spawn(async move {
                let mut worker = Worker::new(pool, cfg, "racer");
                while worker.drain().await.unwrap() > 0 {}
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }

    let got = sink.messages();
    let ids: HashSet<String> = got.iter().map(|m| m.message_id()).collect();
    assert_eq!(got.len(), 150, "each deliverable message arrived");
    assert_eq!(ids.len(), 150, "no Message-ID twice");
    assert!(got
        .iter()
        .all(|m| m.from == "news@example.org" && m.data.contains("Mailroom test message")));

    let counts: Vec<(String, i64)> =
        sqlx::query_as("select status, count(*) from deliveries group by status order by status")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        counts,
        vec![
            ("delivered".into(), 150),
            ("failed".into(), 1),
            ("queued".into(), 1)
        ]
    );
    let (reply, attempt): (String, i32) = sqlx::query_as(
        "select smtp_reply, attempt from deliveries where recipient = 'bounce@example.org'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(reply.contains("5.1.1") && attempt == 1, "{reply}");
    let reason: String = sqlx::query_scalar(
        "select reason from suppressions where email_lower = 'bounce@example.org'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        reason, "hard_bounce",
        "a hard bounce suppresses the address"
    );
    let (error, later): (String, bool) =
        sqlx::query_as("select last_error, next_attempt_at > now() + interval '10 seconds' from deliveries where recipient = 'later@example.org'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        error.contains("451") && later,
        "a 4xx is retried later: {error}"
    );
}

/// Three `mailroom worker` processes share one queue; three times, two are SIGKILLed mid-send
/// and replaced.
/// Every message ends delivered or unknown, and none reaches the SMTP server twice.
#[test]
fn sigkill_mid_send_never_duplicates_and_loses_nothing() {
    use crate::support::procs::Proc;
    use nix::sys::signal::Signal;

    const TOTAL: i64 = 1500;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(async {
        let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
        let org = acme.id.0;
        let addresses: Vec<String> = (0..TOTAL).map(|i| format!("k{i}@example.org")).collect();
        enqueue_test_mail_to(&pool, org, "kill", &addresses).await;
    });
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let port = sink.addr.port().to_string();
    let args = [
        "worker",
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        &port,
        "--smtp-connections",
        "4",
        "--delivery-batch",
        "20",
        "--delivery-lease-seconds",
        "2",
        "--heartbeat-seconds",
        "1",
        "--leader-lease-seconds",
        "2",
    ];
    let env = [("DATABASE_URL", url.as_str())];
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| Proc::start_with_env(&format!("w{i}"), dir.path(), &args, &env))
        .collect();

    // Three rounds of killing: each time two of the three running workers die mid-batch and
    // two new ones take their place.
    for round in 1..=3 {
        wait_until("more of the mail", 60, || {
            sink.messages().len() as i64 >= TOTAL * round / 4
        });
        for p in procs.iter_mut().take(2) {
            p.signal(Signal::SIGKILL);
            p.wait_exit(10);
        }
        procs.drain(..2);
        procs.extend(
            (0..2).map(|i| Proc::start_with_env(&format!("r{round}x{i}"), dir.path(), &args, &env)),
        );
    }
    let open = || -> i64 {
        rt.block_on(
            sqlx::query_scalar(
                "select count(*) from deliveries where status in ('queued', 'sending')",
            )
            .fetch_one(&pool),
        )
        .unwrap()
    };
    wait_until("the queue to drain", 120, || open() == 0);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(60).success(), "{}", p.log_text());
    }

    let got = sink.messages();
    let ids: HashSet<String> = got.iter().map(|m| m.message_id()).collect();
    assert_eq!(
        ids.len(),
        got.len(),
        "a message reached the SMTP server twice"
    );
    let (delivered, unknown, other): (i64, i64, i64) = rt
        .block_on(
            sqlx::query_as(
                "select count(*) filter (where status = 'delivered'), count(*) filter (where status = 'unknown'),
                        count(*) filter (where status not in ('delivered', 'unknown')) from deliveries",
            )
            .fetch_one(&pool),
        )
        .unwrap();
    assert_eq!(other, 0);
    assert_eq!(delivered + unknown, TOTAL, "every message accounted for");
    assert!(
        got.len() as i64 >= delivered && got.len() as i64 <= delivered + unknown,
        "sink {} vs delivered {delivered} + unknown {unknown}",
        got.len()
    );
    // Reconcile: every `delivered` job arrived (exactly once, by the check above).
    let delivered_jobs: Vec<String> = rt
        .block_on(
            sqlx::query_scalar("select job_id from deliveries where status = 'delivered'")
                .fetch_all(&pool),
        )
        .unwrap();
    for job in &delivered_jobs {
        // No --message-id-domain: the org's From domain (news@example.org).
        let id = job.parse::<JobId>().unwrap().message_id("example.org");
        assert!(
            ids.contains(&format!("Message-ID: {id}")),
            "{job} is delivered but never arrived"
        );
    }
    eprintln!("sigkill tally: {TOTAL} messages, {delivered} delivered, {unknown} unknown, {} at the sink, 0 duplicates", got.len());
}

#[tokio::test]
async fn the_global_rate_limit_caps_what_a_round_claims() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let addresses: Vec<String> = (0..30).map(|i| format!("q{i}@example.org")).collect();
    enqueue_test_mail_to(&pool, org, "rate", &addresses).await;
    let sink = SmtpSink::start();
    let mut cfg = config(&sink);
    cfg.rate_per_second = Some(0.001);
    // The bucket holds 12 tokens and refills too slowly to matter here: the whole system may
    // send 12 now, however many workers and rounds try.
    let bucket = format!("{}:{}", sink.addr.ip(), sink.addr.port());
    app::db::rate_limit::configure(&pool, &bucket, 12.0, 0.001)
        .await
        .unwrap();
    let mut one = Worker::new(pool.clone(), cfg.clone(), "one");
    let mut two = Worker::new(pool.clone(), cfg, "two");
    let (a, b) = tokio::join!(one.drain(), two.drain());
    assert_eq!(a.unwrap() + b.unwrap(), 12);
    assert_eq!(one.drain().await.unwrap(), 0, "no tokens left");
    assert_eq!(sink.messages().len(), 12);
}

#[tokio::test]
async fn every_smtp_fault_ends_in_the_right_state_attempt_and_reply() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let cases = [
        "ok",
        "rcpt4xx",
        "data4xx",
        "perm",
        "nouser",
        "dropearly",
        "droplate",
    ];
    let mut addresses: Vec<String> = cases.iter().map(|c| format!("{c}@example.org")).collect();
    // The same 4xx on a delivery that has used up its retries: it gives up, with the reason.
    addresses.push("rcpt4xx@last-try.example".into());
    enqueue_test_mail_to(&pool, org, "fault", &addresses).await;
    sqlx::query(
        "update deliveries set attempt = $1 - 1 where recipient = 'rcpt4xx@last-try.example'",
    )
    .bind(Backoff::default().max_attempts)
    .execute(&pool)
    .await
    .unwrap();
    let sink = SmtpSink::start();
    let cfg = Config {
        transport: Transport::Smtp(Target::plain(
            sink.addr.ip().to_string(),
            sink.addr.port(),
            "mailroom.test",
            Duration::from_secs(5),
        )),
        connections: 1, // one connection carries every case in turn, reconnecting after drops
        ..config_for_capture(std::path::PathBuf::new())
    };
    let mut worker = Worker::new(pool.clone(), cfg, "faults");
    assert_eq!(worker.drain().await.unwrap(), cases.len() + 1);

    type Row = (String, String, i32, Option<String>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "select recipient, status, attempt, smtp_reply, last_error from deliveries order by recipient",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let row = |c: &str| {
        rows.iter()
            .find(|r| r.0 == format!("{c}@example.org"))
            .unwrap()
            .clone()
    };
    let expect = |c: &str, status: &str, text: &str| {
        let (_, got, attempt, reply, error) = row(c);
        assert_eq!(
            (got.as_str(), attempt),
            (status, 1),
            "{c}: {reply:?} {error:?}"
        );
        let shown = reply.or(error).unwrap_or_default();
        assert!(
            shown.contains(text),
            "{c}: {shown:?} should mention {text:?}"
        );
    };
    expect("ok", "delivered", "250");
    expect("rcpt4xx", "queued", "451");
    expect("data4xx", "queued", "452");
    expect("perm", "failed", "554 5.7.1");
    expect("nouser", "failed", "5.1.1");
    expect("dropearly", "queued", "");
    expect("droplate", "unknown", "no reply after the body");
    assert_eq!(sink.accepted(), vec!["ok@example.org".to_string()]);
    let (_, status, attempt, reply, _) = rows
        .iter()
        .find(|r| r.0 == "rcpt4xx@last-try.example")
        .unwrap()
        .clone();
    assert_eq!(
        (status.as_str(), attempt),
        ("failed", Backoff::default().max_attempts)
    );
    let reply = reply.unwrap_or_default();
    assert!(
        reply.starts_with("gave up after 8 attempts: 451"),
        "{reply}"
    );

    // The hard bounce suppressed its address; the 5.7.1 refusal did not.
    let suppressed: Vec<(String, String)> =
        sqlx::query_as("select email_lower, reason from suppressions where org_id = $1")
            .bind(org)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        suppressed,
        vec![("nouser@example.org".to_string(), "hard_bounce".to_string())]
    );
    // Retries wait for their backoff; unknown is never retried by itself.
    let (due,): (i64,) = sqlx::query_as(
        "select count(*) from deliveries where status = 'queued' and next_attempt_at <= now()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(due, 0, "retries are scheduled in the future");
}

#[tokio::test]
async fn without_smtp_mail_is_captured_to_files_the_dashboard_can_read() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let addresses: Vec<String> = (0..25).map(|i| format!("cap{i}@example.org")).collect();
    enqueue_test_mail_to(&pool, org, "cap", &addresses).await;
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::new(pool.clone(), config_for_capture(dir.path().into()), "cap");
    while worker.drain().await.unwrap() > 0 {}

    let rows: Vec<(String, String, String)> =
        sqlx::query_as("select job_id, status, smtp_reply from deliveries")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 25);
    for (job, status, reply) in rows {
        assert_eq!(status, "delivered");
        let path = app::capture::path_for(dir.path(), org, &job);
        // The reply names the file, not the server's directory (it is shown in the API).
        let file = path.file_name().unwrap().to_string_lossy();
        assert_eq!(reply, format!("captured as {file}"));
        assert!(!reply.contains('/'), "{reply}");
        let text = std::fs::read_to_string(&path).unwrap();
        let id: JobId = job.parse().unwrap();
        assert!(
            text.contains(&format!("Message-ID: {}", id.message_id("acme.example"))),
            "{text}"
        );
    }
    let files = std::fs::read_dir(dir.path().join(org.to_string()))
        .unwrap()
        .count();
    assert_eq!(files, 25, "one file per message, no temporary left behind");
}

#[test]
fn sigterm_finishes_or_releases_the_batch_in_hand_within_the_timeout() {
    use crate::support::procs::Proc;
    use nix::sys::signal::Signal;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(async {
        let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
        let org = acme.id.0;
        let mut many: Vec<String> = (0..8).map(|i| format!("ok{i}@example.org")).collect();
        many.push("hang@example.org".into());
        enqueue_test_mail_to(&pool, org, "term", &many).await;
    });
    // The server takes `hang@`'s body and never answers: without the shutdown timeout the
    // process would wait for the 60 s SMTP timeout.
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let port = sink.addr.port().to_string();
    let args = [
        "worker",
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        &port,
        "--smtp-connections",
        "1",
        "--smtp-timeout-seconds",
        "60",
        "--delivery-batch",
        "9",
        "--shutdown-timeout-seconds",
        "1",
    ];
    let mut p = Proc::start_with_env("term", dir.path(), &args, &[("DATABASE_URL", url.as_str())]);
    let started = || -> i64 {
        rt.block_on(
            sqlx::query_scalar(
                // In flight: the row is still at the previous attempt, the mark at the claim's.
                "select count(*) from deliveries d join delivery_marks m on m.job_id = d.job_id and m.attempt = d.attempt + 1
                 where d.recipient = 'hang@example.org' and d.status = 'queued'",
            )
            .fetch_one(&pool),
        )
        .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while started() == 0 {
        assert!(std::time::Instant::now() < deadline, "{}", p.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(10).success(), "{}", p.log_text());
    assert!(p.log_text().contains("releasing it"), "{}", p.log_text());

    let rows: Vec<(String, String, i32)> = rt
        .block_on(
            sqlx::query_as("select recipient, status, attempt from deliveries").fetch_all(&pool),
        )
        .unwrap();
    for (to, status, attempt) in &rows {
        match (to.as_str(), status.as_str()) {
            ("hang@example.org", s) => {
                assert_eq!((s, *attempt), ("unknown", 1), "its body was in flight")
            }
            (_, "delivered") => assert_eq!(*attempt, 1),
            // Released unsent; the attempt number stays spent so that no late write can match
            // the next claim.
            (_, "queued") => assert_eq!(*attempt, 1, "{to}"),
            other => panic!("{other:?} after shutdown"),
        }
    }
    let delivered = rows.iter().filter(|r| r.1 == "delivered").count();
    assert_eq!(
        sink.accepted().len(),
        delivered,
        "the database agrees with the server"
    );
}

#[test]
fn two_worker_processes_share_one_rate_limit_measured_at_the_sink() {
    use crate::support::procs::Proc;
    use nix::sys::signal::Signal;

    const RATE: f64 = 20.0;
    const TOTAL: usize = 120;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(async {
        let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
        let org = acme.id.0;
        let addresses: Vec<String> = (0..TOTAL).map(|i| format!("rl{i}@example.org")).collect();
        enqueue_test_mail_to(&pool, org, "rate", &addresses).await;
    });
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let port = sink.addr.port().to_string();
    let rate = RATE.to_string();
    let args = [
        "worker",
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        &port,
        "--smtp-rate-per-second",
        &rate,
        "--smtp-connections",
        "4",
        "--delivery-batch",
        "10",
    ];
    let env = [("DATABASE_URL", url.as_str())];
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| Proc::start_with_env(&format!("rl{i}"), dir.path(), &args, &env))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sink.messages().len() < TOTAL {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            procs[0].log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in procs.iter_mut() {
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(30).success(), "{}", p.log_text());
    }
    let mut at: Vec<std::time::Instant> = sink.messages().iter().map(|m| m.at).collect();
    at.sort();
    // Token bucket: in any window of w seconds at most capacity (= one second's worth) + R·w
    // messages *start* (take their token), whichever process sends them. Arrivals can bunch by
    // what was already taken before the window: each of the 2 processes holds up to a batch
    // (10) claimed ahead of its connections plus the message in hand on each of its 4
    // connections, plus 1 for the window's edges.
    let in_flight = 2.0 * (10.0 + 4.0) + 1.0;
    for i in 0..at.len() {
        for j in i..at.len() {
            let w = (at[j] - at[i]).as_secs_f64();
            let n = (j - i + 1) as f64;
            assert!(
                n <= RATE + RATE * w + in_flight,
                "{n} messages within {w:.2}s exceed the {RATE}/s limit"
            );
        }
    }
    let span = (at[at.len() - 1] - at[0]).as_secs_f64();
    // Beyond the first second's burst and what was claimed ahead (whose tokens were taken
    // before the first arrival: CI saw 90 arrivals span 3.22 s where the tokens spanned 3.5 s).
    let sustained = (TOTAL as f64 - RATE - in_flight) / span;
    eprintln!("rate limit: {TOTAL} messages over {span:.2}s from 2 processes; sustained {sustained:.1}/s (limit {RATE}/s)");
    assert!(sustained <= RATE * 1.05, "sustained {sustained:.1}/s");
    assert!(
        span >= (TOTAL as f64 - 2.0 * RATE) / RATE,
        "the limit was actually applied"
    );
}
