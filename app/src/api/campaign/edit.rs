//! The campaign editor and the campaign's workflow: create a draft, save it (each save bumps
//! the content version; saving a submitted campaign sends it back to draft), and the admin's
//! transitions — submit, approve (four eyes, the exact version shown, never to nobody), reject
//! with a reason, pause, resume, cancel. Each is a compare-and-set that says who changed the
//! campaign first when it lost, scoped to the signed-in user's org and written to the audit log.

// A server function takes one argument per field of the plain form that posts to it (the
// editor's has eight); the macro's generated client function cannot carry an item attribute.
#![allow(clippy::too_many_arguments)]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, campaign};
#[cfg(feature = "ssr")]
use crate::domain::CampaignId;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListChoice {
    pub id: i64,
    pub name: String,
    pub members: i64,
    pub chosen: bool,
    /// Its members are left out.
    pub excluded: bool,
}

/// A segment the editor may send to or leave out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentChoice {
    pub id: i64,
    pub name: String,
    pub chosen: bool,
    pub excluded: bool,
}

/// The campaign rendered for one real recipient of its lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    pub to: String,
    pub subject: String,
    /// The text part (a Markdown body's source, filled in); `None` for an HTML body.
    pub text: Option<String>,
    /// The HTML part, shown in a sandboxed frame.
    pub html: Option<String>,
}

pub use crate::model::Problem;

/// How many failed and unknown recipients the campaign page lists.
pub const PROBLEMS_SHOWN: i64 = 50;

/// Everything the campaign page, its editor and its dialogs show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sheet {
    pub id: i64,
    pub name: String,
    pub subject: String,
    pub body: String,
    pub format: crate::domain::BodyFormat,
    pub status: crate::domain::CampaignStatus,
    pub version: i32,
    /// A fresh token for the test-send dialog: the same dialog submitted twice sends once.
    pub test_token: String,
    /// Local `YYYY-MM-DDTHH:MM`, or `None` for "as soon as approved".
    pub schedule: Option<String>,
    pub timezone: String,
    pub author: String,
    pub last_editor: String,
    pub approver: Option<String>,
    pub approved_at: Option<String>,
    pub rejection_reason: Option<String>,
    pub lists: Vec<ListChoice>,
    pub segments: Vec<SegmentChoice>,
    /// Recipients after de-duplication and suppression, now; from the start on, the
    /// materialised recipients.
    pub estimate: i64,
    /// The count the approver was shown, when it differs from the recipients materialised at
    /// the start (the audience's data changed in between).
    pub approved_estimate_differs: Option<i64>,
    /// The recipient list was built (the campaign started).
    pub started: bool,
    /// `Err`: why the templates cannot be rendered (or that no list has a recipient).
    pub preview: Result<Preview, String>,
    /// The signed-in user may act (owner or admin).
    pub can_act: bool,
    /// The signed-in user wrote or last edited it (four eyes: someone else approves).
    pub mine: bool,
    /// Failed and unknown recipients, newest first (at most [`PROBLEMS_SHOWN`]).
    pub problems: Vec<Problem>,
}

#[server(endpoint = "campaign_sheet")]
pub async fn campaign_sheet(id: i64) -> Result<Sheet, AppError> {
    let figures = crate::api::figures::figures();
    let (me, pool) = crate::api::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let c = campaign::edit::load(&mut conn, me.org(), CampaignId(id))
        .await?
        .ok_or(AppError::NotFound)?;
    // The editor's choice of lists with member counts: only while the lists can still change
    // (counting a million members on every view of a started campaign would be needless).
    let lists = match c.recipients_total {
        Some(_) => Vec::new(),
        None => figures
            .list_sizes
            .get(me.org_id, async {
                Ok(crate::db::lists::all(&mut conn, me.org_id).await?)
            })
            .await?
            .into_iter()
            .map(|l| ListChoice {
                chosen: c.list_ids.contains(&l.id),
                excluded: c.excluded_list_ids.contains(&l.id),
                id: l.id,
                name: l.name,
                members: l.members,
            })
            .collect(),
    };
    let segments = match c.recipients_total {
        Some(_) => Vec::new(),
        None => crate::db::segment::list(&mut conn, me.org())
            .await?
            .into_iter()
            .map(|s| SegmentChoice {
                chosen: c.segment_ids.contains(&s.id),
                excluded: c.excluded_segment_ids.contains(&s.id),
                id: s.id,
                name: s.name,
            })
            .collect(),
    };
    // Before the start the audience is counted live (an estimate); from the start on, the
    // recipients are the materialised list: counting a million-row audience again on every
    // page view would be needless.
    let (estimate, preview) = match c.recipients_total {
        None => {
            let sample =
                campaign::edit::sample_recipient(&mut conn, me.org(), CampaignId(id)).await?;
            let estimate = figures
                .estimate
                .get((me.org_id, id, c.content_version), async {
                    Ok(campaign::edit::estimate(&mut conn, me.org(), CampaignId(id)).await?)
                })
                .await?;
            (estimate, render_preview(&c, sample))
        }
        Some(total) => (
            total,
            Err(format!(
                "Version {} went out to {total} recipients as approved.",
                c.content_version
            )),
        ),
    };
    let problems =
        campaign::live::problems(&mut conn, me.org(), CampaignId(id), PROBLEMS_SHOWN).await?;
    Ok(Sheet {
        id: c.id,
        status: c.status,
        version: c.content_version,
        schedule: c.scheduled_local,
        timezone: c.timezone,
        author: c.author,
        last_editor: c.last_editor,
        approver: c.approver,
        approved_at: c.approved_at,
        rejection_reason: c.rejection_reason,
        lists,
        segments,
        estimate,
        approved_estimate_differs: c
            .approved_estimate
            .filter(|shown| c.recipients_total.is_some_and(|total| total != *shown)),
        preview,
        can_act: me.role.can_act(),
        mine: me.user_id == c.author_id || me.user_id == c.last_editor_id,
        problems,
        started: c.recipients_total.is_some(),
        test_token: crate::auth::dialog_token(),
        format: c.body_format,
        name: c.name,
        subject: c.subject,
        body: c.body,
    })
}

#[cfg(feature = "ssr")]
fn render_preview(
    c: &campaign::edit::Editable,
    sample: Option<campaign::edit::Sample>,
) -> Result<Preview, String> {
    use crate::campaign_render::{Compiled, Fields};
    let sample = sample.ok_or("No recipient yet: choose lists with subscribers.")?;
    let (name, email) = (sample.name, sample.email);
    let compiled = Compiled::new(&campaign::Content {
        id: c.id,
        org_id: 0,
        subject: c.subject.clone(),
        body: c.body.clone(),
        body_format: c.body_format,
        content_version: c.content_version,
    })
    .map_err(|e| format!("The template does not compile: {e}"))?;
    let m = compiled
        .render(&Fields {
            name: &name,
            email: &email,
            unsubscribe_url: "https://…/u/(a link for this recipient)",
        })
        .map_err(|e| format!("The template cannot be rendered: {e}"))?;
    Ok(Preview {
        to: email,
        subject: m.subject,
        text: m.text,
        html: m.html,
    })
}

/// A new, empty draft by the signed-in admin; the browser goes on to its editor.
#[server(endpoint = "new_campaign")]
pub async fn new_campaign(name: String) -> Result<i64, AppError> {
    use crate::domain::CampaignContent;
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let content = CampaignContent::parse(&name, "", "", "", "").map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let id = campaign::create_draft(
        &mut tx,
        campaign::NewDraft {
            org_id: me.org_id,
            author_id: me.user_id,
            name: &content.name,
            subject: "",
            body: "",
            list_ids: &[],
        },
    )
    .await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: None,
            after: Some(serde_json::json!({ "name": content.name })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::CampaignCreate,
                "campaign",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect(&format!("/campaigns/{id}/edit"));
    Ok(id)
}

/// A new draft with another campaign's content and lists; the browser goes on to its editor.
#[server(endpoint = "clone_campaign")]
pub async fn clone_campaign(id: i64) -> Result<i64, AppError> {
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    let copy = campaign::edit::clone_draft(&mut tx, me.org(), CampaignId(id), me.user())
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "from": id })),
            after: None,
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::CampaignClone,
                "campaign",
                Some(copy.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect(&format!("/campaigns/{copy}/edit"));
    Ok(copy)
}

/// Saves the editor over the version it loaded (`version`); `lists` and `segments` are the
/// ones sent to, `excluded_lists` and `excluded_segments` those left out.
#[allow(clippy::too_many_arguments)] // One per field of the editor's form.
#[server(endpoint = "save_campaign")]
pub async fn save_campaign(
    id: i64,
    version: i32,
    name: String,
    subject: String,
    body: String,
    #[server(default)] format: String,
    #[server(default)] lists: Vec<i64>,
    #[server(default)] excluded_lists: Vec<i64>,
    #[server(default)] segments: Vec<i64>,
    #[server(default)] excluded_segments: Vec<i64>,
    #[server(default)] schedule: String,
) -> Result<String, AppError> {
    use crate::db::campaign::edit::{Audience, Changes, SaveError};
    use crate::domain::CampaignContent;
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let content = CampaignContent::parse(&name, &subject, &body, &format, &schedule)
        .map_err(AppError::Invalid)?;
    if lists.iter().any(|l| excluded_lists.contains(l))
        || segments.iter().any(|s| excluded_segments.contains(s))
    {
        return Err(AppError::Invalid(
            "Audience: a list or segment is either sent to or left out, not both.".into(),
        ));
    }
    let audience = Audience {
        lists,
        excluded_lists,
        segments,
        excluded_segments,
    };
    let mut tx = pool.begin().await?;
    let changes = Changes {
        name: &content.name,
        subject: &content.subject,
        body: &content.body,
        body_format: content.format,
        audience: &audience,
        scheduled_local: content.schedule.as_deref(),
    };
    let saved = campaign::edit::save(
        &mut tx,
        me.org(),
        CampaignId(id),
        me.user(),
        version,
        &changes,
    )
    .await;
    let new_version = match saved {
        Ok(v) => v,
        Err(SaveError::NotFound) | Err(SaveError::UnknownList) => return Err(AppError::NotFound),
        Err(SaveError::PastSchedule) => {
            return Err(AppError::Invalid(
                "The scheduled time is in the past: choose a later time, or none to send as soon as it is approved.".into(),
            ))
        }
        Err(SaveError::Moved { status, .. }) if !status.content_editable() => {
            return Err(AppError::Conflict(format!(
                "This campaign is {status}: only a draft (or a submitted campaign, which goes back to draft) can be edited."
            )))
        }
        Err(SaveError::Moved { version: now, .. }) => {
            return Err(AppError::Conflict(format!(
                "Someone saved this campaign after you opened it (version {now} now, you had {version}): reload to see their changes."
            )))
        }
        Err(SaveError::Db(e)) => return Err(e.into()),
    };
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "version": version })),
            after: Some(serde_json::json!({
                "version": new_version, "name": content.name, "subject": content.subject,
                "format": content.format.as_str(), "lists": audience.lists,
                "excluded_lists": audience.excluded_lists, "segments": audience.segments,
                "excluded_segments": audience.excluded_segments, "schedule": content.schedule,
            })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::CampaignEdit,
                "campaign",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("Saved (version {new_version})."))
}

/// One of the admin's transitions (posted by name: `submit`, `approve`, `reject`, `pause`,
/// `resume`, `cancel`) on the version the dialog showed; `reason` is required to reject.
#[server(endpoint = "campaign_action")]
pub async fn campaign_action(
    id: i64,
    verb: crate::domain::Transition,
    version: i32,
    #[server(default)] reason: String,
) -> Result<String, AppError> {
    use crate::db::campaign::states::ChangeError;
    use crate::domain::{CampaignId, CampaignStatus, OrgId, Transition, UserId};
    let (me, pool) = crate::api::signed_in_to_act().await?;
    // Starting and finishing are the workers'.
    if !Transition::BY_ADMINS.contains(&verb) {
        return Err(AppError::Invalid(format!(
            "Action: {} is not an admin's action.",
            verb.verb()
        )));
    }
    let t = verb;
    let reason = reason.trim().to_string();
    if t == Transition::Reject && (reason.is_empty() || reason.chars().count() > 500) {
        return Err(AppError::Invalid(
            "Say why it is rejected (1 to 500 characters): the author will read it.".into(),
        ));
    }
    // Recorded in the audit log whatever the action.
    crate::domain::input::text_input("Reason", &reason, 500)?;
    let mut tx = pool.begin().await?;
    let mut self_approved = false;
    let (org, campaign_id) = (OrgId(me.org_id), CampaignId(id));
    let done = match t {
        Transition::Approve => {
            let approver = UserId(me.user_id);
            let approved = campaign::states::approve(&mut tx, org, campaign_id, approver, version)
                .await
                .map(|s| self_approved = s);
            // Never approve a campaign that would reach nobody (the estimate the dialog showed).
            // Checked after the compare-and-set, which says "not found" for another org's
            // campaign; returning here rolls the approval back.
            if approved.is_ok() {
                let estimate = campaign::edit::estimate(&mut tx, org, campaign_id).await?;
                if estimate == 0 {
                    return Err(AppError::Conflict(
                        "This campaign would reach nobody (0 recipients after de-duplication and suppression): choose lists or segments with subscribers first.".into(),
                    ));
                }
                campaign::states::record_estimate(&mut tx, org, campaign_id, estimate).await?;
            }
            approved
        }
        Transition::Reject => campaign::states::reject(&mut tx, org, campaign_id, &reason).await,
        other => campaign::states::change(&mut tx, org, campaign_id, other).await,
    };
    match done {
        Ok(()) => {}
        Err(ChangeError::NotFound) => return Err(AppError::NotFound),
        Err(ChangeError::Db(e)) => return Err(e.into()),
        Err(ChangeError::Refused {
            error,
            by: Some((who, at)),
        }) if t == Transition::Approve
            && matches!(
                error.current,
                CampaignStatus::Approved
                    | CampaignStatus::Sending
                    | CampaignStatus::Paused
                    | CampaignStatus::Sent
            ) =>
        {
            return Err(AppError::Conflict(format!(
                "Already approved by {who} at {at}."
            )))
        }
        Err(e) => return Err(AppError::Conflict(crate::api::sentence(&e.to_string()))),
    }
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "version": version })),
            after: Some(serde_json::json!({
                "status": t.to().as_str(),
                "self_approved": self_approved,
                "reason": (!reason.is_empty()).then_some(&reason),
            })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::of_campaign(t),
                "campaign",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("Campaign {}.", t.participle()))
}
