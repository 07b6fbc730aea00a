//! What Mailroom's integration suite and its soak share. Benches that compare throughput keep
//! Postfix's `smtp-sink` as their receiver (the peer `smtp-source` is measured against), so
//! every figure in `docs/performance.md` has the same far end.

/// Bounce reports (DSN, ARF) and an SMTP client that mails them.
pub mod reports;
/// One SMTP server for every test: plain, STARTTLS or implicit TLS, optional AUTH, scripted
/// refusals, a record of what it accepted.
pub mod smtp_sink;

pub use reports::ReportClient;
pub use smtp_sink::{Received, Record, SinkOptions, SmtpSink, Tls};
