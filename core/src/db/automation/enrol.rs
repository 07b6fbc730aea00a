//! Enrolments: `unique (automation_id, subscriber_id, occurrence)` referees every trigger, so
//! the same event, list join or API call delivered any number of times, at once or later, is
//! one enrolment. List joins enrol through the `list_members_enrol` trigger (the migration),
//! whichever path joined; events here, in the transaction that records them.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};

use crate::domain::automation::{AutomationStatus, Definition, Reentry, Trigger};
use crate::domain::{OrgId, SubscriberId};

#[derive(Debug, thiserror::Error)]
pub enum EnrolError {
    #[error("no such automation")]
    NotFound,
    /// A draft or stopped automation enrols nobody.
    #[error("the automation is {0}")]
    NotLive(AutomationStatus),
    #[error("no such subscriber")]
    NoSubscriber,
    /// Only confirmed subscribers are enrolled (as campaigns reach only them).
    #[error("the subscriber is not confirmed")]
    NotConfirmed,
    /// The person's enrolment kept changing under this one (ending as it was made, again
    /// and again): the caller may simply try again.
    #[error("the subscriber's enrolment changed meanwhile; try again")]
    Busy,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enrolled {
    pub id: i64,
    /// False: this occurrence was enrolled before (a retry), or the re-entry rule kept the
    /// person where they are; `id` is that enrolment.
    pub new: bool,
}

/// The occurrence a trigger's identity `key` makes under `reentry`.
fn occurrence(reentry: Reentry, key: &str) -> String {
    match reentry {
        Reentry::Once => String::new(),
        Reentry::PerTrigger | Reentry::AfterLeaving => key.to_owned(),
    }
}

/// Enrols one subscriber through the API (or the dashboard), `key` being the caller's id for
/// this enrolment and `context` what the mail may show as `{{ event.* }}`.
pub async fn enrol(
    conn: &mut PgConnection,
    org: OrgId,
    automation: i64,
    subscriber: SubscriberId,
    key: &str,
    context: &serde_json::Value,
) -> Result<Enrolled, EnrolError> {
    let row: Option<(AutomationStatus, Option<i32>, Option<Reentry>)> = sqlx::query_as(
        // A stop waits for this transaction, and sees what it enrolled.
        "select status, live_version, reentry from automations where org_id = $1 and id = $2
         for key share",
    )
    .bind(org)
    .bind(automation)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, live, reentry)) = row else {
        return Err(EnrolError::NotFound);
    };
    let (Some(version), Some(reentry), true) = (live, reentry, status.enrols()) else {
        return Err(EnrolError::NotLive(status));
    };
    let status: Option<String> = sqlx::query_scalar(
        "select status from subscribers where org_id = $1 and id = $2 and erased_at is null",
    )
    .bind(org)
    .bind(subscriber)
    .fetch_optional(&mut *conn)
    .await?;
    match status.as_deref() {
        None => return Err(EnrolError::NoSubscriber),
        Some("confirmed") => {}
        Some(_) => return Err(EnrolError::NotConfirmed),
    }
    let occurrence = occurrence(reentry, &format!("api:{key}"));
    // On a conflict the insert waited for the other transaction to commit, and the select's
    // snapshot, taken after, sees its row, unless that enrolment has ended meanwhile (an
    // "again after leaving" one conflicts only while active): then the insert is tried again.
    for _ in 0..3 {
        let made: Option<i64> = sqlx::query_scalar(
            "insert into enrolments (org_id, automation_id, version, subscriber_id, occurrence,
                                     exclusive, due_at, enrolled_at, context)
             values ($1, $2, $3, $4, $5, $6, now(), now(), $7)
             on conflict do nothing
             returning id",
        )
        .bind(org)
        .bind(automation)
        .bind(version)
        .bind(subscriber)
        .bind(&occurrence)
        .bind(reentry == Reentry::AfterLeaving)
        .bind(Json(context))
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(id) = made {
            return Ok(Enrolled { id, new: true });
        }
        let id: Option<i64> = sqlx::query_scalar(
            "select id from enrolments
             where org_id = $1 and automation_id = $2 and subscriber_id = $3
               and (occurrence = $4 or (exclusive and state = 'active'))
             order by id desc limit 1",
        )
        .bind(org)
        .bind(automation)
        .bind(subscriber)
        .bind(&occurrence)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(id) = id {
            return Ok(Enrolled { id, new: false });
        }
    }
    Err(EnrolError::Busy)
}

/// The start of an `insert into enrolments … select` shared by the triggers that enrol in
/// bulk, pushed onto `qb`: org and subscriber from the given columns, the occurrence empty
/// for "once" and made by `occurrence` otherwise, exclusive for "again after leaving"; the
/// caller goes on with `, <context> from …`.
fn push_insert_head<'a>(
    qb: &mut QueryBuilder<'a, Postgres>,
    org: &'static str,
    automation: i64,
    version: i32,
    subscriber: &'static str,
    reentry: Reentry,
    occurrence: impl FnOnce(&mut QueryBuilder<'a, Postgres>),
) {
    qb.push(
        "insert into enrolments (org_id, automation_id, version, subscriber_id, occurrence,
                                 exclusive, due_at, enrolled_at, context)
         select ",
    );
    qb.push(org);
    qb.push(", ");
    qb.push_bind(automation);
    qb.push(", ");
    qb.push_bind(version);
    qb.push(", ");
    qb.push(subscriber);
    qb.push(", ");
    match reentry {
        Reentry::Once => {
            qb.push("''");
        }
        Reentry::PerTrigger | Reentry::AfterLeaving => occurrence(qb),
    }
    qb.push(", ");
    qb.push_bind(reentry == Reentry::AfterLeaving);
}

/// [`push_insert_head`] as a statement of its own.
fn insert_head<'a>(
    org: &'static str,
    automation: i64,
    version: i32,
    subscriber: &'static str,
    reentry: Reentry,
    occurrence: impl FnOnce(&mut QueryBuilder<'a, Postgres>),
) -> QueryBuilder<'a, Postgres> {
    let mut qb = QueryBuilder::new("");
    push_insert_head(
        &mut qb, org, automation, version, subscriber, reentry, occurrence,
    );
    qb
}

/// Enrols the subscribers of the newly recorded `events` (ids of the org's events) in every
/// live automation an event of theirs triggers, inside the recording transaction. Returns
/// how many enrolments were made.
pub async fn enrol_from_events(
    conn: &mut PgConnection,
    org: OrgId,
    events: &[i64],
) -> sqlx::Result<u64> {
    if events.is_empty() {
        return Ok(0);
    }
    let triggered: Vec<(i64, i32, Json<Definition>)> = sqlx::query_as(
        "select a.id, a.live_version, v.definition
         from automations a
         join automation_versions v on v.automation_id = a.id and v.version = a.live_version
         where a.org_id = $1 and a.trigger_kind = 'event' and a.status in ('active', 'paused')
           and a.trigger_event in (select distinct name from events where org_id = $1 and id = any($2))
         order by a.id
         for key share of a",
    )
    .bind(org)
    .bind(events)
    .fetch_all(&mut *conn)
    .await?;
    if triggered.is_empty() {
        return Ok(0);
    }
    let clock = crate::db::segment::clock(conn, org, None).await?;
    let mut made = 0;
    for (automation, version, Json(d)) in triggered {
        let Trigger::Event { name, property } = &d.trigger else {
            continue;
        };
        let mut qb = insert_head(
            "e.org_id",
            automation,
            version,
            "e.subscriber_id",
            d.reentry,
            |qb| {
                qb.push("'event:' || e.key");
            },
        );
        qb.push(
            ", now(), now(), e.properties
             from events e join subscribers s on s.org_id = e.org_id and s.id = e.subscriber_id
             where s.erased_at is null and s.status = 'confirmed' and e.org_id = ",
        );
        qb.push_bind(org);
        qb.push(" and e.id = any(");
        qb.push_bind(events.to_vec());
        qb.push(") and e.name = ");
        qb.push_bind(name.clone());
        if let Some(p) = property {
            qb.push(" and ");
            crate::db::segment::push_property_test(&mut qb, "e.properties", p, &clock);
        }
        qb.push(" order by e.subscriber_id, e.key on conflict do nothing");
        made += qb
            .build()
            .persistent(false)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(made)
}

/// How many days back a date trigger looks: a day on which no replica ran is caught up (late,
/// once: the day it fired on is the occurrence).
pub const DATE_CATCH_UP_DAYS: i64 = 3;

/// Enrols, for every live automation with a date trigger, the subscribers whose date fires
/// today in the org's calendar (at the database's now, or `pinned`), or fired on one of the
/// [`DATE_CATCH_UP_DAYS`] before. Any number of replicas may run it at once: the enrolment's
/// unique key referees. Returns how many enrolments were made.
pub async fn enrol_by_dates(pool: &PgPool, pinned: Option<DateTime<Utc>>) -> sqlx::Result<u64> {
    let mut conn = pool.acquire().await?;
    let live: Vec<(i64, i64, i32, Json<Definition>, NaiveDate)> = sqlx::query_as(
        "select a.org_id, a.id, a.live_version, v.definition,
                (coalesce($1, now()) at time zone o.timezone)::date
         from automations a
         join automation_versions v on v.automation_id = a.id and v.version = a.live_version
         join orgs o on o.id = a.org_id
         where a.trigger_kind = 'date' and a.status in ('active', 'paused')
         order by a.id",
    )
    .bind(pinned)
    .fetch_all(&mut *conn)
    .await?;
    drop(conn);
    let mut made = 0;
    for (org, automation, version, Json(d), today) in live {
        let Trigger::Date {
            attribute,
            offset_days,
            yearly,
        } = &d.trigger
        else {
            continue;
        };
        let on_date = enrol_on_date(
            pool,
            org,
            automation,
            version,
            d.reentry,
            (attribute, *offset_days, *yearly),
            today,
        );
        made += crate::db::one_of_many("date trigger of automation", automation, on_date.await)?;
    }
    Ok(made)
}

/// Holds the automation's row shared in `tx` if `version` is still its live version: a stop
/// waits for the transaction and sees what it enrolled, and one stopped (or edited) meanwhile
/// is left for the next scan.
async fn still_live(tx: &mut PgConnection, automation: i64, version: i32) -> sqlx::Result<bool> {
    let still: Option<i32> = sqlx::query_scalar(
        "select live_version from automations
         where id = $1 and status in ('active', 'paused') for key share",
    )
    .bind(automation)
    .fetch_optional(&mut *tx)
    .await?
    .flatten();
    Ok(still == Some(version))
}

/// Enrols, for one date-triggered automation, whoever's date (`attribute`, `offset_days`
/// before it fires, every year or once) fires `today` or fired in the catch-up days before.
async fn enrol_on_date(
    pool: &PgPool,
    org: i64,
    automation: i64,
    version: i32,
    reentry: Reentry,
    (attribute, offset_days, yearly): (&str, i32, bool),
    today: NaiveDate,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    if !still_live(&mut tx, automation, version).await? {
        return Ok(0);
    }
    let mut made = 0;
    for back in 0..DATE_CATCH_UP_DAYS {
        let fires = today - Duration::days(back);
        // The attribute's date that fires on `fires`.
        let date = fires - Duration::days(i64::from(offset_days));
        let mut qb = insert_head("s.org_id", automation, version, "s.id", reentry, |qb| {
            qb.push_bind(format!("date:{fires}"));
        });
        qb.push(", now(), now(), jsonb_build_object('date', s.attributes ->> ");
        qb.push_bind(attribute.to_owned());
        qb.push(") from subscribers s where s.org_id = ");
        qb.push_bind(org);
        qb.push(
            " and s.erased_at is null and s.status = 'confirmed' and jsonb_typeof(s.attributes -> ",
        );
        qb.push_bind(attribute.to_owned());
        qb.push(") = 'string' and ");
        if yearly {
            // The same month and day in a year since (text order is number order for
            // four-digit years); 29 February's falls on 28 February in other years.
            let mut days = vec![date.format("%m-%d").to_string()];
            if date.month() == 2
                && date.day() == 28
                && NaiveDate::from_ymd_opt(date.year(), 2, 29).is_none()
            {
                days.push("02-29".into());
            }
            qb.push("substr(s.attributes ->> ");
            qb.push_bind(attribute.to_owned());
            qb.push(", 5, 1) = '-' and substr(s.attributes ->> ");
            qb.push_bind(attribute.to_owned());
            qb.push(", 6, 5) = any(");
            qb.push_bind(days);
            qb.push(") and substr(s.attributes ->> ");
            qb.push_bind(attribute.to_owned());
            qb.push(", 1, 4) <= ");
            qb.push_bind(format!("{:04}", date.year()));
        } else {
            qb.push("substr(s.attributes ->> ");
            qb.push_bind(attribute.to_owned());
            qb.push(", 1, 10) = ");
            qb.push_bind(date.format("%Y-%m-%d").to_string());
        }
        qb.push(" order by s.id on conflict do nothing");
        made += qb
            .build()
            .persistent(false)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    tx.commit().await?;
    Ok(made)
}

/// Enrols, for every live automation triggered by entering a segment, the subscribers who
/// match its segment version now (at the database's now, or `pinned`) and did not at its last
/// scan; those who no longer match are dropped from the last scan's answer, so matching again
/// later is another entry. The first scan of a segment version enrols nobody: it only notes
/// who matches. Any number of replicas may run it at once: an automation's scan state is
/// locked by the one scanning it (the others skip it), and the entries a scan finds are its
/// scan number's occurrence; one scanned less than half of `every` ago is not scanned again,
/// so more replicas do not mean more scans. Returns how many enrolments were made.
pub async fn enrol_by_segments(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    every: std::time::Duration,
) -> sqlx::Result<u64> {
    let mut conn = pool.acquire().await?;
    let live: Vec<(OrgId, i64, i32, Json<Definition>)> = sqlx::query_as(
        "select a.org_id, a.id, a.live_version, v.definition
         from automations a
         join automation_versions v on v.automation_id = a.id and v.version = a.live_version
         where a.trigger_kind = 'segment_entered' and a.status in ('active', 'paused')
         order by a.id",
    )
    .fetch_all(&mut *conn)
    .await?;
    drop(conn);
    let mut made = 0;
    for (org, automation, version, Json(d)) in live {
        let Trigger::SegmentEntered {
            segment_id,
            version: Some(segment_version),
        } = d.trigger
        else {
            continue;
        };
        let scan = scan_segment(
            pool,
            (pinned, every),
            org,
            automation,
            version,
            d.reentry,
            segment_id,
            segment_version,
        );
        made += crate::db::one_of_many("segment trigger of automation", automation, scan.await)?;
    }
    Ok(made)
}

#[allow(clippy::too_many_arguments)]
async fn scan_segment(
    pool: &PgPool,
    (pinned, every): (Option<DateTime<Utc>>, std::time::Duration),
    org: OrgId,
    automation: i64,
    version: i32,
    reentry: Reentry,
    segment_id: i64,
    segment_version: i32,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    if !still_live(&mut tx, automation, version).await? {
        return Ok(0);
    }
    sqlx::query(
        "insert into automation_segment_scans (automation_id, org_id) values ($1, $2)
         on conflict do nothing",
    )
    .bind(automation)
    .bind(org)
    .execute(&mut *tx)
    .await?;
    let state: Option<(Option<i64>, Option<i32>, i64)> = sqlx::query_as(
        "select segment_id, segment_version, generation from automation_segment_scans
         where automation_id = $1
           and (scanned_at is null
                or scanned_at <= coalesce($2, now()) - make_interval(secs => $3 / 2))
         for update skip locked",
    )
    .bind(automation)
    .bind(pinned)
    .bind(every.as_secs_f64())
    .fetch_optional(&mut *tx)
    .await?;
    // Another replica is scanning it, or just did.
    let Some((scanned_segment, scanned_version, generation)) = state else {
        return Ok(0);
    };
    let Some(g) =
        crate::db::segment::definition_at(&mut tx, org, segment_id, segment_version).await?
    else {
        return Ok(0);
    };
    let clock = crate::db::segment::clock(&mut tx, org, pinned).await?;
    let first = (scanned_segment, scanned_version) != (Some(segment_id), Some(segment_version));
    let generation = generation + 1;
    let mut room = crate::db::segment::roomy(&mut tx).await?;
    if first {
        // Another segment version's answer says nothing about this one's.
        sqlx::query("delete from automation_segment_members where automation_id = $1")
            .bind(automation)
            .execute(&mut *room)
            .await?;
    }
    let mut qb = QueryBuilder::new(
        "with now_in as materialized (
             select s.id from subscribers s
             where s.erased_at is null and s.status = 'confirmed' and s.org_id = ",
    );
    qb.push_bind(org);
    qb.push(" and ");
    crate::db::segment::push_predicate(&mut qb, org, &g, &clock, crate::db::segment::Place::Top);
    qb.push("), gone as (delete from automation_segment_members m where m.automation_id = ");
    qb.push_bind(automation);
    qb.push(
        " and not exists (select 1 from now_in n where n.id = m.subscriber_id)),
         entered as (insert into automation_segment_members (automation_id, org_id, subscriber_id)
                     select ",
    );
    qb.push_bind(automation);
    qb.push(", ");
    qb.push_bind(org);
    qb.push(
        ", id from now_in order by id on conflict do nothing
                     returning org_id, subscriber_id) ",
    );
    let made = if first {
        qb.push("select count(*) from entered");
        qb.build_query_scalar::<i64>()
            .persistent(false)
            .fetch_one(&mut *room)
            .await?;
        0
    } else {
        push_insert_head(
            &mut qb,
            "e.org_id",
            automation,
            version,
            "e.subscriber_id",
            reentry,
            |qb| {
                qb.push_bind(format!("segment:{generation}"));
            },
        );
        qb.push(", now(), now(), jsonb_build_object('segment_id', ");
        qb.push_bind(segment_id);
        qb.push(") from entered e order by e.subscriber_id on conflict do nothing");
        qb.build()
            .persistent(false)
            .execute(&mut *room)
            .await?
            .rows_affected()
    };
    room.commit().await?;
    sqlx::query(
        "update automation_segment_scans
         set segment_id = $2, segment_version = $3, generation = $4, scanned_at = coalesce($5, now())
         where automation_id = $1",
    )
    .bind(automation)
    .bind(segment_id)
    .bind(segment_version)
    .bind(generation)
    .bind(pinned)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(made)
}

/// Takes the subscriber out of the automation: their unfinished enrolments end (`removed`),
/// and their mail not yet claimed is taken off the queue. Returns how many ended.
pub async fn remove(
    conn: &mut PgConnection,
    org: OrgId,
    automation: i64,
    subscriber: SubscriberId,
) -> sqlx::Result<u64> {
    let ended: Vec<i64> = sqlx::query_scalar(
        "update enrolments set state = 'exited', exit_reason = 'removed', ended_at = now()
         where org_id = $1 and automation_id = $2 and subscriber_id = $3 and state = 'active'
         returning id",
    )
    .bind(org)
    .bind(automation)
    .bind(subscriber)
    .fetch_all(&mut *conn)
    .await?;
    crate::db::delivery::cancel_automation_mail(
        conn,
        org,
        &ended,
        "they were taken out of the automation",
    )
    .await?;
    Ok(ended.len() as u64)
}

/// An erasure: the subscribers' enrolments end (`erased`) and forget what their triggers said.
pub async fn forget(conn: &mut PgConnection, org: OrgId, subscribers: &[i64]) -> sqlx::Result<()> {
    sqlx::query(
        "update enrolments
         set context = '{}',
             exit_reason = case when state = 'active' then 'erased' else exit_reason end,
             ended_at = case when state = 'active' then now() else ended_at end,
             state = case when state = 'active' then 'exited' else state end
         where org_id = $1 and subscriber_id = any($2)",
    )
    .bind(org)
    .bind(subscribers)
    .execute(conn)
    .await?;
    Ok(())
}
