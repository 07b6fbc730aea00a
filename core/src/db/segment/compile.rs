//! A segment's tree compiled to SQL, in this one place: a predicate over `s` (a row of
//! `subscribers`) in which every value, attribute name, id, date and count is a bound
//! parameter (`QueryBuilder::push_bind`) and no text a person or a caller sent is ever part of
//! the statement. Equal tree shapes therefore compile to the same statement text, whatever
//! their names and values hold (quotes, `$1`, `;`, comments, JSON path syntax).
//!
//! Each condition is a membership test `s.id in (select … )` (or `not in`) where it reads
//! another table. Among the conditions of the top `all` group PostgreSQL makes them
//! semi-joins and picks their order; nested under or / not it runs each subquery once and
//! probes its hash per subscriber, which it does only while the set's estimate fits its hash
//! memory: [`roomy`] gives segment statements that room (past it, PostgreSQL would rescan the
//! set for every subscriber, and a count over a million people would not finish). A
//! condition that can be SQL's unknown (an attribute missing or of another type, a sign-up
//! source never recorded) is wrapped in `coalesce(…, false)`, so it is "no" and `none` is a
//! plain `not`; membership tests are never unknown (no id they compare is null), and stay
//! bare so they can become semi-joins.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};

use crate::domain::segment::{DateTest, Engagement, Group, GroupOp, Node, ValueTest};
use crate::domain::OrgId;

/// The moment a segment is evaluated at, as the organisation reads it: the database's now
/// (or a pinned one), its calendar day in the org's time zone, and that zone.
#[derive(Clone, Debug)]
pub struct Clock {
    pub now: DateTime<Utc>,
    pub today: NaiveDate,
    pub tz: String,
    /// When the person a condition is evaluated for was enrolled (an automation's branch):
    /// the start of "since enrolment".
    pub enrolled_at: Option<DateTime<Utc>>,
}

impl Clock {
    /// The first instant of "the last `days` days" for event and engagement windows.
    fn since(&self, days: u32) -> DateTime<Utc> {
        self.now - Duration::days(i64::from(days))
    }

    /// The first calendar day of "within the last `days` days" (today is one of them).
    fn first_day(&self, days: u32) -> NaiveDate {
        self.today - Duration::days(i64::from(days.saturating_sub(1)))
    }
}

/// The org's clock now, or at `pinned` (tests and the fake clock pin it).
pub async fn clock(
    conn: &mut PgConnection,
    org: OrgId,
    pinned: Option<DateTime<Utc>>,
) -> sqlx::Result<Clock> {
    let (now, today, tz): (DateTime<Utc>, NaiveDate, String) = sqlx::query_as(
        "select coalesce($2, now()), (coalesce($2, now()) at time zone timezone)::date, timezone
         from orgs where id = $1",
    )
    .bind(org)
    .bind(pinned)
    .fetch_one(conn)
    .await?;
    Ok(Clock {
        now,
        today,
        tz,
        enrolled_at: None,
    })
}

/// Hash memory for one statement that evaluates segments (PostgreSQL's `work_mem`; hashes may
/// take twice it): a membership test's set stays one hash up to about 16 million estimated
/// rows. Only what a statement's sets need is taken, about 40 bytes a row.
const WORK_MEM: &str = "256MB";

/// A transaction (a savepoint inside the caller's) whose statements evaluate segments with
/// room for their sets ([`WORK_MEM`]); the setting ends with the caller's transaction.
///
/// Segment statements are also sent unprepared (`persistent(false)`), so PostgreSQL plans each
/// for its own values: sqlx otherwise keeps statements prepared, and a generic plan cannot
/// tell a rare event name from a common one (on a million people one turned a half-second
/// count into several seconds). `plan_cache_mode = force_custom_plan` did the same for the
/// statement but also for the foreign-key checks its inserts fire, which PostgreSQL then
/// planned again for every row: materialising 467,000 recipients took 19 s instead of 10.
pub async fn roomy(conn: &mut PgConnection) -> sqlx::Result<sqlx::Transaction<'_, Postgres>> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    sqlx::query("select set_config('work_mem', $1, true)")
        .bind(WORK_MEM)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Where a predicate stands in its statement: among the `and`ed conditions of the `where`
/// itself, or under an `or` / `not`. The SQL means the same either way; it is written for
/// what PostgreSQL plans best there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Among the statement's top conditions: a membership test PostgreSQL can join, and a
    /// "never" or "not on" becomes `not exists`, which it plans as one anti-join.
    Top,
    /// Under `or` / `not`: each membership test is a hashed `in` / `not in` set.
    Nested,
}

/// Pushes the predicate of `g` over `s` (a row of `subscribers` of `org`), standing at `place`.
pub fn push_predicate(
    qb: &mut QueryBuilder<'_, Postgres>,
    org: OrgId,
    g: &Group,
    clock: &Clock,
    place: Place,
) {
    let (joiner, empty) = match g.op {
        GroupOp::All | GroupOp::None => (" and ", "true"),
        GroupOp::Any => (" or ", "false"),
    };
    if g.op == GroupOp::None {
        // none of them = not any of them
        qb.push("not ");
        return push_predicate(
            qb,
            org,
            &Group {
                op: GroupOp::Any,
                children: g.children.clone(),
            },
            clock,
            Place::Nested,
        );
    }
    if g.children.is_empty() {
        qb.push(empty);
        return;
    }
    // An `all` at the top keeps its conditions at the top (PostgreSQL flattens nested `and`s).
    let place = if g.op == GroupOp::All {
        place
    } else {
        Place::Nested
    };
    qb.push("(");
    for (i, n) in g.children.iter().enumerate() {
        if i > 0 {
            qb.push(joiner);
        }
        match n {
            Node::Group(inner) => push_predicate(qb, org, inner, clock, place),
            condition if may_be_unknown(condition) => {
                qb.push("coalesce((");
                push_condition(qb, org, condition, clock, place);
                qb.push("), false)");
            }
            condition => {
                qb.push("(");
                push_condition(qb, org, condition, clock, place);
                qb.push(")");
            }
        }
    }
    qb.push(")");
}

/// Whether the condition's SQL can be unknown: it reads a value that may be missing or null.
fn may_be_unknown(n: &Node) -> bool {
    match n {
        Node::Attribute { .. } | Node::Source { .. } => true,
        // Not null columns, and `in` over sets of non-null ids.
        Node::Group(_)
        | Node::List { .. }
        | Node::Status { .. }
        | Node::SignedUp { .. }
        | Node::Engagement { .. }
        | Node::Event { .. } => false,
    }
}

fn push_condition(
    qb: &mut QueryBuilder<'_, Postgres>,
    org: OrgId,
    n: &Node,
    clock: &Clock,
    place: Place,
) {
    match n {
        Node::Group(g) => push_predicate(qb, org, g, clock, place),
        Node::Attribute { name, test } => push_value_test(qb, "s.attributes", name, test, clock),
        Node::List { list_id, member } => {
            if !*member && place == Place::Top {
                qb.push("not exists (select 1 from list_members m where m.org_id = ");
                qb.push_bind(org);
                qb.push(" and m.list_id = ");
                qb.push_bind(*list_id);
                qb.push(" and m.subscriber_id = s.id)");
                return;
            }
            qb.push(if *member { "s.id in" } else { "s.id not in" });
            qb.push(" (select m.subscriber_id from list_members m where m.org_id = ");
            qb.push_bind(org);
            qb.push(" and m.list_id = ");
            qb.push_bind(*list_id);
            qb.push(")");
        }
        Node::Status { status } => {
            qb.push("s.status = ");
            qb.push_bind(status.as_str());
        }
        Node::Source { source } => {
            qb.push("s.optin_source = ");
            qb.push_bind(source.as_str());
        }
        Node::SignedUp { test } => match test {
            DateTest::Before { date } => {
                qb.push("s.created_at < ");
                push_day_start(qb, *date, clock);
            }
            DateTest::After { date } => {
                qb.push("s.created_at >= ");
                push_day_start(qb, *date + Duration::days(1), clock);
            }
            DateTest::WithinDays { days } => {
                qb.push("s.created_at >= ");
                push_day_start(qb, clock.first_day(*days), clock);
            }
        },
        Node::Engagement {
            what: Engagement::Clicked,
            campaign_id,
            within_days,
        } => {
            qb.push("s.id in (select c.subscriber_id from link_clicks c where c.org_id = ");
            qb.push_bind(org);
            // Campaign mail's clicks (an automation's are its own).
            qb.push(
                " and not c.scanner and c.subscriber_id is not null and c.campaign_id is not null",
            );
            if let Some(id) = campaign_id {
                qb.push(" and c.campaign_id = ");
                qb.push_bind(*id);
            }
            if let Some(days) = within_days {
                qb.push(" and c.clicked_at >= ");
                qb.push_bind(clock.since(*days));
            }
            qb.push(")");
        }
        Node::Engagement {
            what,
            campaign_id,
            within_days,
        } => {
            qb.push("s.id in (select d.subscriber_id from deliveries d");
            let reported = match what {
                Engagement::Received | Engagement::Delivered => None,
                Engagement::Bounced => Some("r.kind in ('hard_bounce', 'soft_bounce')"),
                Engagement::Complained => Some("r.kind = 'complaint'"),
                Engagement::Clicked => unreachable!("clicks are matched above"),
            };
            if let Some(kind) = reported {
                qb.push(" join delivery_events r on r.job_id = d.job_id and ");
                qb.push(kind);
            }
            qb.push(" where d.org_id = ");
            qb.push_bind(org);
            qb.push(" and d.kind = 'campaign' and d.subscriber_id is not null");
            if reported.is_none() {
                qb.push(" and d.status = 'delivered'");
            }
            if *what == Engagement::Delivered {
                qb.push(
                    " and not exists (select 1 from delivery_events b where b.job_id = d.job_id
                      and b.kind in ('hard_bounce', 'soft_bounce'))",
                );
            }
            if let Some(c) = campaign_id {
                qb.push(" and d.campaign_id = ");
                qb.push_bind(*c);
            }
            if let Some(days) = within_days {
                // When it happened: the relay's acceptance, or the report's arrival.
                qb.push(if reported.is_some() {
                    " and r.received_at >= "
                } else {
                    " and d.finished_at >= "
                });
                qb.push_bind(clock.since(*days));
            }
            qb.push(")");
        }
        Node::Event {
            name,
            did,
            at_least,
            within_days,
            property,
            since_enrolment,
        } => {
            let anti = !*did && place == Place::Top;
            qb.push(match (*did, anti) {
                (_, true) => "not exists (select 1",
                (true, _) => "s.id in (select e.subscriber_id",
                (false, _) => "s.id not in (select e.subscriber_id",
            });
            qb.push(" from events e where e.org_id = ");
            qb.push_bind(org);
            if anti {
                qb.push(" and e.subscriber_id = s.id");
            }
            qb.push(" and e.name = ");
            qb.push_bind(name.clone());
            if let Some(days) = within_days {
                qb.push(" and e.occurred_at >= ");
                qb.push_bind(clock.since(*days));
            }
            if *since_enrolment {
                // Checked away from saved segments; without an enrolment, no event counts.
                match clock.enrolled_at {
                    Some(at) => {
                        qb.push(" and e.occurred_at >= ");
                        qb.push_bind(at);
                    }
                    None => {
                        qb.push(" and false");
                    }
                }
            }
            if let Some(p) = property {
                qb.push(" and coalesce((");
                push_value_test(qb, "e.properties", &p.name, &p.test, clock);
                qb.push("), false)");
            }
            // Once is any row at all; the set needs no grouping.
            if *did && *at_least > 1 {
                qb.push(" group by e.subscriber_id having count(*) >= ");
                qb.push_bind(i64::from(*at_least));
            }
            qb.push(")");
        }
    }
}

/// The first instant of `day` in the org's time zone.
fn push_day_start(qb: &mut QueryBuilder<'_, Postgres>, day: NaiveDate, clock: &Clock) {
    qb.push("(");
    qb.push_bind(day);
    qb.push("::date::timestamp at time zone ");
    qb.push_bind(clock.tz.clone());
    qb.push(")");
}

/// A property test over `column` (a JSON object column of the statement, never input): an
/// automation's trigger or goal condition on an event's properties.
pub fn push_property_test(
    qb: &mut QueryBuilder<'_, Postgres>,
    column: &'static str,
    p: &crate::domain::segment::PropertyTest,
    clock: &Clock,
) {
    push_value_test(qb, column, &p.name, &p.test, clock);
}

/// A test of `column -> key` (`column` is one of this module's own, never input). Each typed
/// test reads the value only in a `case` branch that checked its JSON type first, so a value
/// of another type is "no", never a cast error.
fn push_value_test(
    qb: &mut QueryBuilder<'_, Postgres>,
    column: &'static str,
    key: &str,
    t: &ValueTest,
    clock: &Clock,
) {
    let value = |qb: &mut QueryBuilder<'_, Postgres>| {
        qb.push(column);
        qb.push(" -> ");
        qb.push_bind(key.to_owned());
    };
    let text = |qb: &mut QueryBuilder<'_, Postgres>| {
        qb.push("(");
        qb.push(column);
        qb.push(" ->> ");
        qb.push_bind(key.to_owned());
        qb.push(")");
    };
    let typed = |qb: &mut QueryBuilder<'_, Postgres>, json_type: &str| {
        qb.push("case when jsonb_typeof(");
        value(qb);
        qb.push(") = '");
        qb.push(json_type);
        qb.push("' then ");
    };
    // Closes a comparison opened with "(": `and` the value is of `json_type`.
    let of_type = |qb: &mut QueryBuilder<'_, Postgres>, json_type: &str| {
        qb.push(" and jsonb_typeof(");
        value(qb);
        qb.push(") = '");
        qb.push(json_type);
        qb.push("')");
    };
    match t {
        ValueTest::Exists => {
            qb.push(column);
            qb.push(" ? ");
            qb.push_bind(key.to_owned());
        }
        // Text tests compare first and check the type only of what matched: one lookup of
        // the key for most people instead of two (neither half can fail, so the order is
        // the result's no more than a `case` would be).
        ValueTest::TextEquals { value: v } => {
            qb.push("(");
            text(qb);
            qb.push(" = ");
            qb.push_bind(v.clone());
            of_type(qb, "string");
        }
        ValueTest::TextContains { value: v } => {
            qb.push("(strpos(");
            text(qb);
            qb.push(", ");
            qb.push_bind(v.clone());
            qb.push(") > 0");
            of_type(qb, "string");
        }
        ValueTest::TextStartsWith { value: v } => {
            qb.push("(starts_with(");
            text(qb);
            qb.push(", ");
            qb.push_bind(v.clone());
            qb.push(")");
            of_type(qb, "string");
        }
        ValueTest::TextIn { values } => {
            qb.push("(");
            text(qb);
            qb.push(" = any(");
            qb.push_bind(values.clone());
            qb.push(")");
            of_type(qb, "string");
        }
        ValueTest::NumberEquals { value: v }
        | ValueTest::NumberLess { value: v }
        | ValueTest::NumberGreater { value: v } => {
            typed(qb, "number");
            text(qb);
            qb.push(match t {
                ValueTest::NumberEquals { .. } => "::float8 = ",
                ValueTest::NumberLess { .. } => "::float8 < ",
                _ => "::float8 > ",
            });
            qb.push_bind(*v);
            qb.push(" end");
        }
        // A JSON boolean's text is `true` or `false` (a string saying so is refused by its
        // type), so no cast is needed.
        ValueTest::Bool { value: v } => {
            qb.push("(");
            text(qb);
            qb.push(" = ");
            qb.push_bind(if *v { "true" } else { "false" });
            of_type(qb, "boolean");
        }
        ValueTest::Date { test } => {
            // A string starting with YYYY-MM-DD, compared as that day (text order is day order).
            qb.push("case when jsonb_typeof(");
            value(qb);
            qb.push(") = 'string' and ");
            text(qb);
            qb.push(" ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}' then left(");
            text(qb);
            qb.push(", 10)");
            let day = |d: NaiveDate| d.format("%Y-%m-%d").to_string();
            match test {
                DateTest::Before { date } => {
                    qb.push(" < ");
                    qb.push_bind(day(*date));
                }
                DateTest::After { date } => {
                    qb.push(" > ");
                    qb.push_bind(day(*date));
                }
                DateTest::WithinDays { days } => {
                    qb.push(" between ");
                    qb.push_bind(day(clock.first_day(*days)));
                    qb.push(" and ");
                    qb.push_bind(day(clock.today));
                }
            }
            qb.push(" end");
        }
    }
}

/// `select count(*)` of the org's subscribers (erased ones never) that match `g`.
pub fn count_query<'a>(org: OrgId, g: &Group, clock: &Clock) -> QueryBuilder<'a, Postgres> {
    let mut qb = QueryBuilder::new("select count(*) from subscribers s where s.org_id = ");
    qb.push_bind(org);
    qb.push(" and s.erased_at is null and ");
    push_predicate(&mut qb, org, g, clock, Place::Top);
    qb
}

/// How many of the org's subscribers match `g` at `clock`.
pub async fn count(
    conn: &mut PgConnection,
    org: OrgId,
    g: &Group,
    clock: &Clock,
) -> sqlx::Result<i64> {
    let mut tx = roomy(conn).await?;
    let n = count_query(org, g, clock)
        .build_query_scalar()
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(n)
}

/// The ids of the org's subscribers that match `g`, in id order (tests and samples).
pub async fn ids(
    conn: &mut PgConnection,
    org: OrgId,
    g: &Group,
    clock: &Clock,
) -> sqlx::Result<Vec<i64>> {
    let mut qb = QueryBuilder::new("select s.id from subscribers s where s.org_id = ");
    qb.push_bind(org);
    qb.push(" and s.erased_at is null and ");
    push_predicate(&mut qb, org, g, clock, Place::Top);
    qb.push(" order by s.id");
    let mut tx = roomy(conn).await?;
    let ids = qb
        .build_query_scalar()
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(ids)
}

/// A subscriber a segment matches, as a page of members lists them.
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: i64,
    pub email: String,
    pub name: String,
}

/// Up to `limit` of the org's subscribers matching `g` after id `after`, in id order (`limit
/// + 1` are read, so the page knows whether another follows).
pub async fn members(
    conn: &mut PgConnection,
    org: OrgId,
    g: &Group,
    clock: &Clock,
    after: i64,
    limit: i64,
) -> sqlx::Result<super::super::Page<Member, i64>> {
    let mut qb =
        QueryBuilder::new("select s.id, s.email, s.name from subscribers s where s.org_id = ");
    qb.push_bind(org);
    qb.push(" and s.erased_at is null and s.id > ");
    qb.push_bind(after);
    qb.push(" and ");
    push_predicate(&mut qb, org, g, clock, Place::Top);
    qb.push(" order by s.id limit ");
    qb.push_bind(limit + 1);
    let mut tx = roomy(conn).await?;
    let rows: Vec<Member> = qb
        .build_query_as()
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(super::super::Page::of(rows, limit, |m| m.id))
}
