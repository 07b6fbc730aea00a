//! A campaign rendered for one recipient, as the editor and the approver see it: the HTML part
//! in a sandboxed frame (no script, no access to the dashboard), the text part beside it.

use leptos::prelude::*;

use crate::api::campaign::edit::Preview;

#[component]
pub fn PreviewBox(p: Preview, test: &'static str) -> impl IntoView {
    let html = p.html.map(|doc| {
        view! {
            <iframe sandbox="" srcdoc=doc title="HTML version" data-test="preview-html"
                class="h-72 w-full rounded border border-slate-200 bg-white dark:border-slate-700 dark:bg-slate-900"></iframe>
        }
    });
    let text = p.text.map(|t| {
        let body = view! { <pre class="whitespace-pre-wrap font-sans" data-test="preview-text">{t}</pre> };
        if html.is_some() {
            view! { <details class="mt-2"><summary class="cursor-pointer text-slate-600 dark:text-slate-300">"Text version"</summary>{body}</details> }
                .into_any()
        } else {
            body.into_any()
        }
    });
    view! {
        <div data-test=test class="grid gap-1 rounded border border-slate-200 bg-white p-3 text-sm dark:border-slate-700 dark:bg-slate-900">
            <p class="text-slate-500 dark:text-slate-400">"To: " {p.to}</p>
            <p class="font-medium" data-test="preview-subject">{p.subject}</p>
            {html}
            {text}
        </div>
    }
}
