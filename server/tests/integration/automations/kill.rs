//! Automations under SIGKILL: three `mailroom worker` processes take the steps of a welcome
//! series (three mails, two waits) while people join its list, and a random worker is killed
//! every 1.5 s and restarted. The workers' automation clock is pinned and moved past each wait
//! in phases (every restart reads the phase's instant). Afterwards: everyone was enrolled once,
//! took every step once and ended completed; each mail step queued one message; no message
//! arrived twice; and a message that never arrived is `unknown` (its body may have started
//! when its worker died: never retried, guarantee 9), never lost silently. The same again on
//! a PostgreSQL of the test's own, crash-restarted (`pg_ctl -m immediate restart`: every
//! backend dies at once, crash recovery on start) while people join and in each phase.

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
use crate::support::procs::Proc;

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

/// How many people: CI runs a small crowd; bench/automations-kill.sh runs 100,000 with the
/// same code and checks.
fn crowd() -> usize {
    std::env::var("AUTOMATION_KILL_PEOPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

#[test]
fn sigkilled_workers_take_every_step_once_and_strand_nobody() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    kill_through_the_series(rt, pool, &url, crowd(), None);
}

/// A PostgreSQL of this test's own (the suite's cluster serves every other test), durable
/// (fsync and synchronous commit on: a crash loses no commit), crash-restarted on demand.
struct OwnCluster {
    pg: mailroom::embedded_pg::EmbeddedPg,
    _dir: tempfile::TempDir,
}

impl OwnCluster {
    fn start(rt: &tokio::runtime::Runtime) -> (OwnCluster, PgPool, String) {
        use mailroom::embedded_pg::{EmbeddedPg, Options, DATABASE};
        let dir = crate::support::helpers::data_dir();
        let pg = rt
            .block_on(EmbeddedPg::open(dir.path(), Options { fast: false }))
            .expect("start a cluster of the test's own");
        let pool = rt.block_on(async {
            let pool = PgPool::connect_with(pg.connect_options(DATABASE))
                .await
                .unwrap();
            app::db::migrate::run(&pool, true).await.unwrap();
            pool
        });
        let url = format!(
            "postgres://mailroom@localhost/{DATABASE}?host={}",
            pg.cluster_dir().display()
        );
        // Stopped even when the test fails.
        let as_db_user = if nix::unistd::Uid::effective().is_root() {
            "runuser -u postgres -- "
        } else {
            ""
        };
        crate::support::helpers::after_exit(&format!(
            "{as_db_user}{} -D {} -m immediate stop >/dev/null 2>&1",
            crate::support::helpers::pg_ctl_path(pg.cluster_dir()).display(),
            pg.cluster_dir().display()
        ));
        (OwnCluster { pg, _dir: dir }, pool, url)
    }

    /// Every backend killed at once (`-m immediate`: no checkpoint, crash recovery on start);
    /// returns once the server accepts connections again.
    fn crash_restart(&self) {
        let cluster = self.pg.cluster_dir();
        let pg_ctl = crate::support::helpers::pg_ctl_path(cluster);
        let mut cmd = if nix::unistd::Uid::effective().is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            std::process::Command::new(&pg_ctl)
        };
        let out = cmd
            .arg("-D")
            .arg(cluster)
            .arg("-l")
            .arg(cluster.join("server.log"))
            .args(["-m", "immediate", "-w", "-t", "60", "restart"])
            .current_dir("/tmp")
            // The server it starts would hold captured pipes open for ever.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run pg_ctl");
        assert!(
            out.status.success(),
            "pg_ctl restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The same series while PostgreSQL itself is crash-restarted: while people join, and once in
/// each phase; the workers go on killed and restarted too.
#[test]
fn a_crash_restarted_database_strands_nobody_and_sends_nothing_twice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (cluster, pool, url) = OwnCluster::start(&rt);
    let n = crowd();
    kill_through_the_series(rt, pool, &url, n, Some(&|| cluster.crash_restart()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(cluster.pg.shutdown()).unwrap();
}

/// Three workers take the welcome series of `n` people on `pool` (reached by `url`), SIGKILLed
/// at random throughout; with `restart`, the database is crash-restarted three times too.
fn kill_through_the_series(
    rt: tokio::runtime::Runtime,
    pool: PgPool,
    url: &str,
    n: usize,
    restart: Option<&dyn Fn()>,
) {
    let url = url.to_owned();
    let mut restarts = 0;
    let restart_now = |restarts: &mut usize| {
        if let Some(r) = restart {
            r();
            *restarts += 1;
        }
    };
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
    // Kills made while steps were due or mail unsent: the ones that can lose or double work
    // (the kills that move the workers to the next phase may find nothing in hand).
    let mut mid_work = 0;
    let mut last_kill = Instant::now();
    let kill_one = |procs: &mut Vec<Proc>, now: DateTime<Utc>, kills: &mut usize| {
        let victim = rand::random::<usize>() % procs.len();
        procs[victim].signal(Signal::SIGKILL);
        procs[victim].wait_exit(10);
        *kills += 1;
        procs[victim] = start(&format!("k{kills}"), dir.path(), &sink, &url, now);
    };
    // Steps due at `now` and mail not yet sent.
    let work = |now: DateTime<Utc>| {
        rt.block_on(
            sqlx::query_scalar::<_, i64>(
                "select (select count(*) from enrolments
                         where automation_id = $1 and state = 'active' and due_at <= $2)
                      + (select count(*) from deliveries
                         where automation_id = $1 and status = 'queued')",
            )
            .bind(id)
            .bind(now)
            .fetch_one(&pool),
        )
        .unwrap()
    };
    // Every second while work remains, one worker is killed.
    let mut kill_while_busy = |procs: &mut Vec<Proc>, now: DateTime<Utc>, kills: &mut usize| {
        if last_kill.elapsed() > Duration::from_secs(1) && work(now) > 0 {
            kill_one(procs, now, kills);
            mid_work += 1;
            last_kill = Instant::now();
        }
    };
    // People join the list in chunks while the workers run and die.
    let halfway = ids.len() / 200;
    for (c, chunk) in ids.chunks(100).enumerate() {
        if c == halfway {
            restart_now(&mut restarts);
        }
        rt.block_on(async {
            let mut tx = pool.begin().await.unwrap();
            app::db::audience::add_members(&mut tx, org, list, chunk)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        });
        kill_while_busy(&mut procs, phases[0], &mut kills);
    }
    let deadline = Instant::now() + Duration::from_secs(600 + n as u64 / 200);
    for (p, now) in phases.iter().enumerate() {
        if p > 0 {
            // Every worker moves to the next instant (killed, not stopped).
            for (i, proc_) in procs.iter_mut().enumerate() {
                proc_.signal(Signal::SIGKILL);
                proc_.wait_exit(10);
                kills += 1;
                *proc_ = start(&format!("p{p}w{i}"), dir.path(), &sink, &url, *now);
            }
            if restart.is_some() {
                // Once the new workers are taking the phase's steps.
                std::thread::sleep(Duration::from_millis(700));
                restart_now(&mut restarts);
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
            std::thread::sleep(Duration::from_millis(200));
            kill_while_busy(&mut procs, *now, &mut kills);
        }
    }
    // The delivery engine finishes what the steps queued, killed on every second while it
    // sends (a debug build sends a few hundred a second: the full size takes a while).
    let deadline = Instant::now() + Duration::from_secs(300 + n as u64 / 50);
    while work(phases[2]) > 0 {
        assert!(
            Instant::now() < deadline,
            "the automation mail was not all sent"
        );
        std::thread::sleep(Duration::from_millis(200));
        kill_while_busy(&mut procs, phases[2], &mut kills);
    }
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    assert!(
        mid_work >= 3,
        "only {mid_work} kills came while work remained: make the run bigger"
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
    // A database restart cuts every worker's connections at once.
    let cuts = kills + 3 * restarts;
    assert!(
        unknown <= cuts * CONNECTIONS * BATCH,
        "{unknown} unknown after {kills} kills and {restarts} database restarts"
    );
    if restart.is_some() {
        assert!(
            restarts == 3,
            "the run ended before the database was restarted: make it bigger"
        );
    }
    eprintln!(
        "{kills} kills ({mid_work} while work remained), {restarts} database restarts over {n} people: {} messages, {unknown} unknown, {} arrived",
        outcomes.len(),
        arrived.len()
    );
    drop(sink);
    close(rt, pool);
}
