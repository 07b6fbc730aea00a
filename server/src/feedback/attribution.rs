//! What the SMTP listener and the IMAP poller share about a report mailed to a bounce domain:
//! which addresses are ours (a genuine VERP address of the domain's own org, or its fixed
//! `fbl@`/`postmaster@`), and recording a parsed report's events in the caller's transaction.

use app::bounce::mailed::{self, Mailed};
use app::db::reports;
use app::domain::BouncePolicy;
use app::feedback::{self, Intake, RecordError};
use sqlx::{PgConnection, PgPool};

/// Local parts every bounce domain takes without a token: feedback loops are registered with
/// one fixed address, and RFC 5321 §4.5.1 says postmaster must be accepted.
const FIXED_LOCALS: [&str; 2] = ["fbl", "postmaster"];

/// An address a report may be mailed to: the org whose bounce domain it is at.
#[derive(Clone, Debug)]
pub struct Recipient {
    pub address: String,
    pub org_id: i64,
    pub policy: BouncePolicy,
}

/// Why an address is not one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotOurs {
    /// No `@`, or nothing before or after it.
    BadAddress,
    /// Its domain is no org's bounce domain.
    NotABounceDomain,
    /// A bounce domain, but the local part is no token of that domain's org.
    NoSuchToken,
}

impl NotOurs {
    /// The SMTP reply refusing such a recipient.
    pub fn smtp_reply(self) -> &'static str {
        match self {
            NotOurs::BadAddress => "550 5.1.3 Bad recipient address\r\n",
            NotOurs::NotABounceDomain => "550 5.7.1 Relaying denied: not a bounce domain here\r\n",
            NotOurs::NoSuchToken => "550 5.1.1 No such bounce address\r\n",
        }
    }
}

/// Checks addresses and records reports; keeps the VERP key once read.
pub struct BounceMail {
    pool: PgPool,
    verp_key: Option<Vec<u8>>,
}

impl BounceMail {
    pub fn new(pool: PgPool) -> Self {
        BounceMail {
            pool,
            verp_key: None,
        }
    }

    async fn key(&mut self) -> sqlx::Result<Vec<u8>> {
        if let Some(k) = &self.verp_key {
            return Ok(k.clone());
        }
        let k = app::signing::Purpose::Verp.key(&self.pool).await?;
        self.verp_key = Some(k.clone());
        Ok(k)
    }

    /// Whether a report mailed to `address` is ours to read, and for which org. The token's
    /// MAC is checked without the database; only the domain's owner is looked up.
    pub async fn recipient(&mut self, address: &str) -> sqlx::Result<Result<Recipient, NotOurs>> {
        let Some((local, domain)) = address.rsplit_once('@') else {
            return Ok(Err(NotOurs::BadAddress));
        };
        if local.is_empty() || domain.is_empty() {
            return Ok(Err(NotOurs::BadAddress));
        }
        let domain = domain.to_ascii_lowercase();
        let Some((org_id, policy)) = reports::org_of_bounce_domain(&self.pool, &domain).await?
        else {
            return Ok(Err(NotOurs::NotABounceDomain));
        };
        let fixed = FIXED_LOCALS.iter().any(|f| local.eq_ignore_ascii_case(f));
        if !fixed && app::verp::verify(&self.key().await?, org_id, local).is_none() {
            return Ok(Err(NotOurs::NoSuchToken));
        }
        Ok(Ok(Recipient {
            address: address.to_owned(),
            org_id,
            policy,
        }))
    }

    /// Parses `raw` as mailed to `r`; `None` when the bytes are no message at all. Large
    /// reports are parsed off the async threads.
    pub async fn parse(raw: &[u8], r: &Recipient) -> Option<Mailed> {
        if raw.len() > 256 * 1024 {
            let (bytes, to) = (raw.to_vec(), r.address.clone());
            tokio::task::spawn_blocking(move || mailed::parse(&bytes, &to))
                .await
                .ok()
                .flatten()
        } else {
            mailed::parse(raw, &r.address)
        }
    }

    /// Records the report's events in `tx` (the caller commits): how many were new. An event
    /// naming another org's message without this org's token is not this org's to record.
    pub async fn record(
        &mut self,
        tx: &mut PgConnection,
        r: &Recipient,
        report: &Mailed,
    ) -> sqlx::Result<usize> {
        if report.events.is_empty() {
            return Ok(0);
        }
        let key = self.key().await?;
        let cx = Intake {
            org_id: r.org_id,
            source: report.source,
            policy: r.policy,
            verp_key: Some(&key),
            signed: false,
        };
        let mut new = 0;
        for e in &report.events {
            match feedback::record(tx, &cx, e).await {
                Ok(Some(rec)) => {
                    new += 1;
                    if let Some(reason) = &rec.paused {
                        tracing::warn!(org = r.org_id, job = ?rec.job_id, %reason, "campaign paused itself");
                    }
                }
                Ok(None) => {}
                Err(RecordError::OtherOrg(id)) => {
                    tracing::warn!(org = r.org_id, event = %id, "mailed report names another organisation's message: ignored");
                }
                Err(RecordError::Db(e)) => return Err(e),
            }
        }
        Ok(new)
    }
}
