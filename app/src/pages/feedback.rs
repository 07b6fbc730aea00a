//! Settings › Relays: the webhook endpoints relays post bounces and complaints to, the
//! soft-bounce rule, and the latest events (matched to a delivery, or kept as unmatched).

use leptos::prelude::*;

use super::action_outcome as outcome;
use super::settings::{SettingsTabs, BUTTON, INPUT};
use super::{Confirm, DangerSubmit, DataTable};
use crate::api::feedback::{
    feedback_events, feedback_settings, CreateWebhookEndpoint, CreatedEndpoint,
    FeedbackSettingsData, RevokeWebhookEndpoint, SaveBounceDomain, SaveBouncePolicy,
};
use crate::domain::EventSource;
use crate::model::FeedbackEventRow;

#[component]
pub fn FeedbackPage() -> impl IntoView {
    let policy = ServerAction::<SaveBouncePolicy>::new();
    let domain = ServerAction::<SaveBounceDomain>::new();
    let create = ServerAction::<CreateWebhookEndpoint>::new();
    let revoke = ServerAction::<RevokeWebhookEndpoint>::new();
    let settings = Resource::new(
        move || {
            (
                policy.version().get(),
                domain.version().get(),
                create.version().get(),
                revoke.version().get(),
            )
        },
        |_| feedback_settings(),
    );
    let unmatched = RwSignal::new(false);
    let events = Resource::new(move || unmatched.get(), feedback_events);
    view! {
        <SettingsTabs current="/settings/relays"/>
        {move || outcome(policy.value().get(), "policy-result")}
        {move || outcome(domain.value().get(), "domain-result")}
        {move || outcome(revoke.value().get(), "revoke-result")}
        {move || create.value().get().map(|r| match r {
            Ok(c) => view! { <Created c/> }.into_any(),
            Err(e) => outcome(Some(Err(e)), "create-result").into_any(),
        })}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(s) => view! {
                        <Policy s=s.clone() action=policy/>
                        <BounceDomain s=s.clone() action=domain/>
                        <Endpoints s create revoke/>
                    }.into_any(),
                }
            })}
        </Suspense>
        <section class="mt-6" aria-labelledby="events-heading">
            <div class="mb-2 flex items-center gap-4">
                <h2 id="events-heading" class="text-lg font-semibold">"Reported events"</h2>
                <label class="text-sm">
                    <input type="checkbox" id="unmatched-only" class="mr-1"
                        prop:checked=move || unmatched.get()
                        on:change=move |ev| unmatched.set(event_target_checked(&ev))/>
                    "Unmatched only"
                </label>
            </div>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match events.await {
                        Err(e) => crate::pages::load_error(e),
                        Ok(rows) => view! { <Events rows/> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn Created(c: CreatedEndpoint) -> impl IntoView {
    view! {
        <div role="status" data-test="create-result" class="mb-4 rounded bg-green-50 px-3 py-2 text-sm text-green-800 dark:bg-green-950 dark:text-green-200">
            <p>"Endpoint created. Give your relay this URL (under this server's public address):"</p>
            <p class="font-mono" data-test="endpoint-path">{c.path}</p>
            {c.secret.map(|s| view! {
                <p class="mt-2">"Its secret, shown only now:"</p>
                <p class="font-mono break-all" data-test="endpoint-secret">{s}</p>
            })}
        </div>
    }
}

#[component]
fn Policy(s: FeedbackSettingsData, action: ServerAction<SaveBouncePolicy>) -> impl IntoView {
    let disabled = !s.can_manage;
    view! {
        <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="policy-heading">
            <h2 id="policy-heading" class="text-lg font-semibold mb-1">"Bounces and complaints"</h2>
            <p class="mb-3 text-sm text-slate-600 dark:text-slate-300">
                "A hard bounce or a complaint suppresses the address at once, for every kind of mail. Soft bounces suppress it for campaigns after this many within this many days. A sending campaign pauses itself, once, when its hard bounces or complaints reach these shares of what it delivered."
            </p>
            <ActionForm action=action attr:id="policy-form" attr:class="flex flex-wrap items-end gap-3 text-sm">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Soft bounces"</span>
                    <input name="soft_threshold" type="number" min="1" max="100" disabled=disabled
                        value=s.policy.soft_threshold.to_string() class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Within days"</span>
                    <input name="soft_days" type="number" min="1" max="365" disabled=disabled
                        value=s.policy.soft_days.to_string() class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Pause at bounces, %"</span>
                    <input name="pause_bounce_pct" type="number" min="0.001" max="100" step="any" disabled=disabled
                        value=s.policy.pause_bounce_pct.to_string() class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Pause at complaints, %"</span>
                    <input name="pause_complaint_pct" type="number" min="0.001" max="100" step="any" disabled=disabled
                        value=s.policy.pause_complaint_pct.to_string() class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Once delivered"</span>
                    <input name="pause_min_delivered" type="number" min="1" disabled=disabled
                        value=s.policy.pause_min_delivered.to_string() class=INPUT/>
                </label>
                {s.can_manage.then(|| view! {
                    <button type="submit" id="save-policy" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
        </section>
    }
}

#[component]
fn BounceDomain(s: FeedbackSettingsData, action: ServerAction<SaveBounceDomain>) -> impl IntoView {
    let disabled = !s.can_manage;
    view! {
        <section class="mt-4 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="domain-heading">
            <h2 id="domain-heading" class="text-lg font-semibold mb-1">"Bounce domain"</h2>
            <p class="mb-3 text-sm text-slate-600 dark:text-slate-300">
                "Set it and every message goes out with a signed VERP envelope sender at this domain (b+<token>@domain), so a bounce mailed back names its delivery. Point the domain's MX at a Mailroom started with --bounce-listen, or deliver it to a mailbox Mailroom reads with --bounce-imap. Feedback loops can report to fbl@ the domain."
            </p>
            <ActionForm action=action attr:id="domain-form" attr:class="flex flex-wrap items-end gap-3 text-sm">
                <label class="block grow">
                    <span class="text-slate-600 dark:text-slate-300">"Domain"</span>
                    <input name="domain" type="text" placeholder="bounce.example.com" disabled=disabled
                        value=s.bounce_domain.unwrap_or_default() class=INPUT/>
                </label>
                {s.can_manage.then(|| view! {
                    <button type="submit" id="save-domain" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
        </section>
    }
}

#[component]
fn Endpoints(
    s: FeedbackSettingsData,
    create: ServerAction<CreateWebhookEndpoint>,
    revoke: ServerAction<RevokeWebhookEndpoint>,
) -> impl IntoView {
    let can_manage = s.can_manage;
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="endpoints-heading">
            <h2 id="endpoints-heading" class="text-lg font-semibold mb-3">"Webhook endpoints"</h2>
            {if s.endpoints.is_empty() {
                view! { <p class="text-sm text-slate-500 dark:text-slate-400">"None yet: bounces reported by a relay after it accepted a message are not seen."</p> }.into_any()
            } else {
                view! {
                    <DataTable id="endpoints" headings=&["Relay", "URL path", "Created", ""]>
                        {s.endpoints.into_iter().map(|e| {
                            let path = format!("/hooks/v1/{}/{}", e.source, e.id);
                            let id = e.id.clone();
                            view! {
                                <tr class="border-t border-slate-100 dark:border-slate-800" data-test="endpoint">
                                    <td class="p-3">{e.source.to_string()}</td>
                                    <td class="p-3 font-mono">{path}</td>
                                    <td class="p-3">{e.created}
                                        {e.subscribe_url.map(|u| view! {
                                            <div class="mt-1 text-xs"><a href=u.clone() rel="noreferrer" target="_blank" class="text-indigo-700 underline dark:text-indigo-300" data-test="confirm-subscription">"Confirm the SNS subscription"</a></div>
                                        })}
                                    </td>
                                    <td class="p-3">{match (e.revoked, can_manage) {
                                        (true, _) => view! { <span class="text-slate-500">"revoked"</span> }.into_any(),
                                        (false, true) => view! {
                                            <Confirm label="Revoke" question="Revoke this endpoint? Its relay's next post is refused.".into() test="revoke">
                                                <ActionForm action=revoke>
                                                    <DangerSubmit label="Revoke" test="confirm-revoke" name="id" value=id/>
                                                </ActionForm>
                                            </Confirm>
                                        }.into_any(),
                                        (false, false) => ().into_any(),
                                    }}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }.into_any()
            }}
            {can_manage.then(|| view! {
                <ActionForm action=create attr:id="endpoint-form" attr:class="mt-4 flex flex-wrap items-end gap-3 text-sm">
                    <label class="block">
                        <span class="text-slate-600 dark:text-slate-300">"Relay"</span>
                        <select name="source" class=INPUT>
                            {EventSource::WEBHOOKS.iter().map(|s| view! { <option value=s.as_str()>{s.as_str()}</option> }).collect_view()}
                        </select>
                    </label>
                    <label class="block grow">
                        <span class="text-slate-600 dark:text-slate-300">"Signing or verification key " <span class="text-slate-400">"(Mailgun, SendGrid)"</span></span>
                        <input name="signing_key" type="password" autocomplete="off" class=INPUT/>
                    </label>
                    <label class="block grow">
                        <span class="text-slate-600 dark:text-slate-300">"SNS topic ARN " <span class="text-slate-400">"(SES only)"</span></span>
                        <input name="topic_arn" type="text" autocomplete="off" class=INPUT/>
                    </label>
                    <label class="block w-full">
                        <span class="text-slate-600 dark:text-slate-300">"SNS signing certificate, PEM " <span class="text-slate-400">"(SES only: the certificate at the SigningCertURL of the topic's messages)"</span></span>
                        <textarea name="certificate" rows="3" class=INPUT></textarea>
                    </label>
                    <button type="submit" id="create-endpoint" disabled=move || create.pending().get() class=BUTTON>"Create endpoint"</button>
                </ActionForm>
            })}
        </section>
    }
}

#[component]
fn Events(rows: Vec<FeedbackEventRow>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="text-sm text-slate-500 dark:text-slate-400">"No events."</p> }
            .into_any();
    }
    view! {
        <DataTable id="relay-events" headings=&["Received", "Relay", "Event", "Recipient", "Delivery", "Effect", "Diagnostic"]>
            {rows.into_iter().map(|r| view! {
                <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-test="relay-event">
                    <td class="p-3 whitespace-nowrap">{r.received}</td>
                    <td class="p-3">{r.source.to_string()}</td>
                    <td class="p-3">{r.kind.to_string()} " " {r.status}</td>
                    <td class="p-3">{r.recipient}</td>
                    <td class="p-3 font-mono text-xs">{match r.job_id {
                        Some(j) => format!("{j} (by {})", r.matched_by),
                        None => "unmatched".to_string(),
                    }}</td>
                    <td class="p-3">{r.effect.to_string()}</td>
                    <td class="p-3 text-xs">{r.diagnostic}</td>
                </tr>
            }).collect_view()}
        </DataTable>
    }
    .into_any()
}
