use rand::{Rng, SeedableRng};

use super::*;

const RCPT: &str = "b+c42-1001.0123456789abcdef@bounce.example.com";

fn fixture(name: &str) -> &'static [u8] {
    match name {
        "rfc3464" => include_bytes!("fixtures/rfc3464.eml"),
        "postfix_base64" => include_bytes!("fixtures/postfix_base64.eml"),
        "qmail" => include_bytes!("fixtures/qmail.eml"),
        "exim" => include_bytes!("fixtures/exim.eml"),
        "exim_delay" => include_bytes!("fixtures/exim_delay.eml"),
        "vacation" => include_bytes!("fixtures/vacation.eml"),
        "arf_rfc5965" => include_bytes!("fixtures/arf_rfc5965.eml"),
        "arf_not_spam" => include_bytes!("fixtures/arf_not_spam.eml"),
        _ => unreachable!("no fixture {name}"),
    }
}

const ALL: [&str; 8] = [
    "rfc3464",
    "postfix_base64",
    "qmail",
    "exim",
    "exim_delay",
    "vacation",
    "arf_rfc5965",
    "arf_not_spam",
];

fn who(e: &FeedbackReport) -> Option<&str> {
    e.recipient.as_ref().map(|r| r.lower())
}

#[test]
fn the_rfc_3464_example_gives_one_event_per_failed_recipient() {
    let m = parse(fixture("rfc3464"), RCPT).unwrap();
    assert_eq!(m.source, EventSource::Dsn);
    assert_eq!(m.events.len(), 2, "the delayed recipient is nothing");
    let (hard, soft) = (&m.events[0], &m.events[1]);
    assert_eq!(hard.kind, EventKind::HardBounce);
    assert_eq!(who(hard), Some("louis@larry.slip.umd.edu"));
    assert_eq!(hard.status.as_deref(), Some("5.1.1"));
    assert_eq!(
        hard.diagnostic.as_deref(),
        Some("550 5.1.1 <louis@larry.slip.umd.edu>: Recipient address rejected: User unknown"),
        "unfolded, the type dropped"
    );
    assert_eq!(hard.envelope_from.as_deref(), Some(RCPT));
    assert_eq!(
        hard.message_id.as_deref(),
        Some("<campaign.42.1001@example.com>")
    );
    assert_eq!(
        hard.id,
        "199407072116.RAA14128@CS.UTK.EDU:louis@larry.slip.umd.edu"
    );
    assert_eq!(soft.kind, EventKind::SoftBounce);
    assert_eq!(soft.status.as_deref(), Some("4.0.0"));
    assert_ne!(hard.id, soft.id);
}

#[test]
fn a_postfix_dsn_with_a_base64_status_part_and_returned_headers() {
    let m = parse(fixture("postfix_base64"), RCPT).unwrap();
    assert_eq!(m.events.len(), 1);
    let e = &m.events[0];
    assert_eq!(e.kind, EventKind::SoftBounce, "5.2.2 mailbox full is soft");
    assert_eq!(who(e), Some("jane@example.org"));
    assert_eq!(
        e.diagnostic.as_deref(),
        Some("host mail.example.org said: 550 5.2.2 mailbox full")
    );
    assert_eq!(
        e.message_id.as_deref(),
        Some("<campaign.42.1002@example.com>")
    );
}

#[test]
fn non_standard_bounces_by_the_rule_set() {
    let q = parse(fixture("qmail"), RCPT).unwrap();
    assert_eq!(q.events.len(), 1);
    assert_eq!(q.events[0].kind, EventKind::HardBounce);
    assert_eq!(
        q.events[0].status.as_deref(),
        Some("5.0.0"),
        "only a basic code"
    );
    assert_eq!(who(&q.events[0]), Some("joe@example.org"));
    assert_eq!(q.events[0].envelope_from.as_deref(), Some(RCPT));
    assert!(
        q.events[0].id.starts_with("sha256:"),
        "no Message-ID: the bytes name it"
    );

    let x = parse(fixture("exim"), RCPT).unwrap();
    assert_eq!(x.events.len(), 1);
    assert_eq!(x.events[0].kind, EventKind::HardBounce);
    assert_eq!(x.events[0].status.as_deref(), Some("5.1.1"));
    assert_eq!(who(&x.events[0]), Some("ann@example.org"));
    assert!(x.events[0]
        .diagnostic
        .as_deref()
        .is_some_and(|d| d.starts_with("550 5.1.1")));

    for nothing in ["exim_delay", "vacation", "arf_not_spam"] {
        let m = parse(fixture(nothing), RCPT).unwrap();
        assert!(m.events.is_empty(), "{nothing}: {:?}", m.events);
    }
}

#[test]
fn the_rfc_5965_example_is_a_complaint_proved_by_its_original_mail_from() {
    let m = parse(fixture("arf_rfc5965"), "fbl@bounce.example.com").unwrap();
    assert_eq!(m.source, EventSource::Arf);
    assert_eq!(m.events.len(), 1);
    let e = &m.events[0];
    assert_eq!(e.kind, EventKind::Complaint);
    assert_eq!(who(e), Some("kim@example.net"));
    assert_eq!(
        e.envelope_from
            .as_deref()
            .map(|f| f.trim_matches(['<', '>'])),
        Some("b+c42-1007.0123456789abcdef@bounce.example.com")
    );
    assert_eq!(
        e.message_id.as_deref(),
        Some("<campaign.42.1007@example.com>")
    );
    assert_eq!(e.id, "arf-1@example.com:kim@example.net");
    assert_eq!(e.diagnostic.as_deref(), Some("feedback-type: abuse"));
}

#[test]
fn the_same_report_twice_is_the_same_event_ids() {
    for name in ALL {
        let a = parse(fixture(name), RCPT).unwrap();
        let b = parse(fixture(name), RCPT).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

/// A fixture cut, with bytes flipped, a slice duplicated, or random bytes.
fn mutate(rng: &mut rand::rngs::StdRng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    match rng.gen_range(0..4) {
        0 => b.truncate(rng.gen_range(0..=b.len())),
        1 => {
            for _ in 0..rng.gen_range(1..16) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
        }
        2 => {
            let i = rng.gen_range(0..b.len());
            let j = rng.gen_range(i..b.len());
            let part = b[i..j].to_vec();
            b.splice(j..j, part.iter().cycle().take(part.len() * 3).copied());
        }
        _ => b = (0..rng.gen_range(0..400)).map(|_| rng.gen()).collect(),
    }
    b
}

#[test]
fn no_input_makes_the_parser_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6473_6e21);
    let mut events = 0;
    for _ in 0..20_000 {
        let seed = fixture(ALL[rng.gen_range(0..ALL.len())]);
        let body = mutate(&mut rng, seed);
        assert!(delivered_to(&body)
            .iter()
            .all(|a| a.contains('@') && a.len() <= 320));
        if let Some(m) = parse(&body, RCPT) {
            events += m.events.len();
            for e in &m.events {
                assert!(e.id.chars().count() <= 300);
                assert!(e
                    .diagnostic
                    .as_ref()
                    .is_none_or(|d| d.chars().count() <= MAX_DIAGNOSTIC));
            }
        }
    }
    assert!(events > 1000, "mutants still parse into events: {events}");
}

#[test]
fn a_mailbox_copy_names_its_envelope_recipient_before_to_and_cc() {
    let raw = b"Return-Path: <>\r\nX-Original-To: b+c1-2.aa@bounce.example.com\r\n\
        Delivered-To: <B+c1-2.aa@Bounce.Example.com>\r\nEnvelope-To: fbl@bounce.example.com, other@x.test\r\n\
        From: MAILER-DAEMON@mx.test\r\nTo: \"Sender\" <news@example.com>\r\nCc: a@c.test, b+c1-2.aa@bounce.example.com\r\n\
        Subject: x\r\n\r\nbody\r\n";
    assert_eq!(
        delivered_to(raw),
        [
            "B+c1-2.aa@Bounce.Example.com",
            "fbl@bounce.example.com",
            "other@x.test",
            "news@example.com",
            "a@c.test",
        ],
        "Delivered-To first, case-insensitive repeats dropped, To and Cc last"
    );
    assert!(delivered_to(b"no headers at all").is_empty());
    assert!(delivered_to(b"").is_empty());
}
