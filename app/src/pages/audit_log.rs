//! Settings › Audit log: newest first, filterable by action and by user, a page at a time.
//! Filters and the page position live in the URL (a GET form), so the page works before the
//! wasm has loaded and a filtered view can be shared as a link.

use leptos::prelude::*;
use leptos_router::components::{Form, A};
use leptos_router::location::Url;

use super::settings::SettingsTabs;
use crate::api::audit_log::{audit_log_page, AuditEntry};

#[derive(Clone, Debug, Default, PartialEq)]
struct Query {
    action: String,
    actor: String,
    before: String,
}

impl Query {
    fn href(&self, before: Option<i64>) -> String {
        let before = before.map(|b| b.to_string()).unwrap_or_default();
        let parts: Vec<String> = [
            ("action", self.action.as_str()),
            ("actor", self.actor.as_str()),
            ("before", before.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", Url::escape(v)))
        .collect();
        if parts.is_empty() {
            "/settings/audit".into()
        } else {
            format!("/settings/audit?{}", parts.join("&"))
        }
    }
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = super::query_of(|get| Query {
        action: get("action"),
        actor: get("actor"),
        before: get("before"),
    });
    let page = Resource::new(
        move || query.get(),
        |q| {
            audit_log_page(
                super::given(q.action),
                super::given(q.actor),
                super::given(q.before),
            )
        },
    );
    view! {
        <SettingsTabs current="/settings/audit"/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(p) => {
                        let q = query.get_untracked();
                        let next = p.next.map(|n| q.href(Some(n)));
                        let first = (!q.before.is_empty()).then(|| q.href(None));
                        let filtered = !q.action.is_empty() || !q.actor.is_empty();
                        let body = if p.rows.is_empty() {
                            let hint = if filtered {
                                "No entries match these filters. Clear them to see the whole log."
                            } else {
                                "Nothing has been recorded yet. Changes to settings, users, campaigns and digests appear here as they happen."
                            };
                            view! { <p id="no-audit" class="text-slate-600 dark:text-slate-300">{hint}</p> }.into_any()
                        } else {
                            view! {
                                <div class="overflow-x-auto">
                                    <table id="audit-log" class="w-full rounded bg-white text-sm shadow dark:bg-slate-900">
                                        <thead class="text-left text-slate-500 dark:text-slate-400">
                                            <tr>
                                                <th class="p-3">{format!("When ({})", p.timezone)}</th><th class="p-3">"Who"</th>
                                                <th class="p-3">"Action"</th><th class="p-3">"Object"</th><th class="p-3">"Change"</th>
                                            </tr>
                                        </thead>
                                        <tbody>
                                            {p.rows.into_iter().map(|e| view! { <Entry e/> }).collect_view()}
                                        </tbody>
                                    </table>
                                </div>
                                <nav class="mt-4 flex gap-4 text-sm">
                                    {first.map(|href| view! { <A href=href attr:class="text-indigo-700 underline dark:text-indigo-300">"Newest entries"</A> })}
                                    {next.map(|href| view! { <A href=href attr:id="next-page" attr:class="text-indigo-700 underline dark:text-indigo-300">"Older entries"</A> })}
                                </nav>
                            }.into_any()
                        };
                        view! {
                            <Filters q actions=p.actions users=p.users/>
                            {body}
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn Filters(q: Query, actions: Vec<String>, users: Vec<(i64, String)>) -> impl IntoView {
    view! {
        <Form method="GET" action="/settings/audit" attr:id="audit-filters" attr:class="mb-4 flex flex-wrap items-end gap-3 text-sm">
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Action"</span>
                <select name="action" class="mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                    <option value="" selected=q.action.is_empty()>"All actions"</option>
                    {actions.into_iter().map(|a| {
                        let selected = a == q.action;
                        view! { <option value=a.clone() selected=selected>{a.clone()}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"User"</span>
                <select name="actor" class="mt-1 block rounded border border-slate-300 px-2 py-1.5 dark:border-slate-600">
                    <option value="" selected=q.actor.is_empty()>"Everyone"</option>
                    {users.into_iter().map(|(id, name)| {
                        let id = id.to_string();
                        let selected = id == q.actor;
                        view! { <option value=id selected=selected>{name}</option> }
                    }).collect_view()}
                </select>
            </label>
            <button id="apply-audit-filters" type="submit" class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700">
                "Filter"
            </button>
            <A href="/settings/audit" attr:class="py-1.5 text-indigo-700 underline dark:text-indigo-300">"Clear"</A>
        </Form>
    }
}

#[component]
fn Entry(e: AuditEntry) -> impl IntoView {
    let object = match &e.object_id {
        Some(id) => format!("{} {id}", e.object_type),
        None => e.object_type.clone(),
    };
    let change = |label: &'static str, json: Option<String>| {
        json.map(|j| view! {
            <div><span class="text-slate-400">{label} ": "</span><code class="break-all">{j}</code></div>
        })
    };
    view! {
        <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-test="audit-row" data-action=e.action.clone()>
            <td class="p-3 whitespace-nowrap text-slate-500 dark:text-slate-400">{e.at.clone()}</td>
            <td class="p-3" data-test="actor">{e.actor.clone().unwrap_or_else(|| "system".into())}</td>
            <td class="p-3 font-mono text-xs">{e.action.clone()}</td>
            <td class="p-3 whitespace-nowrap">{object}</td>
            <td class="p-3 font-mono text-xs">
                {change("before", e.before.clone())}
                {change("after", e.after.clone())}
            </td>
        </tr>
    }
}
