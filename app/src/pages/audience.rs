//! Audience: the subscribers list (search by address, status and list; keyset pages; filters
//! in the URL so they work before the wasm has loaded), adding a subscriber, and the export.
//! The section's tabs lead to lists and the suppression list.

use leptos::prelude::*;
use leptos_router::components::{Form, A};

use crate::api::subscribers::{subscribers, AddSubscriber, SubscriberPage};
use crate::domain::SubscriberStatus;

const FIELD: &str = "mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600 dark:bg-slate-900";

/// The section's tabs.
#[component]
pub fn AudienceTabs(current: &'static str) -> impl IntoView {
    let tab = |href: &'static str, label: &'static str| {
        let active = current == label;
        view! {
            <A href=href attr:aria-current=active.then_some("page")
                attr:class=if active { "border-b-2 border-indigo-600 px-3 py-2 font-medium" } else { "px-3 py-2 text-slate-600 hover:text-slate-900 dark:text-slate-300" }>
                {label}
            </A>
        }
    };
    view! {
        <h1 class="mb-2 text-2xl font-semibold">"Audience"</h1>
        <nav class="mb-4 flex gap-2 border-b border-slate-200 text-sm dark:border-slate-700" aria-label="Audience">
            {tab("/audience", "Subscribers")}
            {tab("/audience/lists", "Lists")}
            {tab("/audience/segments", "Segments")}
            {tab("/audience/suppressions", "Suppressions")}
        </nav>
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Query {
    q: String,
    status: String,
    list: String,
    before: String,
}

impl Query {
    fn href(&self, before: Option<i64>) -> String {
        let before = before.map(|b| b.to_string()).unwrap_or_default();
        super::href_with(
            "/audience",
            &[
                ("q", &self.q),
                ("status", &self.status),
                ("list", &self.list),
                ("before", &before),
            ],
        )
    }
}

#[component]
pub fn SubscribersPage() -> impl IntoView {
    let query = super::query_of(|get| Query {
        q: get("q"),
        status: get("status"),
        list: get("list"),
        before: get("before"),
    });
    let add = ServerAction::<AddSubscriber>::new();
    let page = Resource::new(
        move || query.get(),
        |q| {
            subscribers(
                super::given(q.q),
                super::given(q.status),
                super::given(q.list),
                super::given(q.before),
            )
        },
    );
    view! {
        <AudienceTabs current="Subscribers"/>
        {move || super::action_outcome(add.value().get().map(|r| r.map(|_| "Added.".to_string())), "add-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(p) => view! { <Subscribers p query add/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Subscribers(
    p: SubscriberPage,
    query: Memo<Query>,
    add: ServerAction<AddSubscriber>,
) -> impl IntoView {
    let q = query.get_untracked();
    let next = p.next.map(|n| q.href(Some(n)));
    let first = (!q.before.is_empty()).then(|| q.href(None));
    let export = super::href_with("/api/audience/export.csv", &[("list", &q.list)]);
    let unfiltered = q == Query::default();
    let Query {
        q: search,
        status,
        list,
        ..
    } = q;
    let filter_lists = p.lists.clone();
    let filters = view! {
        <Form method="GET" action="/audience" attr:id="subscriber-filters" attr:class="mb-4 flex flex-wrap items-end gap-3 text-sm">
            <label class="block"><span class="text-slate-600 dark:text-slate-300">"Address contains"</span>
                <input name="q" type="search" value=search class=FIELD data-test="search"/>
            </label>
            <label class="block"><span class="text-slate-600 dark:text-slate-300">"Status"</span>
                <select name="status" class=FIELD>
                    <option value="" selected=status.is_empty()>"Any"</option>
                    {SubscriberStatus::ALL.into_iter().map(|s| view! {
                        <option value=s.as_str() selected=status == s.as_str()>{s.as_str()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label class="block"><span class="text-slate-600 dark:text-slate-300">"List"</span>
                <select name="list" class=FIELD>
                    <option value="" selected=list.is_empty()>"Any list"</option>
                    {filter_lists.into_iter().map(|l| view! {
                        <option value=l.id.to_string() selected=list == l.id.to_string()>{l.name}</option>
                    }).collect_view()}
                </select>
            </label>
            <button type="submit" data-test="apply-filters" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"Filter"</button>
            <A href="/audience" attr:class="py-1.5 text-indigo-700 underline dark:text-indigo-300">"Clear"</A>
            <a href=export download class="ml-auto py-1.5 text-indigo-700 underline dark:text-indigo-300" data-test="export">"Export CSV"</a>
        </Form>
    };
    let add_lists = p.lists.clone();
    let add_form = p.can_act.then(move || view! {
        <details class="mb-4 rounded border border-slate-200 bg-white p-3 text-sm dark:border-slate-700 dark:bg-slate-900">
            <summary class="cursor-pointer font-medium" data-test="open-add">"Add a subscriber"</summary>
            <ActionForm action=add attr:class="mt-3 flex flex-wrap items-end gap-3">
                <label class="block">"Address"<input name="email" type="email" required maxlength="254" class=FIELD data-test="add-email"/></label>
                <label class="block">"Name"<input name="name" maxlength="200" class=FIELD data-test="add-name"/></label>
                <fieldset class="flex flex-wrap gap-3"><legend class="sr-only">"Lists"</legend>
                    {add_lists.iter().enumerate().map(|(k, l)| view! {
                        <label class="flex items-center gap-1"><input type="checkbox" name=format!("lists[{k}]") value=l.id.to_string()/>{l.name.clone()}</label>
                    }).collect_view()}
                </fieldset>
                <button type="submit" data-test="add" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">"Add"</button>
            </ActionForm>
        </details>
    });
    let table = if p.rows.is_empty() {
        let empty = if unfiltered {
            "No subscribers yet: add one above, or import a CSV file into a list (Lists tab)."
        } else {
            "No subscriber matches these filters."
        };
        view! { <p data-test="no-subscribers" class="text-slate-600 dark:text-slate-300">{empty}</p> }.into_any()
    } else {
        view! {
            <table id="subscribers" class="w-full rounded bg-white text-sm shadow dark:bg-slate-900">
                <thead class="text-left text-slate-500 dark:text-slate-400"><tr>
                    <th class="p-3">"Address"</th><th class="p-3">"Name"</th><th class="p-3">"Status"</th>
                    <th class="p-3">"Lists"</th><th class="p-3">"Added"</th>
                </tr></thead>
                <tbody>
                    {p.rows.into_iter().map(|r| view! {
                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="subscriber-row">
                            <td class="p-3 font-medium"><A href=format!("/audience/subscribers/{}", r.id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{r.email.clone()}</A></td>
                            <td class="p-3">{r.name.clone()}</td>
                            <td class="p-3">
                                {if r.erased { "erased".to_string() } else { r.status.to_string() }}
                                {r.suppressed.map(|why| view! { <span class="ml-2 rounded-full bg-slate-100 px-2 py-0.5 text-xs text-slate-700 dark:bg-slate-800 dark:text-slate-300" data-test="suppressed">{format!("suppressed: {why}")}</span> })}
                            </td>
                            <td class="p-3">{r.lists}</td>
                            <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{r.created.clone()}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <nav class="mt-4 flex gap-4 text-sm">
                {first.map(|href| view! { <A href=href attr:class="text-indigo-700 underline dark:text-indigo-300">"First page"</A> })}
                {next.map(|href| view! { <A href=href attr:id="next-page" attr:class="text-indigo-700 underline dark:text-indigo-300">"Next page"</A> })}
            </nav>
        }.into_any()
    };
    view! { {filters} {add_form} {table} }
}
