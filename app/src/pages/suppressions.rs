//! The suppression list: search; add addresses (one or many, pasted); remove one after a
//! confirmation. Reason, source and date of each.

use leptos::prelude::*;
use leptos_router::components::{Form, A};
use leptos_router::hooks::use_query_map;

use crate::api::suppressions::{
    suppressions, AddSuppressions, RemoveSuppression, SuppressionPage, MAX_ADDED,
};

const FIELD: &str = "mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600 dark:bg-slate-900";

#[component]
pub fn SuppressionsPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        let p = params.read();
        (
            p.get("q").unwrap_or_default(),
            p.get("after").unwrap_or_default(),
        )
    });
    let add = ServerAction::<AddSuppressions>::new();
    let remove = ServerAction::<RemoveSuppression>::new();
    let page = Resource::new(
        move || (query.get(), add.version().get(), remove.version().get()),
        |((q, after), _, _)| suppressions(Some(q), Some(after)),
    );
    view! {
        <super::audience::AudienceTabs current="Suppressions"/>
        <p class="mb-4 max-w-3xl text-sm text-slate-600 dark:text-slate-300">
            "No campaign mail goes to a suppressed address, including campaigns already sending. Hard bounces and complaints also stop digests and test mail."
        </p>
        {move || super::action_outcome(add.value().get(), "add-result")}
        {move || super::action_outcome(remove.value().get(), "remove-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(p) => view! { <Suppressions p q=query.get_untracked().0 add remove/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Suppressions(
    p: SuppressionPage,
    q: String,
    add: ServerAction<AddSuppressions>,
    remove: ServerAction<RemoveSuppression>,
) -> impl IntoView {
    let next = p
        .next
        .map(|n| super::href_with("/audience/suppressions", &[("q", &q), ("after", &n)]));
    let add_form = p.can_act.then(|| view! {
        <ActionForm action=add attr:class="mb-4 flex flex-wrap items-end gap-3 text-sm">
            <label class="grid gap-1">{format!("Suppress addresses (one per line or comma-separated, up to {MAX_ADDED})")}
                <textarea name="addresses" rows="2" required class=format!("{FIELD} w-96") data-test="add-addresses"></textarea>
            </label>
            <button type="submit" data-test="add" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"Suppress"</button>
        </ActionForm>
    });
    let can_act = p.can_act;
    let rows = if p.rows.is_empty() {
        view! { <p data-test="no-suppressions" class="text-slate-600 dark:text-slate-300">{if q.is_empty() { "Nobody is suppressed yet: unsubscribes, hard bounces and complaints will appear here." } else { "No suppressed address matches." }}</p> }.into_any()
    } else {
        view! {
            <super::DataTable id="suppressions" headings=&["Address", "Reason", "Source", "Since", ""]>
                    {p.rows.into_iter().map(|r| {
                        let email = r.email.clone();
                        view! {
                            <tr class="border-t border-slate-100 dark:border-slate-800" data-test="suppression-row" data-email=r.email.clone()>
                                <td class="p-3 font-medium">{r.email.clone()}</td>
                                <td class="p-3">{r.reason.as_str()}</td>
                                <td class="p-3 text-slate-600 dark:text-slate-300">{r.source}</td>
                                <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{r.created}</td>
                                <td class="p-3 text-right">{can_act.then(|| view! {
                                    <super::Confirm label="Remove" test="remove" question=format!("Remove the suppression of {email}? Campaigns may mail it again.")>
                                        <ActionForm action=remove>
                                            <super::DangerSubmit label="Remove" test="confirm-remove" name="email" value=email.clone()/>
                                        </ActionForm>
                                    </super::Confirm>
                                })}</td>
                            </tr>
                        }
                    }).collect_view()}
                </super::DataTable>
        }.into_any()
    };
    view! {
        {add_form}
        <Form method="GET" action="/audience/suppressions" attr:class="mb-4 flex items-end gap-3 text-sm">
            <label class="block"><span class="text-slate-600 dark:text-slate-300">"Address contains"</span>
                <input name="q" type="search" value=q.clone() class=FIELD data-test="search"/>
            </label>
            <button type="submit" class="rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Search"</button>
        </Form>
        {rows}
        <nav class="mt-4 flex gap-4 text-sm">
            {next.map(|href| view! { <A href=href attr:id="next-page" attr:class="text-indigo-700 underline dark:text-indigo-300">"Next page"</A> })}
        </nav>
    }
}
