//! Digests: this week's digest and its preview, the schedule, each admin's opt-in, and the
//! history with every recipient's delivery. Every form is an `ActionForm`, so it works before
//! the wasm has loaded (a plain POST and a redirect back) and, once hydrated, without a reload.

use leptos::prelude::*;
use leptos_router::components::A;

use super::deliveries::badge_class;
use super::{action_outcome as outcome, WEEKDAYS};
use crate::api::digests::{
    digest_preview, digests_view, DigestAdmin, DigestsData, HistoryEntry, SaveDigestSchedule,
    SetDigestOptIn,
};
use crate::domain::{DeliveryStatus, DigestKind};

#[component]
pub fn DigestsPage() -> impl IntoView {
    let opt_in = ServerAction::<SetDigestOptIn>::new();
    let schedule = ServerAction::<SaveDigestSchedule>::new();
    let data = Resource::new(
        move || (opt_in.version().get(), schedule.version().get()),
        |_| digests_view(),
    );
    let preview = Resource::new(move || schedule.version().get(), |_| digest_preview());
    view! {
        <h1 class="text-2xl font-semibold mb-4">"Digests"</h1>
        {move || outcome(opt_in.value().get(), "opt-in-result")}
        {move || outcome(schedule.value().get(), "schedule-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => view! {
                        <ThisWeek d=d.clone()/>
                        <div class="mb-6 grid gap-6 md:grid-cols-2">
                            <Schedule d=d.clone() action=schedule/>
                            <Admins admins=d.admins.clone() action=opt_in/>
                        </div>
                        <History rows=d.history/>
                    }.into_any(),
                }
            })}
        </Suspense>
        <section class="mt-6">
            <h2 class="text-lg font-semibold mb-2">"Preview of this week's digest"</h2>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match preview.await {
                        Err(e) => crate::pages::load_error(e),
                        Ok(p) => view! {
                            <p class="mb-2 text-sm" data-test="preview-subject"><span class="text-slate-500 dark:text-slate-400">"Subject: "</span>{p.subject}</p>
                            // Sandboxed: the digest's HTML cannot run script or reach the page.
                            <iframe id="digest-preview" title="Digest preview" sandbox="" srcdoc=p.html
                                class="h-96 w-full rounded border border-slate-200 bg-white dark:border-slate-700 dark:bg-slate-900"></iframe>
                            <details class="mt-2 text-sm">
                                <summary class="cursor-pointer text-indigo-700 dark:text-indigo-300">"Plain-text version"</summary>
                                <pre id="digest-preview-text" class="mt-2 whitespace-pre-wrap rounded bg-white p-3 text-xs shadow dark:bg-slate-900">{p.text}</pre>
                            </details>
                        }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn ThisWeek(d: DigestsData) -> impl IntoView {
    let state = match d.this_week_claimed {
        Some(DigestKind::Scheduled) => "sent",
        Some(DigestKind::Skipped) => "skipped (the 24-hour window was missed)",
        Some(DigestKind::Manual) | None => "not sent yet",
    };
    view! {
        <section class="mb-6 flex flex-wrap items-center justify-between gap-4 rounded-lg bg-white p-4 shadow dark:bg-slate-900">
            <p data-test="this-week">
                "This week's digest (" {d.this_week.clone()} ") is scheduled for "
                <strong>{d.this_week_at.clone()}</strong> " (" {d.timezone.clone()} "): "
                <span data-test="this-week-state">{state}</span> "."
            </p>
            {d.can_act.then(|| view! {
                <A href="/digests/resend" attr:id="resend-now"
                    attr:class="rounded bg-indigo-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-indigo-700">
                    "Resend now"
                </A>
            })}
        </section>
    }
}

#[component]
fn Schedule(d: DigestsData, action: ServerAction<SaveDigestSchedule>) -> impl IntoView {
    let (weekday, hour) = (d.weekday, d.hour);
    let disabled = !d.can_act;
    view! {
        <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900">
            <h2 class="text-lg font-semibold mb-3">"Schedule"</h2>
            <ActionForm action=action attr:id="digest-schedule" attr:class="grid gap-3 text-sm">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Day"</span>
                    <select name="weekday" disabled=disabled class="mt-1 block w-full rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                        {(1..=7i16).map(|n| view! {
                            <option value=n.to_string() selected=n == weekday>{WEEKDAYS[(n - 1) as usize]}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Hour"</span>
                    <select name="hour" disabled=disabled class="mt-1 block w-full rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                        {(0..24i16).map(|h| view! {
                            <option value=h.to_string() selected=h == hour>{format!("{h:02}:00")}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Time zone"</span>
                    <input name="timezone" value=d.timezone.clone() disabled=disabled required
                        class="mt-1 block w-full rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600"/>
                </label>
                {d.can_act.then(|| view! {
                    <button type="submit" id="save-schedule" disabled=move || action.pending().get()
                        class="justify-self-start rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                        "Save schedule"
                    </button>
                })}
            </ActionForm>
        </section>
    }
}

#[component]
fn Admins(admins: Vec<DigestAdmin>, action: ServerAction<SetDigestOptIn>) -> impl IntoView {
    view! {
        <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900">
            <h2 class="text-lg font-semibold mb-3">"Who receives it"</h2>
            <ul id="digest-admins" class="divide-y divide-slate-100 text-sm dark:divide-slate-800">
                {admins.into_iter().map(|a| view! { <AdminRow a action/> }).collect_view()}
            </ul>
        </section>
    }
}

#[component]
fn AdminRow(a: DigestAdmin, action: ServerAction<SetDigestOptIn>) -> impl IntoView {
    let on = a.weekly_digest;
    let can_toggle = a.can_toggle;
    let switch_label = format!("Weekly digest for {}", a.email);
    let label = if on { "On" } else { "Off" };
    let class = if on {
        "w-16 rounded-full bg-green-600 px-3 py-1 text-white disabled:opacity-50"
    } else {
        "w-16 rounded-full bg-slate-300 px-3 py-1 text-slate-800 disabled:opacity-50"
    };
    view! {
        <li class="flex items-center justify-between gap-3 py-2" data-test="digest-admin" data-email=a.email.clone()>
            <div>
                <div class="font-medium">{a.name.clone()}</div>
                <div class="text-slate-500 dark:text-slate-400">{a.email.clone()} " · " {a.role.as_str()}</div>
            </div>
            <ActionForm action=action>
                <input type="hidden" name="user_id" value=a.user_id.to_string()/>
                <input type="hidden" name="enabled" value=(!on).to_string()/>
                <button type="submit" role="switch" aria-checked=on.to_string() data-test="opt-in"
                    aria-label=switch_label
                    disabled=move || !can_toggle || action.pending().get() class=class>
                    {label}
                </button>
            </ActionForm>
        </li>
    }
}

#[component]
fn History(rows: Vec<HistoryEntry>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p id="no-digests" class="text-slate-600 dark:text-slate-300">"No digest has been sent yet."</p> }.into_any();
    }
    view! {
        <section>
            <h2 class="text-lg font-semibold mb-2">"History"</h2>
            <table id="digest-history" class="w-full rounded bg-white text-sm shadow dark:bg-slate-900">
                <thead class="text-left text-slate-500 dark:text-slate-400">
                    <tr>
                        <th class="p-3">"Week"</th><th class="p-3">"Kind"</th><th class="p-3">"Scheduled / sent"</th>
                        <th class="p-3">"Triggered by"</th><th class="p-3">"Recipients"</th>
                    </tr>
                </thead>
                <tbody>
                    {rows.into_iter().map(|r| view! { <HistoryRow r/> }).collect_view()}
                </tbody>
            </table>
        </section>
    }
    .into_any()
}

#[component]
fn HistoryRow(r: HistoryEntry) -> impl IntoView {
    let who = match (&r.triggered_by, r.only_me) {
        (Some(name), true) => format!("{name} (only me)"),
        (Some(name), false) => name.clone(),
        (None, _) => "schedule".into(),
    };
    let recipients = r
        .recipients
        .iter()
        .map(|(to, status)| {
            let class = status
                .parse::<DeliveryStatus>()
                .map(badge_class)
                .unwrap_or("bg-slate-100 text-slate-700 dark:bg-slate-800 dark:text-slate-300");
            view! {
                <li data-test="digest-recipient" data-status=status.clone()>
                    {to.clone()} " " <span class=format!("rounded-full px-2 py-0.5 text-xs {class}")>{status.clone()}</span>
                </li>
            }
        })
        .collect_view();
    view! {
        <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-test="digest-row" data-kind=r.kind.as_str() data-week=r.week_key.clone()>
            <td class="p-3 font-mono text-xs">{r.covers_week.clone()}<div class="text-slate-400">{r.week_key.clone()}</div></td>
            <td class="p-3">{r.kind.as_str()}</td>
            <td class="p-3 whitespace-nowrap">{r.scheduled_at.clone()}<div class="text-slate-400">{r.created_at.clone()}</div></td>
            <td class="p-3">{who}</td>
            <td class="p-3">
                <div data-test="recipient-count">{r.recipient_count}</div>
                <ul class="mt-1 space-y-1">{recipients}</ul>
            </td>
        </tr>
    }
}
