//! Reading the audit log (writing is `audit::record`, inside each action's transaction).

use sqlx::{PgConnection, Postgres, QueryBuilder};

use crate::db::Page;
use crate::model::AuditEntry;

#[derive(Default)]
pub struct Filter<'a> {
    pub action: Option<&'a str>,
    pub actor_id: Option<i64>,
    /// Where the previous page ended: rows with a smaller id come next.
    pub before_id: Option<i64>,
}

/// One page of the org's audit entries, newest first. Keyset on the id (indexes
/// `audit_log_org_*`): each page costs the same however deep it is.
pub async fn list(
    conn: &mut PgConnection,
    org_id: i64,
    f: &Filter<'_>,
    page_size: i64,
) -> sqlx::Result<Page<AuditEntry, i64>> {
    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(
        "select a.id, to_char(a.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as at,
                coalesce(u.name, 'API token ' || t.name) as actor, a.action, a.object_type, a.object_id,
                a.before::text as before, a.after::text as after
         from audit_log a
         join orgs o on o.id = a.org_id
         left join users u on u.org_id = a.org_id and u.id = a.actor_id
         left join api_tokens t on t.org_id = a.org_id and t.id = a.api_token_id
         where a.org_id = ",
    );
    q.push_bind(org_id);
    if let Some(action) = f.action {
        q.push(" and a.action = ").push_bind(action);
    }
    if let Some(actor) = f.actor_id {
        q.push(" and a.actor_id = ").push_bind(actor);
    }
    if let Some(before) = f.before_id {
        q.push(" and a.id < ").push_bind(before);
    }
    // One row more than a page tells whether a next page exists.
    q.push(" order by a.id desc limit ")
        .push_bind(page_size + 1);
    let rows: Vec<AuditEntry> = q.build_query_as().fetch_all(conn).await?;
    // Rows with a smaller id than the last come next.
    Ok(Page::of(rows, page_size, |r| r.id))
}

/// The actions that occur in the org's log, for the filter.
pub async fn actions(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("select distinct action from audit_log where org_id = $1 order by action")
        .bind(org_id)
        .fetch_all(conn)
        .await
}
