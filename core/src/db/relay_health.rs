//! What the relays' circuit breakers publish (one row per relay, for the dashboard) and the
//! campaigns they pause and resume. A relay serves every organisation, so these rows are the
//! operator's, not an org's: pages show their state and why, never the relay's address.

use sqlx::{PgConnection, PgPool};

use crate::db::campaign::states::OrgCampaign;
use crate::domain::relay::{RelayFailure, RelayState};

/// The circuit opened (or stayed open after a failed probe): nothing goes to `relay` until a
/// probe succeeds at `next_probe_in` seconds from now.
pub async fn opened(
    pool: &PgPool,
    relay: &str,
    failures: i32,
    probes_failed: i32,
    next_probe_in: f64,
    why: RelayFailure,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into relay_health as h (relay, state, failures, probes_failed, opened_at, next_probe_at, last_error)
         values ($1, 'open', $2, $3, now(), now() + make_interval(secs => $4), $5)
         on conflict (relay) do update
         set state = 'open', failures = greatest(h.failures, excluded.failures),
             probes_failed = excluded.probes_failed,
             opened_at = case when h.state = 'open' then h.opened_at else now() end,
             next_probe_at = excluded.next_probe_at, last_error = excluded.last_error,
             updated_at = now()",
    )
    .bind(relay)
    .bind(failures)
    .bind(probes_failed)
    .bind(next_probe_in)
    .bind(why.as_str())
    .execute(pool)
    .await
    .map(drop)
}

/// A probe succeeded: the relay takes mail again.
pub async fn healed(pool: &PgPool, relay: &str) -> sqlx::Result<()> {
    sqlx::query(
        "insert into relay_health (relay, state) values ($1, 'healthy')
         on conflict (relay) do update
         set state = 'healthy', failures = 0, probes_failed = 0, opened_at = null,
             next_probe_at = null, updated_at = now()",
    )
    .bind(relay)
    .execute(pool)
    .await
    .map(drop)
}

/// Whether an outage left something behind: campaigns a breaker paused, or `relay` still shown
/// failing (its process stopped mid-outage).
pub async fn left_failing(pool: &PgPool, relay: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "select exists (select 1 from campaigns
                        where status = 'paused' and relay_pause_reason is not null and deleted_at is null)
             or exists (select 1 from relay_health where relay = $1 and state = 'open')",
    )
    .bind(relay)
    .fetch_one(pool)
    .await
}

/// One relay as the dashboard shows it (times in UTC, `HH:MM`).
#[derive(sqlx::FromRow, Debug, Clone, PartialEq)]
pub struct Health {
    pub state: RelayState,
    pub failures: i32,
    pub opened_at: Option<String>,
    pub next_probe_at: Option<String>,
    pub last_error: Option<RelayFailure>,
}

/// Every relay a breaker has written about, the open ones first.
pub async fn all(conn: &mut PgConnection) -> sqlx::Result<Vec<Health>> {
    sqlx::query_as(
        "select state, failures,
                to_char(opened_at at time zone 'UTC', 'HH24:MI') as opened_at,
                to_char(next_probe_at at time zone 'UTC', 'HH24:MI:SS') as next_probe_at,
                last_error
         from relay_health order by state = 'open' desc, relay",
    )
    .fetch_all(conn)
    .await
}

/// Pauses every sending campaign (the relay carries all of them) with `reason` on its page,
/// audited as Mailroom's own action. Returns the campaigns paused.
pub async fn pause_campaigns(pool: &PgPool, reason: &str) -> sqlx::Result<Vec<OrgCampaign>> {
    let mut tx = pool.begin().await?;
    let paused: Vec<OrgCampaign> = sqlx::query_as(
        "update campaigns set status = 'paused', relay_pause_reason = $1
         where status = 'sending' and deleted_at is null
         returning org_id, id",
    )
    .bind(reason)
    .fetch_all(&mut *tx)
    .await?;
    for c in &paused {
        audit(
            &mut tx,
            *c,
            crate::domain::AuditAction::CampaignRelayPause,
            "sending",
            "paused",
            reason,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(paused)
}

/// Resumes exactly the campaigns a breaker paused and nobody has touched since (any admin
/// transition clears `relay_pause_reason`). Returns them.
pub async fn resume_campaigns(pool: &PgPool) -> sqlx::Result<Vec<OrgCampaign>> {
    let mut tx = pool.begin().await?;
    #[derive(sqlx::FromRow)]
    struct Resumed {
        #[sqlx(flatten)]
        campaign: OrgCampaign,
        reason: String,
    }
    let resumed: Vec<Resumed> = sqlx::query_as(
        "update campaigns c set status = 'sending', relay_pause_reason = null
         from (select id, relay_pause_reason from campaigns
               where status = 'paused' and relay_pause_reason is not null and deleted_at is null
               for update) old
         where c.id = old.id
         returning c.org_id, c.id, old.relay_pause_reason as reason",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &resumed {
        audit(
            &mut tx,
            r.campaign,
            crate::domain::AuditAction::CampaignRelayResume,
            "paused",
            "sending",
            &r.reason,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(resumed.into_iter().map(|r| r.campaign).collect())
}

async fn audit(
    conn: &mut PgConnection,
    OrgCampaign { org_id, id }: OrgCampaign,
    action: crate::domain::AuditAction,
    before: &str,
    after: &str,
    reason: &str,
) -> sqlx::Result<()> {
    crate::db::audit::record(
        conn,
        crate::db::audit::Entry {
            before: Some(serde_json::json!({ "status": before })),
            after: Some(serde_json::json!({ "status": after, "reason": reason })),
            ..crate::db::audit::Entry::system(org_id.0, action, "campaign", Some(id.to_string()))
        },
    )
    .await
}
