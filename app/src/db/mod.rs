//! Every SQL statement of Mailroom lives below this module (server only). Functions take an
//! executor or a pool and the caller's org id where rows are org-owned: nothing here can read
//! another organisation's rows by accident.

pub mod audience;
pub mod audit;
pub mod audit_log;
mod campaign_audience;
pub mod campaign_bin;
pub mod campaign_edit;
pub mod campaign_progress;
pub mod campaign_states;
pub mod campaigns;
pub mod cluster;
pub mod deliveries;
pub mod delivery_admin;
pub mod demo;
pub mod digest_admin;
pub mod digest_figures;
pub mod digests;
pub mod health;
pub mod heartbeat;
pub mod imports;
pub mod leader;
pub mod lists;
pub mod login_throttle;
pub mod metrics;
pub mod migrate;
pub mod orgs;
pub mod overview;
pub mod password_tokens;
pub mod progress_slots;
pub mod rate_limit;
pub mod secrets;
pub mod sends;
pub mod sessions;
pub mod settings;
pub mod subscribers;
pub mod suppression_admin;
pub mod user_admin;
pub mod users;

pub use sqlx::PgPool;

/// One page of a keyset-paginated list, and where the next page starts.
pub struct Page<R, C> {
    pub rows: Vec<R>,
    /// Set when there are more rows: the keyset to continue from.
    pub next: Option<C>,
}

impl<R, C> Page<R, C> {
    /// From a query that asked for `size + 1` rows: the extra row only tells that a next page
    /// exists, which then starts after the last row kept.
    pub fn of(mut rows: Vec<R>, size: i64, cursor: impl FnOnce(&R) -> C) -> Self {
        let size = usize::try_from(size).unwrap_or(0);
        let next = if rows.len() > size {
            rows.truncate(size);
            rows.last().map(cursor)
        } else {
            None
        };
        Page { rows, next }
    }
}
