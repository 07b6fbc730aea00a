//! The first-run page (`/setup`): while the database holds no organisation, whoever has the
//! one-time setup token that `mailroom serve` printed in its log creates the first organisation
//! and its owner, and is signed in as that owner. The token is used up in the same transaction,
//! so of several racing submissions exactly one creates anything.

use leptos::prelude::*;

use crate::error::AppError;

/// The one-time token's name in the `secrets` table (shared by every replica).
pub const SETUP_SECRET: &str = "first_run_setup_token";

/// No organisation exists yet: the first-run page is open (behind its token).
#[server(endpoint = "setup_needed")]
pub async fn setup_needed() -> Result<bool, AppError> {
    let pool = super::pool()?;
    Ok(crate::db::orgs::none_exist(&pool).await?)
}

/// Creates the first organisation and its owner, then signs the owner in. The org's mail is
/// from the owner's address until an owner changes it in Settings.
#[server(endpoint = "first_run_setup")]
pub async fn first_run_setup(
    token: String,
    name: String,
    slug: String,
    timezone: String,
    owner_name: String,
    owner_email: String,
    password: String,
) -> Result<(), AppError> {
    use crate::db::orgs::{self, SetupError, SetupField};
    use crate::domain::{org, EmailAddress};
    let pool = super::pool()?;
    if !orgs::none_exist(&pool).await? {
        return Err(AppError::Conflict(
            "This Mailroom has an organisation already: sign in instead.".into(),
        ));
    }
    let invalid = |field: &str, e: String| AppError::Invalid(format!("{field}: {e}"));
    let name = org::name(&name, "Organisation name").map_err(AppError::Invalid)?;
    let slug = org::slug(&slug).map_err(|e| invalid("Short name", e))?;
    let owner = EmailAddress::parse(&owner_email)
        .map_err(|e| invalid("Your e-mail address", e.to_string()))?;
    let owner_name = super::users::valid_name(&owner_name)?.ok_or_else(|| {
        AppError::Invalid("Your name: enter the name the dashboard shows for you.".into())
    })?;
    crate::domain::input::line_input("Time zone", timezone.trim(), super::TIMEZONE_MAX)?;
    let hash = super::invites::new_password_hash(password).await?;
    let mut tx = pool.begin().await?;
    if !crate::db::secrets::take(&mut tx, SETUP_SECRET, token.trim().as_bytes()).await? {
        return Err(AppError::Invalid(
            "Setup token: it is not the one `mailroom serve` printed in its log (or the setup was done meanwhile)."
                .into(),
        ));
    }
    let timezone = timezone.trim();
    let timezone = if timezone.is_empty() { "UTC" } else { timezone };
    let new_org = orgs::NewOrg {
        name: &name,
        slug: &slug,
        timezone,
        from_name: &name,
        from_address: owner.as_str(),
    };
    let new_owner = orgs::NewOwner {
        email: &owner,
        name: &owner_name,
        password_hash: &hash,
    };
    let (org_id, user_id) = orgs::create_with_owner(&mut tx, new_org, new_owner, "first-run page")
        .await
        .map_err(|e| match e {
            SetupError::Field(field, message) => {
                let field = match field {
                    SetupField::Slug => "Short name",
                    SetupField::Timezone => "Time zone",
                    SetupField::OwnerEmail => "Your e-mail address",
                };
                AppError::Invalid(format!("{field}: {message}."))
            }
            SetupError::Db(e) => e.into(),
        })?;
    tx.commit().await?;
    super::auth::start_session(&pool, org_id, user_id).await
}
