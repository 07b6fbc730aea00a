//! Feedback: what relays and remote mail systems report after the SMTP conversation (bounces,
//! complaints, unsubscribes), by webhook or by mail. The parsers and the event ledger are the
//! `app` crate's (`app::bounce`, `app::db::reports`); this is how reports get in.

/// What the listener and the mailbox share: which addresses are ours, recording a report.
pub mod attribution;
/// The SMTP listener (`--bounce-listen`) for mailed DSNs and ARF complaints.
pub mod listener;
/// The bounce mailbox polled over IMAP, for operators who cannot take inbound SMTP.
pub mod mailbox;
/// Relay webhooks: verified, recorded once, answered after commit.
pub mod webhooks;
