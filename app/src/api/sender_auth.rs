//! Sender authentication: the org's DKIM key (generated or pasted, then enabled once its DNS
//! record is published) and its envelope sender (Return-Path). Everyone reads them; only an
//! owner changes them, each change audited. The private key goes in, never out: no response
//! and no audit row carries it.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::audit;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderAuthData {
    pub from_address: String,
    /// Empty when the envelope sender is the From address.
    pub return_path: String,
    pub dkim: Option<DkimView>,
    /// The signed-in user is an owner.
    pub can_manage: bool,
}

/// The org's DKIM key, public parts only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DkimView {
    pub domain: String,
    pub selector: String,
    pub enabled: bool,
    /// The DNS TXT record to publish: its name and its value.
    pub record_name: String,
    pub record_value: String,
    /// The From address is in the signing domain (or below it), so DMARC counts the signature.
    pub aligned: bool,
    /// The Ed25519 key signing beside the RSA key (RFC 8463), when there is one.
    pub ed25519: Option<Ed25519View>,
}

/// The org's Ed25519 DKIM key: its selector and the DNS record to publish for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ed25519View {
    pub selector: String,
    pub record_name: String,
    pub record_value: String,
}

#[server(endpoint = "sender_auth")]
pub async fn sender_auth_view() -> Result<SenderAuthData, AppError> {
    use crate::domain::{DkimDomain, DkimSelector};
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let sender = crate::db::settings::sender(&mut conn, me.org_id).await?;
    let return_path = crate::db::settings::return_path(&mut conn, me.org_id).await?;
    let dkim = match crate::db::settings::dkim(&mut conn, me.org_id).await? {
        None => None,
        Some(k) => {
            // Stored values were parsed when saved; a failure here is a corrupt row.
            let domain = DkimDomain::parse(&k.domain).map_err(|_| AppError::Internal)?;
            let selector = DkimSelector::parse(&k.selector).map_err(|_| AppError::Internal)?;
            let ed25519 = match (k.ed25519_selector, k.ed25519_public_key) {
                (Some(s), Some(public_key)) => {
                    let s = DkimSelector::parse(&s).map_err(|_| AppError::Internal)?;
                    Some(Ed25519View {
                        record_name: s.record_name(&domain),
                        record_value: crate::dkim_key::ed25519_dns_value(&public_key),
                        selector: s.as_str().to_owned(),
                    })
                }
                _ => None,
            };
            Some(DkimView {
                ed25519,
                record_name: selector.record_name(&domain),
                record_value: crate::dkim_key::dns_value(&k.public_key),
                aligned: domain.aligns_with(&sender.from_address),
                domain: k.domain,
                selector: k.selector,
                enabled: k.enabled,
            })
        }
    };
    Ok(SenderAuthData {
        from_address: sender.from_address,
        return_path: return_path.unwrap_or_default(),
        dkim,
        can_manage: me.role.manages_org(),
    })
}

/// Saves a DKIM key with its domain and selector (owner only): the pasted PEM, or a freshly
/// generated RSA 2048 key when none is pasted. Signing stays off until enabled, since the new
/// public key is not in DNS yet.
#[server(endpoint = "save_dkim_key")]
pub async fn save_dkim_key(
    domain: String,
    selector: String,
    #[server(default)] private_key: String,
) -> Result<String, AppError> {
    use crate::db::settings;
    use crate::dkim_key::{fingerprint, DkimKey};
    use crate::domain::{DkimDomain, DkimSelector};
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let domain =
        DkimDomain::parse(&domain).map_err(|e| AppError::Invalid(format!("DKIM domain: {e}.")))?;
    let selector = DkimSelector::parse(&selector)
        .map_err(|e| AppError::Invalid(format!("DKIM selector: {e}.")))?;
    let generated = private_key.trim().is_empty();
    let key = if generated {
        // Key generation takes a noticeable fraction of a second of CPU.
        tokio::task::spawn_blocking(DkimKey::generate)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "DKIM key generation panicked");
                AppError::Internal
            })?
            .map_err(|e| {
                tracing::error!(error = %e, "cannot generate a DKIM key");
                AppError::Internal
            })?
    } else {
        DkimKey::parse_pem(&private_key)
            .map_err(|e| AppError::Invalid(format!("DKIM private key: {e}.")))?
    };
    let encode_failed = |e: crate::dkim_key::DkimKeyError| {
        tracing::error!(error = %e, "cannot encode a DKIM key");
        AppError::Internal
    };
    let pem = key.to_pkcs1_pem().map_err(encode_failed)?;
    let public_key = key.public_key_base64().map_err(encode_failed)?;
    let mut tx = pool.begin().await?;
    let old = settings::lock_dkim(&mut tx, me.org_id).await?;
    if old.as_ref().and_then(|o| o.ed25519_selector.as_deref()) == Some(selector.as_str()) {
        return Err(AppError::Invalid(format!(
            "DKIM selector: “{}” is the Ed25519 key's selector; one DNS name holds one key, so choose another.",
            selector.as_str()
        )));
    }
    settings::replace_dkim_key(
        &mut tx,
        me.org_id,
        domain.as_str(),
        selector.as_str(),
        &pem,
        &public_key,
    )
    .await?;
    // The Ed25519 key signs for the RSA key's domain; under a new domain its record would be
    // at a name nobody published, so it goes (and says so) rather than signing for nothing.
    let dropped = old
        .as_ref()
        .filter(|o| o.domain != domain.as_str())
        .and_then(settings::DkimPublic::ed25519_key);
    if let Some(key) = dropped {
        remove_ed25519(&mut tx, &me, key).await?;
    }
    let ed25519_dropped = dropped.is_some();
    // Keys are told apart by their public key's fingerprint; neither half is recorded.
    audit::org_setting(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsDkimKey,
        old.map(|o| {
            serde_json::json!({
                "domain": o.domain, "selector": o.selector, "enabled": o.enabled,
                "public_key_sha256": fingerprint(&o.public_key),
            })
        }),
        serde_json::json!({
            "domain": domain.as_str(), "selector": selector.as_str(), "enabled": false,
            "public_key_sha256": fingerprint(&public_key),
            "source": if generated { "generated" } else { "pasted" },
        }),
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "{} key saved for {}. Publish the DNS record below, then enable signing.{}",
        if generated { "A new" } else { "The pasted" },
        selector.record_name(&domain),
        if ed25519_dropped {
            " The Ed25519 key is removed: it signed for the previous domain."
        } else {
            ""
        }
    ))
}

/// Adds a freshly generated Ed25519 key under `selector` (owner only): from then on, while
/// signing is on, every message carries an Ed25519 signature beside the RSA one (RFC 8463).
/// Receivers that do not know Ed25519 ignore it, so it can be added before its DNS record is
/// published. It signs for the RSA key's domain, so that key comes first.
#[server(endpoint = "add_dkim_ed25519_key")]
pub async fn add_dkim_ed25519_key(selector: String) -> Result<String, AppError> {
    use crate::db::settings;
    use crate::dkim_key::Ed25519DkimKey;
    use crate::domain::{DkimDomain, DkimSelector};
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let selector = DkimSelector::parse(&selector)
        .map_err(|e| AppError::Invalid(format!("Ed25519 selector: {e}.")))?;
    let key = Ed25519DkimKey::generate().map_err(|e| {
        tracing::error!(error = %e, "cannot generate an Ed25519 DKIM key");
        AppError::Internal
    })?;
    let mut tx = pool.begin().await?;
    let Some(old) = settings::lock_dkim(&mut tx, me.org_id).await? else {
        return Err(AppError::Invalid(
            "Ed25519: generate or paste the RSA key first (the Ed25519 key signs for its domain)."
                .into(),
        ));
    };
    if old.selector == selector.as_str() {
        return Err(AppError::Invalid(format!(
            "Ed25519 selector: “{}” is the RSA key's selector; one DNS name holds one key, so choose another.",
            selector.as_str()
        )));
    }
    // A new key under the name that publishes the current one would fail every receiver's
    // check until DNS caught up; rotation goes through a second name.
    if old.ed25519_selector.as_deref() == Some(selector.as_str()) {
        return Err(AppError::Invalid(format!(
            "Ed25519 selector: “{}” publishes the current Ed25519 key; a new key needs a new selector (publish its record, then retire the old one).",
            selector.as_str()
        )));
    }
    let domain = DkimDomain::parse(&old.domain).map_err(|_| AppError::Internal)?;
    settings::set_dkim_ed25519_key(
        &mut tx,
        me.org_id,
        Some((
            selector.as_str(),
            &key.private_key_pem,
            &key.public_key_base64,
        )),
    )
    .await?;
    audit::org_setting(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsDkimEd25519Key,
        old.ed25519_key().map(ed25519_audited),
        ed25519_audited((selector.as_str(), key.public_key_base64.as_str())),
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "A new Ed25519 key signs beside the RSA key while signing is on. Publish its record at {}.",
        selector.record_name(&domain)
    ))
}

/// Removes the Ed25519 key (owner only): messages carry the RSA signature alone again.
#[server(endpoint = "remove_dkim_ed25519_key")]
pub async fn remove_dkim_ed25519_key() -> Result<String, AppError> {
    use crate::db::settings;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let old = settings::lock_dkim(&mut tx, me.org_id).await?;
    let Some(key) = old.as_ref().and_then(settings::DkimPublic::ed25519_key) else {
        return Err(AppError::Invalid(
            "Ed25519: there is no Ed25519 key.".into(),
        ));
    };
    remove_ed25519(&mut tx, &me, key).await?;
    tx.commit().await?;
    Ok("The Ed25519 key is removed: messages carry the RSA signature alone.".into())
}

/// The Ed25519 key as its audit rows show it: the selector and the public key's fingerprint.
#[cfg(feature = "ssr")]
fn ed25519_audited((selector, public_key): (&str, &str)) -> serde_json::Value {
    serde_json::json!({
        "selector": selector,
        "public_key_sha256": crate::dkim_key::fingerprint(public_key),
    })
}

/// Removes the Ed25519 key, (selector, public key), under the row lock the caller holds, and
/// audits it.
#[cfg(feature = "ssr")]
async fn remove_ed25519(
    tx: &mut sqlx::PgConnection,
    me: &super::CurrentUser,
    key: (&str, &str),
) -> Result<(), AppError> {
    crate::db::settings::set_dkim_ed25519_key(tx, me.org_id, None).await?;
    audit::org_setting(
        tx,
        me,
        crate::domain::AuditAction::SettingsDkimEd25519Key,
        ed25519_audited(key),
        None::<serde_json::Value>,
    )
    .await?;
    Ok(())
}

/// Turns DKIM signing on or off (owner only).
#[server(endpoint = "set_dkim_enabled")]
pub async fn set_dkim_enabled(enabled: bool) -> Result<String, AppError> {
    use crate::db::settings;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let Some(before) = settings::set_dkim_enabled(&mut tx, me.org_id, enabled).await? else {
        return Err(AppError::Invalid(
            "DKIM: generate or paste a key first.".into(),
        ));
    };
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsDkim,
        "enabled",
        before,
        enabled,
    )
    .await?;
    tx.commit().await?;
    Ok(if enabled {
        "DKIM signing is on: every message from now on is signed.".into()
    } else {
        "DKIM signing is off: messages go out unsigned.".into()
    })
}

/// Saves the envelope sender (owner only); empty means the From address.
#[server(endpoint = "save_return_path")]
pub async fn save_return_path(return_path: String) -> Result<String, AppError> {
    use crate::db::settings;
    use crate::domain::EmailAddress;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let return_path = match return_path.trim() {
        "" => None,
        r => Some(
            EmailAddress::parse(r).map_err(|e| AppError::Invalid(format!("Return-Path: {e}.")))?,
        ),
    };
    let new = return_path.as_ref().map(EmailAddress::as_str);
    let mut tx = pool.begin().await?;
    let old = settings::save_return_path(&mut tx, me.org_id, new).await?;
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsReturnPath,
        "return_path",
        old.as_deref(),
        new,
    )
    .await?;
    tx.commit().await?;
    Ok(match new {
        Some(r) => format!("Bounces now go to {r} (the envelope sender)."),
        None => "Bounces go to the From address.".into(),
    })
}
