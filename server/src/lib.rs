//! The `mailroom` process: CLI, configuration, telemetry, the embedded PostgreSQL supervisor,
//! the HTTP server and the worker host. Application logic and SQL live in the `app` crate.
// The dashboard's view types are computed here too (the router renders them), and its nested
// views are deeper than rustc's default query depth of 128.
#![recursion_limit = "256"]

/// Only errors this server signed show on a page after a plain form post.
pub mod action_errors;
/// CSV import into a list (streamed, in the background) and export.
pub mod audience_io;
/// `backup` and `restore` of the embedded database (pg_dump custom format).
pub mod backup;
/// The bounce mailbox polled over IMAP, for operators who cannot take inbound SMTP.
pub mod bounce_imap;
/// The bounce mailbox: an SMTP listener for mailed DSNs and ARF complaints.
pub mod bounce_intake;
/// What the listener and the poller share: which addresses are ours, recording a report.
pub mod bounce_mail;
/// The campaign worker: start, materialise, hand off, sweep, finish.
pub mod campaign;
/// Command-line flags and `MAILROOM_*` variables.
pub mod cli;
/// The client's address and scheme, from the peer or a trusted reverse proxy.
pub mod client_addr;
/// `serve`, `worker`, `migrate`, `demo`, `user add`, … (dispatch).
pub mod commands;
/// Opening the database: `DATABASE_URL`, or the embedded cluster; migrations.
pub mod database;
/// The delivery worker: claim, render, send stage by stage, record fenced.
pub mod delivery;
/// Demo organisations for a first look.
pub mod demo;
/// The digest ticker (every replica).
pub mod digest;
/// A private PostgreSQL cluster under the data directory.
pub mod embedded_pg;
/// Relay webhooks (bounces, complaints): verified, recorded once, answered after commit.
pub mod hooks;
/// The axum router: dashboard, server functions, health, CSRF guard.
pub mod http;
/// Leader election and the singleton jobs (reaper, retention), fenced by epoch.
pub mod leader;
/// Accepting connections: a request-head timeout and a cap per client address.
pub mod listen;
/// Prometheus `/metrics`.
pub mod metrics;
/// The plain routes' signed-in user and plain-text refusals.
pub mod plain;
/// Debounced progress notifications (NOTIFY after commit).
pub mod progress;
/// Live campaign progress for browsers: one LISTEN per replica fanned out as server-sent events.
pub mod progress_stream;
/// The REST API at /api/v1: token auth, scopes, rate limits, problem documents, OpenAPI.
pub mod rest;
/// A configured secret whose `Debug` never shows it.
pub mod secret;
/// Content-Security-Policy (with the page's nonce) and the other security headers.
pub mod security_headers;
/// SIGTERM / Ctrl-C → one shutdown signal for every task.
pub mod shutdown;
/// Public sign-up with double opt-in: the list's page, embedded forms, the confirm link.
pub mod signup;
/// The dashboard's built files inside the release executable.
pub mod site_assets;
/// One SMTP conversation driven stage by stage, each outcome classified exactly.
pub mod smtp;
/// What every request handler may use (the database, the site, the progress fan-out, the edge).
pub mod state;
/// Logs.
pub mod telemetry;
/// Public one-click unsubscribe (RFC 8058) and its signing keys.
pub mod unsubscribe;
/// The worker host: heartbeat, leader jobs, digest ticker, campaign and delivery workers.
pub mod worker;
