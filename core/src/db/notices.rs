//! Account notices (`domain::Notice`): made inside the transaction of the change they report,
//! one delivery per owner of the org, and read back by the delivery worker when sent.

use sqlx::PgConnection;

use crate::db::delivery::{self, NewDelivery};
use crate::domain::{EmailAddress, JobId, Notice, NoticeId, OrgId, Reference, Role, UserId};

/// Stores `notice` and queues one copy to each enabled owner of the org, inside the caller's
/// transaction. Returns how many copies were queued.
pub async fn send_to_owners(
    conn: &mut PgConnection,
    org_id: i64,
    notice: &Notice,
) -> sqlx::Result<usize> {
    let id: i64 = sqlx::query_scalar(
        "insert into notices (org_id, subject, body, path) values ($1, $2, $3, $4) returning id",
    )
    .bind(org_id)
    .bind(&notice.subject)
    .bind(&notice.body)
    .bind(notice.path)
    .fetch_one(&mut *conn)
    .await?;
    let owners: Vec<(i64, String)> = sqlx::query_as(
        "select id, email from users
         where org_id = $1 and role = $2 and not disabled order by id",
    )
    .bind(org_id)
    .bind(Role::Owner)
    .fetch_all(&mut *conn)
    .await?;
    let mut queued = 0;
    for (user_id, email) in owners {
        // Addresses were checked when the user was made; one that no longer parses is skipped
        // rather than failing the change being reported.
        let Ok(recipient) = EmailAddress::parse(&email) else {
            tracing::warn!(
                user_id,
                "an owner's address does not parse; no notice for them"
            );
            continue;
        };
        let job = JobId::Notice {
            org_id,
            notice_id: id,
            user_id,
        };
        let reference = Reference::Notice {
            notice: NoticeId(id),
            user: UserId(user_id),
        };
        if delivery::enqueue(
            conn,
            NewDelivery {
                job: &job,
                org: OrgId(org_id),
                recipient: &recipient,
                reference,
            },
        )
        .await?
        {
            queued += 1;
        }
    }
    Ok(queued)
}

/// A stored notice, for sending.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Stored {
    pub id: i64,
    pub org_id: i64,
    pub subject: String,
    pub body: String,
    pub path: String,
}

/// The notices `(org id, notice id)` name, each only within its org.
pub async fn load(conn: &mut PgConnection, refs: &[(i64, i64)]) -> sqlx::Result<Vec<Stored>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select n.id, n.org_id, n.subject, n.body, n.path
         from notices n join unnest($1::bigint[], $2::bigint[]) r(org_id, id)
           on n.org_id = r.org_id and n.id = r.id",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}
