//! A claimed batch and what its renderers read, loaded once per batch in a few queries (each
//! org's sender and DKIM key, each campaign's compiled content, recipients' names, digests,
//! set-password links) and shared by every connection that sends part of it.

use std::collections::HashMap;

use anyhow::Context;
use sqlx::PgPool;

use app::campaign_render::Compiled;
use app::db::delivery::{Claimed, Sender};
use app::db::digest::Content as DigestContent;
use app::domain::Reference;

use super::render::Inputs;
use super::{dkim, invite, Config};

pub struct Loaded {
    senders: HashMap<i64, Sender>,
    signers: dkim::Signers,
    /// Keyed by (org, campaign): a test job names its campaign by id alone.
    campaigns: HashMap<(i64, i64), Compiled>,
    names: HashMap<i64, String>,
    digests: HashMap<i64, DigestContent>,
    invites: invite::Invites,
    confirms: super::confirm::Confirms,
    transactional: HashMap<i64, app::db::transactional::Content>,
    notices: HashMap<i64, app::db::notices::Stored>,
    /// Automation mail, keyed by (enrolment, step).
    automation_mail: HashMap<(i64, i32), app::db::automation::MailContent>,
    /// Loaded when an org of the batch has a bounce domain.
    verp_key: Option<Vec<u8>>,
    /// Loaded when an org of the batch tracks clicks or opens.
    click_key: Option<Vec<u8>>,
}

/// Takes from the rate limit and claims up to `limit` due deliveries for `holder`.
#[tracing::instrument(name = "claim", skip_all, fields(limit = limit))]
pub async fn claim(
    pool: &PgPool,
    cfg: &Config,
    holder: &str,
    limit: i64,
) -> anyhow::Result<Vec<Claimed>> {
    let allowed = match cfg.rate_per_second {
        Some(_) => app::db::rate_limit::take(pool, &cfg.bucket(), limit as i32)
            .await
            .context("taking from the rate limit")? as i64,
        None => limit,
    };
    if allowed == 0 {
        return Ok(Vec::new());
    }
    let t = std::time::Instant::now();
    let batch = app::db::delivery::claim(pool, allowed, cfg.lease_seconds, holder)
        .await
        .context("claiming deliveries")?;
    let claims: Vec<i64> = batch.iter().map(|c| c.claim_id).collect();
    cfg.held.granted(&claims, t);
    tracing::debug!(
        n = batch.len(),
        us = t.elapsed().as_micros() as u64,
        "claim"
    );
    Ok(batch)
}

impl Loaded {
    pub async fn load(pool: &PgPool, batch: &[Claimed]) -> anyhow::Result<Self> {
        let mut org_ids: Vec<i64> = batch.iter().map(|c| c.org.0).collect();
        org_ids.sort_unstable();
        org_ids.dedup();
        let senders: HashMap<i64, Sender> = app::db::delivery::senders(pool, &org_ids)
            .await
            .context("loading the batch's senders")?
            .into_iter()
            .map(|s| (s.org_id, s))
            .collect();
        let refs = campaign_refs(batch);
        // Each campaign's templates compile once per batch; one that does not compile fails its
        // messages at render time (final, with the reason), not the batch.
        let mut campaigns = HashMap::new();
        let mut names = HashMap::new();
        if !refs.is_empty() {
            let mut conn = pool.acquire().await?;
            let contents = app::db::campaign::contents(&mut conn, &refs)
                .await
                .context("loading the batch's campaign contents")?;
            for k in contents {
                match Compiled::new(&k) {
                    Ok(compiled) => {
                        campaigns.insert((k.org_id, k.id), compiled);
                    }
                    Err(e) => {
                        tracing::warn!(campaign = k.id, error = %e, "campaign templates do not compile")
                    }
                }
            }
            let subscribers: Vec<(i64, i64)> = batch
                .iter()
                .filter_map(|c| Some((c.org.0, c.reference.subscriber()?.0)))
                .collect();
            names = app::db::audience::subscriber_names(&mut conn, &subscribers)
                .await
                .context("loading the batch's subscriber names")?
                .into_iter()
                .collect();
        }
        let mut digest_refs: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| match c.reference {
                Reference::Digest { send, .. } => Some((c.org.0, send.0)),
                _ => None,
            })
            .collect();
        digest_refs.sort_unstable();
        digest_refs.dedup();
        let digests = if digest_refs.is_empty() {
            HashMap::new()
        } else {
            let mut conn = pool.acquire().await?;
            app::db::digest::contents(&mut conn, &digest_refs)
                .await
                .context("loading the batch's digests")?
                .into_iter()
                .map(|d| (d.id, d))
                .collect()
        };
        let invites = invite::Invites::load(pool, batch).await?;
        let confirms = super::confirm::Confirms::load(pool, batch).await?;
        let tx_refs: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| match c.reference {
                Reference::Transactional { message } => Some((c.org.0, message.0)),
                _ => None,
            })
            .collect();
        let transactional = if tx_refs.is_empty() {
            HashMap::new()
        } else {
            let mut conn = pool.acquire().await?;
            app::db::transactional::contents(&mut conn, &tx_refs)
                .await
                .context("loading the batch's transactional messages")?
                .into_iter()
                .map(|m| (m.id, m))
                .collect()
        };
        let notice_refs: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| match c.reference {
                Reference::Notice { notice, .. } => Some((c.org.0, notice.0)),
                _ => None,
            })
            .collect();
        let notices = if notice_refs.is_empty() {
            HashMap::new()
        } else {
            let mut conn = pool.acquire().await?;
            app::db::notices::load(&mut conn, &notice_refs)
                .await
                .context("loading the batch's account notices")?
                .into_iter()
                .map(|n| (n.id, n))
                .collect()
        };
        let automation_refs: Vec<(i64, i64, i32)> = batch
            .iter()
            .filter_map(|c| match c.job {
                app::domain::JobId::Automation {
                    org_id,
                    enrolment_id,
                    step,
                } => Some((org_id, enrolment_id, step)),
                _ => None,
            })
            .collect();
        let automation_mail = if automation_refs.is_empty() {
            HashMap::new()
        } else {
            let mut conn = pool.acquire().await?;
            app::db::automation::mail_contents(&mut conn, &automation_refs)
                .await
                .context("loading the batch's automation mail")?
                .into_iter()
                .map(|m| ((m.enrolment_id, m.step), m))
                .collect()
        };
        let signers = dkim::Signers::load(senders.values());
        let verp_key = if senders.values().any(|s| s.bounce_domain.is_some()) {
            Some(
                app::signing::Purpose::Verp
                    .key(pool)
                    .await
                    .context("loading the VERP signing key")?,
            )
        } else {
            None
        };
        let click_key = if senders
            .values()
            .any(|s| s.click_tracking || s.open_tracking)
        {
            Some(
                app::signing::Purpose::Click
                    .key(pool)
                    .await
                    .context("loading the click-tracking key")?,
            )
        } else {
            None
        };
        Ok(Loaded {
            verp_key,
            click_key,
            senders,
            signers,
            campaigns,
            names,
            digests,
            invites,
            confirms,
            transactional,
            notices,
            automation_mail,
        })
    }

    /// What the renderer of `c` reads.
    pub fn inputs<'a>(&'a self, cfg: &'a Config, c: &Claimed) -> Inputs<'a> {
        Inputs {
            message_id_domain: cfg.message_id_domain.as_deref(),
            links: &cfg.links,
            sender: self.senders.get(&c.org.0),
            campaign: c
                .reference
                .content_campaign()
                .and_then(|id| self.campaigns.get(&(c.org.0, id.0))),
            subscriber_name: c
                .reference
                .subscriber()
                .and_then(|id| self.names.get(&id.0))
                .map(String::as_str),
            digest: match c.reference {
                Reference::Digest { send, .. } => self.digests.get(&send.0),
                _ => None,
            },
            invites: &self.invites,
            confirms: &self.confirms,
            transactional: match c.reference {
                Reference::Transactional { message } => self.transactional.get(&message.0),
                _ => None,
            },
            notice: match c.reference {
                Reference::Notice { notice, .. } => self.notices.get(&notice.0),
                _ => None,
            },
            automation: match c.job {
                app::domain::JobId::Automation {
                    enrolment_id, step, ..
                } => self.automation_mail.get(&(enrolment_id, step)),
                _ => None,
            },
            dkim: self.signers.for_org(c.org.0),
            verp_key: self.verp_key.as_deref(),
            click_key: self.click_key.as_deref(),
        }
    }
}

/// The (org, campaign) pairs whose content the batch shows, each once.
pub fn campaign_refs(batch: &[Claimed]) -> Vec<(i64, i64)> {
    let mut refs: Vec<(i64, i64)> = batch
        .iter()
        .filter_map(|c| Some((c.org.0, c.reference.content_campaign()?.0)))
        .collect();
    refs.sort_unstable();
    refs.dedup();
    refs
}
