//! Reports mailed to the bounce domain: delivery status notifications (RFC 3464, and RFC 6533's
//! `message/global-delivery-status`), feedback-loop complaints (ARF, RFC 5965), and the common
//! bounces that carry no machine-readable part. MIME and header fields are `mail-parser`'s,
//! ARF fields `mail-auth`'s; what is ours is the few rules below. Pure, and never panics.
//!
//! The rules, in order:
//! 1. A `message/feedback-report` part makes an ARF report: `abuse`, `fraud`, `virus` and
//!    `other` are complaints; `not-spam` and `auth-failure` are nothing. The recipient is
//!    `Original-Rcpt-To` (else the returned message's `To`); the envelope sender that proves it
//!    is `Original-Mail-From` (else the returned message's `Return-Path`).
//! 2. A delivery-status part makes one event per recipient group whose `Action` is `failed`:
//!    a 5.x.x status is a hard bounce, except 5.2.2 (mailbox full) and 5.7.x (blocked by
//!    policy), which are soft, as is any 4.x.x the MTA gave up on. `delayed`, `delivered`,
//!    `relayed` and `expanded` are nothing.
//! 3. Anything else counts only when it comes from a mail system (`From` is `MAILER-DAEMON` or
//!    `postmaster`): a vacation notice or any other reply from a person is nothing. A delay
//!    warning ("not yet been delivered", "will continue") is nothing. What is left is a
//!    non-standard bounce (qmail, old Exim): the first enhanced status code in its text, else the
//!    first 5xx/4xx reply code, classified as in rule 2; its recipient is the first address in
//!    the text not at the bounce domain. No code at all: nothing.
//!
//! A report's event id is its own Message-ID (else a hash of its bytes) and the recipient: the
//! same report delivered twice is one event.

use std::borrow::Cow;

use mail_parser::{Message, MessageParser, MimeHeaders, PartType};
use sha2::{Digest, Sha256};

use crate::domain::{EmailAddress, EventKind, EventSource, FeedbackReport, MAX_DIAGNOSTIC};

/// The largest report parsed; a bigger one is refused before DATA ends.
pub const MAX_REPORT_BYTES: usize = 10 * 1024 * 1024;

/// Recipient groups read from one DSN (a report about more is cut there).
const MAX_GROUPS: usize = 100;

/// What a mailed report says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailed {
    pub source: EventSource,
    /// Empty when the report is nothing to act on (a delay, a vacation notice, not-spam).
    pub events: Vec<FeedbackReport>,
}

/// Reads one report mailed to `rcpt` (the address it came to: our VERP address for a DSN).
/// `None` when the bytes are no message at all.
pub fn parse(raw: &[u8], rcpt: &str) -> Option<Mailed> {
    let msg = MessageParser::default().parse(raw)?;
    let report_id = match msg.message_id().filter(|m| !m.is_empty() && m.len() <= 200) {
        Some(m) => m.to_owned(),
        None => {
            let h = Sha256::digest(raw);
            format!(
                "sha256:{}",
                h[..16]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )
        }
    };
    let bounce_domain = rcpt.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase());
    let ctx = Ctx {
        report_id: &report_id,
        rcpt,
        bounce_domain: bounce_domain.as_deref(),
    };
    if msg
        .parts
        .iter()
        .any(|p| p.is_content_type("message", "feedback-report"))
    {
        return Some(Mailed {
            source: EventSource::Arf,
            events: arf(&msg, &ctx).into_iter().collect(),
        });
    }
    Some(Mailed {
        source: EventSource::Dsn,
        events: dsn(&msg, &ctx),
    })
}

/// Header fields in which the delivering MTA names the envelope recipient, most specific first
/// (Postfix and Dovecot `Delivered-To` and `X-Original-To`, Exim `Envelope-To`).
const ENVELOPE_TO: [&str; 5] = [
    "Delivered-To",
    "X-Original-To",
    "Envelope-To",
    "X-Envelope-To",
    "X-Delivered-To",
];

/// The addresses a message read from a mailbox (not received over SMTP, so without its RCPT
/// TO) was delivered to: the envelope-recipient fields, then `To` and `Cc`, in that order,
/// without repeats. The caller takes the first one it can verify.
pub fn delivered_to(raw: &[u8]) -> Vec<String> {
    let Some(msg) = MessageParser::default().parse_headers(raw) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    let mut add = |a: &str| {
        let a = a
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        if a.contains('@') && a.len() <= 320 && !out.iter().any(|o| o.eq_ignore_ascii_case(a)) {
            out.push(a.to_owned());
        }
    };
    for name in ENVELOPE_TO {
        for (n, v) in msg.headers_raw() {
            if n.eq_ignore_ascii_case(name) {
                v.split(',').for_each(&mut add);
            }
        }
    }
    for list in [msg.to(), msg.cc()].into_iter().flatten() {
        for a in list.iter() {
            if let Some(addr) = a.address() {
                add(addr);
            }
        }
    }
    out
}

struct Ctx<'a> {
    report_id: &'a str,
    rcpt: &'a str,
    bounce_domain: Option<&'a str>,
}

impl Ctx<'_> {
    fn event(
        &self,
        kind: EventKind,
        recipient: Option<EmailAddress>,
        envelope_from: Option<&str>,
        message_id: Option<&str>,
        status: Option<&str>,
        diagnostic: Option<&str>,
    ) -> FeedbackReport {
        let who = recipient.as_ref().map_or("-", |r| r.lower());
        FeedbackReport {
            id: cut(&format!("{}:{who}", self.report_id), 300),
            kind,
            recipient,
            message_id: FeedbackReport::field(message_id, 998),
            relay_id: None,
            envelope_from: FeedbackReport::field(envelope_from, 320),
            status: FeedbackReport::field(status, 32),
            diagnostic: FeedbackReport::field(diagnostic, MAX_DIAGNOSTIC),
            occurred_at: None,
        }
    }

    fn foreign_address(&self, a: &str) -> Option<EmailAddress> {
        let e = EmailAddress::parse(a).ok()?;
        let at_bounce = e
            .as_str()
            .rsplit_once('@')
            .map(|(_, d)| Some(d.to_ascii_lowercase().as_str()) == self.bounce_domain);
        (at_bounce != Some(true)).then_some(e)
    }
}

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

fn address(value: &str) -> Option<EmailAddress> {
    // `rfc822; jane@example.com`, `<jane@example.com>`, or bare.
    let v = value.rsplit_once(';').map_or(value, |(_, a)| a);
    EmailAddress::parse(v.trim().trim_start_matches('<').trim_end_matches('>')).ok()
}

/// The returned message (`message/rfc822`, or its headers as `text/rfc822-headers`), parsed
/// for its headers.
fn returned<'m>(msg: &'m Message<'_>) -> Option<Message<'m>> {
    msg.parts.iter().skip(1).find_map(|part| {
        let returned = matches!(part.body, PartType::Message(_))
            || part.is_content_type("message", "rfc822")
            || part.is_content_type("text", "rfc822-headers");
        // A nested message's contents are its own raw bytes.
        returned
            .then(|| MessageParser::default().parse_headers(part.contents()))
            .flatten()
    })
}

/// Rule 1.
fn arf(msg: &Message<'_>, ctx: &Ctx<'_>) -> Option<FeedbackReport> {
    let part = msg
        .parts
        .iter()
        .find(|p| p.is_content_type("message", "feedback-report"))?;
    let text = String::from_utf8_lossy(part.contents()).replace("\r\n", "\n");
    let f = fields(&text);
    let get = |name: &str| f.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let kind = get("feedback-type")?.to_ascii_lowercase();
    if !matches!(kind.as_str(), "abuse" | "fraud" | "virus" | "other") {
        return None;
    }
    let returned = returned(msg);
    let recipient = get("original-rcpt-to").and_then(address).or_else(|| {
        returned
            .as_ref()
            .and_then(|m| m.to()?.first()?.address().and_then(address))
    });
    let envelope_from = get("original-mail-from").map(str::to_owned).or_else(|| {
        returned
            .as_ref()
            .and_then(|m| m.header_raw("Return-Path").map(|r| r.trim().to_owned()))
    });
    let message_id = returned
        .as_ref()
        .and_then(|m| m.message_id().map(|id| format!("<{id}>")));
    Some(ctx.event(
        EventKind::Complaint,
        recipient,
        envelope_from.as_deref(),
        message_id.as_deref(),
        None,
        Some(&format!("feedback-type: {kind}")),
    ))
}

/// The hard/soft rule of a failed delivery's status.
fn classify(status: &str) -> Option<EventKind> {
    let mut parts = status.trim().split('.');
    let class = parts.next()?;
    let subject = parts.next()?;
    let detail = parts.next()?;
    if parts.next().is_some()
        || ![subject, detail]
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    match (class, subject, detail) {
        ("5", "2", "2") | ("5", "7", _) => Some(EventKind::SoftBounce),
        ("5", _, _) => Some(EventKind::HardBounce),
        ("4", _, _) => Some(EventKind::SoftBounce),
        _ => None,
    }
}

/// `name: value` fields of one group, unfolded, names lowercased.
fn fields(group: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in group.lines() {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((n, v)) = line.split_once(':') {
            out.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    out
}

/// Rules 2 and 3.
fn dsn(msg: &Message<'_>, ctx: &Ctx<'_>) -> Vec<FeedbackReport> {
    // The way to our job when no token says it.
    let message_id = returned(msg).and_then(|m| m.message_id().map(|id| format!("<{id}>")));
    let status_part = msg.parts.iter().find(|p| {
        p.is_content_type("message", "delivery-status")
            || p.is_content_type("message", "global-delivery-status")
    });
    if let Some(part) = status_part {
        let text = String::from_utf8_lossy(part.contents()).replace("\r\n", "\n");
        let mut events = Vec::new();
        // The first group is about the message; each further one is about one recipient.
        for group in text.split("\n\n").skip(1).take(MAX_GROUPS) {
            let f = fields(group);
            let get = |name: &str| f.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            if !get("action").is_some_and(|a| a.eq_ignore_ascii_case("failed")) {
                continue;
            }
            let Some(status) = get("status") else {
                continue;
            };
            let status = status.split_whitespace().next().unwrap_or(status);
            let Some(kind) = classify(status) else {
                continue;
            };
            let recipient = get("final-recipient")
                .and_then(address)
                .or_else(|| get("original-recipient").and_then(address));
            let diagnostic =
                get("diagnostic-code").map(|d| d.split_once(';').map_or(d, |(_, t)| t));
            events.push(ctx.event(
                kind,
                recipient,
                Some(ctx.rcpt),
                message_id.as_deref(),
                Some(status),
                diagnostic,
            ));
        }
        return events;
    }
    non_standard(msg, ctx, message_id.as_deref())
        .into_iter()
        .collect()
}

/// Rule 3.
fn non_standard(
    msg: &Message<'_>,
    ctx: &Ctx<'_>,
    message_id: Option<&str>,
) -> Option<FeedbackReport> {
    let from = msg.from()?.first()?.address()?.to_ascii_lowercase();
    let local = from.split('@').next().unwrap_or_default();
    if local != "mailer-daemon" && local != "postmaster" {
        return None;
    }
    let text: Cow<'_, str> = msg.body_text(0)?;
    let lower = text.to_ascii_lowercase();
    if lower.contains("not yet been delivered") || lower.contains("will continue") {
        return None;
    }
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '#' | ',' | ';'))
        .filter(|w| !w.is_empty())
        .collect();
    let enhanced = words.iter().find_map(|w| {
        let w = w.trim_end_matches(['.', ':']);
        classify(w).map(|k| (k, w.to_owned()))
    });
    let basic = || {
        words.iter().find_map(|w| {
            let w = w.trim_end_matches(['-', ':']);
            let ok = w.len() == 3 && w.bytes().all(|b| b.is_ascii_digit());
            match w.as_bytes().first() {
                Some(b'5') if ok => Some((EventKind::HardBounce, "5.0.0".to_owned())),
                Some(b'4') if ok => Some((EventKind::SoftBounce, "4.0.0".to_owned())),
                _ => None,
            }
        })
    };
    let (kind, status) = enhanced.or_else(basic)?;
    let recipient = words.iter().find_map(|w| {
        let w = w.trim_matches(|c: char| matches!(c, '<' | '>' | ':' | '"' | '\'' | '.'));
        w.contains('@').then(|| ctx.foreign_address(w)).flatten()
    });
    let diagnostic = text
        .lines()
        .find(|l| l.contains(&status) || l.trim_start().starts_with(['4', '5']))
        .map(str::trim);
    Some(ctx.event(
        kind,
        recipient,
        Some(ctx.rcpt),
        message_id,
        Some(&status),
        diagnostic,
    ))
}

#[cfg(test)]
mod tests;
