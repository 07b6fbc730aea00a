//! The Audience page's segments: the list with their counts, the builder's sheet (the
//! definition and what its conditions may name: the org's lists and campaigns), a live count
//! and sample of a definition being built, and saving and deleting (audited). Saving is the
//! one use case the REST API shares (`crate::segments`).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::domain::segment::Group;
use crate::error::AppError;

/// How many matching subscribers the builder shows as a sample.
pub const SAMPLE_SIZE: i64 = 10;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentRow {
    pub id: i64,
    pub name: String,
    pub version: i32,
    /// Subscribers it matches now.
    pub count: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentsView {
    pub segments: Vec<SegmentRow>,
    pub can_act: bool,
}

/// What the builder edits: a saved segment (or a new one, `id` 0) and what its conditions
/// may name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuilderSheet {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub definition: Group,
    pub lists: Vec<(i64, String)>,
    pub campaigns: Vec<(i64, String)>,
    pub can_act: bool,
}

/// A definition's count now, and the first few subscribers it matches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentPreview {
    pub count: i64,
    /// (id, address, name)
    pub sample: Vec<(i64, String, String)>,
}

#[server(endpoint = "segments")]
pub async fn segments() -> Result<SegmentsView, AppError> {
    use crate::db::segment;
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let clock = segment::clock(&mut conn, me.org(), None).await?;
    let mut rows = Vec::new();
    for s in segment::list(&mut conn, me.org()).await? {
        let count = segment::count(&mut conn, me.org(), &s.definition.0, &clock).await?;
        rows.push(SegmentRow {
            id: s.id,
            name: s.name,
            version: s.version,
            count,
        });
    }
    Ok(SegmentsView {
        segments: rows,
        can_act: me.role.can_act(),
    })
}

/// The builder's sheet for segment `id` (0: a new one, matching everyone).
#[server(endpoint = "segment_sheet")]
pub async fn segment_sheet(id: i64) -> Result<BuilderSheet, AppError> {
    use crate::db::segment;
    use crate::domain::segment::GroupOp;
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let (name, version, definition) = if id == 0 {
        (
            String::new(),
            0,
            Group {
                op: GroupOp::All,
                children: Vec::new(),
            },
        )
    } else {
        let s = segment::get(&mut conn, me.org(), id)
            .await?
            .ok_or(AppError::NotFound)?;
        (s.name, s.version, s.definition.0)
    };
    let lists = crate::db::lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| (l.id, l.name))
        .collect();
    let campaigns = crate::db::campaign::list(&mut conn, me.org_id, None)
        .await?
        .into_iter()
        .map(|c| (c.id, c.name))
        .collect();
    Ok(BuilderSheet {
        id,
        name,
        version,
        definition,
        lists,
        campaigns,
        can_act: me.role.can_act(),
    })
}

/// The count and a sample of `definition` (JSON) now; a node at fault is named.
#[server(endpoint = "preview_segment")]
pub async fn preview_segment(definition: String) -> Result<SegmentPreview, AppError> {
    use crate::db::segment;
    let (me, pool) = super::signed_in().await?;
    let g = parse(&definition)?;
    g.check().map_err(|e| AppError::Invalid(format!("{e}.")))?;
    let mut conn = pool.acquire().await?;
    // Another org's list or campaign is not found, as it is everywhere.
    if segment::foreign_reference(&mut conn, me.org(), &g)
        .await?
        .is_some()
    {
        return Err(AppError::NotFound);
    }
    let clock = segment::clock(&mut conn, me.org(), None).await?;
    let count = segment::count(&mut conn, me.org(), &g, &clock).await?;
    let sample = segment::members(&mut conn, me.org(), &g, &clock, 0, SAMPLE_SIZE)
        .await?
        .rows
        .into_iter()
        .map(|m| (m.id, m.email, m.name))
        .collect();
    Ok(SegmentPreview { count, sample })
}

/// Saves the builder's segment (`id` 0: a new one) over the version it loaded; the browser
/// goes on to the saved segment's page.
#[server(endpoint = "save_segment")]
pub async fn save_segment(
    id: i64,
    #[server(default)] version: i32,
    name: String,
    definition: String,
) -> Result<i64, AppError> {
    use crate::db::audit;
    use crate::db::segment::StoreError;
    use crate::segments::SaveError;
    let (me, pool) = super::signed_in_to_act().await?;
    let g = parse(&definition)?;
    let mut tx = pool.begin().await?;
    let existing = (id != 0).then_some(id);
    let expected = existing.map(|_| version);
    let (id, version) = crate::segments::save(&mut tx, me.org(), existing, expected, &name, &g)
        .await
        .map_err(|e| match e {
            SaveError::Name(why) => AppError::Invalid(why),
            SaveError::Tree(t) => AppError::Invalid(format!("{t}.")),
            // Another org's list or campaign is not found, as it is everywhere.
            SaveError::Unknown(_) => AppError::NotFound,
            SaveError::Store(StoreError::NotFound) => AppError::NotFound,
            SaveError::Store(StoreError::Taken) => {
                AppError::Conflict("Another segment has this name: choose another.".into())
            }
            SaveError::Store(StoreError::Moved(v)) => AppError::Conflict(format!(
                "Someone saved this segment after you opened it (version {v} now): reload to see their changes."
            )),
            SaveError::Store(StoreError::Db(e)) => e.into(),
        })?;
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "name": name.trim(), "version": version })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::SegmentSave,
                "segment",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect(&format!("/audience/segments/{id}"));
    Ok(id)
}

#[server(endpoint = "delete_segment")]
pub async fn delete_segment(id: i64) -> Result<String, AppError> {
    use crate::db::audit;
    use crate::db::segment::{self, DeleteError};
    let (me, pool) = super::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    match segment::delete(&mut tx, me.org(), id).await {
        Ok(()) => {}
        Err(DeleteError::NotFound) => return Err(AppError::NotFound),
        Err(DeleteError::InUse(names)) => {
            return Err(AppError::Conflict(format!(
                "Campaigns still to be sent or live automations use this segment: {}.",
                names.join(", ")
            )))
        }
        Err(DeleteError::Db(e)) => return Err(e.into()),
    }
    audit::record(
        &mut tx,
        audit::Entry::by(
            &me,
            crate::domain::AuditAction::SegmentDelete,
            "segment",
            Some(id.to_string()),
        ),
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect("/audience/segments");
    Ok("Deleted.".into())
}

#[cfg(feature = "ssr")]
fn parse(definition: &str) -> Result<Group, AppError> {
    crate::domain::input::text_input("Definition", definition, 200_000)?;
    serde_json::from_str(definition)
        .map_err(|e| AppError::Invalid(format!("The definition is not a segment: {e}.")))
}
