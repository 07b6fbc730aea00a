//! Deliveries: counts by state, the filtered newest-first list, an admin's retry, and captured
//! messages. Filters live in the URL (a GET form), so they work before the wasm has loaded and
//! a filtered list can be shared as a link; the retry confirmation is a `<details>` panel with an
//! `ActionForm`, which also works before hydration.

use leptos::prelude::*;
use leptos_router::components::{Form, A};
use leptos_router::hooks::use_query_map;
use leptos_router::location::Url;

use crate::api::deliveries::{
    captured_message, database_status, deliveries_page, delivery_counts, relay_health, DeliveryRow,
    RelayView, RetryDelivery,
};
use crate::domain::relay::RelayState;
use crate::domain::{DatabaseStatus, DeliveryKind, DeliveryStatus, Durability};

/// The list's filters as they stand in the URL (`?status=&kind=&recipient=&after=`).
#[derive(Clone, Debug, Default, PartialEq)]
struct Query {
    status: String,
    kind: String,
    recipient: String,
    after: String,
}

impl Query {
    /// This query's URL with another `after` (None: the first page).
    fn href(&self, after: Option<&str>) -> String {
        super::href_with(
            "/deliveries",
            &[
                ("status", &self.status),
                ("kind", &self.kind),
                ("recipient", &self.recipient),
                ("after", after.unwrap_or("")),
            ],
        )
    }
}

pub(super) fn badge_class(s: DeliveryStatus) -> &'static str {
    match s {
        DeliveryStatus::Delivered => {
            "bg-green-100 text-green-800 dark:bg-green-900 dark:text-green-200"
        }
        DeliveryStatus::Failed => "bg-red-100 text-red-800 dark:bg-red-900 dark:text-red-200",
        DeliveryStatus::Unknown => {
            "bg-amber-100 text-amber-800 dark:bg-amber-900 dark:text-amber-300"
        }
        DeliveryStatus::Queued | DeliveryStatus::Sending => {
            "bg-sky-100 text-sky-800 dark:bg-sky-900 dark:text-sky-200"
        }
        DeliveryStatus::Suppressed | DeliveryStatus::Cancelled => {
            "bg-slate-100 text-slate-700 dark:bg-slate-800 dark:text-slate-300"
        }
    }
}

/// One line per relay: healthy, or failing with since when, why, and the next try.
#[component]
fn RelayHealthNote(relays: Vec<RelayView>) -> impl IntoView {
    relays
        .into_iter()
        .map(|r| match r.state {
            RelayState::Healthy => view! {
                <p class="mb-4 text-sm text-slate-600 dark:text-slate-300" data-test="relay-health" data-state="healthy">
                    "Mail relay: healthy."
                </p>
            }
            .into_any(),
            RelayState::Open => view! {
                <p role="status" data-test="relay-health" data-state="open"
                    class="mb-4 rounded border border-amber-300 bg-amber-50 p-3 text-sm text-amber-900 dark:border-amber-700 dark:bg-amber-950 dark:text-amber-100">
                    {format!(
                        "The mail relay is failing ({} failures in a row: {}). Nothing is sent to it since {} UTC; it is tried again at {} UTC, and mail waits in the queue meanwhile. Campaigns are paused while it lasts and resume by themselves.",
                        r.failures,
                        r.why.as_deref().unwrap_or("it does not answer"),
                        r.since.as_deref().unwrap_or("?"),
                        r.next_probe.as_deref().unwrap_or("?"),
                    )}
                </p>
            }
            .into_any(),
        })
        .collect_view()
}

/// The database's durability: a quiet line, or a warning when a failover can cost mail.
/// Shown while this replica's workers cannot write to the database: nothing is sent that
/// cannot be recorded first.
#[component]
fn WritesFailingNote(status: DatabaseStatus) -> impl IntoView {
    status.writes_failing.map(|failing| {
        let since = failing.since.format("%Y-%m-%d %H:%M:%S UTC");
        view! {
            <p role="alert" data-test="database-writes-failing" data-trouble=failing.trouble.as_str()
                class="mb-4 rounded border border-red-300 bg-red-50 p-3 text-sm text-red-900 dark:border-red-700 dark:bg-red-950 dark:text-red-100">
                {format!(
                    "This replica's workers cannot write to the database since {since}: {}. \
                     Nothing is sent until they can record it; sending resumes by itself once the \
                     database takes writes again.",
                    failing.trouble.describe()
                )}
            </p>
        }
    })
}

#[component]
fn DurabilityNote(durability: Durability) -> impl IntoView {
    match durability.warning() {
        None => view! {
            <p class="mb-4 text-sm text-slate-600 dark:text-slate-300" data-test="database-durability"
                data-state=durability.as_str()>
                {format!("Database: {}.", durability.describe())}
            </p>
        }
        .into_any(),
        Some(warning) => view! {
            <p role="status" data-test="database-durability" data-state=durability.as_str()
                class="mb-4 rounded border border-amber-300 bg-amber-50 p-3 text-sm text-amber-900 dark:border-amber-700 dark:bg-amber-950 dark:text-amber-100">
                {format!("Database: {warning}.")}
            </p>
        }
        .into_any(),
    }
}

#[component]
pub fn DeliveriesPage() -> impl IntoView {
    let query = super::query_of(|get| Query {
        status: get("status"),
        kind: get("kind"),
        recipient: get("recipient"),
        after: get("after"),
    });
    let retry = ServerAction::<RetryDelivery>::new();
    // The job whose retry panel is open; every retry answer closes it.
    let open_job = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        if retry.version().get() > 0 {
            open_job.set(None);
        }
    });
    let counts = Resource::new(move || retry.version().get(), |_| delivery_counts());
    let relays = Resource::new(move || retry.version().get(), |_| relay_health());
    let database = Resource::new(|| (), |_| database_status());
    let page = Resource::new(
        move || (query.get(), retry.version().get()),
        |(q, _)| {
            deliveries_page(
                super::given(q.status),
                super::given(q.kind),
                super::given(q.recipient),
                super::given(q.after),
            )
        },
    );
    view! {
        <h1 class="text-2xl font-semibold mb-4">"Deliveries"</h1>
        {move || super::action_outcome(retry.value().get(), "retry-result")}
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                relays.await.ok().map(|relays| view! { <RelayHealthNote relays/> })
            })}
        </Suspense>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                database.await.ok().map(|status| view! {
                    <WritesFailingNote status/>
                    <DurabilityNote durability=status.durability/>
                })
            })}
        </Suspense>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match counts.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(counts) => view! {
                        <div id="delivery-counts" class="mb-6 grid grid-cols-2 gap-3 md:grid-cols-7">
                            {counts.into_iter().map(|c| view! {
                                <A href=format!("/deliveries?status={}", c.status) attr:data-test=format!("count-{}", c.status)
                                    attr:class="block rounded-lg bg-white p-3 shadow hover:ring-2 hover:ring-indigo-200 dark:bg-slate-900 dark:hover:ring-indigo-800">
                                    <div class="text-sm text-slate-500 dark:text-slate-400">{c.status.to_string()}</div>
                                    <div class="text-2xl font-semibold" data-test="count-value">{c.count}</div>
                                </A>
                            }).collect_view()}
                        </div>
                    }.into_any(),
                }
            })}
        </Suspense>
        <Filters query/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(p) if p.rows.is_empty() => view! { <p id="no-deliveries" class="text-slate-600 dark:text-slate-300">"No deliveries match."</p> }.into_any(),
                    Ok(p) => {
                        let q = query.get_untracked();
                        let next = p.next.as_deref().map(|n| q.href(Some(n)));
                        let first = (!q.after.is_empty()).then(|| q.href(None));
                        let can_retry = p.can_retry;
                        view! {
                            <table id="deliveries" class="w-full rounded bg-white shadow text-sm dark:bg-slate-900">
                                <thead class="text-left text-slate-500 dark:text-slate-400">
                                    <tr>
                                        <th class="p-3">"Recipient"</th><th class="p-3">"Kind"</th><th class="p-3">"Status"</th>
                                        <th class="p-3">"Attempt"</th><th class="p-3">"Updated"</th><th class="p-3">"Reply / error"</th><th class="p-3"></th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {p.rows.into_iter().map(|d| view! { <Row d can_retry open_job retry/> }).collect_view()}
                                </tbody>
                            </table>
                            <nav class="mt-4 flex gap-4 text-sm">
                                {first.map(|href| view! { <A href=href attr:class="text-indigo-700 underline dark:text-indigo-300">"First page"</A> })}
                                {next.map(|href| view! { <A href=href attr:id="next-page" attr:class="text-indigo-700 underline dark:text-indigo-300">"Next page"</A> })}
                            </nav>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// The filter form: a plain GET to this page, so the filters are the URL.
#[component]
fn Filters(query: Memo<Query>) -> impl IntoView {
    let q = move || query.get();
    view! {
        <Form method="GET" action="/deliveries" attr:id="delivery-filters" attr:class="mb-4 flex flex-wrap items-end gap-3 text-sm">
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Status"</span>
                <select name="status" class="mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                    <option value="" selected=move || q().status.is_empty()>"All states"</option>
                    {DeliveryStatus::ALL.into_iter().map(|s| view! {
                        <option value=s.as_str() selected=move || q().status == s.as_str()>{s.as_str()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Kind"</span>
                <select name="kind" class="mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                    <option value="" selected=move || q().kind.is_empty()>"All kinds"</option>
                    {DeliveryKind::ALL.into_iter().map(|k| view! {
                        <option value=k.as_str() selected=move || q().kind == k.as_str()>{k.as_str()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Recipient contains"</span>
                <input name="recipient" type="search" prop:value=move || q().recipient value=move || q().recipient
                    class="mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600"/>
            </label>
            <button id="apply-filters" type="submit" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">
                "Filter"
            </button>
            <A href="/deliveries" attr:class="py-1.5 text-indigo-700 underline dark:text-indigo-300">"Clear"</A>
        </Form>
    }
}

#[component]
fn Row(
    d: DeliveryRow,
    can_retry: bool,
    open_job: RwSignal<Option<String>>,
    retry: ServerAction<RetryDelivery>,
) -> impl IntoView {
    let retry_control = (can_retry && d.status.retryable()).then(|| {
        view! { <RetryPanel job_id=d.job_id.clone() recipient=d.recipient.clone() status=d.status open_job retry/> }
    });
    let open = d.captured.then(|| {
        let href = format!("/deliveries/message?job={}", Url::escape(&d.job_id));
        view! { <A href=href attr:class="text-indigo-700 underline dark:text-indigo-300" attr:data-test="open-message">"Open"</A> }
    });
    view! {
        <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-test="delivery-row" data-job=d.job_id.clone() data-status=d.status.as_str()>
            <td class="p-3 font-medium whitespace-nowrap">{d.recipient.clone()}</td>
            <td class="p-3">{d.kind.as_str()}</td>
            <td class="p-3">
                <span class=format!("rounded-full px-2 py-0.5 {}", badge_class(d.status)) data-test="status">{d.status.as_str()}</span>
                {d.reported.clone().map(|(what, diagnostic)| view! {
                    <div class="mt-1 text-xs text-red-700 dark:text-red-300" data-test="reported">
                        {what}
                        <div class="font-mono break-all text-slate-500 dark:text-slate-400">{diagnostic}</div>
                    </div>
                })}
            </td>
            <td class="p-3">{d.attempt}</td>
            <td class="p-3 text-slate-500 whitespace-nowrap dark:text-slate-400">{d.updated.clone()}</td>
            <td class="p-3 text-slate-600 font-mono text-xs break-all dark:text-slate-300" data-test="detail">{d.detail.clone()}</td>
            <td class="p-3 whitespace-nowrap">{retry_control}{open}</td>
        </tr>
    }
}

/// Retry confirmation: a `<details>` panel (opens without JavaScript) holding the `ActionForm`.
/// For an unknown delivery it warns that the recipient may already have the message.
#[component]
fn RetryPanel(
    job_id: String,
    recipient: String,
    status: DeliveryStatus,
    open_job: RwSignal<Option<String>>,
    retry: ServerAction<RetryDelivery>,
) -> impl IntoView {
    let this = job_id.clone();
    let is_open = {
        let this = this.clone();
        move || open_job.read().as_deref() == Some(this.as_str())
    };
    let toggle = move |ev: leptos::ev::MouseEvent| {
        ev.prevent_default();
        open_job.update(|o| {
            *o = if o.as_deref() == Some(this.as_str()) {
                None
            } else {
                Some(this.clone())
            }
        });
    };
    let warning = status.may_have_arrived().then(|| view! {
        <p data-test="unknown-warning" class="mb-3 rounded bg-amber-50 px-3 py-2 text-amber-900 dark:bg-amber-950 dark:text-amber-200">
            "Warning: " {recipient.clone()} " may already have received this message. The worker lost "
            "track of it while the body was being sent, so retrying can deliver a second copy."
        </p>
    });
    view! {
        <details class="relative inline-block mr-3" prop:open=is_open>
            <summary on:click=toggle data-test="retry"
                class="cursor-pointer list-none rounded border border-slate-300 px-2 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">
                "Retry"
            </summary>
            <div role="dialog" aria-label=format!("Retry the delivery to {recipient}")
                class="absolute right-0 z-10 mt-2 w-80 whitespace-normal rounded-lg border border-slate-200 bg-white p-4 text-sm shadow-lg dark:border-slate-700 dark:bg-slate-900">
                <p class="mb-2 font-semibold">"Retry this delivery?"</p>
                <p class="mb-3 text-slate-600 dark:text-slate-300">
                    {format!("It goes back to the queue ({status} now) and is sent to {recipient} again.")}
                </p>
                {warning}
                <ActionForm action=retry attr:class="flex gap-2">
                    <input type="hidden" name="job_id" value=job_id/>
                    <button type="submit" data-test="confirm-retry" disabled=move || retry.pending().get()
                        class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                        "Retry now"
                    </button>
                    <button type="button" data-test="cancel-retry" on:click=move |_| open_job.set(None)
                        class="rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">
                        "Cancel"
                    </button>
                </ActionForm>
            </div>
        </details>
    }
}

/// One captured message, raw (headers and body).
#[component]
pub fn CapturedPage() -> impl IntoView {
    let params = use_query_map();
    let job = Memo::new(move |_| params.read().get("job").unwrap_or_default());
    let message = Resource::new(move || job.get(), captured_message);
    view! {
        <A href="/deliveries" attr:class="text-indigo-700 underline text-sm dark:text-indigo-300">"← Deliveries"</A>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match message.await {
                    Err(e) => view! { <p role="alert" class="mt-4 text-red-700 dark:text-red-300">{e.to_string()}</p> }.into_any(),
                    Ok(m) => view! {
                        <h1 class="mt-2 mb-1 text-2xl font-semibold">{format!("Message to {}", m.recipient)}</h1>
                        <p class="mb-4 font-mono text-xs text-slate-500 dark:text-slate-400">{m.job_id}</p>
                        {m.truncated.then(|| view! {
                            <p role="status" data-test="truncated" class="mb-2 rounded bg-amber-50 px-3 py-2 text-sm text-amber-900 dark:bg-amber-950 dark:text-amber-200">
                                {format!("Only the first {} MiB of this message are shown.", crate::api::deliveries::CAPTURED_SHOW_BYTES / (1024 * 1024))}
                            </p>
                        })}
                        <pre id="captured-message" class="overflow-x-auto whitespace-pre-wrap break-all rounded bg-white p-4 text-xs shadow dark:bg-slate-900">{m.text}</pre>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
