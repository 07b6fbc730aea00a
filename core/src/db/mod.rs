//! Every SQL statement of Mailroom lives below this module (server only). Functions take an
//! executor or a pool and the caller's org id where rows are org-owned: nothing here can read
//! another organisation's rows by accident.

/// API tokens: created (hash only), listed, revoked, and the lookup behind every API request.
pub mod api_tokens;
/// Subscribers, lists and memberships, and the one place suppressions are written.
pub mod audience;
/// The audit log: writing an entry in the action's transaction, reading it.
pub mod audit;
/// Automations: versions and approval, enrolments by every trigger, and the step runner.
pub mod automation;
/// Campaigns: drafts, states, recipients, progress, the bin.
pub mod campaign;
/// Clicks on tracked links, per link, forgotten with the subscriber.
pub mod clicks;
/// Database-level statements (create, drop, swap databases) for the cluster and restores.
pub mod cluster;
/// The delivery queue: the worker's ledger statements and the admin view.
pub mod delivery;
/// Demo deliveries already in a final state, as if the delivery worker had sent them.
pub mod demo;
/// The weekly digest: claims, contents, the admin page, figures.
pub mod digest;
/// The SaaS's events about its people, stored once per event id.
pub mod events;
/// Whether the database answers a query (`/readyz`).
pub mod health;
/// Each worker host's heartbeat row, timed by the database clock.
pub mod heartbeat;
/// The IMAP bounce poller's cursor per mailbox (UIDVALIDITY and last recorded UID).
pub mod imap_cursor;
/// CSV imports: the progress row (outside the import's transaction) and the batch insert.
pub mod imports;
/// Leader leases per role, timed by the database clock and fenced by epoch.
pub mod leader;
/// An org's lists with member counts: create, rename, delete.
pub mod lists;
/// Login throttle counters, locked and counted before a password is checked.
pub mod login_throttle;
/// What `/metrics` reads from the database, at a cost independent of the queue's size.
pub mod metrics;
/// The embedded migrations, applied strictly or tolerating newer ones (rolling upgrades).
pub mod migrate;
/// Account notices to an org's owners, queued with the change they report.
pub mod notices;
/// Creating organisations (the first with its owner), time zone checks, lookups.
pub mod orgs;
/// The Overview page's figures of one organisation, in one round trip.
pub mod overview;
/// Set-password links: issued, redeemed once; only the token's hash is stored.
pub mod password_tokens;
/// The per-SMTP-server token bucket shared by every replica, refilled by database time.
pub mod rate_limit;
/// What the relays' circuit breakers publish, and the campaigns they pause and resume.
pub mod relay_health;
/// What relays report later (bounces, complaints): the event ledger, its effects, endpoints.
pub mod reports;
/// Generated secrets shared by every replica: created once, then read by all.
pub mod secrets;
/// Segments: the tree compiled to one parameterised predicate, counts and members.
pub mod segment;
/// Server-side sessions, stored by the hash of their token.
pub mod sessions;
/// The org's sender identity, envelope sender and DKIM key.
pub mod settings;
/// Public sign-up with double opt-in: sign-ups, confirmations, spent proof-of-work challenges.
pub mod signup;
/// Subscribers as the REST API sees them: upserts by address (bulk too), pages, membership.
pub mod subscriber_api;
/// An org's subscribers as the Audience pages see them, and the admin's changes.
pub mod subscribers;
/// The suppression list as admins manage it: search, add, remove.
pub mod suppression_admin;
/// Transactional mail: versioned templates and the messages API requests queue.
pub mod transactional;
/// Users: sign-in records, creation, the owner's administration.
pub mod user;
/// Events out: webhook endpoints, the events queued for them, claims and attempts.
pub mod webhooks_out;

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

/// What one item's scan came to, for a pass over many (automations' triggers, watched
/// segments): the database refusing it (an operator's data it cannot read, say) is logged and
/// the pass goes on to the others, which it must not stop; losing the database ends the pass.
pub(crate) fn one_of_many(what: &str, id: i64, r: sqlx::Result<u64>) -> sqlx::Result<u64> {
    match r {
        Err(sqlx::Error::Database(e)) => {
            tracing::error!(what, id, error = %e, "a scan failed; the pass goes on");
            Ok(0)
        }
        r => r,
    }
}
