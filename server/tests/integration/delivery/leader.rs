//! Leadership (guarantee 11): one leader at a time, and an epoch fence that rejects a stalled
//! leader's writes after another replica took over.

use std::time::Duration;

use app::db::leader;
use nix::sys::signal::Signal;
use sqlx::PgPool;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::procs::{wait_until, Proc};

async fn expire_lease(pool: &PgPool) {
    sqlx::query("update leader_lease set expires_at = now() - interval '1 second'")
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn one_elector_of_three_leads_and_a_stale_epoch_is_fenced_out() {
    let pool = test_db().await;
    let electors = ["a", "b", "c"];
    let results = futures::future::join_all(
        electors
            .iter()
            .map(|h| leader::acquire(&pool, "leader", h, 30.0)),
    )
    .await;
    let leases: Vec<_> = results.into_iter().filter_map(|r| r.unwrap()).collect();
    assert_eq!(
        leases.len(),
        1,
        "exactly one of three racing electors leads"
    );
    let old = leases[0].clone();
    assert_eq!(old.epoch, 1);
    let renewed = leader::acquire(&pool, "leader", &old.holder, 30.0)
        .await
        .unwrap();
    assert_eq!(
        renewed.as_ref().map(|l| l.epoch),
        Some(1),
        "a renewal keeps the epoch"
    );
    assert!(leader::log_action(&pool, &old, "reap", "").await.unwrap());

    // The leader stalls past its lease; another elector takes over with the next epoch.
    expire_lease(&pool).await;
    let other = electors.iter().find(|h| **h != old.holder).unwrap();
    let new = leader::acquire(&pool, "leader", other, 30.0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(new.epoch, 2);

    // The stalled leader wakes up: every write it attempts with its old epoch is rejected.
    assert!(!leader::log_action(&pool, &old, "reap", "").await.unwrap());
    let acme = TestOrg::with_roles(&pool, "acme", &[app::domain::Role::Owner]).await;
    let org = acme.id.0;
    let to = app::domain::EmailAddress::parse("a@example.org").unwrap();
    let job = app::domain::JobId::test(1, 1, "x", &to).unwrap();
    let mut conn = pool.acquire().await.unwrap();
    app::db::delivery::enqueue(
        &mut conn,
        crate::support::fixtures::test_mail(&job, org, &to),
    )
    .await
    .unwrap();
    app::db::delivery::claim(&pool, 1, 60.0, "w").await.unwrap();
    sqlx::query("update delivery_claims set lease_until = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        app::db::delivery::reap_expired(&pool, &old).await.unwrap(),
        Default::default(),
        "the stale leader's reaper writes nothing"
    );
    assert_eq!(
        app::db::delivery::reap_expired(&pool, &new).await.unwrap(),
        app::db::delivery::TakenBack {
            requeued: 1,
            unknown: 0
        }
    );
    assert!(
        leader::acquire(&pool, "leader", &old.holder, 30.0)
            .await
            .unwrap()
            .is_none(),
        "the old leader cannot take a live lease back"
    );
    leader::release(&pool, &new).await.unwrap();
    let third = leader::acquire(&pool, "leader", &old.holder, 30.0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        third.epoch, 3,
        "a released lease is taken at once, with the next epoch"
    );
}

fn holder_pid(holder: &str) -> i32 {
    holder.split(':').nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_sigstopped_leader_is_replaced_and_never_acts_again_on_its_old_epoch() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    let dir = crate::support::helpers::data_dir();
    let args = [
        "worker",
        "--leader-lease-seconds",
        "2",
        "--heartbeat-seconds",
        "1",
    ];
    let env = [("DATABASE_URL", url.as_str())];
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| Proc::start_with_env(&format!("e{i}"), dir.path(), &args, &env))
        .collect();
    let lease_holder = || -> Option<(String, i64)> {
        rt.block_on(
            sqlx::query_as("select holder, epoch from leader_lease where name = 'leader' and expires_at > now()")
                .fetch_optional(&pool),
        )
        .unwrap()
    };
    wait_until("a leader", 30, || lease_holder().is_some());
    let (first, first_epoch) = lease_holder().unwrap();
    let stopped = procs
        .iter()
        .position(|p| p.child.id() as i32 == holder_pid(&first))
        .expect("the leader is one of ours");
    std::thread::sleep(Duration::from_millis(800)); // let it act at least once
    procs[stopped].signal(Signal::SIGSTOP);
    wait_until("another replica to take over", 30, || {
        lease_holder().is_some_and(|(h, _)| h != first)
    });
    std::thread::sleep(Duration::from_millis(1500)); // the new leader acts
    procs[stopped].signal(Signal::SIGCONT);
    let woken = &procs[stopped];
    wait_until("the woken leader to step down", 10, || {
        let log = woken.log_text();
        log.contains("lost leadership") || log.contains("stepping down")
    });
    std::thread::sleep(Duration::from_millis(1500)); // the woken process would act here if it could
    for p in procs.iter_mut() {
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(30).success(), "{}", p.log_text());
    }

    let actions = rt.block_on(leader::actions(&pool, "leader")).unwrap();
    assert!(actions
        .iter()
        .any(|a| a.epoch == first_epoch && a.holder == first));
    assert!(
        actions.iter().any(|a| a.epoch > first_epoch),
        "the new leader acted"
    );
    // No overlap: epochs only grow along the log, and each epoch has one holder.
    for pair in actions.windows(2) {
        assert!(
            pair[0].epoch <= pair[1].epoch,
            "epoch {} acted after epoch {}: {:?}",
            pair[1].epoch,
            pair[0].epoch,
            pair
        );
        if pair[0].epoch == pair[1].epoch {
            assert_eq!(pair[0].holder, pair[1].holder);
        }
    }
    let last_of_first = actions
        .iter()
        .rposition(|a| a.holder == first && a.epoch == first_epoch);
    let first_of_new = actions.iter().position(|a| a.epoch > first_epoch);
    assert!(last_of_first < first_of_new);
    eprintln!(
        "leader tally: {} actions, epochs {:?}",
        actions.len(),
        actions
            .iter()
            .map(|a| a.epoch)
            .collect::<std::collections::BTreeSet<_>>()
    );
}

#[tokio::test]
async fn retention_clears_old_details_and_files_but_keeps_the_ledger_rows() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[app::domain::Role::Owner]).await;
    let org = acme.id.0;
    let mut conn = pool.acquire().await.unwrap();
    for name in ["old", "new"] {
        let to = app::domain::EmailAddress::parse(&format!("{name}@example.org")).unwrap();
        let job = app::domain::JobId::test(1, 1, name, &to).unwrap();
        app::db::delivery::enqueue(
            &mut conn,
            crate::support::fixtures::test_mail(&job, org, &to),
        )
        .await
        .unwrap();
    }
    sqlx::query(
        "update deliveries set status = 'delivered', smtp_reply = '250 ok', last_error = 'x',
                finished_at = now() - case when recipient like 'old@%' then interval '40 days' else interval '1 day' end",
    )
    .execute(&pool)
    .await
    .unwrap();
    let lease = leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap()
        .unwrap();
    let stale = leader::Lease {
        epoch: lease.epoch - 1,
        ..lease.clone()
    };
    assert_eq!(
        app::db::delivery::trim_details(&pool, &stale, 30.0, 100)
            .await
            .unwrap(),
        0,
        "fenced"
    );
    assert_eq!(
        app::db::delivery::trim_details(&pool, &lease, 30.0, 100)
            .await
            .unwrap(),
        1
    );
    let rows: Vec<(String, String, Option<String>)> =
        sqlx::query_as("select recipient, status, smtp_reply from deliveries order by recipient")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "new@example.org".into(),
                "delivered".into(),
                Some("250 ok".into())
            ),
            ("old@example.org".into(), "delivered".into(), None),
        ],
        "the old row keeps its job id, state and times; only its details go"
    );

    // Captured files older than the retention go; newer ones stay.
    let dir = tempfile::tempdir().unwrap();
    let org_dir = dir.path().join(org.to_string());
    std::fs::create_dir_all(&org_dir).unwrap();
    let (old, new) = (org_dir.join("old.eml"), org_dir.join("new.eml"));
    std::fs::write(&old, "x").unwrap();
    std::fs::write(&new, "x").unwrap();
    let forty_days_ago = std::time::SystemTime::now() - Duration::from_secs(40 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(forty_days_ago)
        .unwrap();
    assert_eq!(
        mailroom::workers::leader::trim_captured(dir.path(), 30.0).await,
        1
    );
    assert!(!old.exists() && new.exists());
}
