//! The step runner: claims due enrolments (`FOR UPDATE SKIP LOCKED`, oldest due first) and
//! takes their steps in the claiming transaction, up to the next wait or the end.
//!
//! Every step is a database action (a mail step queues a delivery; the delivery engine sends
//! it later under its own guarantees), so the step, its record and the enrolment's new place
//! commit together or not at all: the row lock is the lease. A process killed mid-batch loses
//! its connection, PostgreSQL rolls the transaction back and releases the rows, and the next
//! claim takes them from where they were committed. Nothing is half-done, and nothing is done
//! twice: a step taken is a row with `primary key (enrolment_id, step)`, a mail's job id is
//! derived from that key, and a branch only jumps forward.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};

use crate::db::delivery::{self, NewDelivery};
use crate::db::segment::{push_predicate, push_property_test, Clock, Place};
use crate::domain::automation::{land, Definition, ExitReason, Step, StepOutcome};
use crate::domain::{
    AutomationId, EmailAddress, EnrolmentId, JobId, OrgId, Reference, SubscriberId,
};

#[derive(sqlx::FromRow)]
struct Due {
    id: i64,
    org_id: i64,
    automation_id: i64,
    version: i32,
    subscriber_id: i64,
    step: i32,
    enrolled_at: DateTime<Utc>,
    now: DateTime<Utc>,
    email: String,
    erased: bool,
    suppressed: bool,
    zone: String,
    org_zone: String,
    /// The calendar day in the org's zone, as the segment language reads dates.
    today: chrono::NaiveDate,
    /// Inside the org's quiet hours: when they end.
    quiet_until: Option<DateTime<Utc>>,
}

/// Takes the steps of up to `limit` due enrolments of active automations, at the database's
/// now (or `pinned`). Returns how many enrolments it moved.
pub async fn run_due(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    limit: i64,
) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    let due: Vec<Due> = sqlx::query_as(
        "select e.id, e.org_id, e.automation_id, e.version, e.subscriber_id, e.step, e.enrolled_at,
                coalesce($1, now()) as now, s.email, s.erased_at is not null as erased,
                exists (select 1 from suppressions x
                        where x.org_id = e.org_id and x.email_lower = s.email_lower) as suppressed,
                mailroom_zone_or(s.attributes ->> 'timezone', o.timezone) as zone,
                o.timezone as org_zone, (coalesce($1, now()) at time zone o.timezone)::date as today,
                case when q.quiet and o.quiet_hours is not null
                     then mailroom_next_local(coalesce($1, now()), o.timezone, null, q.stop) end as quiet_until
         from enrolments e
         join automations a on a.id = e.automation_id
         join subscribers s on s.org_id = e.org_id and s.id = e.subscriber_id
         join orgs o on o.id = e.org_id
         cross join lateral (
             select split_part(o.quiet_hours, '-', 2)::int as stop,
                    case when split_part(o.quiet_hours, '-', 1)::int < split_part(o.quiet_hours, '-', 2)::int
                         then h >= split_part(o.quiet_hours, '-', 1)::int and h < split_part(o.quiet_hours, '-', 2)::int
                         else h >= split_part(o.quiet_hours, '-', 1)::int or h < split_part(o.quiet_hours, '-', 2)::int
                    end as quiet
             from (select extract(hour from coalesce($1, now()) at time zone o.timezone)::int as h) l
         ) q
         where e.state = 'active' and e.due_at <= coalesce($1, now()) and a.status = 'active'
         order by e.due_at
         limit $2
         for update of e skip locked",
    )
    .bind(pinned)
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let mut keys: Vec<(i64, i32)> = due.iter().map(|d| (d.automation_id, d.version)).collect();
    keys.sort_unstable();
    keys.dedup();
    let (ids, versions): (Vec<i64>, Vec<i32>) = keys.into_iter().unzip();
    let definitions: HashMap<(i64, i32), Definition> =
        sqlx::query_as::<_, (i64, i32, Json<Definition>)>(
            "select v.automation_id, v.version, v.definition from automation_versions v
         join unnest($1::bigint[], $2::int[]) k(a, v) on v.automation_id = k.a and v.version = k.v",
        )
        .bind(&ids)
        .bind(&versions)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|(a, v, Json(d))| ((a, v), d))
        .collect();
    let n = due.len();
    for d in due {
        let Some(def) = definitions.get(&(d.automation_id, d.version)) else {
            continue;
        };
        take_steps(&mut tx, &d, def).await?;
    }
    tx.commit().await?;
    Ok(n)
}

/// What one enrolment's claim ends with.
enum End {
    /// Asleep until `due`, at step `next`.
    Sleep {
        next: usize,
        due: DateTime<Utc>,
    },
    Completed,
    Left(ExitReason),
}

async fn take_steps(conn: &mut PgConnection, d: &Due, def: &Definition) -> sqlx::Result<()> {
    let org = OrgId(d.org_id);
    let clock = Clock {
        now: d.now,
        today: d.today,
        tz: d.org_zone.clone(),
    };
    let goal = match &def.goal {
        Some(g) => reached_goal(conn, org, d, g, &clock).await?,
        None => false,
    };
    let mut at = usize::try_from(d.step).unwrap_or(usize::MAX);
    let end = loop {
        let leave = if d.erased {
            Some(ExitReason::Erased)
        } else if d.suppressed {
            Some(ExitReason::Unsubscribed)
        } else if goal {
            Some(ExitReason::Goal)
        } else {
            None
        };
        if let Some(reason) = leave {
            if at < def.steps.len() {
                record(conn, d, at, StepOutcome::Skipped, reason.as_str()).await?;
            }
            break End::Left(reason);
        }
        let Some(step) = def.steps.get(at) else {
            break End::Completed;
        };
        match step {
            Step::Email { .. } => {
                // Quiet hours: the mail waits, untaken, until they end.
                if let Some(due) = d.quiet_until {
                    break End::Sleep { next: at, due };
                }
                if record(conn, d, at, StepOutcome::Sent, "").await? {
                    queue_mail(conn, d, at).await?;
                }
                at += 1;
            }
            Step::Wait { .. } => {
                let minutes = step.wait_minutes().unwrap_or(0);
                let due = d.now + chrono::Duration::minutes(i64::try_from(minutes).unwrap_or(0));
                record(conn, d, at, StepOutcome::Waited, &due.to_rfc3339()).await?;
                break End::Sleep { next: at + 1, due };
            }
            Step::WaitUntil { weekday, hour } => {
                let due: DateTime<Utc> =
                    sqlx::query_scalar("select mailroom_next_local($1, $2, $3, $4)")
                        .bind(d.now)
                        .bind(&d.zone)
                        .bind(weekday.map(|w| w.dow()))
                        .bind(i32::from(*hour))
                        .fetch_one(&mut *conn)
                        .await?;
                let detail = format!("{} ({})", due.to_rfc3339(), d.zone);
                record(conn, d, at, StepOutcome::Waited, &detail).await?;
                break End::Sleep { next: at + 1, due };
            }
            Step::Branch {
                condition,
                then,
                otherwise,
            } => {
                let mut qb: QueryBuilder<'_, Postgres> = QueryBuilder::new(
                    "select exists (select 1 from subscribers s where s.org_id = ",
                );
                qb.push_bind(org);
                qb.push(" and s.id = ");
                qb.push_bind(d.subscriber_id);
                qb.push(" and ");
                push_predicate(&mut qb, org, condition, &clock, Place::Top);
                qb.push(")");
                let holds: bool = qb
                    .build_query_scalar()
                    .persistent(false)
                    .fetch_one(&mut *conn)
                    .await?;
                let jump = if holds { *then } else { *otherwise };
                let detail = if holds { "then" } else { "else" };
                record(conn, d, at, StepOutcome::Branched, detail).await?;
                match land(at, jump) {
                    Some(next) => at = next,
                    None => break End::Left(ExitReason::Branch),
                }
            }
            Step::SetAttribute { name, value } => {
                if record(conn, d, at, StepOutcome::Set, "").await? {
                    sqlx::query(
                        "update subscribers set attributes = attributes || jsonb_build_object($3::text, $4::jsonb)
                         where org_id = $1 and id = $2",
                    )
                    .bind(org)
                    .bind(d.subscriber_id)
                    .bind(name)
                    .bind(Json(value))
                    .execute(&mut *conn)
                    .await?;
                }
                at += 1;
            }
            Step::AddToList { list_id } => {
                let added = sqlx::query(
                    "insert into list_members (org_id, list_id, subscriber_id)
                     select $1, l.id, $3 from lists l where l.org_id = $1 and l.id = $2
                     on conflict do nothing",
                )
                .bind(org)
                .bind(list_id)
                .bind(d.subscriber_id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
                let detail = if added == 1 {
                    ""
                } else {
                    "already on the list, or it is gone"
                };
                record(conn, d, at, StepOutcome::Listed, detail).await?;
                at += 1;
            }
            Step::RemoveFromList { list_id } => {
                sqlx::query(
                    "delete from list_members where org_id = $1 and list_id = $2 and subscriber_id = $3",
                )
                .bind(org)
                .bind(list_id)
                .bind(d.subscriber_id)
                .execute(&mut *conn)
                .await?;
                record(conn, d, at, StepOutcome::Unlisted, "").await?;
                at += 1;
            }
            Step::Exit => {
                record(conn, d, at, StepOutcome::Exited, "").await?;
                break End::Left(ExitReason::Step);
            }
        }
    };
    match end {
        End::Sleep { next, due } => {
            sqlx::query("update enrolments set step = $2, due_at = $3 where id = $1")
                .bind(d.id)
                .bind(i32::try_from(next).unwrap_or(i32::MAX))
                .bind(due)
                .execute(&mut *conn)
                .await?;
        }
        End::Completed => {
            sqlx::query(
                "update enrolments set step = $2, state = 'completed', ended_at = $3 where id = $1",
            )
            .bind(d.id)
            .bind(i32::try_from(at).unwrap_or(i32::MAX))
            .bind(d.now)
            .execute(&mut *conn)
            .await?;
        }
        End::Left(reason) => {
            sqlx::query(
                "update enrolments set step = $2, state = 'exited', exit_reason = $3, ended_at = $4
                 where id = $1",
            )
            .bind(d.id)
            .bind(i32::try_from(at).unwrap_or(i32::MAX))
            .bind(reason)
            .bind(d.now)
            .execute(&mut *conn)
            .await?;
        }
    }
    Ok(())
}

/// Records step `at` as taken; false when it was taken before (never in this design, which
/// visits each step once, but the key decides and the step's action is not repeated).
async fn record(
    conn: &mut PgConnection,
    d: &Due,
    at: usize,
    outcome: StepOutcome,
    detail: &str,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "insert into enrolment_steps (org_id, automation_id, enrolment_id, step, outcome, detail, taken_at)
         values ($1, $2, $3, $4, $5, $6, $7)
         on conflict do nothing",
    )
    .bind(d.org_id)
    .bind(d.automation_id)
    .bind(d.id)
    .bind(i32::try_from(at).unwrap_or(i32::MAX))
    .bind(outcome)
    .bind(detail)
    .bind(d.now)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

async fn queue_mail(conn: &mut PgConnection, d: &Due, at: usize) -> sqlx::Result<()> {
    // Addresses were checked when the subscriber was made; one that no longer parses is
    // recorded against the step instead of failing the batch.
    let Ok(recipient) = EmailAddress::parse(&d.email) else {
        sqlx::query(
            "update enrolment_steps set outcome = 'skipped', detail = 'the address does not parse'
             where enrolment_id = $1 and step = $2",
        )
        .bind(d.id)
        .bind(i32::try_from(at).unwrap_or(i32::MAX))
        .execute(conn)
        .await?;
        return Ok(());
    };
    let job = JobId::Automation {
        org_id: d.org_id,
        enrolment_id: d.id,
        step: i32::try_from(at).unwrap_or(i32::MAX),
    };
    delivery::enqueue(
        conn,
        NewDelivery {
            job: &job,
            org: OrgId(d.org_id),
            recipient: &recipient,
            reference: Reference::Automation {
                automation: AutomationId(d.automation_id),
                enrolment: EnrolmentId(d.id),
                subscriber: SubscriberId(d.subscriber_id),
            },
        },
    )
    .await?;
    Ok(())
}

/// The goal event happened since they were enrolled.
async fn reached_goal(
    conn: &mut PgConnection,
    org: OrgId,
    d: &Due,
    g: &crate::domain::automation::Goal,
    clock: &Clock,
) -> sqlx::Result<bool> {
    let mut qb: QueryBuilder<'_, Postgres> =
        QueryBuilder::new("select exists (select 1 from events e where e.org_id = ");
    qb.push_bind(org);
    qb.push(" and e.subscriber_id = ");
    qb.push_bind(d.subscriber_id);
    qb.push(" and e.name = ");
    qb.push_bind(g.event.clone());
    qb.push(" and e.occurred_at >= ");
    qb.push_bind(d.enrolled_at);
    if let Some(p) = &g.property {
        qb.push(" and ");
        push_property_test(&mut qb, "e.properties", p, clock);
    }
    qb.push(")");
    qb.build_query_scalar()
        .persistent(false)
        .fetch_one(conn)
        .await
}
