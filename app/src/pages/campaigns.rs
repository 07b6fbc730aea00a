use leptos::prelude::*;

use crate::api::campaign_edit::NewCampaign;
use crate::api::campaigns::campaigns;

#[component]
pub fn CampaignsPage() -> impl IntoView {
    let list = Resource::new(|| (), |_| campaigns());
    let create = ServerAction::<NewCampaign>::new();
    view! {
        <div class="mb-4 flex flex-wrap items-center justify-between gap-3">
            <h1 class="text-2xl font-semibold">"Campaigns"</h1>
            <ActionForm action=create attr:class="flex gap-2">
                <input name="name" required maxlength="200" placeholder="New campaign's name" aria-label="New campaign's name"
                    class="rounded border border-slate-300 px-2 py-1"/>
                <button type="submit" id="new-campaign" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"New campaign"</button>
            </ActionForm>
        </div>
        {move || create.value().get().and_then(|r| r.err()).map(|e| view! {
            <p role="alert" class="mb-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700">{e.to_string()}</p>
        })}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Err(e) => view! { <p role="alert" class="text-red-700">{e.to_string()}</p> }.into_any(),
                    Ok(rows) if rows.is_empty() => view! { <p class="text-slate-600">"No campaigns yet."</p> }.into_any(),
                    Ok(rows) => view! {
                        <table id="campaigns" class="w-full rounded bg-white shadow text-sm">
                            <thead class="text-left text-slate-500">
                                <tr><th class="p-3">"Name"</th><th class="p-3">"Status"</th><th class="p-3">"Version"</th><th class="p-3">"Author"</th><th class="p-3">"Updated"</th></tr>
                            </thead>
                            <tbody>
                                {rows.into_iter().map(|c| view! {
                                    <tr class="border-t border-slate-100">
                                        <td class="p-3 font-medium"><a href=format!("/campaigns/{}", c.id) class="text-sky-700 hover:underline">{c.name}</a></td>
                                        <td class="p-3"><span class="rounded-full bg-slate-100 px-2 py-0.5">{c.status}</span></td>
                                        <td class="p-3">{c.content_version}</td>
                                        <td class="p-3">{c.author}</td>
                                        <td class="p-3 text-slate-500">{c.updated}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
