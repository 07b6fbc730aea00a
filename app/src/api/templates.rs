//! Templates: the org's transactional templates, which `POST /api/v1/messages` names. Every
//! save is a new version (a message records the version it was made from); a save that
//! started from an older version than the current one is refused, so two admins never
//! overwrite each other. Everyone reads; admins and owners save, each save audited.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::api::campaign::edit::Preview;
use crate::error::AppError;

/// The longest text or HTML body of a template, in characters.
pub const BODY_MAX: usize = 500_000;

/// A template as the list shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateRow {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub subject: String,
    pub saved: String,
    pub author: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplatesData {
    pub templates: Vec<TemplateRow>,
    pub can_act: bool,
}

/// One template's current version, for the editor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateDetail {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub subject: String,
    pub body_text: String,
    pub body_html: String,
    /// Pretty-printed JSON.
    pub sample_data: String,
    pub saved: String,
    pub author: Option<String>,
    pub can_act: bool,
    /// The current version filled in from its sample data, or why it does not render.
    pub preview: Result<Preview, String>,
}

#[server(endpoint = "templates")]
pub async fn templates() -> Result<TemplatesData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let rows = crate::db::transactional::templates(&mut conn, me.org_id).await?;
    Ok(TemplatesData {
        templates: rows
            .into_iter()
            .map(|t| TemplateRow {
                id: t.id,
                name: t.name,
                version: t.version,
                subject: t.subject,
                saved: t.saved,
                author: t.author,
            })
            .collect(),
        can_act: me.role.can_act(),
    })
}

#[server(endpoint = "template")]
pub async fn template(id: i64) -> Result<TemplateDetail, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let t = crate::db::transactional::template(&mut conn, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let to = t
        .sample_data
        .0
        .get("email")
        .and_then(|e| e.as_str())
        .unwrap_or(me.email.as_str())
        .to_owned();
    let preview = crate::tx_render::render(
        &crate::tx_render::Source {
            subject: &t.subject,
            text: &t.body_text,
            html: t.body_html.as_deref(),
        },
        &to,
        &t.sample_data.0,
    )
    .map(|r| Preview {
        to,
        subject: r.subject,
        text: Some(r.text),
        html: r.html,
    })
    .map_err(|e| format!("It does not render with the sample data: {e}."));
    Ok(TemplateDetail {
        preview,
        id: t.id,
        name: t.name,
        version: t.version,
        subject: t.subject,
        body_text: t.body_text,
        body_html: t.body_html.unwrap_or_default(),
        sample_data: serde_json::to_string_pretty(&t.sample_data.0).unwrap_or_default(),
        saved: t.saved,
        author: t.author,
        can_act: me.role.can_act(),
    })
}

/// A checked template: its parts and sample data.
#[cfg(feature = "ssr")]
struct Checked {
    name: String,
    subject: String,
    body_text: String,
    body_html: Option<String>,
    sample: serde_json::Value,
}

#[cfg(feature = "ssr")]
fn checked(
    name: &str,
    subject: &str,
    body_text: &str,
    body_html: &str,
    sample_data: &str,
) -> Result<Checked, AppError> {
    use crate::domain::input::{json_input, text_input};
    let name = name.trim();
    let valid_name = crate::domain::text::template_name(name);
    if !valid_name {
        return Err(AppError::Invalid(
            "Name: 1 to 64 lowercase letters, digits, '-' and '_', starting with a letter or digit (API requests name the template by it).".into(),
        ));
    }
    let subject = subject.trim();
    if subject.is_empty() || subject.len() > 998 {
        return Err(AppError::Invalid("Subject: 1 to 998 characters.".into()));
    }
    text_input("Subject", subject, 998)?;
    text_input("Text body", body_text, BODY_MAX)?;
    text_input("HTML body", body_html, BODY_MAX)?;
    let body_html = Some(body_html.trim()).filter(|h| !h.is_empty());
    if body_text.trim().is_empty() {
        return Err(AppError::Invalid(
            "Text body: every message has a text part; write one.".into(),
        ));
    }
    let sample = if sample_data.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str::<serde_json::Value>(sample_data)
            .map_err(|e| AppError::Invalid(format!("Sample data: not JSON ({e}).")))?
    };
    if !sample.is_object() {
        return Err(AppError::Invalid(
            "Sample data: a JSON object, like the data API requests send.".into(),
        ));
    }
    json_input("Sample data", &sample)?;
    crate::tx_render::check(&crate::tx_render::Source {
        subject,
        text: body_text,
        html: body_html,
    })
    .map_err(|e| AppError::Invalid(format!("The template does not compile: {e}.")))?;
    Ok(Checked {
        name: name.to_owned(),
        subject: subject.to_owned(),
        body_text: body_text.to_owned(),
        body_html: body_html.map(str::to_owned),
        sample,
    })
}

/// Creates a template (no `id`; the browser is sent to its page) or saves a new version of
/// one, which must still be at `expected_version`.
#[server(endpoint = "save_template")]
pub async fn save_template(
    #[server(default)] id: Option<i64>,
    #[server(default)] expected_version: Option<i32>,
    name: String,
    subject: String,
    body_text: String,
    #[server(default)] body_html: String,
    #[server(default)] sample_data: String,
) -> Result<String, AppError> {
    use crate::db::{audit, transactional};
    let (me, pool) = super::signed_in_to_act().await?;
    let c = checked(&name, &subject, &body_text, &body_html, &sample_data)?;
    let target = match (id, expected_version) {
        (Some(id), Some(v)) => Some((id, v)),
        (None, _) => None,
        (Some(_), None) => {
            return Err(AppError::Invalid(
                "Which version was edited? Reload the page and edit again.".into(),
            ))
        }
    };
    let mut tx = pool.begin().await?;
    let saved = transactional::save(
        &mut tx,
        me.org_id,
        target,
        &transactional::Draft {
            name: &c.name,
            subject: &c.subject,
            body_text: &c.body_text,
            body_html: c.body_html.as_deref(),
            sample_data: &c.sample,
            author_id: me.user_id,
        },
    )
    .await?;
    let (tid, version) = match saved {
        transactional::Saved::Version(t, v) => (t, v),
        transactional::Saved::NameTaken => {
            return Err(AppError::Conflict(format!(
                "Another template is named “{}”.",
                c.name
            )))
        }
        transactional::Saved::NotFound => return Err(AppError::NotFound),
        transactional::Saved::Stale => {
            return Err(AppError::Conflict(
                "Someone saved this template since you opened it: reload to see their version, then edit again.".into(),
            ))
        }
    };
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "name": c.name, "version": version })),
            ..audit::Entry::by(
                &me,
                if version == 1 {
                    crate::domain::AuditAction::TemplateCreate
                } else {
                    crate::domain::AuditAction::TemplateSave
                },
                "template",
                Some(tid.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    if id.is_none() {
        leptos_axum::redirect(&format!("/templates/{tid}"));
    }
    Ok(format!(
        "Saved: version {version} is what messages are made from now."
    ))
}
