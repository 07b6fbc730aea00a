//! Who a campaign reaches, defined once: building its recipients (`sends::materialise`),
//! counting them for the approver (`edit::estimate`) and picking the preview's sample
//! recipient (`edit::sample_recipient`) all build their statement here, so they cannot
//! disagree.
//!
//! The audience is the members of its included lists and the matches of its included
//! segments, minus the members of its excluded lists and the matches of its excluded
//! segments; of those, confirmed subscribers only, never erased, never suppressed. One message
//! per address is the caller's `DISTINCT ON (email_lower)`. A segment is read at the version
//! frozen at approval (as it is now while the campaign is edited), and evaluated inside the
//! caller's transaction, so the start's count is the audience at that moment.

use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, QueryBuilder};

use crate::db::segment::{push_predicate, Clock, Place};
use crate::domain::segment::Group;
use crate::domain::{CampaignId, OrgId};

/// What a campaign targets, read once per statement.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    pub lists: Vec<i64>,
    pub excluded_lists: Vec<i64>,
    pub segments: Vec<Group>,
    pub excluded_segments: Vec<Group>,
}

/// The campaign's lists and segments (each segment at its frozen version, or as it is).
pub async fn targets(
    conn: &mut PgConnection,
    org: OrgId,
    campaign: CampaignId,
) -> sqlx::Result<Targets> {
    let lists: Vec<(i64, bool)> = sqlx::query_as(
        "select list_id, exclude from campaign_lists where org_id = $1 and campaign_id = $2
         order by list_id",
    )
    .bind(org)
    .bind(campaign)
    .fetch_all(&mut *conn)
    .await?;
    let segments: Vec<(Json<Group>, bool)> = sqlx::query_as(
        "select coalesce(v.definition, s.definition), cs.exclude
         from campaign_segments cs
         join segments s on s.org_id = cs.org_id and s.id = cs.segment_id
         left join segment_versions v on v.segment_id = cs.segment_id and v.version = cs.version
         where cs.org_id = $1 and cs.campaign_id = $2
         order by cs.segment_id",
    )
    .bind(org)
    .bind(campaign)
    .fetch_all(conn)
    .await?;
    let mut t = Targets::default();
    for (l, exclude) in lists {
        if exclude {
            t.excluded_lists.push(l);
        } else {
            t.lists.push(l);
        }
    }
    for (Json(g), exclude) in segments {
        if exclude {
            t.excluded_segments.push(g);
        } else {
            t.segments.push(g);
        }
    }
    Ok(t)
}

/// Pushes `from subscribers s where …`: the audience of `t`, one row per subscriber.
pub fn push_from(qb: &mut QueryBuilder<'_, Postgres>, org: OrgId, t: &Targets, clock: &Clock) {
    qb.push(
        " from subscribers s where s.status = 'confirmed' and s.erased_at is null
          and not exists (select 1 from suppressions x
                          where x.org_id = s.org_id and x.email_lower = s.email_lower)
          and s.org_id = ",
    );
    qb.push_bind(org);
    let members = |qb: &mut QueryBuilder<'_, Postgres>, lists: &[i64]| {
        qb.push("s.id in (select lm.subscriber_id from list_members lm where lm.org_id = ");
        qb.push_bind(org);
        qb.push(" and lm.list_id = any(");
        qb.push_bind(lists.to_vec());
        qb.push("))");
    };
    let included = usize::from(!t.lists.is_empty()) + t.segments.len();
    qb.push(" and ");
    if included == 0 {
        qb.push("false");
    }
    // A single target stands alone (a plain semi-join for a list-only campaign); several are
    // one `or`.
    if included > 1 {
        qb.push("(");
    }
    let mut first = true;
    let mut or = |qb: &mut QueryBuilder<'_, Postgres>| {
        if !first {
            qb.push(" or ");
        }
        first = false;
    };
    if !t.lists.is_empty() {
        or(qb);
        members(qb, &t.lists);
    }
    // A segment alone stands among the statement's top conditions.
    let place = if included == 1 {
        Place::Top
    } else {
        Place::Nested
    };
    for g in &t.segments {
        or(qb);
        push_predicate(qb, org, g, clock, place);
    }
    if included > 1 {
        qb.push(")");
    }
    if !t.excluded_lists.is_empty() {
        qb.push(" and not ");
        members(qb, &t.excluded_lists);
    }
    for g in &t.excluded_segments {
        qb.push(" and not ");
        push_predicate(qb, org, g, clock, Place::Nested);
    }
}
