//! "Resend now": the confirmation, server-rendered with the key the server issued for it
//! (database clock), so it works before the wasm has loaded. Submitting the same confirmation
//! twice sends once; success returns to the Digests page, where the history shows the resend.

use leptos::prelude::*;
use leptos_router::components::A;

use crate::api::digests::{resend_dialog, ResendDigest};

#[component]
pub fn ResendPage() -> impl IntoView {
    let dialog = Resource::new(|| (), |_| resend_dialog());
    let resend = ServerAction::<ResendDigest>::new();
    view! {
        <A href="/digests" attr:class="text-indigo-700 underline text-sm dark:text-indigo-300">"← Digests"</A>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match dialog.await {
                    Err(e) => view! { <p role="alert" class="mt-4 text-red-700 dark:text-red-300">{e.to_string()}</p> }.into_any(),
                    Ok(d) => {
                        let warning = d.scheduled_pending.then(|| view! {
                            <p data-test="pending-warning" class="mb-3 rounded bg-amber-50 px-3 py-2 text-amber-900 dark:bg-amber-950 dark:text-amber-200">
                                "This week's scheduled digest (" {d.this_week.clone()} ", " {d.this_week_at.clone()}
                                ") has not gone out yet. It will still go out as scheduled, so admins may get two digests this week."
                            </p>
                        });
                        let skipped = d.scheduled_skipped.then(|| view! {
                            <p data-test="skipped-note" class="mb-3 rounded bg-slate-50 px-3 py-2 text-slate-700 dark:bg-slate-950 dark:text-slate-300">
                                "This week's scheduled digest (" {d.this_week.clone()} ") was skipped: its time passed while Mailroom was not running. This resend will be this week's only digest."
                            </p>
                        });
                        view! {
                            <div role="dialog" aria-labelledby="resend-title" class="mt-4 max-w-xl rounded-lg bg-white p-6 shadow dark:bg-slate-900">
                                <h1 id="resend-title" class="mb-2 text-xl font-semibold">"Resend the digest now?"</h1>
                                <p class="mb-3 text-slate-600 dark:text-slate-300">
                                    {format!("It covers the last 7 days and goes to the {} admin(s) who receive the weekly digest. The scheduled digest is not affected.", d.recipients)}
                                </p>
                                {warning}
                                {skipped}
                                <ActionForm action=resend attr:class="grid gap-3">
                                    <input type="hidden" name="key" value=d.key.clone()/>
                                    <label class="flex items-center gap-2 text-sm">
                                        <input type="checkbox" name="only_me" value="on" data-test="only-me"/>
                                        "Only me (even if I turned the weekly digest off)"
                                    </label>
                                    <div class="flex gap-2">
                                        <button type="submit" id="confirm-resend" disabled=move || resend.pending().get()
                                            class="rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                                            "Send now"
                                        </button>
                                        <A href="/digests" attr:class="rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Cancel"</A>
                                    </div>
                                </ActionForm>
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
        {move || resend.value().get().and_then(|r| r.err()).map(|e| view! {
            <p role="alert" data-test="resend-error" class="mt-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">{e.to_string()}</p>
        })}
    }
}
