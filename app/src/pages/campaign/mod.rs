//! A campaign and its send progress, live: before it sends, a note that it has not; while it
//! sends, a stacked bar of every state, the rate over the last minute, an ETA and a chart of the
//! rate with its scale; once sent or cancelled, the bar and a summary of the whole send. The server renders the first reading (the page reads
//! without JavaScript); once hydrated, an `EventSource` on `/api/campaigns/{id}/progress`
//! replaces it with every new reading and reconnects by itself after a server restart.

/// The recycle bin: deleted campaigns, when each is purged, and restore.
pub(super) mod bin;
/// The draft editor, with a preview for a real recipient and the estimate.
pub(super) mod editor;
/// The campaign list, filtered by status, and creating a campaign.
pub(super) mod list;
/// A campaign rendered for one recipient, its HTML in a sandboxed frame.
pub(super) mod preview;
/// The campaign page's workflow panel: who wrote, edited, approved it; its actions.
pub(super) mod workflow;

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::campaign::edit::{campaign_sheet, CampaignAction};
use crate::api::campaign::{campaign_detail, CampaignWithProgress};
use crate::domain::progress::{self, Phase, Progress};
use crate::domain::CampaignStatus;
use crate::error::AppError;
use crate::pages::campaign::workflow::{Panel, Problems};

#[component]
pub fn CampaignPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    // Owned here, above the Suspense, so its outcome survives the re-read that follows it; every
    // resource is made here too (a resource made inside a Suspense is remade on each pass).
    let act = ServerAction::<CampaignAction>::new();
    let key = move || (id(), act.version().get());
    let detail = Resource::new(key, |(id, _)| async move {
        match id {
            Some(id) => campaign_detail(id).await,
            None => Err(AppError::NotFound),
        }
    });
    let sheet = Resource::new(key, |(id, _)| async move {
        match id {
            Some(id) => campaign_sheet(id).await,
            None => Err(AppError::NotFound),
        }
    });
    view! {
        <p class="mb-2 text-sm"><a href="/campaigns" class="text-sky-700 hover:underline dark:text-sky-300">"← Campaigns"</a></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match (detail.await, sheet.await) {
                    (Ok(d), Ok(s)) => {
                        // One live reading for the progress and for which actions are offered.
                        let live = RwSignal::new(d.progress.clone());
                        let status = Signal::derive(move || live.with(|p| p.status));
                        // This read follows each action: the last action's outcome shows until
                        // the campaign moves on from the state read here.
                        let after = d.progress.status;
                        let outcome = move || {
                            act.value()
                                .get()
                                .filter(|_| outcome_current(after, status.get()))
                        };
                        let problems = s.problems.clone();
                        view! {
                            {move || crate::pages::action_outcome(outcome(), "action-result")}
                            <CampaignView detail=d live/> <Panel s act status/> <Problems problems/>
                        }.into_any()
                    }
                    (Err(e), _) | (_, Err(e)) => view! {
                        {move || crate::pages::action_outcome(act.value().get(), "action-result")}
                        <p role="alert" class="text-red-700 dark:text-red-300">{e.to_string()}</p>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Whether the last action's outcome, read back when the campaign was `after`, still describes
/// it now that it is `now`. It shows until the campaign moves on from there ("Campaign
/// submitted." goes once it is approved, a refusal once what refused it changed); an approval's
/// or a resume's own course (approved, sending, sent) is not moving on.
fn outcome_current(after: CampaignStatus, now: CampaignStatus) -> bool {
    use CampaignStatus as S;
    match after {
        S::Approved => matches!(now, S::Approved | S::Sending | S::Sent),
        S::Sending => matches!(now, S::Sending | S::Sent),
        _ => now == after,
    }
}

/// (field, label, bar colour) of each segment, in the bar's order.
const SEGMENTS: [(&str, &str, &str); 7] = [
    ("delivered", "Delivered", "bg-green-500"),
    ("failed", "Failed", "bg-red-500"),
    ("unknown", "Unknown", "bg-amber-400"),
    ("suppressed", "Suppressed", "bg-slate-500"),
    ("cancelled", "Cancelled", "bg-slate-300"),
    ("in_flight", "Sending", "bg-sky-500"),
    ("queued", "Queued", "bg-slate-100 dark:bg-slate-800"),
];

fn count(p: &Progress, field: &str) -> i64 {
    match field {
        "delivered" => p.delivered,
        "failed" => p.failed,
        "unknown" => p.unknown,
        "suppressed" => p.suppressed,
        "cancelled" => p.cancelled,
        "in_flight" => p.in_flight(),
        _ => p.queued,
    }
}

#[component]
fn CampaignView(detail: CampaignWithProgress, live: RwSignal<Progress>) -> impl IntoView {
    let history = RwSignal::new(Vec::new());
    history.update(|h| progress::record(h, &detail.progress));
    let connected = RwSignal::new(false);
    let id = detail.id;
    // Effects run only in the browser: the stream opens once the page is live.
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        open_stream(id, live, history, connected);
        #[cfg(not(feature = "hydrate"))]
        let _ = (id, connected);
    });
    let rate = move || history.with(|h| progress::rate(h));
    let bar = move || {
        let p = live.get();
        SEGMENTS
            .iter()
            .map(|&(field, label, colour)| {
                let n = count(&p, field);
                let width = format!("{:.3}%", p.percent(n));
                view! { <div class=format!("h-full {colour}") style:width=width title=format!("{label}: {n}")></div> }
            })
            .collect_view()
    };
    let legend = move || {
        let p = live.get();
        SEGMENTS
            .iter()
            .map(|&(field, label, colour)| {
                view! {
                    <div class="flex items-center gap-2">
                        <span class=format!("inline-block h-3 w-3 rounded-sm {colour}")></span>
                        <dt class="text-slate-600 dark:text-slate-300">{label}</dt>
                        <dd class="font-medium tabular-nums" data-test=format!("count-{field}")>{count(&p, field)}</dd>
                    </div>
                }
            })
            .collect_view()
    };
    let phase = move || live.with(|p| p.phase());
    view! {
        <div class="flex items-baseline gap-3 mb-1">
            <h1 class="text-2xl font-semibold" id="campaign-name">{detail.name.clone()}</h1>
            <span class="rounded-full bg-slate-100 px-2 py-0.5 text-sm dark:bg-slate-800" data-test="campaign-status">{move || live.with(|p| p.status.as_str())}</span>
            <span class="text-xs" data-test="live">
                {move || if connected.get() { "● live" } else { "○ not live" }}
            </span>
        </div>
        <p class="text-slate-600 mb-4 dark:text-slate-300">"Subject: " {detail.subject.clone()}</p>
        {detail.pause_reason.clone().map(|r| view! {
            <p role="status" class="mb-4 rounded border border-amber-300 bg-amber-50 p-3 text-sm text-amber-900 dark:border-amber-700 dark:bg-amber-950 dark:text-amber-100" data-test="pause-reason">{r}</p>
        })}
        <Reports counts=detail.bounces live/>
        {(!detail.links.is_empty()).then(|| view! { <Clicks links=detail.links.clone()/> })}
        {(detail.opens != crate::model::Opens::default()).then(|| view! { <Opens opens=detail.opens.clone()/> })}
        // One section in every phase: what it holds changes as the readings arrive.
        <section class="rounded bg-white shadow p-4 mb-4 dark:bg-slate-900" aria-label="Send progress">
            <Show when=move || phase() == Phase::NotStarted>
                <p class="text-sm text-slate-600 dark:text-slate-300" data-test="not-started">
                    "Not sent yet. Once it is approved and its time comes, its progress shows here as it sends."
                </p>
            </Show>
            <Show when=move || phase() != Phase::NotStarted>
                <div class="flex justify-between text-sm mb-2">
                    <span data-test="progress-summary">
                        {move || live.with(|p| format!("{} of {} recipients done", p.done(), p.total))}
                    </span>
                    <Show when=move || phase() == Phase::Sending>
                        <span>
                            "Rate: " <span data-test="rate">{move || rate().map_or("—".to_string(), |r| format!("{r:.1} msg/s"))}</span>
                            " · ETA: " <span data-test="eta">{move || progress::eta_seconds(&live.get(), rate()).map_or("—".to_string(), progress::human_duration)}</span>
                        </span>
                    </Show>
                </div>
                <div class="flex h-4 w-full overflow-hidden rounded bg-slate-100 dark:bg-slate-800" data-test="progress-bar">{bar}</div>
                <dl class="mt-3 grid grid-cols-2 gap-1 text-sm sm:grid-cols-4">{legend}</dl>
                <Show when=move || phase() == Phase::Finished fallback=move || view! { <RateChart history/> }>
                    <SendSummary live/>
                </Show>
            </Show>
        </section>
    }
}

/// Bounces and complaints relays reported, beside what was delivered (the rates a relay
/// reviews a sender by). Delivered is the live reading's, the progress panel's own figure, and
/// moves with it; the reports are as read with the page.
#[component]
fn Reports(counts: crate::domain::BounceCounts, live: RwSignal<Progress>) -> impl IntoView {
    let delivered = move || live.with(|p| p.delivered);
    let pct = move |n: i64, digits: usize| {
        crate::domain::BounceCounts::pct(n, delivered())
            .map_or("—".to_string(), |p| format!("{p:.digits$} %"))
    };
    view! {
        <dl class="mb-4 grid grid-cols-2 gap-x-4 gap-y-1 rounded bg-white p-4 text-sm shadow sm:grid-cols-4 dark:bg-slate-900" aria-label="Relay reports" data-test="relay-reports">
            <div><dt class="text-slate-600 dark:text-slate-300">"Delivered"</dt><dd class="tabular-nums" data-test="reports-delivered">{delivered}</dd></div>
            <div>
                <dt class="text-slate-600 dark:text-slate-300">"Bounced later"</dt>
                <dd class="tabular-nums"><span data-test="hard-bounces">{counts.hard_bounces}</span> " (" <span data-test="bounce-rate">{move || pct(counts.hard_bounces, 1)}</span> ")"</dd>
            </div>
            <div><dt class="text-slate-600 dark:text-slate-300">"Soft bounces"</dt><dd class="tabular-nums" data-test="soft-bounces">{counts.soft_bounces}</dd></div>
            <div>
                <dt class="text-slate-600 dark:text-slate-300">"Complaints"</dt>
                <dd class="tabular-nums"><span data-test="complaints">{counts.complaints}</span> " (" <span data-test="complaint-rate">{move || pct(counts.complaints, 2)}</span> ")"</dd>
            </div>
        </dl>
    }
}

/// Clicks per tracked link: people's clicks, how many people, and link scanners' apart.
#[component]
fn Clicks(links: Vec<crate::model::LinkClicks>) -> impl IntoView {
    view! {
        <section class="mb-4 rounded bg-white p-4 text-sm shadow dark:bg-slate-900" aria-labelledby="clicks-heading" data-test="clicks">
            <h2 id="clicks-heading" class="mb-2 font-semibold">"Clicks"</h2>
            <table class="w-full">
                <thead class="text-left text-slate-500 dark:text-slate-400">
                    <tr><th class="p-1">"Link"</th><th class="p-1">"Clicks"</th><th class="p-1">"People"</th><th class="p-1">"Link scanners"</th></tr>
                </thead>
                <tbody>
                    {links.into_iter().map(|l| view! {
                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="link-clicks">
                            <td class="p-1 break-all font-mono text-xs">{l.url}</td>
                            <td class="p-1 tabular-nums">{l.clicks}</td>
                            <td class="p-1 tabular-nums">{l.people}</td>
                            <td class="p-1 tabular-nums">{l.scanners}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// Opens, labelled for what they are worth.
#[component]
fn Opens(opens: crate::model::Opens) -> impl IntoView {
    view! {
        <section class="mb-4 rounded bg-white p-4 text-sm shadow dark:bg-slate-900" aria-labelledby="opens-heading" data-test="opens">
            <h2 id="opens-heading" class="mb-1 font-semibold">"Opens (unreliable)"</h2>
            <p class="mb-2 text-xs text-slate-500 dark:text-slate-400">"Many clients block the pixel and some fetch it on arrival: a rough sign, not a count of readers."</p>
            <dl class="grid grid-cols-3 gap-2">
                <div><dt class="text-slate-600 dark:text-slate-300">"Opens"</dt><dd class="tabular-nums" data-test="opens-total">{opens.opens}</dd></div>
                <div><dt class="text-slate-600 dark:text-slate-300">"People"</dt><dd class="tabular-nums" data-test="opens-people">{opens.people}</dd></div>
                <div><dt class="text-slate-600 dark:text-slate-300">"Machines"</dt><dd class="tabular-nums" data-test="opens-machines">{opens.machines}</dd></div>
            </dl>
        </section>
    }
}

/// A finished send as a whole: when it started and ended, how long it took, its average rate.
#[component]
fn SendSummary(live: RwSignal<Progress>) -> impl IntoView {
    let p = move || live.get();
    let summary = move || live.with(|p| p.summary());
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "—".to_string());
    view! {
        <dl class="mt-4 grid grid-cols-2 gap-x-4 gap-y-1 border-t border-slate-200 pt-3 text-sm sm:grid-cols-4 dark:border-slate-700" data-test="send-summary">
            <div><dt class="text-slate-600 dark:text-slate-300">"Started"</dt><dd data-test="started">{move || or_dash(p().started)}</dd></div>
            <div>
                <dt class="text-slate-600 dark:text-slate-300">{move || if p().status == CampaignStatus::Cancelled { "Cancelled" } else { "Finished" }}</dt>
                <dd data-test="finished">{move || or_dash(p().finished)}</dd>
            </div>
            <div><dt class="text-slate-600 dark:text-slate-300">"Duration"</dt><dd data-test="duration">{move || or_dash(summary().duration_seconds.map(progress::human_duration))}</dd></div>
            <div><dt class="text-slate-600 dark:text-slate-300">"Average rate"</dt><dd data-test="average-rate">{move || or_dash(summary().average_rate.map(|r| format!("{r:.1} msg/s")))}</dd></div>
        </dl>
    }
}

/// The send rate between readings over the last minutes, as a small SVG line with its scale:
/// messages per second up the side (0 to the highest rate seen), time along the bottom.
#[component]
fn RateChart(history: RwSignal<Vec<(i64, i64)>>) -> impl IntoView {
    const W: f64 = 300.0;
    const H: f64 = 48.0;
    let series = move || history.with(|h| progress::rate_series(h));
    let top = move || series().iter().map(|s| s.1).fold(0.0, f64::max);
    let points = move || {
        let series = series();
        let (Some(first), Some(last)) = (series.first(), series.last()) else {
            return String::new();
        };
        let span = (last.0 - first.0).max(1) as f64;
        let top = top().max(1.0);
        series
            .iter()
            .map(|&(at, r)| {
                let x = (at - first.0) as f64 / span * W;
                let y = H - r / top * (H - 2.0);
                format!("{x:.1},{y:.1}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let span_label = move || {
        let series = series();
        match (series.first(), series.last()) {
            (Some(f), Some(l)) if l.0 > f.0 => {
                format!("{} ago", progress::human_duration((l.0 - f.0) / 1000))
            }
            _ => "waiting for a second reading".to_string(),
        }
    };
    view! {
        <figure class="mt-3">
            <div class="flex gap-2 text-xs text-slate-500 dark:text-slate-400">
                <div class="flex w-20 flex-col justify-between text-right tabular-nums" data-test="rate-axis">
                    <span data-test="rate-axis-top">{move || format!("{:.1} msg/s", top())}</span>
                    <span>"0 msg/s"</span>
                </div>
                <svg viewBox="0 0 300 48" class="h-12 flex-1 border-b border-l border-slate-300 dark:border-slate-600" role="img" aria-label="Send rate over time, in messages per second" data-test="rate-chart">
                    <polyline points=points fill="none" stroke="currentColor" stroke-width="1.5" class="text-sky-600"></polyline>
                </svg>
            </div>
            <div class="flex justify-between pl-22 text-xs text-slate-500 dark:text-slate-400" data-test="time-axis">
                <span>{span_label}</span>
                <span>"now"</span>
            </div>
            <figcaption class="text-xs text-slate-500 dark:text-slate-400">"Send rate (messages per second) since this page opened"</figcaption>
        </figure>
    }
}

/// Opens the page's event stream; readings update `live` and `history` until the page goes.
#[cfg(feature = "hydrate")]
fn open_stream(
    id: i64,
    live: RwSignal<Progress>,
    history: RwSignal<Vec<(i64, i64)>>,
    connected: RwSignal<bool>,
) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Ok(source) = web_sys::EventSource::new(&format!("/api/campaigns/{id}/progress")) else {
        return;
    };
    let on_progress =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let Some(text) = ev.data().as_string() else {
                return;
            };
            if let Ok(p) = serde_json::from_str::<Progress>(&text) {
                history.try_update(|h| progress::record(h, &p));
                live.try_set(p);
                connected.try_set(true);
            }
        });
    let _ =
        source.add_event_listener_with_callback("progress", on_progress.as_ref().unchecked_ref());
    on_progress.forget();
    // The browser retries by itself; the page says it is not live meanwhile.
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        connected.try_set(false);
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
    let source = StoredValue::new_local(source);
    on_cleanup(move || source.with_value(|s| s.close()));
}

#[cfg(test)]
mod tests {
    use super::outcome_current;
    use crate::domain::CampaignStatus as S;

    #[test]
    fn an_action_outcome_shows_until_the_campaign_moves_on() {
        // "Campaign submitted." (and a refusal to approve): while it awaits approval only.
        assert!(outcome_current(S::Submitted, S::Submitted));
        for later in [S::Approved, S::Sending, S::Sent, S::Draft, S::Cancelled] {
            assert!(!outcome_current(S::Submitted, later), "{later:?}");
        }
        // "Campaign approved.": through its own send, not past a pause or a cancel.
        for course in [S::Approved, S::Sending, S::Sent] {
            assert!(outcome_current(S::Approved, course), "{course:?}");
        }
        assert!(!outcome_current(S::Approved, S::Paused));
        assert!(!outcome_current(S::Approved, S::Cancelled));
        assert!(outcome_current(S::Sending, S::Sent));
        assert!(!outcome_current(S::Paused, S::Sending));
        assert!(outcome_current(S::Draft, S::Draft));
    }
}
