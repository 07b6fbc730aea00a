//! What the integration tests share, kept apart from the tests themselves: no test module
//! imports another.

/// Canary secrets every configured secret is, and the run's log directory.
pub mod canary;
/// Fixtures several test modules share (audiences, approvals, worker configurations).
pub mod fixtures;
/// The test run's PostgreSQL cluster, a fresh database per test, and seeding helpers.
pub mod helpers;
/// The real `mailroom` binary as a child process.
pub mod procs;
/// The real router on a real socket, and a browser-like client.
pub mod test_app;
