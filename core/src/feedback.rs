//! Feedback: what a relay's or a remote mail system's report does, once. A report is attributed
//! to one delivery of the org it came for, kept in the event ledger (whose unique key makes a
//! report delivered any number of times, at once or later, one row), and only the insert that
//! kept it applies its effect: a suppression through [`audience::suppress_all`], a soft bounce
//! counted towards the org's rule, and a campaign paused when its bounce or complaint rate
//! crosses the org's limits. Everything runs in the caller's transaction; the statements are
//! `db::reports`'.

use sqlx::PgConnection;

use crate::db::audience;
use crate::db::reports::{self, NewReport, Reported};
use crate::domain::{
    is_erased, BouncePolicy, CampaignId, EmailAddress, EventEffect, EventKind, EventSource,
    FeedbackReport, MatchedBy, OrgId, SuppressionReason,
};
use crate::verp::{self, VerpRef};

/// An event the org may not record: its Message-ID names another org's delivery.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("event {0} names a message of another organisation")]
    OtherOrg(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What recording one event did; `None` from [`record`] when it was recorded before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub job_id: Option<String>,
    pub matched_by: MatchedBy,
    pub effect: EventEffect,
    /// The event proved its origin (a signed webhook, or our token in a mailed report).
    pub verified: bool,
    /// Why the event's campaign paused itself, when this event made it.
    pub paused: Option<String>,
}

/// Where events are taken in: the org they are for, how they came, and its rules.
pub struct Intake<'a> {
    pub org_id: i64,
    pub source: EventSource,
    pub policy: BouncePolicy,
    /// The VERP key, to read tokens in envelope senders.
    pub verp_key: Option<&'a [u8]>,
    /// The channel proves the sender (a signed webhook); a mailed report proves itself only by
    /// our token, and changes nothing without it.
    pub signed: bool,
}

/// Records one event of `cx.org_id` and applies its effect, once. `Ok(None)`: recorded before,
/// or a mailed report that names nobody (no address, no token).
pub async fn record(
    conn: &mut PgConnection,
    cx: &Intake<'_>,
    e: &FeedbackReport,
) -> Result<Option<Recorded>, RecordError> {
    // An erased person's rows hold the hash of their address: an event about them is matched,
    // and kept, by that hash, and never writes the address back.
    let named = match &e.recipient {
        Some(r) => Some(erased_or_clear(conn, cx.org_id, r).await?),
        None => None,
    };
    let (found, matched_by) = attribute(conn, cx, e, named.as_deref()).await?;
    let verified = cx.signed || matched_by == MatchedBy::Token;
    let lower = match (named, &found) {
        (Some(named), _) => named,
        (None, Some(f)) => f.email_lower.clone(),
        (None, None) => return Ok(None),
    };
    let erased = is_erased(&lower);
    let kept = NewReport {
        org_id: cx.org_id,
        source: cx.source,
        event: e,
        delivery: found.as_ref(),
        matched_by,
        email_lower: &lower,
        diagnostic: if erased {
            None
        } else {
            e.diagnostic.as_deref()
        },
        verified,
    };
    let Some(id) = reports::insert(conn, &kept).await? else {
        return Ok(None);
    };
    let campaign_id = found.as_ref().and_then(|f| f.campaign_id);
    let mut recorded = Recorded {
        job_id: found.map(|f| f.job_id),
        matched_by,
        effect: EventEffect::None,
        verified,
        paused: None,
    };
    if !verified {
        return Ok(Some(recorded));
    }
    let why = format!(
        "{} {}",
        cx.source,
        e.status.as_deref().unwrap_or(e.kind.as_str())
    );
    let reason = match e.kind.suppresses_at_once() {
        Some(r) => Some(r),
        None if e.kind == EventKind::SoftBounce => {
            let n =
                reports::soft_bounces_within(conn, cx.org_id, &lower, cx.policy.soft_days).await?;
            cx.policy
                .soft_suppresses(n)
                .then_some(SuppressionReason::SoftBounce)
        }
        None => None,
    };
    recorded.effect = match reason {
        Some(r) => {
            let written =
                audience::suppress_all(conn, cx.org_id, &[lower.as_str()], r, &why).await?;
            if written.is_empty() {
                EventEffect::None
            } else {
                EventEffect::Suppressed
            }
        }
        None if e.kind == EventKind::SoftBounce => EventEffect::Counted,
        None => EventEffect::None,
    };
    reports::set_effect(conn, id, recorded.effect).await?;
    if let (Some(campaign), EventKind::HardBounce | EventKind::Complaint) = (campaign_id, e.kind) {
        // Counted one at a time, so concurrent reports cannot all stay one short of the limit.
        reports::lock_campaign_reports(conn, campaign).await?;
        let counts = reports::campaign_counts(conn, cx.org_id, campaign).await?;
        if let Some(reason) = cx.policy.pause_reason(counts) {
            if crate::db::campaign::states::auto_pause(
                conn,
                OrgId(cx.org_id),
                CampaignId(campaign),
                &reason,
            )
            .await?
            {
                recorded.paused = Some(reason);
            }
        }
    }
    Ok(Some(recorded))
}

/// The delivery an event is about, and how it was found, in this order: the job our signed
/// VERP token names; the job its Message-ID names, when that job is the org's; the message the
/// relay named in its 250 reply; else the org's latest delivered message to the address; else
/// none (kept as unmatched).
async fn attribute(
    conn: &mut PgConnection,
    cx: &Intake<'_>,
    e: &FeedbackReport,
    lower: Option<&str>,
) -> Result<(Option<Reported>, MatchedBy), RecordError> {
    let org_id = cx.org_id;
    let token = cx
        .verp_key
        .zip(e.envelope_from.as_deref())
        .and_then(|(key, from)| verp::verify_address(key, org_id, from));
    match token {
        Some(VerpRef::Job(job)) => {
            let found = reports::delivery_of_org(conn, org_id, &job).await?;
            return Ok(vouched(found, lower, e));
        }
        Some(VerpRef::Test {
            campaign_id,
            content_version,
        }) => {
            // A test job's id ends in the address it went to: the report's recipient picks it.
            let found = match lower {
                Some(lower) => {
                    reports::delivered_test(conn, org_id, lower, campaign_id, content_version)
                        .await?
                }
                None => None,
            };
            return Ok(vouched(found, lower, e));
        }
        None => {}
    }
    if let Some(job) = e.job_id() {
        match reports::delivery_of_any_org(conn, &job).await? {
            Some(f) if f.org_id == org_id => return Ok((Some(f), MatchedBy::MessageId)),
            Some(_) => return Err(RecordError::OtherOrg(e.id.clone())),
            None => {}
        }
    }
    if let Some(relay_id) = &e.relay_id {
        if let Some(f) = reports::delivery_by_relay_id(conn, org_id, relay_id).await? {
            return Ok((Some(f), MatchedBy::RelayId));
        }
    }
    Ok(match lower {
        Some(lower) => match reports::latest_delivered_to(conn, org_id, lower).await? {
            Some(f) => (Some(f), MatchedBy::Recipient),
            None => (None, MatchedBy::None),
        },
        None => (None, MatchedBy::None),
    })
}

/// What a genuine token proves about the report that came through it: the delivery it names,
/// when that delivery still exists and went to the address the report names (in either of
/// its stored forms). A token without its delivery (a purged campaign's, a test sent to
/// someone else) or naming another address proves nothing: the report is unmatched, so one
/// received message cannot be used to suppress or count against anyone else.
fn vouched(
    found: Option<Reported>,
    lower: Option<&str>,
    e: &FeedbackReport,
) -> (Option<Reported>, MatchedBy) {
    match found {
        Some(f)
            if lower.is_none_or(|l| l == f.email_lower)
                || e.recipient
                    .as_ref()
                    .is_some_and(|r| r.lower() == f.email_lower) =>
        {
            (Some(f), MatchedBy::Token)
        }
        _ => (None, MatchedBy::None),
    }
}

/// The form an event about `r` is matched and kept under: the hash of the address while the
/// org holds that person erased, else the address, so a person who came back is suppressed,
/// counted and matched by their address again.
async fn erased_or_clear(
    conn: &mut PgConnection,
    org_id: i64,
    r: &EmailAddress,
) -> sqlx::Result<String> {
    let hashed = r.erased_form();
    Ok(
        if reports::holds_erased(conn, org_id, &hashed, r.lower()).await? {
            hashed
        } else {
            r.lower().to_owned()
        },
    )
}
