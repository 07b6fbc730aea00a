//! The Deliveries page's server functions: counts, the list, an admin's retry, and reading a
//! captured message. Each is scoped to the signed-in user's organisation.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::delivery;
use crate::domain::DeliveryStatus;
use crate::error::AppError;

/// Rows per page of the list.
pub const PAGE_SIZE: i64 = 50;
/// The most of a captured message the dashboard shows; the rest is cut, and said so.
pub const CAPTURED_SHOW_BYTES: u64 = 2 * 1024 * 1024;
/// The longest job id a retry or a captured message is looked up by (longer than any real one).
pub const JOB_ID_MAX: usize = 1000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusCount {
    pub status: DeliveryStatus,
    pub count: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub job_id: String,
    pub kind: crate::domain::DeliveryKind,
    pub recipient: String,
    pub status: DeliveryStatus,
    pub attempt: i32,
    pub updated: String,
    /// What went wrong: the SMTP reply of a failed row, the last error of others.
    pub detail: Option<String>,
    /// A copy was captured to a file (no SMTP server configured) and can be opened.
    pub captured: bool,
    /// What a relay reported later ("hard_bounce 5.1.1 at 2026-12-01 10:04 via mailgun"), and
    /// its diagnostic as the relay gave it.
    pub reported: Option<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryPage {
    pub rows: Vec<DeliveryRow>,
    /// The `after` of the next page, when there is one.
    pub next: Option<String>,
    /// The signed-in user's role allows retrying.
    pub can_retry: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapturedText {
    pub job_id: String,
    pub recipient: String,
    /// The raw message (headers and body), lossily decoded as UTF-8.
    pub text: String,
    /// The file was longer than [`CAPTURED_SHOW_BYTES`]; `text` is its beginning.
    pub truncated: bool,
}

/// A relay as its circuit breaker last saw it (the relay's address is the operator's, not
/// shown).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RelayView {
    pub state: crate::domain::relay::RelayState,
    /// Failures in a row when it stopped.
    pub failures: i32,
    /// Since when nothing is sent to it, and when it is tried again (UTC, `HH:MM`).
    pub since: Option<String>,
    pub next_probe: Option<String>,
    pub why: Option<String>,
}

/// The relays' health: a failing relay is why mail waits, whichever org it is for.
#[server(endpoint = "relay_health")]
pub async fn relay_health() -> Result<Vec<RelayView>, AppError> {
    let (_me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let relays = crate::db::relay_health::all(&mut conn).await?;
    Ok(relays
        .into_iter()
        .map(|h| RelayView {
            state: h.state,
            failures: h.failures,
            since: h.opened_at,
            next_probe: h.next_probe_at,
            why: h.last_error.map(|w| w.describe().to_string()),
        })
        .collect())
}

/// The database as this replica sees it, whichever org it is for: what a failover would cost
/// now (why mail could be sent twice, or stop), and whether this replica's workers can write to
/// it (a full disk stops them).
#[server(endpoint = "database_status")]
pub async fn database_status() -> Result<crate::domain::DatabaseStatus, AppError> {
    let (_me, pool) = super::signed_in().await?;
    let reading = crate::db::health::replication(&pool).await?;
    Ok(crate::domain::DatabaseStatus {
        durability: crate::domain::Durability::of(&reading),
        writes_failing: crate::db::health::writes_failing(),
    })
}

/// Deliveries of the org in each state.
#[server(endpoint = "delivery_counts")]
pub async fn delivery_counts() -> Result<Vec<StatusCount>, AppError> {
    let figures = super::figures::figures();
    let (me, pool) = super::signed_in().await?;
    let counts = figures
        .delivery_counts
        .get(me.org_id, async {
            let mut conn = pool.acquire().await?;
            Ok(delivery::admin::counts(&mut conn, me.org_id).await?)
        })
        .await?;
    Ok(counts
        .into_iter()
        .map(|(status, count)| StatusCount { status, count })
        .collect())
}

/// One page of the org's deliveries, newest first. Empty strings mean "no filter" (a GET form
/// sends every field).
#[server(endpoint = "deliveries")]
pub async fn deliveries_page(
    status: Option<String>,
    kind: Option<String>,
    recipient: Option<String>,
    after: Option<String>,
) -> Result<DeliveryPage, AppError> {
    use crate::db::delivery::admin::Filter;
    use crate::domain::{DeliveryCursor, DeliveryKind};
    let (me, pool) = super::signed_in().await?;
    let status = super::filter("Status", status)?
        .map(|s| s.parse::<DeliveryStatus>())
        .transpose()
        .map_err(AppError::Invalid)?;
    let kind = super::filter("Kind", kind)?
        .map(|s| s.parse::<DeliveryKind>())
        .transpose()
        .map_err(AppError::Invalid)?;
    let after = super::filter("Page", after)?
        .map(|s| s.parse::<DeliveryCursor>())
        .transpose()
        .map_err(AppError::Invalid)?;
    let recipient = super::filter("Recipient", recipient)?;
    let filter = Filter {
        status,
        kind,
        recipient: recipient.as_deref(),
        after: after.as_ref(),
    };
    let mut conn = pool.acquire().await?;
    let page = delivery::admin::list(&mut conn, me.org_id, &filter, PAGE_SIZE).await?;
    let rows = page.rows.into_iter().map(row).collect();
    Ok(DeliveryPage {
        rows,
        next: page.next.map(|c| c.to_string()),
        can_retry: me.role.can_act(),
    })
}

#[cfg(feature = "ssr")]
fn row(r: delivery::admin::ListRow) -> DeliveryRow {
    let status = r.status;
    // The delivery worker records "captured …" as the reply of a message written to a file;
    // one that carries a credential is never offered.
    let captured = status == DeliveryStatus::Delivered
        && !r.kind.carries_credential()
        && r.smtp_reply
            .as_deref()
            .is_some_and(|s| s.starts_with("captured"));
    let detail = match status {
        DeliveryStatus::Failed => r.smtp_reply.or(r.last_error),
        DeliveryStatus::Delivered => None,
        _ => r.last_error,
    };
    let e = r.reported;
    let reported = e.event_kind.map(|kind| {
        let status = e.event_status.map(|s| format!(" {s}")).unwrap_or_default();
        let source = e.event_source.map(|s| s.to_string()).unwrap_or_default();
        let at = e.event_at.unwrap_or_default();
        (
            format!("{kind}{status} at {at} via {source}"),
            e.event_diagnostic.unwrap_or_default(),
        )
    });
    DeliveryRow {
        reported,
        job_id: r.job_id,
        kind: r.kind,
        recipient: r.recipient,
        status,
        attempt: r.attempt,
        updated: r.updated,
        detail,
        captured,
    }
}

/// Puts a failed or unknown delivery back in the queue (owners and admins), with an audit row.
#[server(endpoint = "retry_delivery")]
pub async fn retry_delivery(job_id: String) -> Result<String, AppError> {
    use crate::db::delivery::admin::{Actor, Retry};
    let (me, pool) = super::signed_in_to_act().await?;
    crate::domain::input::line_input("Job id", &job_id, JOB_ID_MAX)?;
    let mut tx = pool.begin().await?;
    let actor = Actor {
        user_id: me.user_id,
        name: &me.name,
    };
    match delivery::admin::retry(&mut tx, me.org_id, &job_id, actor).await? {
        Retry::Retried { before } => {
            tx.commit().await?;
            Ok(format!("Queued again ({before} before): {job_id}"))
        }
        Retry::NotRetryable(now) => Err(AppError::Conflict(format!(
            "This delivery is {now} and cannot be retried: only failed or unknown deliveries can."
        ))),
        Retry::NotFound => Err(AppError::NotFound),
    }
}

/// The raw text of a captured message. The file is found from the org and the job id after the
/// job was looked up in the org, never from a path in the request. Account mail (an invitation
/// or reset link) is not found here for anyone: its link signs in as its recipient.
#[server(endpoint = "captured_message")]
pub async fn captured_message(job_id: String) -> Result<CapturedText, AppError> {
    use tokio::io::AsyncReadExt;
    let captured_dir = super::api_config().captured_dir;
    let (me, pool) = super::signed_in().await?;
    crate::domain::input::line_input("Job id", &job_id, JOB_ID_MAX)?;
    let mut conn = pool.acquire().await?;
    let found = delivery::admin::find(&mut conn, me.org_id, &job_id)
        .await?
        .filter(|f| !f.kind.carries_credential())
        .ok_or(AppError::NotFound)?;
    drop(conn);
    let no_copy = || {
        AppError::Conflict(
            "No captured copy of this message exists: it was not sent yet, or it was sent through an SMTP server."
                .into(),
        )
    };
    let dir = captured_dir.ok_or_else(no_copy)?;
    let path = crate::capture::path_for(&dir, me.org_id, &found.job_id);
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_copy()),
        Err(e) => {
            tracing::error!(error = %e, path = %path.display(), "cannot open a captured message");
            return Err(AppError::Internal);
        }
    };
    let mut bytes = Vec::new();
    file.take(CAPTURED_SHOW_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, path = %path.display(), "cannot read a captured message");
            AppError::Internal
        })?;
    let truncated = bytes.len() as u64 > CAPTURED_SHOW_BYTES;
    bytes.truncate(CAPTURED_SHOW_BYTES as usize);
    Ok(CapturedText {
        job_id: found.job_id,
        recipient: found.recipient,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
    })
}
