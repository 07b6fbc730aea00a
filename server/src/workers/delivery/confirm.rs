//! A sign-up's double opt-in mail (`confirm:` jobs), carrying its confirm link. The link's
//! token is derived from the sign-up with the shared key (`app::signup`), so nothing secret is
//! stored in the delivery or shown with it.

use std::collections::HashMap;

use sqlx::PgPool;

use app::db::delivery::Claimed;
use app::db::signup::MailFacts;
use app::domain::JobId;

/// The facts of a batch's confirmation mail and the key of its links, loaded once per batch.
#[derive(Default)]
pub struct Confirms {
    pub key: Vec<u8>,
    pub facts: HashMap<i64, MailFacts>,
}

impl Confirms {
    pub async fn load(pool: &PgPool, batch: &[Claimed]) -> anyhow::Result<Self> {
        let mut refs: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| match c.job {
                JobId::Confirm { org_id, signup_id } => Some((org_id, signup_id)),
                _ => None,
            })
            .collect();
        if refs.is_empty() {
            return Ok(Confirms::default());
        }
        refs.sort_unstable();
        refs.dedup();
        let key = app::signing::Purpose::Signup.key(pool).await?;
        let mut conn = pool.acquire().await?;
        let facts = app::db::signup::mail_facts(&mut conn, &refs)
            .await?
            .into_iter()
            .map(|f| (f.id, f))
            .collect();
        Ok(Confirms { key, facts })
    }
}

/// Subject and plain-text body of a confirmation mail.
pub fn subject_and_body(
    confirms: &Confirms,
    public_url: &str,
    job: &JobId,
) -> anyhow::Result<(String, String)> {
    let JobId::Confirm { org_id, signup_id } = job else {
        anyhow::bail!("not a confirmation job: {job}");
    };
    let f = confirms
        .facts
        .get(signup_id)
        .filter(|f| f.org_id == *org_id)
        .ok_or_else(|| anyhow::anyhow!("the sign-up {signup_id} no longer exists"))?;
    anyhow::ensure!(
        f.pending,
        "the sign-up was confirmed before its mail was sent"
    );
    let link = app::signup::confirm_link(
        public_url,
        &app::signup::confirm_token(&confirms.key, *org_id, *signup_id),
    );
    Ok((
        format!(
            "Confirm your subscription to {} ({})",
            f.list_name, f.org_name
        ),
        format!(
            "Someone, hopefully you, asked to receive {list} from {org} at this address.\n\n\
             Confirm here:\n\n{link}\n\n\
             If it was not you, ignore this message: nothing is sent to you unless you confirm.\n",
            list = f.list_name,
            org = f.org_name,
        ),
    ))
}
