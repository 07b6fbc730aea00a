//! VERP envelope senders: `b+<token>@<bounce domain>`, the token naming the job and signed for
//! the org that owns the domain. A DSN comes back to the envelope sender, so its RCPT TO names
//! the delivery it is about, and nobody can forge one for another address: the MAC covers the
//! org id as well as the job, so a token is valid only at its own org's domain.
//!
//! Everything in a token is lowercase letters, digits, `-` and `.`: mail systems may fold the
//! case of a local part, and the whole address must fit RFC 5321's 64-octet local part.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::{JobId, WeekKey};

/// The local part's fixed prefix, before `+`.
pub const PREFIX: &str = "b";

/// RFC 5321 §4.5.3.1.1: the longest local part.
const MAX_LOCAL: usize = 64;

/// Hex digits of the MAC kept in a token (64 bits: a forger must guess online, one DSN at a time).
const TAG_HEX: usize = 16;

/// What a verified token names. Test mail is named by its campaign and content version only
/// (its job id holds a dialog token and the address typed in, too long for a local part); the
/// recipient of the report picks the one test delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerpRef {
    Job(JobId),
    Test {
        campaign_id: i64,
        content_version: i32,
    },
}

/// The compact, case-proof form of a job in a token; `None` for transactional mail, whose
/// job id holds the caller's key (any case, up to 200 characters): its reports are matched
/// by Message-ID instead.
fn form(job: &JobId) -> Option<String> {
    Some(match job {
        JobId::Campaign {
            campaign_id,
            subscriber_id,
        } => format!("c{campaign_id}-{subscriber_id}"),
        JobId::Digest {
            org_id,
            week_key,
            user_id,
        } => {
            let week = match week_key {
                WeekKey::Scheduled { iso_year, week } => format!("{iso_year:04}w{week:02}"),
                WeekKey::Manual {
                    unix_seconds,
                    nonce: Some(n),
                } => format!("m{unix_seconds}x{n:016x}"),
                WeekKey::Manual {
                    unix_seconds,
                    nonce: None,
                } => format!("m{unix_seconds}"),
            };
            format!("d{org_id}-{week}-{user_id}")
        }
        JobId::Invite {
            org_id,
            user_id,
            token_id,
        } => format!("i{org_id}-{user_id}-{token_id}"),
        JobId::Test {
            campaign_id,
            content_version,
            ..
        } => format!("t{campaign_id}-{content_version}"),
        JobId::Confirm { org_id, signup_id } => format!("s{org_id}-{signup_id}"),
        JobId::Notice {
            org_id,
            notice_id,
            user_id,
        } => format!("n{org_id}-{notice_id}-{user_id}"),
        JobId::Automation {
            org_id,
            enrolment_id,
            step,
        } => format!("a{org_id}-{enrolment_id}-{step}"),
        JobId::Transactional { .. } => return None,
    })
}

fn int<T: std::str::FromStr>(s: &str) -> Option<T> {
    // Canonical decimal only, so one job has one form.
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

fn parse_form(f: &str) -> Option<VerpRef> {
    let (kind, rest) = (f.get(..1)?, f.get(1..)?);
    let parts: Vec<&str> = rest.split('-').collect();
    Some(match (kind, parts.as_slice()) {
        ("c", [c, s]) => VerpRef::Job(JobId::Campaign {
            campaign_id: int(c)?,
            subscriber_id: int(s)?,
        }),
        ("i", [o, u, t]) => VerpRef::Job(JobId::Invite {
            org_id: int(o)?,
            user_id: int(u)?,
            token_id: int(t)?,
        }),
        ("n", [o, n, u]) => VerpRef::Job(JobId::Notice {
            org_id: int(o)?,
            notice_id: int(n)?,
            user_id: int(u)?,
        }),
        ("a", [o, e, step]) => VerpRef::Job(JobId::Automation {
            org_id: int(o)?,
            enrolment_id: int(e)?,
            step: int(step)?,
        }),
        ("s", [o, id]) => VerpRef::Job(JobId::Confirm {
            org_id: int(o)?,
            signup_id: int(id)?,
        }),
        ("t", [c, v]) => VerpRef::Test {
            campaign_id: int(c)?,
            content_version: int(v)?,
        },
        ("d", [o, w, u]) => {
            let week_key = if let Some(m) = w.strip_prefix('m') {
                let (secs, nonce) = match m.split_once('x') {
                    Some((s, n)) if n.len() == 16 => (s, Some(u64::from_str_radix(n, 16).ok()?)),
                    Some(_) => return None,
                    None => (m, None),
                };
                WeekKey::Manual {
                    unix_seconds: int(secs)?,
                    nonce,
                }
            } else {
                let (y, wk) = w.split_once('w')?;
                format!("{y}-W{wk}").parse().ok()?
            };
            VerpRef::Job(JobId::Digest {
                org_id: int(o)?,
                week_key,
                user_id: int(u)?,
            })
        }
        _ => return None,
    })
}

fn mac(key: &[u8], org_id: i64, form: &str) -> Hmac<Sha256> {
    let mut mac = crate::signing::Purpose::Verp.mac(key);
    mac.update(org_id.to_string().as_bytes());
    mac.update(b":");
    mac.update(form.as_bytes());
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The token of `job` for `org_id`: `<form>.<tag>` (`None` for a job without a form).
pub fn token(key: &[u8], org_id: i64, job: &JobId) -> Option<String> {
    let f = form(job)?;
    let tag = mac(key, org_id, &f).finalize().into_bytes();
    Some(format!("{f}.{}", &hex(&tag)[..TAG_HEX]))
}

/// The envelope sender of `job` at `bounce_domain`; `None` when it would not fit a local part.
pub fn address(key: &[u8], org_id: i64, job: &JobId, bounce_domain: &str) -> Option<String> {
    let local = format!("{PREFIX}+{}", token(key, org_id, job)?);
    (local.len() <= MAX_LOCAL).then(|| format!("{local}@{bounce_domain}"))
}

/// What the local part of an address at `org_id`'s bounce domain names, when its token is
/// genuine (any case); `None` for anything else, forged or not ours.
pub fn verify(key: &[u8], org_id: i64, local_part: &str) -> Option<VerpRef> {
    let local = local_part.to_ascii_lowercase();
    let token = local.strip_prefix(PREFIX)?.strip_prefix('+')?;
    let (f, tag) = token.rsplit_once('.')?;
    if tag.len() != TAG_HEX || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let tag: Vec<u8> = (0..TAG_HEX / 2)
        .map(|i| u8::from_str_radix(&tag[2 * i..2 * i + 2], 16))
        .collect::<Result<_, _>>()
        .ok()?;
    mac(key, org_id, f).verify_truncated_left(&tag).ok()?;
    parse_form(f)
}

/// The token of an envelope-sender address, when it is one of `org_id`'s (its domain is not
/// checked here: the caller knows which domain it came to).
pub fn verify_address(key: &[u8], org_id: i64, address: &str) -> Option<VerpRef> {
    let a = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, _) = a.rsplit_once('@')?;
    verify(key, org_id, local)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn jobs() -> Vec<JobId> {
        vec![
            "campaign:42:100234".parse().unwrap(),
            "digest:7:2026-W48:12".parse().unwrap(),
            "digest:7:manual-1764633600-00000000deadbeef:12"
                .parse()
                .unwrap(),
            "digest:7:manual-1764633600:12".parse().unwrap(),
            "invite:7:12:55".parse().unwrap(),
            "confirm:7:123".parse().unwrap(),
            "notice:7:9:12".parse().unwrap(),
            "automation:7:9:2".parse().unwrap(),
        ]
    }

    #[test]
    fn every_kind_of_job_comes_back_from_its_address_in_any_case() {
        for job in jobs() {
            let a = address(KEY, 7, &job, "bounce.example.com").unwrap();
            let (local, domain) = a.rsplit_once('@').unwrap();
            assert_eq!(domain, "bounce.example.com");
            assert!(local.len() <= 64, "{a}");
            assert!(local
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b)));
            assert_eq!(verify(KEY, 7, local), Some(VerpRef::Job(job.clone())));
            assert_eq!(
                verify(KEY, 7, &local.to_ascii_uppercase()),
                Some(VerpRef::Job(job.clone()))
            );
            assert_eq!(
                verify_address(KEY, 7, &format!("<{a}>")),
                Some(VerpRef::Job(job))
            );
        }
        let test: JobId = "test:42:3:dlg_Token-1:jane@example.com".parse().unwrap();
        let a = address(KEY, 7, &test, "b.example").unwrap();
        assert_eq!(
            verify_address(KEY, 7, &a),
            Some(VerpRef::Test {
                campaign_id: 42,
                content_version: 3
            })
        );
    }

    #[test]
    fn transactional_mail_has_no_verp_address() {
        // Its job id holds the caller's key; reports about it are matched by Message-ID.
        let job: JobId = "tx:7:Order-7/Receipt".parse().unwrap();
        assert_eq!(address(KEY, 7, &job, "bounces.example.org"), None);
    }

    #[test]
    fn a_token_is_bound_to_its_org_its_job_and_the_key() {
        let job: JobId = "campaign:42:100234".parse().unwrap();
        let local = format!("{PREFIX}+{}", token(KEY, 7, &job).unwrap());
        assert_eq!(verify(KEY, 8, &local), None, "another org's domain");
        assert_eq!(
            verify(b"another key of 32 bytes..........", 7, &local),
            None
        );
        let other = local.replacen("c42-100234", "c42-100235", 1);
        assert_eq!(verify(KEY, 7, &other), None, "the job is signed");
        for bad in [
            "",
            "b+",
            "b+c42-1",
            "x+c42-1.0123456789abcdef",
            "b+c42-1.zz23456789abcdef",
        ] {
            assert_eq!(verify(KEY, 7, bad), None, "{bad}");
        }
        // A non-canonical form (a leading zero) never verifies, even if signed as such.
        let f = "c042-1";
        let tag = hex(&mac(KEY, 7, f).finalize().into_bytes());
        assert_eq!(verify(KEY, 7, &format!("b+{f}.{}", &tag[..16])), None);
    }

    #[test]
    fn an_address_that_would_not_fit_is_not_made() {
        let job = JobId::Digest {
            org_id: i64::MAX,
            week_key: WeekKey::manual(i64::MAX, u64::MAX),
            user_id: i64::MAX,
        };
        assert_eq!(address(KEY, 1, &job, "b.example"), None);
    }
}
