//! Automations under SIGKILL: three `mailroom worker` processes take the steps of a welcome
//! series (three mails, two waits) while people join its list, and a random worker is killed
//! every 1.5 s and restarted. The workers' automation clock is pinned and moved past each wait
//! in phases (every restart reads the phase's instant). Afterwards: everyone was enrolled once,
//! took every step once and ended completed; each mail step queued one message; no message
//! arrived twice; and a message that never arrived is `unknown` (its body may have started
//! when its worker died: never retried, guarantee 9), never lost silently.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use app::domain::JobId;
use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use sqlx::PgPool;
use testkit::SmtpSink;

use super::{definition, people};
use crate::campaign::campaign_processes::{close, worker_args};
use crate::support::org::TestOrg;
use crate::support::procs::{wait_until, Proc};

const CONNECTIONS: usize = 4;
const BATCH: usize = 20;

fn start(
    name: &str,
    dir: &std::path::Path,
    sink: &SmtpSink,
    url: &str,
    now: DateTime<Utc>,
) -> Proc {
    let now = now.to_rfc3339();
    let args = worker_args(
        sink,
        &["--automation-now", &now, "--automation-poll-ms", "100"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proc::start_with_env(
        name,
        dir,
        &args,
        &[("DATABASE_URL", url), ("MAILROOM_ALLOW_FAKE_CLOCK", "1")],
    )
}

fn scalar(rt: &tokio::runtime::Runtime, pool: &PgPool, sql: &str, id: i64) -> i64 {
    rt.block_on(sqlx::query_scalar::<_, i64>(sql).bind(id).fetch_one(pool))
        .unwrap()
}

#[test]
fn sigkilled_workers_take_every_step_once_and_strand_nobody() {
    // CI runs a small crowd; bench/automations.sh runs 100,000 with the same code and checks.
    let n: usize = std::env::var("AUTOMATION_KILL_PEOPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    let (id, list, ids) = rt.block_on(async {
        let acme = TestOrg::new(&pool, "acme").await;
        let list = acme.list("Newsletter").await;
        let d = definition(serde_json::json!({
            "trigger": {"type": "list_joined", "list_id": list},
            "reentry": "once",
            "steps": [
                {"type": "email", "subject": "Welcome {{ name }}", "body": "Hello"},
                {"type": "wait", "days": 1},
                {"type": "email", "subject": "Day 1", "body": "Tips"},
                {"type": "wait", "days": 2},
                {"type": "email", "subject": "Day 3", "body": "More"}
            ]
        }));
        let id = super::live(
            &pool,
            acme.id,
            "Welcome",
            &d,
            acme.owner().id,
            acme.admin(0).id,
        )
        .await;
        let ids = people(&pool, acme.id, "k", n).await;
        (id, list, ids)
    });
    let org: i64 = scalar(
        &rt,
        &pool,
        "select org_id from automations where id = $1",
        id,
    );
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let t0: DateTime<Utc> = "2031-01-06T10:00:00Z".parse().unwrap();
    let phases = [
        t0,
        t0 + chrono::Duration::days(1) + chrono::Duration::minutes(1),
        t0 + chrono::Duration::days(3) + chrono::Duration::minutes(2),
    ];
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| start(&format!("w{i}"), dir.path(), &sink, &url, phases[0]))
        .collect();
    let mut kills = 0;
    let mut last_kill = Instant::now();
    let kill_one = |procs: &mut Vec<Proc>, now: DateTime<Utc>, kills: &mut usize| {
        let victim = rand::random::<usize>() % procs.len();
        procs[victim].signal(Signal::SIGKILL);
        procs[victim].wait_exit(10);
        *kills += 1;
        procs[victim] = start(&format!("k{kills}"), dir.path(), &sink, &url, now);
    };
    // People join the list in chunks while the workers run and die.
    for chunk in ids.chunks(100) {
        rt.block_on(async {
            let mut tx = pool.begin().await.unwrap();
            app::db::audience::add_members(&mut tx, org, list, chunk)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        });
        if last_kill.elapsed() > Duration::from_millis(1500) {
            kill_one(&mut procs, phases[0], &mut kills);
            last_kill = Instant::now();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    for (p, now) in phases.iter().enumerate() {
        if p > 0 {
            // Every worker moves to the next instant (killed, not stopped).
            for (i, proc_) in procs.iter_mut().enumerate() {
                proc_.signal(Signal::SIGKILL);
                proc_.wait_exit(10);
                kills += 1;
                *proc_ = start(&format!("p{p}w{i}"), dir.path(), &sink, &url, *now);
            }
        }
        let due = || {
            rt.block_on(
                sqlx::query_scalar::<_, i64>(
                    "select count(*) from enrolments
                     where automation_id = $1 and state = 'active' and due_at <= $2",
                )
                .bind(id)
                .bind(now)
                .fetch_one(&pool),
            )
            .unwrap()
        };
        while due() > 0 {
            assert!(Instant::now() < deadline, "phase {p} did not finish");
            std::thread::sleep(Duration::from_millis(1500));
            if due() == 0 {
                break;
            }
            kill_one(&mut procs, *now, &mut kills);
        }
    }
    // The delivery engine finishes what the steps queued.
    let unsent = || {
        scalar(
            &rt,
            &pool,
            "select count(*) from deliveries where automation_id = $1 and status = 'queued'",
            id,
        )
    };
    wait_until("every automation mail sent", 300, || unsent() == 0);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    assert!(
        kills >= 4,
        "the run ended before the workers were killed: make it bigger"
    );

    // Everyone enrolled once, took all five steps once, and finished.
    let count = |sql: &str| scalar(&rt, &pool, sql, id);
    assert_eq!(
        count("select count(*) from enrolments where automation_id = $1") as usize,
        n
    );
    assert_eq!(
        count("select count(*) from enrolments where automation_id = $1 and state = 'completed'")
            as usize,
        n,
        "every enrolment ends completed: nobody is stranded in a step"
    );
    assert_eq!(
        count("select count(*) from enrolment_steps where automation_id = $1") as usize,
        5 * n
    );
    assert_eq!(
        count("select count(*) from deliveries where automation_id = $1") as usize,
        3 * n,
        "one message per mail step and person"
    );
    // On the wire: nothing twice; what never arrived is unknown.
    let arrived: HashMap<String, u32> = sink
        .ids()
        .into_iter()
        .filter_map(|(mid, times)| Some((JobId::from_message_id(&mid)?.to_string(), times)))
        .collect();
    let twice: Vec<&String> = arrived
        .iter()
        .filter(|(_, t)| **t > 1)
        .map(|(j, _)| j)
        .collect();
    assert!(twice.is_empty(), "arrived twice: {twice:?}");
    let outcomes: Vec<(String, String)> = rt
        .block_on(
            sqlx::query_as("select job_id, status from deliveries where automation_id = $1")
                .bind(id)
                .fetch_all(&pool),
        )
        .unwrap();
    let mut unknown = 0;
    for (job, status) in &outcomes {
        match status.as_str() {
            "delivered" => assert!(
                arrived.contains_key(job),
                "{job} is delivered but never arrived"
            ),
            "unknown" => unknown += 1,
            other => panic!("{job} ended {other}"),
        }
        if !arrived.contains_key(job) {
            assert_eq!(status, "unknown", "{job} never arrived and is not unknown");
        }
    }
    assert!(
        unknown <= kills * CONNECTIONS * BATCH,
        "{unknown} unknown after {kills} kills"
    );
    eprintln!(
        "{kills} kills over {n} people: {} messages, {unknown} unknown, {} arrived",
        outcomes.len(),
        arrived.len()
    );
    drop(sink);
    close(rt, pool);
}
