//! Saving a segment, one use case for the dashboard and the API: its name and tree checked by
//! the domain's rules, every list and campaign it names checked to be the organisation's (an
//! id of another organisation names nothing here, so it is refused as unknown, never matched
//! against), then stored as a new version when its definition changed.

use sqlx::PgConnection;

use crate::db::segment::{self as store, StoreError};
use crate::domain::segment::{segment_name, Group};
use crate::domain::OrgId;

/// Why a segment was not saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("name: {0}")]
    Name(String),
    /// A node of the tree is wrong: its path and why.
    #[error("{0}")]
    Tree(crate::domain::segment::TreeError),
    /// A node names a list or campaign that is not the organisation's: its path.
    #[error("{0}: no such list or campaign in this organisation")]
    Unknown(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for SaveError {
    fn from(e: sqlx::Error) -> Self {
        SaveError::Store(StoreError::Db(e))
    }
}

/// Checks the name and the tree against the org; the name as it is stored.
pub async fn check(
    conn: &mut PgConnection,
    org: OrgId,
    name: &str,
    definition: &Group,
) -> Result<String, SaveError> {
    let name = segment_name(name).map_err(SaveError::Name)?;
    definition.check().map_err(SaveError::Tree)?;
    if let Some(path) = store::foreign_reference(conn, org, definition).await? {
        return Err(SaveError::Unknown(path));
    }
    Ok(name)
}

/// Saves a new segment or a change of `id` (over version `expected`, when given); returns
/// (id, version).
pub async fn save(
    conn: &mut PgConnection,
    org: OrgId,
    id: Option<i64>,
    expected: Option<i32>,
    name: &str,
    definition: &Group,
) -> Result<(i64, i32), SaveError> {
    let name = check(conn, org, name, definition).await?;
    match id {
        None => Ok((store::create(conn, org, &name, definition).await?, 1)),
        Some(id) => Ok((
            id,
            store::update(conn, org, id, &name, definition, expected).await?,
        )),
    }
}
