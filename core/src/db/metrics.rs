//! What `/metrics` reads from the database at scrape time: the same figures from any replica,
//! at a cost that does not grow with the deliveries table.

use sqlx::PgPool;

#[derive(Debug, Default)]
pub struct Snapshot {
    /// Deliveries by status, every org; `sending`: in flight (claimed, outcome not yet written).
    pub by_status: Vec<(String, i64)>,
    /// Queued deliveries by kind (test, digest, campaign, invite), not counting those in flight.
    pub queued_by_kind: Vec<(String, i64)>,
    /// Age of the oldest delivery that is due and still queued (0 when none).
    pub oldest_queued_seconds: f64,
    /// The leader lease's current epoch (0 before any election).
    pub leader_epoch: i64,
    /// How long past its org's retention the oldest event still stored is (0: retention
    /// keeps up). One index probe per org.
    pub events_overdue_seconds: f64,
    /// The primary's replication, as Mailroom's sessions see it.
    pub replication: crate::domain::ReplicationReading,
}

/// The figures, summed from `delivery_counts` (a few rows per kind and status between two
/// leader passes), with the messages in flight told apart: a claim does not write its rows, so
/// the counts hold them as `queued`; here they are `sending`, counted from the claims (one
/// probe per message held, never a scan). One statement, so both parts are of one snapshot.
pub const COUNTS: &str = concat!(
    "with counted as (select kind, status, sum(n)::bigint as n from delivery_counts group by kind, status),
          flying as (select d.kind, count(*)::bigint as n from delivery_claims c cross join lateral ",
    crate::db::delivery::in_flight_of!("c"),
    " group by d.kind)
     select c.kind, c.status,
            c.n - case when c.status = 'queued'
                       then coalesce((select f.n from flying f where f.kind = c.kind), 0) else 0 end
     from counted c
     union all
     select kind, 'sending', n from flying"
);

/// The oldest due queued delivery: the first entry of `delivery_queue_due`.
pub const OLDEST_AND_EPOCH: &str =
    "select coalesce(extract(epoch from now() - (select min(next_attempt_at) from delivery_queue
                                                 where next_attempt_at <= now())), 0)::float8,
            coalesce((select epoch from leader_lease where name = 'leader'), 0),
            coalesce((select max(extract(epoch from
                          (now() - make_interval(days => o.event_retention_days))
                          - (select min(e.occurred_at) from events e where e.org_id = o.id)))
                      from orgs o), 0)::float8";

pub async fn snapshot(pool: &PgPool) -> sqlx::Result<Snapshot> {
    let counts: Vec<(String, String, i64)> = sqlx::query_as(COUNTS).fetch_all(pool).await?;
    let (oldest_queued_seconds, leader_epoch, overdue): (f64, i64, f64) =
        sqlx::query_as(OLDEST_AND_EPOCH).fetch_one(pool).await?;
    // Present even when nothing is in flight, so that an alert's series never vanishes.
    let mut by_status: Vec<(String, i64)> = vec![("sending".to_string(), 0)];
    let mut queued_by_kind = Vec::new();
    for (kind, status, n) in counts {
        if status == "queued" {
            queued_by_kind.push((kind, n));
        }
        match by_status.iter_mut().find(|(s, _)| *s == status) {
            Some((_, total)) => *total += n,
            None => by_status.push((status, n)),
        }
    }
    Ok(Snapshot {
        by_status,
        queued_by_kind,
        oldest_queued_seconds,
        leader_epoch,
        events_overdue_seconds: overdue.max(0.0),
        replication: crate::db::health::replication(pool).await?,
    })
}

/// Folds the appended count rows into one per (kind, status). Safe beside writers and beside
/// another fold: the delete takes only rows its snapshot sees, and a row two folds race for is
/// deleted (and summed) by one of them. Returns the rows folded away.
pub async fn fold_counts(pool: &PgPool) -> sqlx::Result<u64> {
    let folded: (i64,) = sqlx::query_as(
        "with gone as (delete from delivery_counts returning kind, status, n),
              kept as (
                  insert into delivery_counts (kind, status, n)
                  select kind, status, sum(n) from gone group by kind, status having sum(n) <> 0
                  returning 1
              )
         select (select count(*) from gone) - (select count(*) from kept)",
    )
    .fetch_one(pool)
    .await?;
    Ok(folded.0.max(0) as u64)
}
