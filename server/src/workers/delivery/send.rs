//! Sending one claimed delivery and classifying its outcome exactly (guarantees 9–10): anything
//! before the body is "not delivered" (retry or fail); once the body-start mark is committed, a
//! lost reply is `unknown`.

use std::path::Path;
use std::time::Duration;

use app::db::delivery::{Claimed, Outcome};

use app::domain::relay::{RelayFailure, Signal};

use super::breaker::Breaker;
use super::ledger::Ledger;
use super::render::{render, Inputs, Rendered};
use super::{Config, Transport};
use crate::smtp::{BodyOutcome, Connection, Needs, Refusal};
use app::domain::Failure;

/// When a message's "body started" mark is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Just before the body, once the server has opened DATA (exact).
    AtBody,
    /// Already committed, asked for as the message entered its connection's window
    /// (`Config::marks_ahead`).
    Ahead,
}

/// Sends one message over `conn` (opened or re-opened as needed) or into the capture directory;
/// says what the attempt showed of the relay's health. While the relay's circuit is open the
/// message is not sent but given back to the queue.
#[tracing::instrument(name = "send", skip_all, fields(job_id = %c.job, kind = %c.kind(), attempt = c.attempt))]
pub async fn send_one(
    cfg: &Config,
    marks: &Ledger,
    breaker: &Breaker,
    cx: &Inputs<'_>,
    c: &Claimed,
    conn: &mut Option<Connection>,
    mark: Mark,
) -> (Outcome, Signal) {
    let rendered = match render(cx, c) {
        Ok(r) => r,
        // Nothing a later attempt would change (a bad address, no content): final, with why.
        Err(e) => {
            let failed = Outcome::Failed {
                failure: Failure::Unsendable,
                reply: format!("cannot render: {e:#}"),
            };
            return (failed, Signal::None);
        }
    };
    match &cfg.transport {
        Transport::Capture(dir) => (
            capture(cfg, marks, dir, c, &rendered, mark).await,
            Signal::None,
        ),
        // Given back without counting against the message's attempts: the relay was not asked.
        Transport::Smtp(_) if breaker.is_open() => {
            *conn = None;
            let error = "not sent: the relay kept failing, sending to it is paused until it answers a probe";
            let after_seconds = cfg.breaker.first_pause.as_secs_f64();
            let outcome = Outcome::Retry {
                error: error.into(),
                after_seconds,
            };
            (outcome, Signal::None)
        }
        Transport::Smtp(target) => {
            let reusable = match conn.as_mut() {
                Some(open) => open.ready().await,
                None => false,
            };
            if !reusable {
                match Connection::open(target).await {
                    Ok(opened) => *conn = Some(opened),
                    Err(refusal) => return refused_by(cfg, c.attempt, refusal),
                }
            }
            let Some(smtp) = conn.as_mut() else {
                return (
                    retry_or_fail(cfg, c.attempt, "no connection".into()),
                    Signal::None,
                );
            };
            let started = std::time::Instant::now();
            let needs = Needs::of(&rendered.envelope_from, &rendered.to, &rendered.bytes);
            if let Err(refusal) = smtp
                .prepare(&rendered.envelope_from, &rendered.to, needs)
                .await
            {
                return refused_by(cfg, c.attempt, refusal);
            }
            let prepared = started.elapsed();
            if let Err(outcome) = body_may_start(cfg, marks, c, mark).await {
                *conn = None; // abandon the open transaction
                return (outcome, Signal::Answered);
            }
            let marked = started.elapsed();
            let outcome = smtp.body(&rendered.bytes).await;
            tracing::debug!(
                prepare_us = prepared.as_micros() as u64,
                mark_us = (marked - prepared).as_micros() as u64,
                body_us = (started.elapsed() - marked).as_micros() as u64,
                "sent"
            );
            crate::http::metrics::SMTP_LATENCY.observe(started.elapsed().as_secs_f64());
            match outcome {
                BodyOutcome::Accepted(reply) => (Outcome::Delivered { reply }, Signal::Answered),
                BodyOutcome::Refused(refusal) => refused_by(cfg, c.attempt, refusal),
                BodyOutcome::Unknown(error) => {
                    *conn = None;
                    (
                        Outcome::Unknown { error },
                        Signal::Failed(RelayFailure::NoReplyAfterBody),
                    )
                }
            }
        }
    }
}

/// A refusal's outcome, and what it says of the relay: a reply means it works, a network
/// error or a timeout counts against it.
fn refused_by(cfg: &Config, attempt: i32, r: Refusal) -> (Outcome, Signal) {
    let signal = if r.answered {
        Signal::Answered
    } else {
        Signal::Failed(RelayFailure::Unreachable)
    };
    (refused(cfg, attempt, r), signal)
}

/// From here a crash must read as "may have been sent": the mark is committed before the body
/// goes out (now, or ahead with the connection's next messages). If it cannot be, the body is
/// not sent and the message is retried. Nor is it sent once the claim's lease may have run out
/// (a database that stopped answering, a mark's reply that came late): another process may
/// have taken the message back.
async fn body_may_start(
    cfg: &Config,
    marks: &Ledger,
    c: &Claimed,
    mark: Mark,
) -> Result<(), Outcome> {
    // Before the mark too: a mark on a lapsed claim not yet reaped would make the reaper
    // count an unsent message as `unknown`.
    lease_holds(cfg, c)?;
    if mark == Mark::AtBody {
        after_mark(cfg, c.attempt, marks.mark(&c.job_id(), c.attempt).await)?;
    }
    lease_holds(cfg, c)
}

/// The message is retried unless its claim's lease surely still holds.
fn lease_holds(cfg: &Config, c: &Claimed) -> Result<(), Outcome> {
    match cfg
        .held
        .lease_holds(c.claim_id, Duration::from_secs_f64(cfg.lease_seconds))
    {
        true => Ok(()),
        false => Err(retry_or_fail(
            cfg,
            c.attempt,
            "not sent: the claim's lease could not be renewed in time".into(),
        )),
    }
}

/// What a mark's answer means for its message: the body may go out, or this outcome instead.
/// Refused: its claim was lost, its campaign paused or its address suppressed meanwhile (the
/// mark statement has already settled which); not answered: retried.
pub fn after_mark(cfg: &Config, attempt: i32, answer: Result<bool, String>) -> Result<(), Outcome> {
    match answer {
        Ok(true) => Ok(()),
        Ok(false) => Err(retry_or_fail(
            cfg,
            attempt,
            "lease lost, campaign paused or address suppressed before the body".into(),
        )),
        Err(e) => Err(retry_or_fail(cfg, attempt, e)),
    }
}

/// The embedded default transport: the message is written as an `.eml` file under a temporary
/// name, then renamed, so a reader never sees half a message and a failed write is simply "not
/// delivered". The body-start mark is still taken first, so a crash mid-write reads as `unknown`
/// exactly as with SMTP.
async fn capture(
    cfg: &Config,
    marks: &Ledger,
    dir: &Path,
    c: &Claimed,
    r: &Rendered,
    mark: Mark,
) -> Outcome {
    if let Err(outcome) = body_may_start(cfg, marks, c, mark).await {
        return outcome;
    }
    let path = app::capture::path_for(dir, c.org.0, &c.job.to_string());
    let write = async {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        tokio::fs::write(&tmp, &r.bytes).await?;
        tokio::fs::rename(&tmp, &path).await
    };
    // The recorded reply is shown by the dashboard and the REST API: it names the file, never
    // the server's directory (the dashboard finds the file again from the org and the job id).
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match write.await {
        Ok(()) => Outcome::Delivered {
            reply: format!("captured as {file}"),
        },
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot capture a message");
            retry_or_fail(cfg, c.attempt, format!("cannot capture as {file}: {e}"))
        }
    }
}

pub fn refused(cfg: &Config, attempt: i32, r: Refusal) -> Outcome {
    match (r.permanent, r.hard_bounce) {
        (true, true) => Outcome::Failed {
            failure: Failure::HardBounce,
            reply: r.reply,
        },
        (true, false) => Outcome::Failed {
            failure: Failure::Refused,
            reply: r.reply,
        },
        (false, _) => retry_or_fail(cfg, attempt, r.reply),
    }
}

pub fn retry_or_fail(cfg: &Config, attempt: i32, error: String) -> Outcome {
    match cfg.backoff.delay(attempt, rand::random::<f64>()) {
        Some(after) => Outcome::Retry {
            error,
            after_seconds: after.as_secs_f64(),
        },
        None => Outcome::Failed {
            failure: Failure::GaveUp,
            reply: format!("gave up after {attempt} attempts: {error}"),
        },
    }
}
