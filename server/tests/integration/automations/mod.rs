//! Automations: triggers racing, steps on the injected clock (waits across both hemispheres'
//! daylight-saving changes), unsubscribes, pause, stop and version edits mid-flight, four-eyes
//! approval, the API, and workers SIGKILLed while thousands move through their steps.

mod dashboard;
mod engine;
mod kill;
mod segment_trigger;

use app::domain::automation::Definition;
use app::domain::{EmailAddress, OrgId, UserId};
use sqlx::PgPool;

pub(crate) fn definition(v: serde_json::Value) -> Definition {
    let d: Definition = serde_json::from_value(v).unwrap();
    d.check().unwrap();
    d
}

/// A live automation: made by `editor`, approved by `approver`.
pub(crate) async fn live(
    pool: &PgPool,
    org: OrgId,
    name: &str,
    d: &Definition,
    editor: UserId,
    approver: UserId,
) -> i64 {
    let mut c = pool.acquire().await.unwrap();
    let id = app::db::automation::create(&mut c, org, name, d, editor)
        .await
        .unwrap();
    let approved = app::db::automation::approve(&mut c, org, id, 1, approver, false)
        .await
        .unwrap();
    assert!(approved.activated);
    id
}

/// `n` subscribers `<prefix><i>@example.org`, their ids in order.
pub(crate) async fn people(pool: &PgPool, org: OrgId, prefix: &str, n: usize) -> Vec<i64> {
    let mut tx = pool.begin().await.unwrap();
    let rows: Vec<(EmailAddress, String)> = (0..n)
        .map(|i| {
            (
                EmailAddress::parse(&format!("{prefix}{i}@example.org")).unwrap(),
                format!("Person {i}"),
            )
        })
        .collect();
    let ids = app::db::audience::insert_subscribers(&mut tx, org.0, &rows)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    ids
}

/// Runs due steps at `now` from `workers` concurrent tasks until none is due; returns how
/// many enrolment claims were made in all.
pub(crate) async fn run_all(
    pool: &PgPool,
    now: chrono::DateTime<chrono::Utc>,
    workers: usize,
) -> usize {
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut n = 0;
                loop {
                    let moved = app::db::automation::run_due(&pool, Some(now), 50)
                        .await
                        .unwrap();
                    if moved == 0 {
                        return n;
                    }
                    n += moved;
                }
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}
