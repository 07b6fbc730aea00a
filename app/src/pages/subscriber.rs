//! One subscriber: edit their name, status and lists; which campaigns reached them and how;
//! the events the SaaS reported about them; remove them (only before any campaign did) or
//! erase their personal data.

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_params_map;

use crate::api::subscribers::{
    subscriber, EraseSubscriber, RemoveSubscriber, SaveSubscriber, SubscriberDetail,
};
use crate::domain::SubscriberStatus;
use crate::error::AppError;

const FIELD: &str = "mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600 dark:bg-slate-900";

#[component]
pub fn SubscriberPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    let save = ServerAction::<SaveSubscriber>::new();
    let erase = ServerAction::<EraseSubscriber>::new();
    let remove = ServerAction::<RemoveSubscriber>::new();
    let detail = Resource::new(
        move || (id(), save.version().get(), erase.version().get()),
        |(id, _, _)| async move {
            match id {
                Some(id) => subscriber(id).await,
                None => Err(AppError::NotFound),
            }
        },
    );
    view! {
        <super::audience::AudienceTabs current="Subscribers"/>
        {move || super::action_outcome(save.value().get(), "save-result")}
        {move || super::action_outcome(erase.value().get(), "erase-result")}
        {move || super::action_outcome(remove.value().get(), "remove-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => view! { <Detail d save erase remove/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Detail(
    d: SubscriberDetail,
    save: ServerAction<SaveSubscriber>,
    erase: ServerAction<EraseSubscriber>,
    remove: ServerAction<RemoveSubscriber>,
) -> impl IntoView {
    let editable = d.can_act && d.subscriber.erased.is_none();
    let (id, name) = (d.subscriber.id, d.subscriber.name.clone());
    let source = d.subscriber.suppression_source.clone().unwrap_or_default();
    let at = d.subscriber.suppressed_at.clone().unwrap_or_default();
    let suppression = d.subscriber.suppression.map(|reason| view! {
        <p class="mb-3 rounded bg-slate-100 px-3 py-2 text-sm dark:bg-slate-800" data-test="suppression">
            {format!("Suppressed ({reason}, {source}) since {at}: no campaign reaches this address.")}
        </p>
    });
    let erased = d.subscriber.erased.clone().map(|at| {
        view! {
            <p class="mb-3 rounded bg-amber-50 px-3 py-2 text-sm text-amber-900 dark:bg-amber-950 dark:text-amber-200" data-test="erased">
                {format!("Personal data erased on {at}. The address stays suppressed.")}
            </p>
        }
    });
    let (status, lists) = (d.subscriber.status, d.lists.clone());
    let form = editable.then(move || view! {
        <ActionForm action=save attr:class="mb-6 grid max-w-xl gap-3 text-sm">
            <input type="hidden" name="id" value=id.to_string()/>
            <label>"Name"<input name="name" maxlength="200" value=name class=FIELD data-test="name"/></label>
            <label>"Status"
                <select name="status" class=FIELD data-test="status">
                    {SubscriberStatus::ALL.into_iter().map(|s| view! {
                        <option value=s.as_str() selected=status == s>{s.as_str()}</option>
                    }).collect_view()}
                </select>
            </label>
            <fieldset class="flex flex-wrap gap-3"><legend>"Lists"</legend>
                {lists.iter().enumerate().map(|(k, (l, member))| view! {
                    <label class="flex items-center gap-1"><input type="checkbox" name=format!("lists[{k}]") value=l.id.to_string() checked=*member data-test="list-member"/>{l.name.clone()}</label>
                }).collect_view()}
            </fieldset>
            <button type="submit" data-test="save" class="justify-self-start rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"Save"</button>
        </ActionForm>
    });
    let email = d.subscriber.email.clone();
    let actions = editable.then(move || {
        view! {
            <div class="mb-6 flex gap-3">
                <super::Confirm label="Remove" test="remove" question=format!("Remove {email}? Only possible while no campaign has reached them.")>
                    <ActionForm action=remove>
                        <super::DangerSubmit label="Remove" test="confirm-remove" name="id" value=id.to_string()/>
                    </ActionForm>
                </super::Confirm>
                <super::Confirm label="Erase personal data" test="erase" question=format!("Erase {email}'s personal data? The address becomes a hash everywhere, their name goes, and they stay suppressed. This cannot be undone.")>
                    <ActionForm action=erase>
                        <super::DangerSubmit label="Erase" test="confirm-erase" name="id" value=id.to_string()/>
                    </ActionForm>
                </super::Confirm>
            </div>
        }
    });
    let history = if d.history.is_empty() {
        view! { <p class="text-sm text-slate-600 dark:text-slate-300" data-test="no-history">"No campaign has been sent to them yet."</p> }.into_any()
    } else {
        view! {
            <super::DataTable test="history" headings=&["Campaign", "Outcome", "When", "Detail"]>
                    {d.history.into_iter().map(|h| view! {
                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="history-row">
                            <td class="p-3"><A href=format!("/campaigns/{}", h.campaign_id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{h.campaign}</A></td>
                            <td class="p-3">{h.status}</td>
                            <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{h.at}</td>
                            <td class="p-3 font-mono text-xs text-slate-600 break-all dark:text-slate-300">{h.detail}</td>
                        </tr>
                    }).collect_view()}
                </super::DataTable>
        }.into_any()
    };
    let timeline = if d.events.is_empty() {
        view! { <p class="text-sm text-slate-600 dark:text-slate-300" data-test="no-events">"No events reported about them."</p> }.into_any()
    } else {
        view! {
            <super::DataTable test="events" headings=&["Event", "When", "Properties"]>
                {d.events.into_iter().map(|e| view! {
                    <tr class="border-t border-slate-100 dark:border-slate-800" data-test="event-row">
                        <td class="p-3 font-medium">{e.name}</td>
                        <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{e.at}</td>
                        <td class="p-3 font-mono text-xs text-slate-600 break-all dark:text-slate-300">{e.properties}</td>
                    </tr>
                }).collect_view()}
            </super::DataTable>
        }.into_any()
    };
    let automations = if d.automations.is_empty() {
        view! { <p class="text-sm text-slate-600 dark:text-slate-300" data-test="no-automations">"In no automation."</p> }.into_any()
    } else {
        view! {
            <super::DataTable test="subscriber-automations" headings=&["Automation", "State", "Next step", "Enrolled", "Mails"]>
                {d.automations.into_iter().map(|a| view! {
                    <tr class="border-t border-slate-100 dark:border-slate-800" data-test="subscriber-automation">
                        <td class="p-3"><A href=format!("/automations/{}", a.automation_id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{a.automation}</A></td>
                        <td class="p-3">{a.state}</td>
                        <td class="p-3">{a.step}</td>
                        <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{a.enrolled}</td>
                        <td class="p-3">{a.mails}</td>
                    </tr>
                }).collect_view()}
            </super::DataTable>
        }.into_any()
    };
    let external = d
        .subscriber
        .external_id
        .clone()
        .map(|x| format!(" · external id {x}"))
        .unwrap_or_default();
    view! {
        <h2 class="mb-1 text-xl font-semibold" data-test="subscriber-email">{d.subscriber.email.clone()}</h2>
        <p class="mb-3 text-sm text-slate-500 dark:text-slate-400" data-test="subscriber-facts">{format!("{} · added {}{external}", d.subscriber.status, d.subscriber.created)}</p>
        <p class="mb-3 text-sm" data-test="consent">{consent(&d.subscriber)}</p>
        {suppression}
        {erased}
        {form}
        {actions}
        <h3 class="mb-2 font-semibold">"History"</h3>
        {history}
        <h3 class="mb-2 mt-6 font-semibold">"Automations"</h3>
        {automations}
        <h3 class="mb-2 mt-6 font-semibold">"Events"</h3>
        {timeline}
    }
}

/// How and when they opted in, and confirmed: the evidence an operator shows when asked.
fn consent(s: &crate::model::SubscriberProfile) -> String {
    let how = match s.optin_source.as_deref() {
        Some("signup") => "Signed up on the sign-up page",
        Some("api") => "Added through the API",
        Some("import") => "Imported from a CSV file",
        Some("dashboard") => "Added in the dashboard",
        _ => "Added before opt-in evidence was kept",
    };
    let mut out = how.to_string();
    if let Some(at) = &s.optin_at {
        out.push_str(&format!(" at {at}"));
    }
    if let Some(ip) = &s.optin_ip {
        out.push_str(&format!(" from {ip}"));
    }
    out.push('.');
    match (&s.confirmed_at, &s.confirmed_ip) {
        (Some(at), Some(ip)) => out.push_str(&format!(" Confirmed by the link at {at} from {ip}.")),
        (Some(at), None) => out.push_str(&format!(" Confirmed by the link at {at}.")),
        _ if s.optin_source.as_deref() == Some("signup") => out.push_str(" Not confirmed yet."),
        _ => {}
    }
    out
}
