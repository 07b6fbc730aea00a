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

use crate::db::delivery;
use crate::db::segment::{push_predicate, push_property_test, Clock, Place};
use crate::domain::automation::{land, Definition, EnrolmentState, ExitReason, Step, StepOutcome};
use crate::domain::{AutomationId, EmailAddress, EnrolmentId, JobId, OrgId, SubscriberId};

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
///
/// A step the database refuses for one person (a constraint or trigger of the operator's, a
/// row gone) would fail the whole batch, and fail it again at every claim, stranding everyone
/// in it: such a batch is taken again one person at a time, each in a savepoint, and whoever
/// fails leaves the automation (`failed`) while the others go on.
pub async fn run_due(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    limit: i64,
) -> sqlx::Result<usize> {
    match run_batch(pool, pinned, limit, false).await {
        Err(sqlx::Error::Database(e)) if refused_for_data(e.as_ref()) => {
            tracing::warn!(error = %e, "a batch of automation steps was refused; taking it one person at a time");
            run_batch(pool, pinned, limit, true).await
        }
        r => r,
    }
}

/// Whether the database refused a statement for what it held (a value out of range, a
/// constraint, an operator's trigger raising), which taking it again would not change; a
/// deadlock, a timeout or a server shutting down is none of these, and the claim is simply
/// retried later with nobody's enrolment ended.
fn refused_for_data(e: &dyn sqlx::error::DatabaseError) -> bool {
    data_refusal(e.code().as_deref())
}

/// By SQLSTATE: data exceptions (22), integrity constraints (23), PL/pgSQL raising (P0).
fn data_refusal(sqlstate: Option<&str>) -> bool {
    sqlstate.is_some_and(|c| c.starts_with("22") || c.starts_with("23") || c.starts_with("P0"))
}

/// One claim of up to `limit` due enrolments; `careful`: each person's steps in a savepoint.
async fn run_batch(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    limit: i64,
    careful: bool,
) -> sqlx::Result<usize> {
    let mut tx = pool.begin().await?;
    let due: Vec<Due> = sqlx::query_as(
        "select e.id, e.org_id, e.automation_id, e.version, e.subscriber_id, e.step, e.enrolled_at,
                coalesce($1, now()) as now, s.email, s.erased_at is not null as erased,
                s.status <> 'confirmed'
                or exists (select 1 from suppressions x
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
         -- The automation's row too, shared: a stop (which locks it) waits for this batch and
         -- sees the mail it queued; while a stop holds it, its enrolments are skipped.
         for update of e skip locked
         for key share of a skip locked",
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
    let mut fx = Effects::default();
    for d in &due {
        let Some(def) = definitions.get(&(d.automation_id, d.version)) else {
            continue;
        };
        if !careful {
            take_steps(&mut tx, d, def, &mut fx).await?;
            continue;
        }
        let mut one = sqlx::Connection::begin(&mut *tx).await?;
        let mut own = Effects::default();
        let taken = match take_steps(&mut one, d, def, &mut own).await {
            Ok(()) => own.write(&mut one, d.now).await,
            Err(e) => Err(e),
        };
        match taken {
            Ok(()) => one.commit().await?,
            Err(sqlx::Error::Database(e)) if refused_for_data(e.as_ref()) => {
                one.rollback().await?;
                tracing::error!(enrolment = d.id, automation = d.automation_id, step = d.step, error = %e,
                    "the database refused an automation step; the person leaves the automation");
                fx.failed(d);
            }
            Err(e) => return Err(e),
        }
    }
    fx.write(&mut tx, due[0].now).await?;
    tx.commit().await?;
    Ok(n)
}

/// What a batch's steps record and queue, written at its end in one statement each (a step
/// taken, the mail it queues, where each enrolment is now): the claim's cost is then a few
/// statements per batch, not per person, and the tables' statement triggers (the delivery
/// queue, events out) run once. Steps that read or change other rows (a branch, an attribute,
/// a list) still run as they are reached.
#[derive(Default)]
struct Effects {
    steps: Vec<StepRow>,
    mails: Vec<delivery::AutomationMail>,
    ends: Vec<EndRow>,
}

/// A step taken.
struct StepRow {
    org: i64,
    automation: i64,
    enrolment: i64,
    step: i32,
    outcome: StepOutcome,
    detail: String,
}

/// Where an enrolment is after its claim (asleep with its `due`, or ended).
struct EndRow {
    id: i64,
    step: i32,
    state: EnrolmentState,
    reason: Option<ExitReason>,
    due: Option<DateTime<Utc>>,
}

impl Effects {
    /// Step `at` of `d` taken.
    fn record(&mut self, d: &Due, at: usize, outcome: StepOutcome, detail: &str) {
        self.steps.push(StepRow {
            org: d.org_id,
            automation: d.automation_id,
            enrolment: d.id,
            step: index(at),
            outcome,
            detail: detail.to_owned(),
        });
    }

    /// `d`'s step was refused: recorded as skipped, and they leave.
    fn failed(&mut self, d: &Due) {
        let at = usize::try_from(d.step).unwrap_or(0);
        self.record(
            d,
            at,
            StepOutcome::Skipped,
            "the database refused this step (the server log says why)",
        );
        self.ends.push(EndRow {
            id: d.id,
            step: d.step,
            state: EnrolmentState::Exited,
            reason: Some(ExitReason::Failed),
            due: None,
        });
    }

    async fn write(self, conn: &mut PgConnection, now: DateTime<Utc>) -> sqlx::Result<()> {
        if !self.steps.is_empty() {
            let col = |f: fn(&StepRow) -> i64| self.steps.iter().map(f).collect::<Vec<i64>>();
            sqlx::query(
                "insert into enrolment_steps (org_id, automation_id, enrolment_id, step, outcome, detail, taken_at)
                 select o, a, e, s, out, det, $7
                 from unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::text[], $6::text[])
                      as t(o, a, e, s, out, det)
                 order by e, s
                 on conflict do nothing",
            )
            .bind(col(|r| r.org))
            .bind(col(|r| r.automation))
            .bind(col(|r| r.enrolment))
            .bind(self.steps.iter().map(|r| r.step).collect::<Vec<i32>>())
            .bind(self.steps.iter().map(|r| r.outcome).collect::<Vec<StepOutcome>>())
            .bind(self.steps.iter().map(|r| r.detail.as_str()).collect::<Vec<&str>>())
            .bind(now)
            .execute(&mut *conn)
            .await?;
        }
        delivery::enqueue_automation_mail(&mut *conn, &self.mails).await?;
        if !self.ends.is_empty() {
            sqlx::query(
                "update enrolments e
                 set step = u.step, state = u.state, exit_reason = u.reason,
                     due_at = coalesce(u.due, e.due_at),
                     ended_at = case when u.state = 'active' then null else $6 end
                 from unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::timestamptz[])
                      as u(id, step, state, reason, due)
                 where e.id = u.id",
            )
            .bind(self.ends.iter().map(|r| r.id).collect::<Vec<i64>>())
            .bind(self.ends.iter().map(|r| r.step).collect::<Vec<i32>>())
            .bind(
                self.ends
                    .iter()
                    .map(|r| r.state)
                    .collect::<Vec<EnrolmentState>>(),
            )
            .bind(
                self.ends
                    .iter()
                    .map(|r| r.reason)
                    .collect::<Vec<Option<ExitReason>>>(),
            )
            .bind(
                self.ends
                    .iter()
                    .map(|r| r.due)
                    .collect::<Vec<Option<DateTime<Utc>>>>(),
            )
            .bind(now)
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }
}

fn index(at: usize) -> i32 {
    i32::try_from(at).unwrap_or(i32::MAX)
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

async fn take_steps(
    conn: &mut PgConnection,
    d: &Due,
    def: &Definition,
    fx: &mut Effects,
) -> sqlx::Result<()> {
    let org = OrgId(d.org_id);
    let clock = Clock {
        now: d.now,
        today: d.today,
        tz: d.org_zone.clone(),
        enrolled_at: Some(d.enrolled_at),
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
                fx.record(d, at, StepOutcome::Skipped, reason.as_str());
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
                // Addresses were checked when the subscriber was made; one that no longer parses
                // is recorded against the step instead of failing the batch.
                match EmailAddress::parse(&d.email) {
                    Ok(recipient) => {
                        fx.record(d, at, StepOutcome::Sent, "");
                        fx.mails.push(delivery::AutomationMail {
                            job: JobId::Automation {
                                org_id: d.org_id,
                                enrolment_id: d.id,
                                step: index(at),
                            },
                            org: OrgId(d.org_id),
                            recipient,
                            automation: AutomationId(d.automation_id),
                            enrolment: EnrolmentId(d.id),
                            subscriber: SubscriberId(d.subscriber_id),
                        });
                    }
                    Err(_) => {
                        fx.record(d, at, StepOutcome::Skipped, "the address does not parse");
                    }
                }
                at += 1;
            }
            Step::Wait { .. } => {
                let minutes = step.wait_minutes().unwrap_or(0);
                let due = d.now + chrono::Duration::minutes(i64::try_from(minutes).unwrap_or(0));
                fx.record(d, at, StepOutcome::Waited, &due.to_rfc3339());
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
                fx.record(d, at, StepOutcome::Waited, &detail);
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
                fx.record(d, at, StepOutcome::Branched, detail);
                match land(at, jump) {
                    Some(next) => at = next,
                    None => break End::Left(ExitReason::Branch),
                }
            }
            Step::SetAttribute { name, value } => {
                fx.record(d, at, StepOutcome::Set, "");
                {
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
                fx.record(d, at, StepOutcome::Listed, detail);
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
                fx.record(d, at, StepOutcome::Unlisted, "");
                at += 1;
            }
            Step::Exit => {
                fx.record(d, at, StepOutcome::Exited, "");
                break End::Left(ExitReason::Step);
            }
        }
    };
    let (step, state, reason, due) = match end {
        End::Sleep { next, due } => (index(next), EnrolmentState::Active, None, Some(due)),
        End::Completed => (index(at), EnrolmentState::Completed, None, None),
        End::Left(reason) => (index(at), EnrolmentState::Exited, Some(reason), None),
    };
    fx.ends.push(EndRow {
        id: d.id,
        step,
        state,
        reason,
        due,
    });
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

#[cfg(test)]
mod tests {
    use super::data_refusal;

    #[test]
    fn only_what_the_data_causes_ends_an_enrolment() {
        for refused in ["22003", "22P02", "23505", "23514", "P0001"] {
            assert!(data_refusal(Some(refused)), "{refused}");
        }
        // Deadlock, serialization, lock and statement timeouts, shutdown, no room: retried.
        for passing in [
            "40P01", "40001", "55P03", "57014", "57P01", "53100", "08006",
        ] {
            assert!(!data_refusal(Some(passing)), "{passing}");
        }
        assert!(!data_refusal(None));
    }
}
