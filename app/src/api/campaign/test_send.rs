//! Test sends: a campaign's content, as the version the editor showed, to a few addresses typed
//! in, through the delivery engine as `test:<campaign>:<version>:<dialog token>:<email>` jobs.
//! The same dialog submitted twice queues each message once; a new edit (or a new dialog) can be
//! tested again. Test mail never touches the campaign's recipients or counts, and never goes to
//! an address the org suppresses (someone who unsubscribed must not get the campaign's content
//! through a test either): such an address is refused when typed, and a test queued before it
//! was suppressed is stopped when the worker claims it.

use leptos::prelude::*;

#[cfg(feature = "ssr")]
use crate::db::{audit, campaign, delivery};
use crate::error::AppError;

/// The most addresses one test send goes to.
pub const MAX_TEST_ADDRESSES: usize = 10;

#[server(endpoint = "campaign_test")]
pub async fn send_test(
    id: i64,
    version: i32,
    token: String,
    addresses: String,
) -> Result<String, AppError> {
    use crate::db::suppression_admin;
    use crate::domain::{CampaignId, EmailAddress, JobId, OrgId, Reference};
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let to = EmailAddress::parse_list(&addresses, MAX_TEST_ADDRESSES).map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let now = campaign::edit::content_version(&mut tx, me.org(), CampaignId(id))
        .await?
        .ok_or(AppError::NotFound)?;
    if now != version {
        return Err(AppError::Conflict(format!(
            "The campaign was saved after this page was loaded (version {now} now, you saw {version}): reload to test what it says now."
        )));
    }
    let lower: Vec<&str> = to.iter().map(|a| a.lower()).collect();
    let suppressed = suppression_admin::suppressed_among(&mut tx, me.org_id, &lower).await?;
    if !suppressed.is_empty() {
        let named: Vec<String> = suppressed
            .iter()
            .map(|(email, reason)| format!("{email} ({})", reason.replace('_', " ")))
            .collect();
        return Err(AppError::Invalid(format!(
            "Test sends never go to suppressed addresses, and these are: {}. Test with another address, or remove it from Suppressions first.",
            named.join(", ")
        )));
    }
    let mut queued = Vec::new();
    for address in &to {
        let job = JobId::test(id, version, &token, address)
            .map_err(|_| AppError::Invalid("This dialog has expired: reload the page.".into()))?;
        let d = delivery::NewDelivery {
            job: &job,
            org: OrgId(me.org_id),
            recipient: address,
            reference: Reference::Test {
                campaign: CampaignId(id),
                version,
            },
        };
        if delivery::enqueue(&mut tx, d).await? {
            queued.push(address.as_str());
        }
    }
    if queued.is_empty() {
        return Ok(
            "Already sent: this test went out once; reload the page to send another.".into(),
        );
    }
    audit::record(
        &mut tx,
        audit::Entry {
            before: None,
            after: Some(serde_json::json!({ "version": version, "to": queued })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::CampaignTest,
                "campaign",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "Test of version {version} queued to {}.",
        queued.join(", ")
    ))
}
