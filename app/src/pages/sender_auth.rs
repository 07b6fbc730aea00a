//! Settings → sender authentication: the envelope sender (Return-Path) and the DKIM key with
//! the DNS record to publish for it. The private key can be pasted in but is never shown.

use leptos::prelude::*;

use super::action_outcome as outcome;
use super::settings::{BUTTON, INPUT, SMALL_BUTTON};
use crate::api::sender_auth::{
    AddDkimEd25519Key, DkimView, RemoveDkimEd25519Key, SaveDkimKey, SaveReturnPath, SenderAuthData,
    SetDkimEnabled,
};

/// The section's actions, created at the page's top level with the resource they refresh.
#[derive(Clone, Copy)]
pub struct SenderAuthActions {
    pub return_path: ServerAction<SaveReturnPath>,
    pub key: ServerAction<SaveDkimKey>,
    pub enable: ServerAction<SetDkimEnabled>,
    pub ed25519_add: ServerAction<AddDkimEd25519Key>,
    pub ed25519_remove: ServerAction<RemoveDkimEd25519Key>,
}

impl SenderAuthActions {
    pub fn new() -> Self {
        Self {
            return_path: ServerAction::new(),
            key: ServerAction::new(),
            enable: ServerAction::new(),
            ed25519_add: ServerAction::new(),
            ed25519_remove: ServerAction::new(),
        }
    }

    /// Changes whenever one of them completes (the resource's source).
    pub fn versions(&self) -> [usize; 5] {
        [
            self.return_path.version().get(),
            self.key.version().get(),
            self.enable.version().get(),
            self.ed25519_add.version().get(),
            self.ed25519_remove.version().get(),
        ]
    }
}

#[component]
pub fn SenderAuth(d: SenderAuthData, actions: SenderAuthActions) -> impl IntoView {
    let disabled = !d.can_manage;
    let action = actions.return_path;
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="sender-auth-heading">
            <h2 id="sender-auth-heading" class="text-lg font-semibold mb-1">"Sender authentication"</h2>
            <h3 class="mt-3 font-semibold">"Envelope sender (Return-Path)"</h3>
            <p class="mb-3 text-sm text-slate-600 dark:text-slate-300">
                "The address given to the SMTP server as MAIL FROM: receiving servers send bounces there and check it with SPF. Empty: the From address ("
                {d.from_address.clone()} ")."
            </p>
            {move || outcome(action.value().get(), "return-path-result")}
            <ActionForm action=action attr:id="return-path-form" attr:class="flex flex-wrap items-end gap-3 text-sm">
                <label class="block grow">
                    <span class="text-slate-600 dark:text-slate-300">"Return-Path " <span class="text-slate-400">"(optional)"</span></span>
                    <input name="return_path" type="email" value=d.return_path.clone() disabled=disabled
                        placeholder="Bounces go to the From address" class=INPUT/>
                </label>
                {d.can_manage.then(|| view! {
                    <button type="submit" id="save-return-path" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
            <Dkim dkim=d.dkim.clone() can_manage=d.can_manage actions/>
            {disabled.then(|| view! { <p class="mt-2 text-sm text-slate-500 dark:text-slate-400">"Only an owner can change sender authentication."</p> })}
        </section>
    }
    .into_any()
}

#[component]
fn Dkim(dkim: Option<DkimView>, can_manage: bool, actions: SenderAuthActions) -> impl IntoView {
    let (key, enable) = (actions.key, actions.enable);
    let state = match &dkim {
        None => "No key yet: messages go out unsigned.".to_string(),
        Some(k) if k.enabled => format!("Signing is on ({}, selector {}).", k.domain, k.selector),
        Some(_) => "Signing is off: publish the record below, then enable it.".to_string(),
    };
    let record = dkim.clone().map(|k| view! {
        <DnsRecord name=k.record_name.clone() value=k.record_value.clone() test="dkim-record"/>
        {(!k.aligned).then(|| view! {
            <p class="mt-2 text-sm text-amber-800 dark:text-amber-300" data-test="dkim-unaligned">
                {format!("The From address is not in {}: DMARC will not count this signature.", k.domain)}
            </p>
        })}
    });
    let toggle = match (&dkim, can_manage) {
        (Some(k), true) => {
            let next = !k.enabled;
            Some(view! {
                <ActionForm action=enable attr:class="mt-3">
                    <input type="hidden" name="enabled" value=next.to_string()/>
                    <button type="submit" id="toggle-dkim" disabled=move || enable.pending().get() class=SMALL_BUTTON>
                        {if next { "Enable signing" } else { "Disable signing" }}
                    </button>
                </ActionForm>
            })
        }
        _ => None,
    };
    let (domain, selector) = dkim
        .as_ref()
        .map(|k| (k.domain.clone(), k.selector.clone()))
        .unwrap_or_default();
    view! {
        <h3 class="mt-6 font-semibold">"DKIM signing"</h3>
        <p class="text-sm text-slate-600 dark:text-slate-300" data-test="dkim-state">{state}</p>
        {move || outcome(key.value().get(), "dkim-key-result")}
        {move || outcome(enable.value().get(), "dkim-enable-result")}
        {record}
        {toggle}
        {dkim.as_ref().map(|k| view! { <Ed25519 dkim=k.clone() can_manage actions/> })}
        {can_manage.then(|| view! {
            <ActionForm action=key attr:id="dkim-key-form" attr:class="mt-4 grid gap-3 text-sm md:grid-cols-2">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Signing domain"</span>
                    <input name="domain" value=domain.clone() required placeholder="example.com" class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Selector"</span>
                    <input name="selector" value=selector.clone() required placeholder="mailroom1" class=INPUT/>
                </label>
                <label class="block md:col-span-2">
                    <span class="text-slate-600 dark:text-slate-300">"Private key (PEM) " <span class="text-slate-400">"(optional: leave empty to generate an RSA 2048 key)"</span></span>
                    <textarea name="private_key" rows="4" autocomplete="off" spellcheck="false"
                        placeholder="-----BEGIN RSA PRIVATE KEY-----" class=INPUT></textarea>
                </label>
                <div>
                    <button type="submit" id="save-dkim-key" disabled=move || key.pending().get() class=BUTTON>
                        "Save key (generate when empty)"
                    </button>
                    <p class="mt-1 text-slate-500 dark:text-slate-400">"A new key turns signing off until you enable it again; a new selector lets the old record stay published meanwhile."</p>
                </div>
            </ActionForm>
        })}
    }
    .into_any()
}

/// The optional second key: Ed25519 signatures beside the RSA ones (RFC 8463).
#[component]
fn Ed25519(dkim: DkimView, can_manage: bool, actions: SenderAuthActions) -> impl IntoView {
    let (add, remove) = (actions.ed25519_add, actions.ed25519_remove);
    let state = match &dkim.ed25519 {
        None => "None: messages carry the RSA signature alone.".to_string(),
        Some(e) => format!(
            "Selector {}: while signing is on, every message also carries an Ed25519 signature.",
            e.selector
        ),
    };
    let record = dkim.ed25519.clone().map(|e| {
        view! {
            <DnsRecord name=e.record_name value=e.record_value test="dkim-ed25519-record"/>
        }
    });
    let has_key = dkim.ed25519.is_some();
    view! {
        <h4 class="mt-4 text-sm font-semibold">"Ed25519 key (dual signing)"</h4>
        <p class="text-sm text-slate-600 dark:text-slate-300" data-test="dkim-ed25519-state">{state}</p>
        {move || outcome(add.value().get(), "dkim-ed25519-result")}
        {move || outcome(remove.value().get(), "dkim-ed25519-remove-result")}
        {record}
        {can_manage.then(|| view! {
            <ActionForm action=add attr:id="dkim-ed25519-form" attr:class="mt-2 flex flex-wrap items-end gap-3 text-sm">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Ed25519 selector"</span>
                    <input name="selector" required placeholder="mailroom1e" class=INPUT/>
                </label>
                <button type="submit" id="add-dkim-ed25519" disabled=move || add.pending().get() class=SMALL_BUTTON>
                    {if has_key { "Replace Ed25519 key" } else { "Generate Ed25519 key" }}
                </button>
            </ActionForm>
        })}
        {(can_manage && has_key).then(|| view! {
            <ActionForm action=remove attr:class="mt-2">
                <button type="submit" id="remove-dkim-ed25519" disabled=move || remove.pending().get() class=SMALL_BUTTON>
                    "Remove Ed25519 key"
                </button>
            </ActionForm>
        })}
    }
    .into_any()
}

/// A DNS TXT record to publish; `test` marks it, and `{test}-name` and `{test}-value` its parts.
#[component]
fn DnsRecord(name: String, value: String, test: &'static str) -> impl IntoView {
    view! {
        <dl class="mt-2 grid gap-1 text-sm" data-test=test>
            <dt class="text-slate-600 dark:text-slate-300">"DNS TXT record name"</dt>
            <dd><code data-test=format!("{test}-name") class="break-all">{name}</code></dd>
            <dt class="text-slate-600 dark:text-slate-300">"Value"</dt>
            <dd><code data-test=format!("{test}-value") class="block break-all rounded bg-slate-100 p-2 dark:bg-slate-800">{value}</code></dd>
        </dl>
    }
}
