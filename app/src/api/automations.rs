//! Automations: the list, one automation's sheet (its definition as edited, each step's counts
//! and the people in it), saving (a draft in place, a live one as a new version), four-eyes
//! approval, pause / resume / stop, and a mail step's preview. Every change is audited.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::domain::automation::{AutomationStatus, Definition};
use crate::error::AppError;

/// How many of the people in an automation its page shows (newest first).
pub const PEOPLE_SHOWN: i64 = 50;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutomationRow {
    pub id: i64,
    pub name: String,
    pub status: AutomationStatus,
    pub live_version: Option<i32>,
    /// An edit waits for a second admin's approval.
    pub waiting: bool,
    pub active: i64,
    pub enrolled: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutomationsView {
    pub rows: Vec<AutomationRow>,
    pub can_act: bool,
}

/// One step's counts as the page shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLine {
    pub version: i32,
    pub step: i32,
    /// "next step of" (people whose next step it is), or the outcome.
    pub what: String,
    pub detail: String,
    pub n: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersonLine {
    pub subscriber_id: i64,
    pub email: String,
    pub version: i32,
    /// "active", "completed", "exited (goal)", …
    pub state: String,
    pub step: i32,
    /// RFC 3339, for active ones: when their next step is due.
    pub due: Option<String>,
}

/// What the automation page edits and shows (`id` 0: a new automation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutomationView {
    pub id: i64,
    pub name: String,
    pub status: AutomationStatus,
    pub live_version: Option<i32>,
    pub draft_version: i32,
    /// The version waiting for approval when there is one, else the live one.
    pub definition: Definition,
    /// Who edited the version waiting for approval.
    pub waiting_editor: Option<String>,
    /// The signed-in user may approve it (someone else edited it, or the org allows
    /// self-approval).
    pub may_approve: bool,
    pub lists: Vec<(i64, String)>,
    /// The org's saved segments, for a segment trigger.
    pub segments: Vec<(i64, String)>,
    pub steps: Vec<StepLine>,
    pub people: Vec<PersonLine>,
    pub can_act: bool,
}

#[server(endpoint = "automations")]
pub async fn automations() -> Result<AutomationsView, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let rows = crate::db::automation::list(&mut conn, me.org())
        .await?
        .into_iter()
        .map(|s| AutomationRow {
            waiting: s.live_version != Some(s.draft_version) && s.live_version.is_some(),
            id: s.id,
            name: s.name,
            status: s.status,
            live_version: s.live_version,
            active: s.active,
            enrolled: s.enrolled,
        })
        .collect();
    Ok(AutomationsView {
        rows,
        can_act: me.role.can_act(),
    })
}

/// A new automation's starting point: a welcome mail to whoever joins the first list.
#[cfg(feature = "ssr")]
fn starter(list: Option<i64>) -> Definition {
    use crate::domain::automation::{Reentry, Step, Trigger};
    Definition {
        trigger: match list {
            Some(list_id) => Trigger::ListJoined { list_id },
            None => Trigger::Api,
        },
        reentry: Reentry::Once,
        goal: None,
        steps: vec![Step::Email {
            subject: "Welcome, {{ name }}".into(),
            body: "Thanks for joining.".into(),
            format: Default::default(),
        }],
    }
}

#[server(endpoint = "automation_sheet")]
pub async fn automation_sheet(id: i64) -> Result<AutomationView, AppError> {
    use crate::db::automation;
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let lists: Vec<(i64, String)> = crate::db::lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| (l.id, l.name))
        .collect();
    let segments: Vec<(i64, String)> = crate::db::segment::list(&mut conn, me.org())
        .await?
        .into_iter()
        .map(|s| (s.id, s.name))
        .collect();
    if id == 0 {
        return Ok(AutomationView {
            id: 0,
            name: String::new(),
            status: AutomationStatus::Draft,
            live_version: None,
            draft_version: 1,
            definition: starter(lists.first().map(|l| l.0)),
            waiting_editor: None,
            may_approve: false,
            lists,
            segments,
            steps: Vec::new(),
            people: Vec::new(),
            can_act: me.role.can_act(),
        });
    }
    let d = automation::get(&mut conn, me.org(), id)
        .await?
        .ok_or(AppError::NotFound)?;
    let allow_self = crate::db::settings::allows_self_approval(&mut conn, me.org_id).await?;
    let (definition, waiting_editor, may_approve) = match (d.waiting, d.live) {
        (Some((def, edit)), _) => {
            let mine = edit.editor_id == me.user_id;
            (def, Some(edit.editor), !mine || allow_self)
        }
        (None, Some(live)) => (live, None, false),
        (None, None) => return Err(AppError::NotFound),
    };
    let steps = automation::step_counts(&mut conn, me.org(), id)
        .await?
        .into_iter()
        .map(|c| StepLine {
            version: c.version,
            step: c.step,
            what: c
                .outcome
                .map(|o| o.to_string())
                .unwrap_or_else(|| "next step of".into()),
            detail: c.detail,
            n: c.n,
        })
        .collect();
    let people = automation::people(&mut conn, me.org(), id, None, PEOPLE_SHOWN)
        .await?
        .rows
        .into_iter()
        .map(|p| PersonLine {
            subscriber_id: p.subscriber_id,
            email: p.email,
            version: p.version,
            state: match p.exit_reason {
                Some(r) => format!("{} ({r})", p.state),
                None => p.state.to_string(),
            },
            step: p.step,
            due: (p.state == crate::domain::automation::EnrolmentState::Active)
                .then(|| p.due_at.to_rfc3339()),
        })
        .collect();
    Ok(AutomationView {
        id,
        name: d.summary.name,
        status: d.summary.status,
        live_version: d.summary.live_version,
        draft_version: d.summary.draft_version,
        definition,
        waiting_editor,
        may_approve,
        lists,
        segments,
        steps,
        people,
        can_act: me.role.can_act(),
    })
}

/// Saves the page's automation (`id` 0: a new draft); a live one's edit becomes a new version
/// that waits for approval. The browser goes on to the saved automation's page.
#[server(endpoint = "save_automation")]
pub async fn save_automation(id: i64, name: String, definition: String) -> Result<i64, AppError> {
    use crate::db::audit;
    use crate::db::automation::{self, StoreError};
    let (me, pool) = super::signed_in_to_act().await?;
    let name = crate::domain::audience::list_name(&name)
        .map_err(|e| AppError::Invalid(e.replace("list's", "automation's")))?;
    let d = parse(&definition)?;
    let mut tx = pool.begin().await?;
    // Another org's list is not found, as it is everywhere.
    if automation::foreign_reference(&mut tx, me.org(), &d)
        .await?
        .is_some()
    {
        return Err(AppError::NotFound);
    }
    let store = |e: StoreError| match e {
        StoreError::NotFound => AppError::NotFound,
        StoreError::Taken => {
            AppError::Conflict("Another automation has this name: choose another.".into())
        }
        StoreError::Stopped => {
            AppError::Conflict("This automation was stopped; it cannot be changed.".into())
        }
        StoreError::Db(e) => e.into(),
    };
    let user = crate::domain::UserId(me.user_id);
    let (id, version, action) = if id == 0 {
        let id = automation::create(&mut tx, me.org(), &name, &d, user)
            .await
            .map_err(store)?;
        (id, 1, crate::domain::AuditAction::AutomationCreate)
    } else {
        let v = automation::update(&mut tx, me.org(), id, &name, &d, user)
            .await
            .map_err(store)?;
        (id, v, crate::domain::AuditAction::AutomationEdit)
    };
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "name": name, "version": version, "definition": d })),
            ..audit::Entry::by(&me, action, "automation", Some(id.to_string()))
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect(&format!("/automations/{id}"));
    Ok(id)
}

/// Approves `version` (the one the page showed) and makes it live.
#[server(endpoint = "approve_automation")]
pub async fn approve_automation(id: i64, version: i32) -> Result<String, AppError> {
    use crate::db::audit;
    use crate::db::automation::{self, ApproveError};
    let (me, pool) = super::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    let allow_self = crate::db::settings::allows_self_approval(&mut tx, me.org_id).await?;
    let approved = automation::approve(
        &mut tx,
        me.org(),
        id,
        version,
        crate::domain::UserId(me.user_id),
        allow_self,
    )
    .await
    .map_err(|e| match e {
        ApproveError::NotFound => AppError::NotFound,
        ApproveError::Moved => AppError::Conflict(
            "The automation was edited after you opened it: reload to see the version to approve."
                .into(),
        ),
        ApproveError::NothingWaiting => AppError::Conflict("Nothing waits for approval.".into()),
        ApproveError::OwnEdit => AppError::Conflict(
            "Another admin must approve your edit (four eyes); Settings can allow self-approval."
                .into(),
        ),
        ApproveError::Stopped => AppError::Conflict("This automation was stopped.".into()),
        ApproveError::SegmentGone => AppError::Conflict(
            "The segment that starts this automation was deleted: choose another and save again."
                .into(),
        ),
        ApproveError::Db(e) => e.into(),
    })?;
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({
                "version": approved.version,
                "self_approved": approved.self_approved,
                "activated": approved.activated,
            })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::AutomationApprove,
                "automation",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(if approved.activated {
        format!(
            "Version {} approved: the automation is live.",
            approved.version
        )
    } else {
        format!(
            "Version {} approved: newcomers enrol on it; people already in finish on theirs.",
            approved.version
        )
    })
}

/// Pauses, resumes or stops the automation (`action`: pause, resume or stop).
#[server(endpoint = "control_automation")]
pub async fn control_automation(id: i64, action: String) -> Result<String, AppError> {
    use crate::db::audit;
    use crate::db::automation::{self, Control, StoreError};
    use crate::domain::AuditAction;
    let (me, pool) = super::signed_in_to_act().await?;
    let (control, audited) = match action.as_str() {
        "pause" => (Control::Pause, AuditAction::AutomationPause),
        "resume" => (Control::Resume, AuditAction::AutomationResume),
        "stop" => (Control::Stop, AuditAction::AutomationStop),
        _ => {
            return Err(AppError::Invalid(
                "The action is one of pause, resume and stop.".into(),
            ))
        }
    };
    let mut tx = pool.begin().await?;
    let changed = automation::set_status(&mut tx, me.org(), id, control)
        .await
        .map_err(|e| match e {
            StoreError::Db(e) => e.into(),
            _ => AppError::NotFound,
        })?;
    let Some((before, after)) = changed else {
        return Err(AppError::Conflict(format!(
            "The automation cannot {action} from where it is."
        )));
    };
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "status": before })),
            after: Some(serde_json::json!({ "status": after })),
            ..audit::Entry::by(&me, audited, "automation", Some(id.to_string()))
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("The automation is {after}."))
}

/// A mail step of `definition` rendered for a sample subscriber (its subject and text), or
/// the template's fault.
#[server(endpoint = "preview_automation_mail")]
pub async fn preview_automation_mail(
    definition: String,
    step: usize,
) -> Result<(String, String), AppError> {
    use crate::campaign_render::{Compiled, Extra, Fields};
    use crate::domain::automation::Step;
    let (me, _pool) = super::signed_in().await?;
    let d = parse(&definition)?;
    let Some(Step::Email {
        subject,
        body,
        format,
    }) = d.steps.get(step)
    else {
        return Err(AppError::Invalid(format!("Step {step} is not a mail.")));
    };
    let compiled = Compiled::new(&crate::db::campaign::Content {
        id: 0,
        org_id: me.org_id,
        subject: subject.clone(),
        body: body.clone(),
        body_format: *format,
        content_version: 0,
    })
    .map_err(|e| AppError::Invalid(format!("steps[{step}]: {e}")))?;
    let attributes = serde_json::json!({"plan": "pro", "timezone": "Europe/Berlin"});
    let event = serde_json::json!({"order": "A-1001"});
    let m = compiled
        .render_with(
            &Fields {
                name: "Sample Person",
                email: "sample@example.org",
                unsubscribe_url: "https://example.org/u/sample",
            },
            &Extra {
                attributes: Some(&attributes),
                event: Some(&event),
            },
        )
        .map_err(|e| AppError::Invalid(format!("steps[{step}]: {e}")))?;
    Ok((m.subject, m.text.or(m.html).unwrap_or_default()))
}

#[cfg(feature = "ssr")]
fn parse(definition: &str) -> Result<Definition, AppError> {
    crate::domain::input::text_input("Definition", definition, 1_000_000)?;
    let d: Definition = serde_json::from_str(definition)
        .map_err(|e| AppError::Invalid(format!("The definition is not an automation: {e}.")))?;
    d.check().map_err(|e| AppError::Invalid(format!("{e}.")))?;
    // A mail whose template does not compile is refused now, not failed at each send.
    for (i, step) in d.mails() {
        if let crate::domain::automation::Step::Email {
            subject,
            body,
            format,
        } = step
        {
            crate::campaign_render::Compiled::new(&crate::db::campaign::Content {
                id: 0,
                org_id: 0,
                subject: subject.clone(),
                body: body.clone(),
                body_format: *format,
                content_version: 0,
            })
            .map_err(|e| AppError::Invalid(format!("steps[{i}]: {e}.")))?;
        }
    }
    Ok(d)
}
