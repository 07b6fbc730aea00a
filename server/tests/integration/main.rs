//! Integration tests against real parts: one throwaway PostgreSQL cluster per test run, a fresh
//! database per test copied from a migrated template, the real HTTP router on a real socket, and
//! the real `mailroom` binary for process-level behaviour (signals, embedded cluster, bad input).

/// What the tests share: the database, the router, the binary, SMTP servers, fixtures.
mod support;

/// Subscribers and lists: adding, importing, signing up, unsubscribing, erasing.
mod audiences;
/// Automations: lifecycle mail in steps, each taken once per person.
mod automations;
/// Campaigns from draft to sent: the workflow, its pages, test sends, starting and progress.
mod campaign;
/// The dashboard's HTTP edge: sign-in, first run, settings, limits, headers, tenancy, odd input.
mod dashboard;
/// The delivery queue and its worker: claims, leases, marks, the rate limit, the relay's breaker, SMTP.
mod delivery;
/// The weekly digest: the tick, forced resends, its pages, processes racing.
mod digest;
/// Bounce reports coming back: relay webhooks, the bounce listener, the mailbox, attribution.
mod feedback;
/// Operating the binary: the embedded cluster, backups, migrations, the CLI, metrics, logs.
mod ops;
/// The REST API: its routes, errors, transactional mail, subscribers and its published schema.
mod rest;
/// Segments: saved filters over subscribers, their events and engagement, as campaign targets.
mod segments;
/// Events out: signed webhooks, retried through a misbehaving receiver, verified independently.
mod webhooks;
