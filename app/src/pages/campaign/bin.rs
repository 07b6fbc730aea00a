//! The recycle bin: deleted campaigns, when the leader purges each, and "Restore".

use leptos::prelude::*;

use crate::api::campaign::bin::{campaign_bin, RestoreCampaign};

#[component]
pub fn BinPage() -> impl IntoView {
    let restore = ServerAction::<RestoreCampaign>::new();
    let bin = Resource::new(move || restore.version().get(), |_| campaign_bin());
    view! {
        <p class="mb-2 text-sm"><a href="/campaigns" class="text-sky-700 hover:underline dark:text-sky-300">"← Campaigns"</a></p>
        <h1 class="mb-4 text-2xl font-semibold">"Recycle bin"</h1>
        {move || crate::pages::action_outcome(restore.value().get(), "restore-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match bin.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(rows) if rows.is_empty() => view! { <p class="text-slate-600 dark:text-slate-300">"The recycle bin is empty."</p> }.into_any(),
                    Ok(rows) => view! {
                        <crate::pages::DataTable headings=&["Name", "Status", "Deleted", "Purged after", ""]>
                                {rows.into_iter().map(|b| view! {
                                    <tr class="border-t border-slate-100 dark:border-slate-800" data-test="binned">
                                        <td class="p-3 font-medium">{b.name}</td>
                                        <td class="p-3">{b.status.as_str()}</td>
                                        <td class="p-3">{b.deleted}</td>
                                        <td class="p-3">{b.purged_after}</td>
                                        <td class="p-3">
                                            <ActionForm action=restore>
                                                <input type="hidden" name="id" value=b.id.to_string()/>
                                                <button type="submit" data-test="restore" class="rounded border border-slate-300 px-3 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Restore"</button>
                                            </ActionForm>
                                        </td>
                                    </tr>
                                }).collect_view()}
                            </crate::pages::DataTable>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
