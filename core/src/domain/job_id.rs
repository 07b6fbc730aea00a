use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::{EmailAddress, WeekKey};

/// The deterministic identity of one message, primary key of `deliveries` and base of its
/// `Message-ID`. Deterministic (never a random uuid or a timestamp) so that enqueueing the same
/// message twice stores it once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum JobId {
    /// `campaign:<campaign id>:<subscriber id>`
    Campaign {
        campaign_id: i64,
        subscriber_id: i64,
    },
    /// `digest:<org id>:<week key>:<user id>`
    Digest {
        org_id: i64,
        week_key: WeekKey,
        user_id: i64,
    },
    /// `test:<campaign id>:<content version>:<dialog token>:<email lower>`: a double-submitted
    /// dialog sends once, a new edit or a new dialog can be tested again.
    Test {
        campaign_id: i64,
        content_version: i32,
        token: String,
        email_lower: String,
    },
    /// `invite:<org id>:<user id>:<password token id>`: the mail carrying a set-password link
    /// (an invitation or a reset). It names the token's row, never the token itself: job ids are
    /// shown on the Deliveries page, and the link is a credential.
    Invite {
        org_id: i64,
        user_id: i64,
        token_id: i64,
    },
    /// `tx:<org id>:<idempotency key>`: transactional mail sent through the API. The caller's
    /// key is the identity, so a retried request finds the message it queued.
    Transactional { org_id: i64, key: String },
    /// `confirm:<org id>:<sign-up id>`: the double opt-in mail carrying a sign-up's confirm
    /// link. One per pending sign-up, so a double submit sends one.
    Confirm { org_id: i64, signup_id: i64 },
    /// `notice:<org id>:<notice id>:<user id>`: one owner's copy of an account notice.
    Notice {
        org_id: i64,
        notice_id: i64,
        user_id: i64,
    },
    /// `automation:<org id>:<enrolment id>:<step>`: one person's mail of one automation step.
    /// An enrolment takes each step once, so the same step never queues two messages.
    Automation {
        org_id: i64,
        enrolment_id: i64,
        step: i32,
    },
}

/// The longest idempotency key accepted.
pub const IDEMPOTENCY_KEY_MAX: usize = 200;

/// Checks an `Idempotency-Key`: 1 to 200 visible ASCII characters (no spaces or controls), so
/// it prints the same everywhere it is shown and fits a job id.
pub fn idempotency_key(key: &str) -> Result<&str, String> {
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX {
        return Err(format!(
            "The Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} characters long."
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "The Idempotency-Key may hold visible ASCII characters only (no spaces).".into(),
        );
    }
    Ok(key)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("“{0}” is not a job id (expected campaign:<cid>:<sid>, digest:<org>:<week>:<user>, test:<cid>:<version>:<token>:<email>, invite:<org>:<user>:<token id>, tx:<org>:<key>, confirm:<org>:<sign-up id>, notice:<org>:<notice id>:<user> or automation:<org>:<enrolment>:<step>)")]
pub struct JobIdError(pub String);

impl JobId {
    pub fn test(
        campaign_id: i64,
        content_version: i32,
        token: &str,
        email: &EmailAddress,
    ) -> Result<Self, JobIdError> {
        if token.is_empty()
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(JobIdError(token.to_owned()));
        }
        Ok(JobId::Test {
            campaign_id,
            content_version,
            token: token.to_owned(),
            email_lower: email.lower().to_owned(),
        })
    }

    /// Every value [`JobId::priority`] takes.
    pub const PRIORITIES: [i16; 4] = [0, 1, 2, 3];

    /// Priority of its kind for the delivery worker, lower first: test and account mail,
    /// then digests, then transactional mail, then campaigns and automations. An automation's
    /// mail shares the campaigns' level, in a fairness group of its own (the claim gives each
    /// campaign and each automation an equal share of a batch), so a blast never holds up a
    /// welcome series and a million-person import's welcome mail never holds up a campaign.
    pub fn priority(&self) -> i16 {
        match self {
            JobId::Test { .. }
            | JobId::Invite { .. }
            | JobId::Confirm { .. }
            | JobId::Notice { .. } => 0,
            JobId::Digest { .. } => 1,
            JobId::Transactional { .. } => 2,
            JobId::Campaign { .. } | JobId::Automation { .. } => 3,
        }
    }

    pub fn kind(&self) -> &'static str {
        self.delivery_kind().as_str()
    }

    pub fn delivery_kind(&self) -> super::DeliveryKind {
        use super::DeliveryKind;
        match self {
            JobId::Test { .. } => DeliveryKind::Test,
            JobId::Digest { .. } => DeliveryKind::Digest,
            JobId::Campaign { .. } => DeliveryKind::Campaign,
            JobId::Invite { .. } => DeliveryKind::Invite,
            JobId::Transactional { .. } => DeliveryKind::Transactional,
            JobId::Confirm { .. } => DeliveryKind::Confirm,
            JobId::Notice { .. } => DeliveryKind::Notice,
            JobId::Automation { .. } => DeliveryKind::Automation,
        }
    }

    /// A `Message-ID` that is the same on every attempt of this job, and different for every
    /// other job: ':' becomes '.', other bytes outside [A-Za-z0-9-] become `=XX` (so the
    /// encoding is injective and header-safe).
    pub fn message_id(&self, domain: &str) -> String {
        let mut local = String::new();
        for b in self.to_string().bytes() {
            match b {
                b':' => local.push('.'),
                b if b.is_ascii_alphanumeric() || b == b'-' => local.push(b as char),
                b => local.push_str(&format!("={b:02X}")),
            }
        }
        format!("<{local}@{domain}>")
    }

    /// The job a Message-ID header names, if [`JobId::message_id`] made it (any domain): the
    /// way back from a relay's report to the delivery.
    pub fn from_message_id(header: &str) -> Option<JobId> {
        let inner = header.trim().strip_prefix('<')?.strip_suffix('>')?;
        let (local, _) = inner.rsplit_once('@')?;
        let mut bytes = Vec::with_capacity(local.len());
        let mut rest = local.as_bytes();
        while let Some((&b, tail)) = rest.split_first() {
            rest = tail;
            match b {
                b'.' => bytes.push(b':'),
                b'=' => {
                    let hex = std::str::from_utf8(rest.get(..2)?).ok()?;
                    bytes.push(u8::from_str_radix(hex, 16).ok()?);
                    rest = &rest[2..];
                }
                b if b.is_ascii_alphanumeric() || b == b'-' => bytes.push(b),
                _ => return None,
            }
        }
        String::from_utf8(bytes).ok()?.parse().ok()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobId::Campaign {
                campaign_id,
                subscriber_id,
            } => write!(f, "campaign:{campaign_id}:{subscriber_id}"),
            JobId::Digest {
                org_id,
                week_key,
                user_id,
            } => write!(f, "digest:{org_id}:{week_key}:{user_id}"),
            JobId::Test {
                campaign_id,
                content_version,
                token,
                email_lower,
            } => {
                write!(
                    f,
                    "test:{campaign_id}:{content_version}:{token}:{email_lower}"
                )
            }
            JobId::Invite {
                org_id,
                user_id,
                token_id,
            } => write!(f, "invite:{org_id}:{user_id}:{token_id}"),
            JobId::Transactional { org_id, key } => write!(f, "tx:{org_id}:{key}"),
            JobId::Confirm { org_id, signup_id } => write!(f, "confirm:{org_id}:{signup_id}"),
            JobId::Notice {
                org_id,
                notice_id,
                user_id,
            } => write!(f, "notice:{org_id}:{notice_id}:{user_id}"),
            JobId::Automation {
                org_id,
                enrolment_id,
                step,
            } => write!(f, "automation:{org_id}:{enrolment_id}:{step}"),
        }
    }
}

fn id<T: FromStr>(s: &str, whole: &str) -> Result<T, JobIdError> {
    // Canonical decimal only: "007" would parse to an id that prints differently.
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return Err(JobIdError(whole.to_owned()));
    }
    s.parse().map_err(|_| JobIdError(whole.to_owned()))
}

impl FromStr for JobId {
    type Err = JobIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || JobIdError(s.to_owned());
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "campaign" => {
                let (c, sub) = rest.split_once(':').ok_or_else(bad)?;
                Ok(JobId::Campaign {
                    campaign_id: id(c, s)?,
                    subscriber_id: id(sub, s)?,
                })
            }
            "digest" => {
                let mut parts = rest.splitn(3, ':');
                let (org, week, user) = (parts.next(), parts.next(), parts.next());
                let (Some(org), Some(week), Some(user)) = (org, week, user) else {
                    return Err(bad());
                };
                Ok(JobId::Digest {
                    org_id: id(org, s)?,
                    week_key: week.parse().map_err(|_| bad())?,
                    user_id: id(user, s)?,
                })
            }
            "test" => {
                // The e-mail comes last and may itself contain ':' in a quoted local part.
                let mut parts = rest.splitn(4, ':');
                let (Some(c), Some(v), Some(token), Some(email)) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                let email = EmailAddress::parse(email).map_err(|_| bad())?;
                if email.lower() != email.as_str() {
                    return Err(bad());
                }
                JobId::test(id(c, s)?, id(v, s)?, token, &email).map_err(|_| bad())
            }
            "invite" => {
                let mut parts = rest.splitn(3, ':');
                let (Some(org), Some(user), Some(token)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                Ok(JobId::Invite {
                    org_id: id(org, s)?,
                    user_id: id(user, s)?,
                    token_id: id(token, s)?,
                })
            }
            "tx" => {
                // The key comes last and may itself contain ':'.
                let (org, key) = rest.split_once(':').ok_or_else(bad)?;
                let key = idempotency_key(key).map_err(|_| bad())?;
                Ok(JobId::Transactional {
                    org_id: id(org, s)?,
                    key: key.to_owned(),
                })
            }
            "confirm" => {
                let (org, signup) = rest.split_once(':').ok_or_else(bad)?;
                Ok(JobId::Confirm {
                    org_id: id(org, s)?,
                    signup_id: id(signup, s)?,
                })
            }
            "notice" => {
                let mut parts = rest.splitn(3, ':');
                let (Some(org), Some(notice), Some(user)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                Ok(JobId::Notice {
                    org_id: id(org, s)?,
                    notice_id: id(notice, s)?,
                    user_id: id(user, s)?,
                })
            }
            "automation" => {
                let mut parts = rest.splitn(3, ':');
                let (Some(org), Some(enrolment), Some(step)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(bad());
                };
                Ok(JobId::Automation {
                    org_id: id(org, s)?,
                    enrolment_id: id(enrolment, s)?,
                    step: id(step, s)?,
                })
            }
            _ => Err(bad()),
        }
    }
}

impl TryFrom<String> for JobId {
    type Error = JobIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<JobId> for String {
    fn from(value: JobId) -> Self {
        value.to_string()
    }
}

/// A campaign message's job id as an SQL expression over the campaign and subscriber columns
/// or parameters given: the format of [`JobId::Campaign`]'s `Display`, kept beside it for the
/// statements that create those rows in bulk. A macro so they stay compile-time constants.
#[cfg(feature = "ssr")]
macro_rules! campaign_job_sql {
    ($campaign:literal, $subscriber:literal) => {
        concat!("'campaign:' || ", $campaign, " || ':' || ", $subscriber)
    };
}
#[cfg(feature = "ssr")]
pub(crate) use campaign_job_sql;

/// A digest message's job id as an SQL expression: the format of [`JobId::Digest`].
#[cfg(feature = "ssr")]
macro_rules! digest_job_sql {
    ($org:literal, $week:literal, $user:literal) => {
        concat!(
            "'digest:' || ",
            $org,
            " || ':' || ",
            $week,
            " || ':' || ",
            $user
        )
    };
}
#[cfg(feature = "ssr")]
pub(crate) use digest_job_sql;

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluates one of the SQL expressions above for given column values (`'text'` literals
    /// joined by `||`), as PostgreSQL would.
    #[cfg(feature = "ssr")]
    fn eval(sql: &str, values: &[(&str, &str)]) -> String {
        sql.split(" || ")
            .map(
                |part| match part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')) {
                    Some(text) => text.to_owned(),
                    None => values
                        .iter()
                        .find(|(k, _)| *k == part)
                        .unwrap()
                        .1
                        .to_owned(),
                },
            )
            .collect()
    }

    #[test]
    #[cfg(feature = "ssr")]
    fn the_sql_job_ids_are_the_ones_the_worker_parses() {
        let sql = eval(
            campaign_job_sql!("$2", "s.id"),
            &[("$2", "7"), ("s.id", "42")],
        );
        let id = JobId::Campaign {
            campaign_id: 7,
            subscriber_id: 42,
        };
        assert_eq!(
            (sql.as_str(), sql.parse::<JobId>().unwrap()),
            (id.to_string().as_str(), id)
        );
        let week = "2026-W48";
        let sql = eval(
            digest_job_sql!("org_id", "week_key", "user_id"),
            &[("org_id", "3"), ("week_key", week), ("user_id", "9")],
        );
        let id = JobId::Digest {
            org_id: 3,
            week_key: week.parse().unwrap(),
            user_id: 9,
        };
        assert_eq!(
            (sql.as_str(), sql.parse::<JobId>().unwrap()),
            (id.to_string().as_str(), id)
        );
    }

    #[test]
    fn formats_are_deterministic_and_round_trip() {
        let c = JobId::Campaign {
            campaign_id: 7,
            subscriber_id: 42,
        };
        assert_eq!(c.to_string(), "campaign:7:42");
        let d = JobId::Digest {
            org_id: 3,
            week_key: "2026-W53".parse().unwrap(),
            user_id: 9,
        };
        assert_eq!(d.to_string(), "digest:3:2026-W53:9");
        let m = JobId::Digest {
            org_id: 3,
            week_key: WeekKey::manual(1_800_000_000, 0xabc),
            user_id: 9,
        };
        assert_eq!(
            m.to_string(),
            "digest:3:manual-1800000000-0000000000000abc:9"
        );
        let e = EmailAddress::parse("Ann@Example.org").unwrap();
        let t = JobId::test(7, 2, "dlg-abc_1", &e).unwrap();
        assert_eq!(t.to_string(), "test:7:2:dlg-abc_1:ann@example.org");
        let i = JobId::Invite {
            org_id: 3,
            user_id: 9,
            token_id: 12,
        };
        assert_eq!(i.to_string(), "invite:3:9:12");
        assert_eq!((i.kind(), i.priority()), ("invite", 0));
        let a = JobId::Automation {
            org_id: 3,
            enrolment_id: 41,
            step: 2,
        };
        assert_eq!(a.to_string(), "automation:3:41:2");
        assert_eq!((a.kind(), a.priority()), ("automation", 3));
        for j in [c, d, m, t, i, a] {
            assert_eq!(j.to_string().parse::<JobId>().unwrap(), j);
        }
    }

    #[test]
    fn rejects_malformed_ids_naming_them() {
        for s in [
            "",
            "campaign",
            "campaign:1",
            "campaign:1:x",
            "campaign:-1:2",
            "campaign:007:1",
            "digest:1:2026-W99:2",
            "digest:1:2026-W01",
            "sms:1:2",
            "test:1:2:tok",
            "test:1:2:bad token:a@b.org",
            "test:1:2:t:A@b.org",
            "invite:1:2",
            "invite:1:2:x",
            "invite:1:2:3:4",
            "automation:1:2",
            "automation:1:2:-1",
        ] {
            let err = s.parse::<JobId>().unwrap_err();
            assert!(err.to_string().contains(&format!("“{s}”")), "{s}");
        }
    }

    #[test]
    fn priority_orders_test_then_digest_then_campaign() {
        let e = EmailAddress::parse("a@b.org").unwrap();
        let t = JobId::test(1, 1, "x", &e).unwrap();
        let d: JobId = "digest:1:2026-W01:1".parse().unwrap();
        let c: JobId = "campaign:1:1".parse().unwrap();
        let x: JobId = "tx:1:order-7".parse().unwrap();
        assert!(t.priority() < d.priority() && d.priority() < x.priority());
        assert!(
            x.priority() < c.priority(),
            "transactional before campaigns"
        );
        assert_eq!(
            (t.kind(), d.kind(), x.kind(), c.kind()),
            ("test", "digest", "transactional", "campaign")
        );
        for j in [&t, &d, &x, &c] {
            assert!(JobId::PRIORITIES.contains(&j.priority()), "{j}");
        }
    }

    #[test]
    fn transactional_ids_keep_the_callers_key_whole_and_check_it() {
        let x: JobId = "tx:12:order:7/receipt".parse().unwrap();
        assert_eq!(
            x,
            JobId::Transactional {
                org_id: 12,
                key: "order:7/receipt".into()
            }
        );
        assert_eq!(x.to_string(), "tx:12:order:7/receipt");
        assert_eq!(JobId::from_message_id(&x.message_id("a.org")), Some(x));
        for bad in ["tx:12:", "tx:12:has space", "tx:012:k", "tx:k"] {
            assert!(bad.parse::<JobId>().is_err(), "{bad}");
        }
        assert!(idempotency_key(&"k".repeat(IDEMPOTENCY_KEY_MAX)).is_ok());
        let c: JobId = "confirm:3:41".parse().unwrap();
        assert_eq!(
            (c.kind(), c.priority(), c.to_string().as_str()),
            ("confirm", 0, "confirm:3:41")
        );
        let n: JobId = "notice:3:8:5".parse().unwrap();
        assert_eq!(
            (n.kind(), n.priority(), n.to_string().as_str()),
            ("notice", 0, "notice:3:8:5")
        );
        assert_eq!(JobId::from_message_id(&n.message_id("a.org")), Some(n));
        for bad in ["notice:3:8", "notice:3:8:05", "notice:3:8:5:1"] {
            assert!(bad.parse::<JobId>().is_err(), "{bad}");
        }
        assert!(idempotency_key(&"k".repeat(IDEMPOTENCY_KEY_MAX + 1)).is_err());
    }

    #[test]
    fn message_id_is_stable_and_header_safe() {
        let c: JobId = "campaign:7:42".parse().unwrap();
        assert_eq!(
            c.message_id("mail.example.org"),
            "<campaign.7.42@mail.example.org>"
        );
        assert_eq!(c.message_id("x.org"), c.clone().message_id("x.org"));
        // Distinct jobs never share a Message-ID, even when they differ only in '.', ':' or '@'.
        let ids = [
            "test:1:1:t:a.b@c.org",
            "test:1:1:t:a@b.c.org",
            "test:1:1:t:jürgen@x.org",
            "test:1:1:t:j.rgen@x.org",
        ];
        let mut seen = std::collections::HashSet::new();
        for s in ids {
            let m = s.parse::<JobId>().unwrap().message_id("x.org");
            assert!(
                m.is_ascii() && !m[1..m.len() - 1].contains(['<', '>', ' ']),
                "{m}"
            );
            assert!(seen.insert(m.clone()), "collision: {m}");
            assert_eq!(JobId::from_message_id(&m), s.parse().ok(), "{m}");
        }
        assert_eq!(
            JobId::from_message_id(" <campaign.7.42@relay.example> "),
            Some(c)
        );
        for not_ours in [
            "<0100018c-abc@email.amazonses.com>",
            "campaign.7.42@x.org",
            "<campaign.7.42>",
            "<campaign.7.4=2@x.org>",
            "<campaign.7.42=@x.org>",
            "<campaign.7.4 2@x.org>",
        ] {
            assert_eq!(JobId::from_message_id(not_ours), None, "{not_ours}");
        }
    }
}
