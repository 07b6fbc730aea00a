//! Erasing a subscriber, whoever asks (the dashboard or the REST API): the erasure and its
//! audit row in one transaction, then, once committed, the captured copies of the mail to them.

use std::path::Path;

use sqlx::PgPool;

use crate::db::audit::{self, Entry};
use crate::db::subscribers::{self, Erasure};

#[derive(Debug, thiserror::Error)]
pub enum EraseError {
    #[error("no such subscriber")]
    NotFound,
    #[error("this subscriber was erased already")]
    Already,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Erases subscriber `id` of the org `by` names ([`subscribers::erase`]), audited as `by` with
/// how many rows went (the entry never repeats the address). Captured copies under `captured`
/// go after the commit: a rolled-back erasure removes nothing.
pub async fn erase(
    pool: &PgPool,
    id: i64,
    by: Entry<'_>,
    captured: Option<&Path>,
) -> Result<Erasure, EraseError> {
    let org_id = by.org_id;
    let mut tx = pool.begin().await?;
    if subscribers::detail(&mut tx, org_id, id).await?.is_none() {
        return Err(EraseError::NotFound);
    }
    let erasure = subscribers::erase(&mut tx, org_id, id)
        .await?
        .ok_or(EraseError::Already)?;
    let entry = Entry {
        before: None,
        after: Some(serde_json::json!({ "erased": true, "subscribers": erasure.subscribers })),
        ..by
    };
    audit::record(&mut tx, entry).await?;
    tx.commit().await?;
    if let Some(dir) = captured {
        crate::capture::remove(dir, org_id, &erasure.job_ids).await;
    }
    Ok(erasure)
}
