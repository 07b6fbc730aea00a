//! What the dashboard shows, one type each: `db` reads these rows and `api` hands them to the
//! pages unchanged. Wasm-safe (the browser decodes them); on the server they read straight from
//! a query (`FromRow`), so there is no second, mirrored struct to keep in step.

/// The Overview page's figures.
pub mod overview;

/// A recipient a campaign did not reach for sure, as the campaign page lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Problem {
    pub job_id: String,
    pub recipient: String,
    /// `failed` (with the server's reply) or `unknown` (the connection broke after the body
    /// started).
    pub status: crate::domain::DeliveryStatus,
    pub reason: String,
}

use serde::{Deserialize, Serialize};

use crate::domain::Role;

/// The signed-in user, as every server function and page sees them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct CurrentUser {
    pub user_id: i64,
    pub org_id: i64,
    pub name: String,
    pub email: String,
    pub role: Role,
    pub org_name: String,
}
