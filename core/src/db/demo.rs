//! Demo data that no public statement can make: deliveries already in a final state, as if the
//! delivery worker had handled them (for `mailroom demo` and tests of the dashboard).

use sqlx::PgConnection;

use crate::db::delivery;
use crate::db::delivery::NewDelivery;
use crate::domain::{DeliveryStatus, EmailAddress, JobId, OrgId, Reference};

/// A test message (its job a `test:` one) in a given state, with what the worker would have recorded.
pub struct DemoDelivery<'a> {
    pub job: &'a JobId,
    pub recipient: &'a EmailAddress,
    pub status: DeliveryStatus,
    pub attempt: i32,
    pub last_error: Option<&'a str>,
    pub smtp_reply: Option<&'a str>,
}

/// Queues the message through the ordinary `enqueue`, then moves it to its state. Queued and
/// sending rows stay as `enqueue` left them (a worker will pick them up).
pub async fn delivery(
    conn: &mut PgConnection,
    org_id: i64,
    d: DemoDelivery<'_>,
) -> sqlx::Result<()> {
    let Some(reference) = Reference::of_test(d.job) else {
        return Err(sqlx::Error::Protocol(format!(
            "{} is not a test message",
            d.job
        )));
    };
    let new = NewDelivery {
        job: d.job,
        org: OrgId(org_id),
        recipient: d.recipient,
        reference,
    };
    delivery::enqueue(&mut *conn, new).await?;
    if matches!(d.status, DeliveryStatus::Queued | DeliveryStatus::Sending) {
        return Ok(());
    }
    sqlx::query(
        "with off_queue as (delete from delivery_queue where job_id = $2)
         update deliveries
         set status = $3, attempt = $4, last_error = $5, smtp_reply = $6,
             finished_at = now(), updated_at = now()
         where org_id = $1 and job_id = $2",
    )
    .bind(org_id)
    .bind(d.job.to_string())
    .bind(d.status.as_str())
    .bind(d.attempt)
    .bind(d.last_error)
    .bind(d.smtp_reply)
    .execute(conn)
    .await?;
    Ok(())
}
