//! Set-password mail (`invite:` jobs): an invitation or a password reset, carrying its link.
//! The link's token is derived from the job id with the shared key (`app::password_token`), so
//! nothing secret is stored in the delivery or shown with it.

use std::collections::HashMap;

use sqlx::PgPool;

use app::db::delivery::Claimed;
use app::db::password_tokens::MailFacts;
use app::domain::{JobId, LinkPurpose, Reference, UserId};

/// The links of a batch's invite mail and the key to derive them, loaded once per batch.
#[derive(Default)]
pub struct Invites {
    pub key: Vec<u8>,
    pub facts: HashMap<i64, MailFacts>,
}

impl Invites {
    pub async fn load(pool: &PgPool, batch: &[Claimed]) -> anyhow::Result<Self> {
        let mut refs: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| match c.job {
                JobId::Invite {
                    org_id, token_id, ..
                } => Some((org_id, token_id)),
                _ => None,
            })
            .collect();
        if refs.is_empty() {
            return Ok(Invites::default());
        }
        refs.sort_unstable();
        refs.dedup();
        let key = app::signing::Purpose::PasswordToken.key(pool).await?;
        let mut conn = pool.acquire().await?;
        let facts = app::db::password_tokens::mail_facts(&mut conn, &refs)
            .await?
            .into_iter()
            .map(|f| (f.id, f))
            .collect();
        Ok(Invites { key, facts })
    }
}

/// Subject and plain-text body of a set-password message.
pub fn subject_and_body(
    invites: &Invites,
    public_url: &str,
    job: &JobId,
    c: &Claimed,
) -> anyhow::Result<(String, String)> {
    let JobId::Invite {
        org_id,
        user_id,
        token_id,
    } = job
    else {
        anyhow::bail!("not a set-password job: {job}");
    };
    let f = invites
        .facts
        .get(token_id)
        .filter(|f| {
            f.org_id == *org_id
                && f.user_id == *user_id
                && c.reference
                    == Reference::Invite {
                        user: UserId(f.user_id),
                    }
        })
        .ok_or_else(|| anyhow::anyhow!("the set-password link {token_id} does not exist"))?;
    // A link that was used, replaced by a newer one or expired is not worth a message.
    anyhow::ensure!(
        f.live,
        "the set-password link was used, replaced or expired before it was sent"
    );
    let link =
        app::password_token::link(public_url, &app::password_token::token(&invites.key, job));
    let (subject, why) = match f.purpose {
        LinkPurpose::Invite => (
            format!("You are invited to {} on Mailroom", f.org_name),
            format!("You have been invited to {} on Mailroom. Choose your password here:", f.org_name),
        ),
        LinkPurpose::Reset => (
            format!("Set a new Mailroom password for {}", f.org_name),
            format!(
                "An owner of {} reset your Mailroom password; your old password no longer works. Choose a new one here:",
                f.org_name
            ),
        ),
    };
    // Only an invitation can arrive unexpected; a reset follows from an account they have.
    let unexpected = match f.purpose {
        LinkPurpose::Invite => "If you did not expect this invitation, ignore this message.\n",
        LinkPurpose::Reset => "",
    };
    Ok((
        subject,
        format!(
            "Hello {name},\n\n{why}\n\n{link}\n\nThe link works once, until {expires}.\n{unexpected}",
            name = f.user_name,
            expires = f.expires,
        ),
    ))
}
