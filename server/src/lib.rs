//! The `mailroom` process: CLI, configuration, telemetry, the embedded PostgreSQL supervisor,
//! the HTTP server and the worker host. Application logic and SQL live in the `app` crate.
// The dashboard's view types are computed here too (the router renders them), and its nested
// views are deeper than rustc's default query depth of 128.
#![recursion_limit = "256"]

/// Command-line flags and `MAILROOM_*` variables.
pub mod cli;
/// `serve`, `worker`, `migrate`, `demo`, `user add`, … (dispatch).
pub mod commands;
/// A private PostgreSQL cluster under the data directory.
pub mod embedded_pg;
/// Bounce reports coming back: relay webhooks, the SMTP listener, the IMAP mailbox, and what
/// they share (whose report it is, recording it once).
pub mod feedback;
/// The HTTP edge: the router and its state, accepting connections, security headers, the
/// dashboard's plain routes and files, live progress, metrics, and the public pages (sign-up,
/// unsubscribe).
pub mod http;
/// Running the process: the database it opens, backup and restore, demo data, logs, shutdown,
/// secrets.
pub mod ops;
/// The REST API at /api/v1: token auth, scopes, rate limits, problem documents, OpenAPI.
pub mod rest;
/// One SMTP conversation driven stage by stage, each outcome classified exactly.
pub mod smtp;
/// The workers every replica hosts: the host itself, leader jobs, the digest ticker, the
/// campaign worker, progress notifications and the delivery engine.
pub mod workers;
