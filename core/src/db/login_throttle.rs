//! Login throttle counters (the policy is `domain::login_throttle`). An attempt is one short
//! transaction that locks its three rows, decides, and counts the attempt as a failure *before*
//! the password is checked; a success takes that back. Concurrent attempts on every replica
//! serialise on the row locks, so a burst cannot check more passwords than the policy allows.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::login_throttle::{Counter, Counters, Keys, Verdict, ACCOUNT, IP, PAIR};

/// Decides whether an attempt may check its password and, if it may, counts it as failed.
pub async fn begin_attempt(pool: &PgPool, keys: &Keys) -> sqlx::Result<Verdict> {
    let scopes = ["account", "ip", "pair"].map(String::from);
    let ids = [keys.account.clone(), keys.ip.clone(), keys.pair.clone()];
    let mut tx = pool.begin().await?;
    // Upsert-and-return locks all three rows in one fixed order (no deadlock between attempts);
    // the no-op update is what takes the lock on an existing row.
    let rows: Vec<(String, i32, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "insert into login_throttle as t (scope, key)
         select s, k from unnest($1::text[], $2::text[]) as u(s, k) order by s, k
         on conflict (scope, key) do update set failures = t.failures
         returning t.scope, t.failures, t.last_failure_at, now()",
    )
    .bind(&scopes[..])
    .bind(&ids[..])
    .fetch_all(&mut *tx)
    .await?;
    let Some(now) = rows.first().map(|r| r.3) else {
        return Err(sqlx::Error::RowNotFound);
    };
    let counter = |scope: &str| {
        rows.iter()
            .find(|r| r.0 == scope)
            .map(|r| Counter {
                failures: r.1,
                last_failure_at: r.2,
            })
            .unwrap_or(Counter {
                failures: 0,
                last_failure_at: now,
            })
    };
    let c = Counters {
        pair: counter("pair"),
        ip: counter("ip"),
        account: counter("account"),
    };
    let verdict = c.verdict(now);
    if verdict == Verdict::Allowed {
        let failures = [
            ACCOUNT.after_failure(c.account, now),
            IP.after_failure(c.ip, now),
            PAIR.after_failure(c.pair, now),
        ];
        sqlx::query(
            "update login_throttle t set failures = u.f, last_failure_at = now()
             from unnest($1::text[], $2::text[], $3::int[]) as u(s, k, f)
             where t.scope = u.s and t.key = u.k",
        )
        .bind(&scopes[..])
        .bind(&ids[..])
        .bind(&failures[..])
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(verdict)
}

/// A correct password: forgets the pair's failures and takes back the failure that
/// [`begin_attempt`] counted for the IP and the address (their earlier failures stay counted, so
/// a real user's success during an attack does not reset the attacker's budget).
pub async fn record_success(pool: &PgPool, keys: &Keys) -> sqlx::Result<()> {
    sqlx::query(
        "with pair as (delete from login_throttle where scope = 'pair' and key = $1)
         update login_throttle set failures = greatest(failures - 1, 0)
         where (scope = 'ip' and key = $2) or (scope = 'account' and key = $3)",
    )
    .bind(&keys.pair)
    .bind(&keys.ip)
    .bind(&keys.account)
    .execute(pool)
    .await?;
    Ok(())
}

/// Deletes up to `limit` counters idle for `idle_seconds`, skipping rows another attempt holds.
pub async fn sweep(pool: &PgPool, idle_seconds: i64, limit: i64) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "delete from login_throttle where ctid = any(array(
             select ctid from login_throttle
             where last_failure_at < now() - make_interval(secs => $1)
             order by last_failure_at limit $2 for update skip locked))",
    )
    .bind(idle_seconds as f64)
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
