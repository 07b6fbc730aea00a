use leptos::prelude::*;

use super::WEEKDAYS;
use crate::api::overview::{get_overview, Overview};

#[component]
pub fn OverviewPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| get_overview());
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(o) => view! { <Figures o/> }.into_any(),
                    Err(e) => crate::pages::load_error(e),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Card(
    label: &'static str,
    value: String,
    #[prop(optional)] hint: Option<String>,
) -> impl IntoView {
    view! {
        <div class="rounded-lg bg-white p-4 shadow dark:bg-slate-900">
            <div class="text-sm text-slate-500 dark:text-slate-400">{label}</div>
            <div class="text-2xl font-semibold">{value}</div>
            {hint.map(|h| view! { <div class="text-xs text-slate-400">{h}</div> })}
        </div>
    }
}

#[component]
fn Figures(o: Overview) -> impl IntoView {
    let weekday = WEEKDAYS
        .get((o.digest_weekday as usize).saturating_sub(1))
        .copied()
        .unwrap_or("?");
    view! {
        <h1 id="org-name" class="text-2xl font-semibold mb-1">{o.org_name.clone()}</h1>
        <p class="mb-6 text-slate-500 dark:text-slate-400">
            {format!("Weekly digest: {weekday}s at {:02}:00 ({}). Last scheduled digest: {}.",
                o.digest_hour, o.timezone, o.last_digest.clone().unwrap_or_else(|| "none yet".into()))}
        </p>
        {(o.webhooks_turned_off > 0).then(|| view! {
            <p role="alert" data-test="webhooks-off" class="mb-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">
                {format!("{} event webhook endpoint(s) failed for a day and were turned off: their events wait. ", o.webhooks_turned_off)}
                <a href="/settings/webhooks" class="underline">"See Settings › Event webhooks."</a>
            </p>
        })}
        <div class="grid grid-cols-2 gap-4 md:grid-cols-4">
            <Card label="Subscribers" value=super::thousands(o.subscribers) hint=format!("{} confirmed", super::thousands(o.confirmed))/>
            <Card label="Lists" value=super::thousands(o.lists)/>
            <Card label="Suppressed addresses" value=super::thousands(o.suppressions)/>
            <Card label="Worker hosts alive" value=super::thousands(o.workers_alive)/>
            <Card label="Draft campaigns" value=super::thousands(o.campaigns_draft)/>
            <Card label="In review / approved" value=super::thousands(o.campaigns_in_review)/>
            <Card label="Sending or paused" value=super::thousands(o.campaigns_active)/>
            <Card label="Sent campaigns" value=super::thousands(o.campaigns_sent)/>
            <Card label="Delivered (7 days)" value=super::thousands(o.delivered_7d)/>
            <Card label="Failed (7 days)" value=super::thousands(o.failed_7d)/>
            <Card label="Unknown, needs a look" value=super::thousands(o.unknown_open)/>
            <Card label="In the queue now" value=super::thousands(o.queued_now)/>
        </div>
        <h2 class="mt-8 mb-2 text-lg font-semibold">"Recent activity"</h2>
        <ul class="rounded-lg bg-white shadow divide-y divide-slate-100 text-sm dark:bg-slate-900 dark:divide-slate-800">
            {if o.recent.is_empty() {
                view! { <li class="p-3 text-slate-500 dark:text-slate-400">"Nothing yet."</li> }.into_any()
            } else {
                o.recent.into_iter().map(|r| view! {
                    <li class="p-3">
                        <span class="text-slate-500 dark:text-slate-400">{r.at}</span> " · " {r.actor.unwrap_or_else(|| "system".into())}
                        " · " {r.action} " (" {r.object_type} ")"
                    </li>
                }).collect_view().into_any()
            }}
        </ul>
    }
}
