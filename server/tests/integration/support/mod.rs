//! What the integration tests share, kept apart from the tests themselves: no test module
//! imports another.

/// Bounce domains, delivered campaigns to bounce, and tallies of recorded events.
pub mod bounces;
/// Canary secrets every configured secret is, and the run's log directory.
pub mod canary;
/// A real IMAP server (Dovecot) started for a test, and a client to fill its mailbox.
pub mod dovecot;
/// Fixtures several test modules share (audiences, approvals, worker configurations).
pub mod fixtures;
/// A TCP proxy that freezes: a partition between a process and its database.
pub mod freezer;
/// The test run's PostgreSQL cluster, a fresh database per test, and seeding helpers.
pub mod helpers;
/// `TestOrg`: an organisation with its users by role, and builders for its campaigns.
pub mod org;
/// PostgreSQL servers of a test's own: a primary and standbys, for failovers.
pub mod pg_servers;
/// pgbouncer in front of one of those, in session or transaction mode.
pub mod pgbouncer;
/// The real `mailroom` binary as a child process.
pub mod procs;
/// The REST API as a client calls it: tokens and requests.
pub mod rest;
/// The real router on a real socket, and a browser-like client.
pub mod test_app;
