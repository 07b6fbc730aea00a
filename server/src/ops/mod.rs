//! Running the process: the database it opens, backup and restore, demo data, logs, the
//! shutdown signal and secrets that never print.

/// `backup` and `restore` of the embedded database (pg_dump custom format).
pub mod backup;
/// Opening the database: `DATABASE_URL`, or the embedded cluster; migrations.
pub mod database;
/// Demo organisations for a first look.
pub mod demo;
/// A configured secret whose `Debug` never shows it.
pub mod secret;
/// SIGTERM / Ctrl-C → one shutdown signal for every task.
pub mod shutdown;
/// Logs.
pub mod telemetry;
