//! Public sign-up with double opt-in: the list a sign-up page names, a sign-up recorded with
//! its evidence and its one confirmation mail queued, the confirmation (once), the facts the
//! confirmation mail shows, and spent proof-of-work challenges.

use sqlx::PgConnection;

use crate::domain::{EmailAddress, JobId, OrgId, Reference, SignupId, SubscriberId};

/// The list behind a sign-up page.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct SignupList {
    pub org_id: i64,
    pub list_id: i64,
    pub list_name: String,
    pub org_name: String,
}

pub async fn list_by_key(conn: &mut PgConnection, key: &str) -> sqlx::Result<Option<SignupList>> {
    sqlx::query_as(
        "select l.org_id, l.id as list_id, l.name as list_name, o.name as org_name
         from lists l join orgs o on o.id = l.org_id where l.signup_key = $1",
    )
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Where a sign-up came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The hosted page or an embedded form.
    Form,
    /// `POST /api/v1/lists/{id}/signups`.
    Api,
}

impl Source {
    fn signup(self) -> &'static str {
        match self {
            Source::Form => "signup",
            Source::Api => "api",
        }
    }
}

/// A sign-up as recorded: its id, its subscriber, and whether this call queued its mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requested {
    pub signup_id: i64,
    pub subscriber_id: i64,
    pub queued: bool,
}

/// Records a sign-up of `email` to a list and queues its confirmation mail, in the caller's
/// transaction. Everything here is per mailbox (`email_lower`), not per spelling: `Ann@x.org`
/// and `aNN@x.org` are one person, one subscriber, one pending sign-up and one mail, so typing
/// an address in twenty spellings cannot send it twenty mails. A new mailbox becomes an
/// unconfirmed subscriber with the evidence of its opt-in (source, IP, time); a known one (in
/// any spelling; that spelling first, else the oldest) keeps its status and lists until the
/// confirm click. A pending sign-up of the same mailbox to the same list is reused, and its
/// mail is queued once whatever the number of submissions. Sign-ups of one mailbox are taken
/// one at a time (a transaction lock on the org and the mailbox), so concurrent spellings
/// cannot each find nothing and each create a subscriber. Nothing is lifted here: a
/// suppressed address is re-subscribed only by the confirm click.
pub async fn request(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    email: &EmailAddress,
    name: &str,
    source: Source,
    ip: Option<&str>,
) -> sqlx::Result<Requested> {
    sqlx::query(
        "select pg_advisory_xact_lock(hashtextextended('signup:' || $1::text || ':' || $2, 0))",
    )
    .bind(org_id)
    .bind(email.lower())
    .execute(&mut *conn)
    .await?;
    // A sign-up of this mailbox to this list still waiting for its click, whichever spelling
    // (and whichever subscriber row of it) it was made with: that one is the sign-up.
    let pending: Option<(i64, i64)> = sqlx::query_as(
        "select g.id, g.subscriber_id from signups g
         join subscribers s on s.org_id = g.org_id and s.id = g.subscriber_id
         where g.org_id = $1 and g.list_id = $2 and g.confirmed_at is null
           and s.email_lower = $3 and s.erased_at is null
         order by g.id limit 1",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(email.lower())
    .fetch_optional(&mut *conn)
    .await?;
    if let Some((signup_id, subscriber_id)) = pending {
        let queued = queue_confirmation(conn, org_id, signup_id, subscriber_id, email).await?;
        return Ok(Requested {
            signup_id,
            subscriber_id,
            queued,
        });
    }
    let known: Option<i64> = sqlx::query_scalar(
        "update subscribers set name = case when name = '' then $4 else name end
         where org_id = $1 and id = (select id from subscribers
                     where org_id = $1 and email_lower = $2 and erased_at is null
                     order by (email = $3) desc, id limit 1)
         returning id",
    )
    .bind(org_id)
    .bind(email.lower())
    .bind(email.as_str())
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    let subscriber_id: i64 = match known {
        Some(id) => id,
        None => sqlx::query_scalar(
            "insert into subscribers as s (org_id, email, email_lower, name, status, optin_source, optin_ip, optin_at)
             values ($1, $2, $3, $4, 'unconfirmed', $5, $6, now())
             on conflict (org_id, email) do update set name = case when s.name = '' then excluded.name else s.name end
             returning id",
        )
        .bind(org_id)
        .bind(email.as_str())
        .bind(email.lower())
        .bind(name)
        .bind(source.signup())
        .bind(ip)
        .fetch_one(&mut *conn)
        .await?,
    };
    let created: Option<i64> = sqlx::query_scalar(
        "insert into signups (org_id, list_id, subscriber_id, source, ip) values ($1, $2, $3, $4, $5)
         on conflict (list_id, subscriber_id) where confirmed_at is null do nothing
         returning id",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(subscriber_id)
    .bind(source.signup())
    .bind(ip)
    .fetch_optional(&mut *conn)
    .await?;
    let signup_id =
        match created {
            Some(id) => id,
            None => sqlx::query_scalar(
                "select id from signups where org_id = $1 and list_id = $2 and subscriber_id = $3
                 and confirmed_at is null",
            )
            .bind(org_id)
            .bind(list_id)
            .bind(subscriber_id)
            .fetch_one(&mut *conn)
            .await?,
        };
    let queued = queue_confirmation(conn, org_id, signup_id, subscriber_id, email).await?;
    Ok(Requested {
        signup_id,
        subscriber_id,
        queued,
    })
}

/// Queues the one confirmation mail of a sign-up (its job id is the sign-up's: a second call
/// queues nothing and answers false).
async fn queue_confirmation(
    conn: &mut PgConnection,
    org_id: i64,
    signup_id: i64,
    subscriber_id: i64,
    email: &EmailAddress,
) -> sqlx::Result<bool> {
    let job = JobId::Confirm { org_id, signup_id };
    crate::db::delivery::enqueue(
        conn,
        crate::db::delivery::NewDelivery {
            job: &job,
            org: OrgId(org_id),
            recipient: email,
            reference: Reference::Confirm {
                signup: SignupId(signup_id),
                subscriber: SubscriberId(subscriber_id),
            },
        },
    )
    .await
}

pub enum Confirmed {
    /// Confirmed now: they are on the list. `resubscribed` when an unsubscribe was lifted.
    Now {
        list_id: i64,
        subscriber_id: i64,
        resubscribed: bool,
    },
    /// The link was used before: nothing changes.
    Already,
    NotFound,
}

/// Confirms a pending sign-up, once: the subscriber is confirmed (with the click's IP and
/// time), joins the list, and an unsubscribe of the address is lifted (their click asks for
/// mail again). Hard bounces, complaints and an admin's suppression stay. An erased subscriber
/// stays erased.
pub async fn confirm(
    conn: &mut PgConnection,
    org_id: i64,
    signup_id: i64,
    ip: Option<&str>,
) -> sqlx::Result<Confirmed> {
    let done: Option<(i64, i64)> = sqlx::query_as(
        "update signups set confirmed_at = now(), confirmed_ip = $3
         where org_id = $1 and id = $2 and confirmed_at is null
         returning list_id, subscriber_id",
    )
    .bind(org_id)
    .bind(signup_id)
    .bind(ip)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((list_id, subscriber_id)) = done else {
        let exists: bool = sqlx::query_scalar(
            "select exists (select 1 from signups where org_id = $1 and id = $2)",
        )
        .bind(org_id)
        .bind(signup_id)
        .fetch_one(&mut *conn)
        .await?;
        return Ok(if exists {
            Confirmed::Already
        } else {
            Confirmed::NotFound
        });
    };
    let lifted: i64 = sqlx::query_scalar(
        "with person as (
             update subscribers
             set status = case when status = 'unconfirmed' then 'confirmed' else status end,
                 confirmed_at = coalesce(confirmed_at, now()),
                 confirmed_ip = coalesce(confirmed_ip, $4)
             where org_id = $1 and id = $3 and erased_at is null
             returning id, email_lower
         ),
         joined as (
             insert into list_members (org_id, list_id, subscriber_id)
             select $1, $2, id from person on conflict do nothing
         ),
         lifted as (
             delete from suppressions x using person p
             where x.org_id = $1 and x.email_lower = p.email_lower and x.reason = 'unsubscribed'
             returning 1
         )
         select count(*) from lifted",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(subscriber_id)
    .bind(ip)
    .fetch_one(conn)
    .await?;
    Ok(Confirmed::Now {
        list_id,
        subscriber_id,
        resubscribed: lifted > 0,
    })
}

/// What a confirmation mail says, loaded per batch.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct MailFacts {
    pub id: i64,
    pub org_id: i64,
    pub org_name: String,
    pub list_name: String,
    /// Not confirmed yet: a confirmed sign-up needs no mail.
    pub pending: bool,
}

pub async fn mail_facts(
    conn: &mut PgConnection,
    refs: &[(i64, i64)],
) -> sqlx::Result<Vec<MailFacts>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select s.id, s.org_id, o.name as org_name, l.name as list_name,
                s.confirmed_at is null as pending
         from unnest($1::bigint[], $2::bigint[]) as r(org_id, id)
         join signups s on s.org_id = r.org_id and s.id = r.id
         join orgs o on o.id = s.org_id
         join lists l on l.org_id = s.org_id and l.id = s.list_id",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// Records a proof-of-work challenge as spent; false when it was spent before. Challenges
/// older than their validity are forgotten on the way.
pub async fn spend_challenge(conn: &mut PgConnection, challenge: &str) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "with forgotten as (delete from pow_spent where spent_at < now() - make_interval(secs => $2))
         insert into pow_spent (challenge) values ($1) on conflict do nothing",
    )
    .bind(challenge)
    .bind(2.0 * crate::signup::POW_TTL_SECONDS as f64)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}
