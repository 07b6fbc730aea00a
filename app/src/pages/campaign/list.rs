use leptos::prelude::*;

use leptos_router::hooks::use_query_map;

use crate::api::campaign::campaigns;
use crate::api::campaign::edit::NewCampaign;

#[component]
pub fn CampaignsPage() -> impl IntoView {
    let query = use_query_map();
    let status = move || query.read().get("status").unwrap_or_default();
    let list = Resource::new(status, campaigns);
    let create = ServerAction::<NewCampaign>::new();
    view! {
        <div class="mb-4 flex flex-wrap items-center justify-between gap-3">
            <h1 class="text-2xl font-semibold">"Campaigns"</h1>
            <a href="/campaigns/bin" class="text-sm text-sky-700 hover:underline dark:text-sky-300">"Recycle bin"</a>
            <ActionForm action=create attr:class="flex gap-2">
                <input name="name" required maxlength="200" placeholder="New campaign's name" aria-label="New campaign's name"
                    class="rounded border border-slate-300 px-2 py-1 dark:border-slate-600"/>
                <button type="submit" id="new-campaign" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"New campaign"</button>
            </ActionForm>
        </div>
        {move || create.value().get().and_then(|r| r.err()).map(|e| view! {
            <p role="alert" class="mb-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">{e.to_string()}</p>
        })}
        <nav class="mb-3 flex flex-wrap gap-2 text-sm" aria-label="Filter by status">
            {FILTERS.iter().map(|&(value, label)| {
                let href = if value.is_empty() { "/campaigns".to_string() } else { format!("/campaigns?status={value}") };
                let class = move || if status() == value { "rounded-full bg-slate-800 px-3 py-1 text-white" } else { "rounded-full bg-white px-3 py-1 shadow hover:bg-slate-100 dark:bg-slate-900 dark:hover:bg-slate-800" };
                view! { <a href=href class=class data-test=format!("filter-{}", if value.is_empty() { "all" } else { value })>{label}</a> }
            }).collect_view()}
        </nav>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(rows) if rows.is_empty() => view! { <p class="text-slate-600 dark:text-slate-300">"No campaigns here yet. Name one above and press “New campaign” to write it."</p> }.into_any(),
                    Ok(rows) => view! {
                        <crate::pages::DataTable id="campaigns" headings=&["Name", "Status", "Progress", "Version", "Author", "Updated"]>
                                {rows.into_iter().map(|c| view! {
                                    <tr class="border-t border-slate-100 dark:border-slate-800">
                                        <td class="p-3 font-medium"><a href=format!("/campaigns/{}", c.id) class="text-sky-700 hover:underline">{c.name}</a></td>
                                        <td class="p-3"><span class="rounded-full bg-slate-100 px-2 py-0.5 dark:bg-slate-800" data-test="status">{c.status.to_string()}</span></td>
                                        <td class="p-3 w-40">{(c.total > 0).then(|| {
                                            let pct = (c.done as f64 * 100.0 / c.total as f64).clamp(0.0, 100.0);
                                            view! {
                                                <div class="h-2 w-full overflow-hidden rounded bg-slate-100 dark:bg-slate-800" title=format!("{} of {} done", c.done, c.total)>
                                                    <div class="h-full bg-green-500" style:width=format!("{pct:.1}%")></div>
                                                </div>
                                                <span class="text-xs text-slate-500 dark:text-slate-400" data-test="progress">{format!("{} / {}", c.done, c.total)}</span>
                                            }
                                        })}</td>
                                        <td class="p-3">{c.content_version}</td>
                                        <td class="p-3">{c.author}</td>
                                        <td class="p-3 text-slate-500 dark:text-slate-400">{c.updated}</td>
                                    </tr>
                                }).collect_view()}
                            </crate::pages::DataTable>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// (status, label) of the list's filters; "" is all.
const FILTERS: [(&str, &str); 8] = [
    ("", "All"),
    ("draft", "Drafts"),
    ("submitted", "Awaiting approval"),
    ("approved", "Approved"),
    ("sending", "Sending"),
    ("paused", "Paused"),
    ("sent", "Sent"),
    ("cancelled", "Cancelled"),
];
