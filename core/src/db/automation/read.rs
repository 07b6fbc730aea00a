//! What the dashboard, the API and the delivery worker read about automations.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgConnection;

use crate::domain::automation::{
    AutomationStatus, Definition, EnrolmentState, ExitReason, Step, StepOutcome,
};
use crate::domain::{BodyFormat, OrgId};

/// One automation in a list.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Summary {
    pub id: i64,
    pub name: String,
    pub status: AutomationStatus,
    pub live_version: Option<i32>,
    pub draft_version: i32,
    /// People on their way through it now.
    pub active: i64,
    /// Every enrolment, finished or not.
    pub enrolled: i64,
}

const SUMMARY: &str = "select a.id, a.name, a.status, a.live_version, a.draft_version,
        (select count(*) from enrolments e where e.automation_id = a.id and e.state = 'active') as active,
        (select count(*) from enrolments e where e.automation_id = a.id) as enrolled
    from automations a";

/// The org's automations, by name.
pub async fn list(conn: &mut PgConnection, org: OrgId) -> sqlx::Result<Vec<Summary>> {
    sqlx::query_as(&format!(
        "{SUMMARY} where a.org_id = $1 order by lower(a.name), a.id"
    ))
    .bind(org)
    .fetch_all(conn)
    .await
}

/// One automation with its live definition and the version waiting for approval.
#[derive(Debug, Clone)]
pub struct Detail {
    pub summary: Summary,
    pub live: Option<Definition>,
    /// The version being edited, when it is not the live one.
    pub waiting: Option<(Definition, WaitingEdit)>,
}

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct WaitingEdit {
    pub editor_id: i64,
    pub editor: String,
}

pub async fn get(conn: &mut PgConnection, org: OrgId, id: i64) -> sqlx::Result<Option<Detail>> {
    let summary: Option<Summary> =
        sqlx::query_as(&format!("{SUMMARY} where a.org_id = $1 and a.id = $2"))
            .bind(org)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(summary) = summary else {
        return Ok(None);
    };
    let versions: Vec<(i32, Json<Definition>, i64, String)> = sqlx::query_as(
        "select v.version, v.definition, v.editor_id, u.name
         from automation_versions v join users u on u.org_id = v.org_id and u.id = v.editor_id
         where v.org_id = $1 and v.automation_id = $2 and v.version in ($3, $4)",
    )
    .bind(org)
    .bind(id)
    .bind(summary.live_version.unwrap_or(0))
    .bind(summary.draft_version)
    .fetch_all(&mut *conn)
    .await?;
    let mut live = None;
    let mut waiting = None;
    for (version, Json(d), editor_id, editor) in versions {
        if Some(version) == summary.live_version {
            live = Some(d);
        } else {
            waiting = Some((d, WaitingEdit { editor_id, editor }));
        }
    }
    Ok(Some(Detail {
        summary,
        live,
        waiting,
    }))
}

/// How many people on `version` took step `step` with `outcome` (and, for skipped steps,
/// why); `outcome` `None` counts the people whose next step it is.
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct StepCount {
    pub version: i32,
    pub step: i32,
    pub outcome: Option<StepOutcome>,
    pub detail: String,
    pub n: i64,
}

/// Every step's counts for the automation, per version (a step's index means another step in
/// another version).
pub async fn step_counts(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
) -> sqlx::Result<Vec<StepCount>> {
    sqlx::query_as(
        "select e.version, t.step, t.outcome,
                case when t.outcome = 'skipped' then t.detail else '' end as detail, count(*) as n
         from enrolment_steps t join enrolments e on e.id = t.enrolment_id
         where t.org_id = $1 and t.automation_id = $2
         group by 1, 2, 3, 4
         union all
         select version, step, null, '', count(*) from enrolments
         where org_id = $1 and automation_id = $2 and state = 'active'
         group by 1, 2
         order by 1, 2, 3 nulls first, 4",
    )
    .bind(org)
    .bind(id)
    .fetch_all(conn)
    .await
}

/// Someone in an automation, and where they are.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Person {
    pub enrolment_id: i64,
    pub subscriber_id: i64,
    pub email: String,
    pub version: i32,
    pub state: EnrolmentState,
    pub exit_reason: Option<ExitReason>,
    /// The next step (or where they left).
    pub step: i32,
    pub due_at: DateTime<Utc>,
    pub enrolled_at: DateTime<Utc>,
}

/// The automation's enrolments after id `after`, newest first (`limit + 1` are read).
pub async fn people(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    before: Option<i64>,
    limit: i64,
) -> sqlx::Result<crate::db::Page<Person, i64>> {
    let rows: Vec<Person> = sqlx::query_as(
        "select e.id as enrolment_id, e.subscriber_id, s.email, e.version, e.state, e.exit_reason,
                e.step, e.due_at, e.enrolled_at
         from enrolments e join subscribers s on s.org_id = e.org_id and s.id = e.subscriber_id
         where e.org_id = $1 and e.automation_id = $2 and ($3::bigint is null or e.id < $3)
         order by e.id desc limit $4",
    )
    .bind(org)
    .bind(id)
    .bind(before)
    .bind(limit + 1)
    .fetch_all(conn)
    .await?;
    Ok(crate::db::Page::of(rows, limit, |p| p.enrolment_id))
}

/// A mail step's content for one enrolment, as the delivery worker renders it.
#[derive(Debug, Clone)]
pub struct MailContent {
    pub org_id: i64,
    pub enrolment_id: i64,
    pub step: i32,
    pub automation_id: i64,
    pub subject: String,
    pub body: String,
    pub format: BodyFormat,
    /// What the trigger said (`{{ event.* }}`).
    pub context: serde_json::Value,
    /// The subscriber's attributes (`{{ attributes.* }}`) and name, now.
    pub attributes: serde_json::Value,
    pub name: String,
}

/// The mail content of the steps `(org, enrolment, step)` name, each only within its org. A
/// reference whose step is not a mail step is left out.
pub async fn mail_contents(
    conn: &mut PgConnection,
    refs: &[(i64, i64, i32)],
) -> sqlx::Result<Vec<MailContent>> {
    let orgs: Vec<i64> = refs.iter().map(|r| r.0).collect();
    let ids: Vec<i64> = refs.iter().map(|r| r.1).collect();
    let steps: Vec<i32> = refs.iter().map(|r| r.2).collect();
    #[derive(sqlx::FromRow)]
    struct Row {
        org_id: i64,
        id: i64,
        step: i32,
        automation_id: i64,
        definition: Option<Json<Step>>,
        context: Json<serde_json::Value>,
        attributes: Json<serde_json::Value>,
        name: String,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "select e.org_id, e.id, r.step, e.automation_id, v.definition -> 'steps' -> r.step as definition,
                e.context, s.attributes, s.name
         from unnest($1::bigint[], $2::bigint[], $3::int[]) r(org_id, id, step)
         join enrolments e on e.org_id = r.org_id and e.id = r.id
         join automation_versions v on v.automation_id = e.automation_id and v.version = e.version
         join subscribers s on s.org_id = e.org_id and s.id = e.subscriber_id",
    )
    .bind(&orgs)
    .bind(&ids)
    .bind(&steps)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| match r.definition?.0 {
            Step::Email {
                subject,
                body,
                format,
            } => Some(MailContent {
                org_id: r.org_id,
                enrolment_id: r.id,
                step: r.step,
                automation_id: r.automation_id,
                subject,
                body,
                format,
                context: r.context.0,
                attributes: r.attributes.0,
                name: r.name,
            }),
            _ => None,
        })
        .collect())
}

/// A subscriber's enrolments, newest first (at most `limit`), with their mails' states.
pub async fn of_subscriber(
    conn: &mut PgConnection,
    org: OrgId,
    subscriber: crate::domain::SubscriberId,
    limit: i64,
) -> sqlx::Result<Vec<crate::model::Enrolled>> {
    sqlx::query_as(
        "select a.id as automation_id, a.name as automation,
                e.state || coalesce(' (' || e.exit_reason || ')', '') as state, e.step,
                to_char(e.enrolled_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as enrolled,
                coalesce((select string_agg(n || ' ' || status, ', ' order by status)
                          from (select d.status, count(*) as n from deliveries d
                                where d.org_id = e.org_id and d.enrolment_id = e.id
                                group by d.status) m), 'none') as mails
         from enrolments e
         join automations a on a.id = e.automation_id
         join orgs o on o.id = e.org_id
         where e.org_id = $1 and e.subscriber_id = $2
         order by e.id desc limit $3",
    )
    .bind(org)
    .bind(subscriber)
    .bind(limit)
    .fetch_all(conn)
    .await
}
