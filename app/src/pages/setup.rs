//! The first-run page: while no organisation exists, the first one and its owner are created
//! here, behind the one-time setup token `mailroom serve` printed in its log.

use leptos::prelude::*;

use crate::api::setup::{setup_needed, FirstRunSetup};

const FIELD: &str = "mt-1 w-full rounded border border-slate-300 px-3 py-2 dark:border-slate-600";

#[component]
pub fn SetupPage() -> impl IntoView {
    let setup = ServerAction::<FirstRunSetup>::new();
    let needed = Resource::new(|| (), |_| setup_needed());
    let error = move || {
        setup
            .value()
            .get()
            .and_then(|r| r.err())
            .map(|e| e.to_string())
    };
    let field = |label: &'static str,
                 name: &'static str,
                 kind: &'static str,
                 hint: &'static str| {
        view! {
            <label class="block">
                <span class="text-sm text-slate-600 dark:text-slate-300">{label}</span>
                <input name=name type=kind required=name != "timezone" placeholder=hint class=FIELD/>
            </label>
        }
    };
    view! {
        <div class="min-h-screen flex items-center justify-center p-4">
            <div class="w-full max-w-md rounded-xl bg-white p-8 shadow dark:bg-slate-900">
                <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match needed.await {
                            Ok(true) => view! {
                                <h1 class="mb-2 text-2xl font-semibold">"Set up Mailroom"</h1>
                                <p class="mb-4 text-sm text-slate-600 dark:text-slate-300">
                                    "Create your organisation and its first owner. The setup token is in the log of "
                                    <code>"mailroom serve"</code>" (it works once)."
                                </p>
                                <ActionForm action=setup attr:class="space-y-3" attr:id="setup-form">
                                    {field("Setup token", "token", "password", "")}
                                    {field("Organisation name", "name", "text", "Acme Inc")}
                                    {field("Short name", "slug", "text", "acme")}
                                    {field("Time zone", "timezone", "text", "UTC")}
                                    {field("Your name", "owner_name", "text", "")}
                                    {field("Your e-mail address (your login, and the From address of its mail until you change it in Settings)", "owner_email", "email", "")}
                                    {field("Password (at least 10 characters)", "password", "password", "")}
                                    <Show when=move || error().is_some()>
                                        <p id="setup-error" role="alert" class="rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">
                                            {error}
                                        </p>
                                    </Show>
                                    <button id="create-org" type="submit" disabled=move || setup.pending().get()
                                        class="w-full rounded bg-indigo-600 px-4 py-2 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                                        "Create the organisation"
                                    </button>
                                </ActionForm>
                            }.into_any(),
                            Ok(false) => view! {
                                <h1 class="mb-2 text-2xl font-semibold">"Mailroom is set up"</h1>
                                <p id="setup-done">"It has an organisation already. "<a href="/login" class="text-indigo-700 underline dark:text-indigo-300">"Sign in"</a></p>
                            }.into_any(),
                            Err(e) => view! { <p role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
            </div>
        </div>
    }
}
