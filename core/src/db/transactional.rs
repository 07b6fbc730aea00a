//! Transactional mail: the org's templates (every save a new, never-changed version) and the
//! messages API requests queue, keyed by the caller's Idempotency-Key. Every statement is
//! scoped by the org.

use sqlx::types::Json;
use sqlx::PgConnection;

use crate::domain::{EmailAddress, JobId, OrgId, Reference, TxMessageId};

/// A template with its current version, as the Templates page and the API read it.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Template {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub subject: String,
    pub body_text: String,
    pub body_html: Option<String>,
    pub sample_data: Json<serde_json::Value>,
    /// Who saved the current version (None: removed since, or not a user).
    pub author: Option<String>,
    /// When the current version was saved, in the org's time zone.
    pub saved: String,
}

const TEMPLATE: &str = "select t.id, t.name, v.version, v.subject, v.body_text, v.body_html,
        v.sample_data, u.name as author,
        to_char(v.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as saved
    from tx_templates t
    join orgs o on o.id = t.org_id
    join tx_template_versions v on v.template_id = t.id and v.version = t.current_version
    left join users u on u.org_id = v.org_id and u.id = v.author_id";

pub async fn templates(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<Template>> {
    sqlx::query_as(&format!("{TEMPLATE} where t.org_id = $1 order by t.name"))
        .bind(org_id)
        .fetch_all(conn)
        .await
}

pub async fn template(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
) -> sqlx::Result<Option<Template>> {
    sqlx::query_as(&format!("{TEMPLATE} where t.org_id = $1 and t.id = $2"))
        .bind(org_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// The template a request names, locked against a concurrent save for the request's
/// transaction (the message is made from the version read here).
pub async fn template_by_name(
    conn: &mut PgConnection,
    org_id: i64,
    name: &str,
) -> sqlx::Result<Option<Template>> {
    sqlx::query_as(&format!(
        "{TEMPLATE} where t.org_id = $1 and t.name = $2 for share of t"
    ))
    .bind(org_id)
    .bind(name)
    .fetch_optional(conn)
    .await
}

/// What a save writes.
pub struct Draft<'a> {
    pub name: &'a str,
    pub subject: &'a str,
    pub body_text: &'a str,
    pub body_html: Option<&'a str>,
    pub sample_data: &'a serde_json::Value,
    pub author_id: i64,
}

pub enum Saved {
    /// The template's id and the version now current.
    Version(i64, i32),
    /// Another template of the org has that name.
    NameTaken,
    /// No such template of the org (to edit).
    NotFound,
    /// It was edited since `expected_version`.
    Stale,
}

/// Creates a template (version 1), or saves a new version of template `id`, which must
/// still be at `expected_version` (two admins editing at once: the second is told).
pub async fn save(
    conn: &mut PgConnection,
    org_id: i64,
    id: Option<(i64, i32)>,
    d: &Draft<'_>,
) -> sqlx::Result<Saved> {
    if let Some((template_id, _)) = id {
        let ours: Option<i64> = sqlx::query_scalar(
            "select id from tx_templates where org_id = $1 and id = $2 for update",
        )
        .bind(org_id)
        .bind(template_id)
        .fetch_optional(&mut *conn)
        .await?;
        if ours.is_none() {
            return Ok(Saved::NotFound);
        }
    }
    let taken: Option<i64> =
        sqlx::query_scalar("select id from tx_templates where org_id = $1 and name = $2")
            .bind(org_id)
            .bind(d.name)
            .fetch_optional(&mut *conn)
            .await?;
    if taken.is_some() && taken != id.map(|(i, _)| i) {
        return Ok(Saved::NameTaken);
    }
    let (template_id, version) = match id {
        None => {
            let created: Option<i64> = sqlx::query_scalar(
                "insert into tx_templates (org_id, name) values ($1, $2)
                 on conflict (org_id, name) do nothing returning id",
            )
            .bind(org_id)
            .bind(d.name)
            .fetch_optional(&mut *conn)
            .await?;
            match created {
                Some(t) => (t, 1),
                None => return Ok(Saved::NameTaken),
            }
        }
        Some((template_id, expected)) => {
            let bumped: Option<i32> = sqlx::query_scalar(
                "update tx_templates set current_version = current_version + 1, name = $4
                 where org_id = $1 and id = $2 and current_version = $3
                 returning current_version",
            )
            .bind(org_id)
            .bind(template_id)
            .bind(expected)
            .bind(d.name)
            .fetch_optional(&mut *conn)
            .await?;
            match bumped {
                Some(v) => (template_id, v),
                None => return Ok(Saved::Stale),
            }
        }
    };
    sqlx::query(
        "insert into tx_template_versions
             (org_id, template_id, version, subject, body_text, body_html, sample_data, author_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(org_id)
    .bind(template_id)
    .bind(version)
    .bind(d.subject)
    .bind(d.body_text)
    .bind(d.body_html)
    .bind(Json(d.sample_data))
    .bind(d.author_id)
    .execute(conn)
    .await?;
    Ok(Saved::Version(template_id, version))
}

/// A message as the request that made it is answered, every time it is asked again.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Message {
    pub id: i64,
    pub job_id: String,
    pub request_hash: Vec<u8>,
    pub template: String,
    pub template_version: i32,
    pub recipient: String,
    /// RFC 3339, UTC.
    pub created_at: String,
}

/// What a new message is made of.
pub struct NewMessage<'a> {
    pub key: &'a str,
    pub request_hash: &'a [u8],
    pub template_id: i64,
    pub template_version: i32,
    pub recipient: &'a EmailAddress,
    pub data: &'a serde_json::Value,
    pub subject: &'a str,
    pub body_text: &'a str,
    pub body_html: Option<&'a str>,
    pub api_token_id: i64,
}

const MESSAGE: &str = "select m.id, 'tx:' || m.org_id || ':' || m.idempotency_key as job_id,
        m.request_hash, t.name as template, m.template_version, m.recipient,
        to_char(m.created_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') as created_at
    from tx_messages m join tx_templates t on t.org_id = m.org_id and t.id = m.template_id";

/// The message of an idempotency key, if there is one.
pub async fn by_key(
    conn: &mut PgConnection,
    org_id: i64,
    key: &str,
) -> sqlx::Result<Option<Message>> {
    sqlx::query_as(&format!(
        "{MESSAGE} where m.org_id = $1 and m.idempotency_key = $2"
    ))
    .bind(org_id)
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Records a message and queues its delivery, in the caller's transaction; `None` when the
/// key has a message already (this statement waited for the transaction that wrote it, so
/// [`by_key`] now finds it).
pub async fn create(
    conn: &mut PgConnection,
    org_id: i64,
    m: &NewMessage<'_>,
) -> sqlx::Result<Option<i64>> {
    let id: Option<i64> = sqlx::query_scalar(
        "insert into tx_messages (org_id, idempotency_key, request_hash, template_id,
                                  template_version, recipient, email_lower, data, subject,
                                  body_text, body_html, api_token_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         on conflict (org_id, idempotency_key) do nothing
         returning id",
    )
    .bind(org_id)
    .bind(m.key)
    .bind(m.request_hash)
    .bind(m.template_id)
    .bind(m.template_version)
    .bind(m.recipient.as_str())
    .bind(m.recipient.lower())
    .bind(Json(m.data))
    .bind(m.subject)
    .bind(m.body_text)
    .bind(m.body_html)
    .bind(m.api_token_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = id else {
        return Ok(None);
    };
    let job = JobId::Transactional {
        org_id,
        key: m.key.to_owned(),
    };
    crate::db::delivery::enqueue(
        conn,
        crate::db::delivery::NewDelivery {
            job: &job,
            org: OrgId(org_id),
            recipient: m.recipient,
            reference: Reference::Transactional {
                message: TxMessageId(id),
            },
        },
    )
    .await?;
    Ok(Some(id))
}

/// What a transactional message says, as the delivery worker renders it.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Content {
    pub id: i64,
    pub org_id: i64,
    pub subject: String,
    pub body_text: String,
    pub body_html: Option<String>,
}

/// The content of every transactional message of a batch, in one query; each id is looked
/// up within its own org.
pub async fn contents(conn: &mut PgConnection, refs: &[(i64, i64)]) -> sqlx::Result<Vec<Content>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select m.id, m.org_id, m.subject, m.body_text, m.body_html
         from unnest($1::bigint[], $2::bigint[]) as r(org_id, id)
         join tx_messages m on m.org_id = r.org_id and m.id = r.id",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}
