use leptos::prelude::*;

use crate::api::auth::Login;
use crate::api::setup::setup_needed;

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let first_run = Resource::new(|| (), |_| setup_needed());
    let error = move || {
        login
            .value()
            .get()
            .and_then(|r| r.err())
            .map(|e| e.to_string())
    };
    view! {
        <div class="min-h-screen flex items-center justify-center">
            <div class="w-full max-w-sm rounded-xl bg-white p-8 shadow dark:bg-slate-900">
                <h1 class="mb-6 text-2xl font-semibold">"Sign in to Mailroom"</h1>
                <Suspense>
                    {move || Suspend::new(async move {
                        first_run.await.unwrap_or(false).then(|| view! {
                            <p id="first-run" class="mb-4 rounded bg-amber-50 px-3 py-2 text-sm text-amber-900 dark:bg-amber-950 dark:text-amber-200">
                                "This Mailroom has no organisation yet. "
                                <a href="/setup" class="underline">"Set it up"</a>
                                " with the setup token from the log of mailroom serve."
                            </p>
                        })
                    })}
                </Suspense>
                <ActionForm action=login attr:class="space-y-4">
                    <label class="block">
                        <span class="text-sm text-slate-600 dark:text-slate-300">"E-mail address"</span>
                        <input name="email" type="email" required autocomplete="username"
                            class="mt-1 w-full rounded border border-slate-300 px-3 py-2 dark:border-slate-600"/>
                    </label>
                    <label class="block">
                        <span class="text-sm text-slate-600 dark:text-slate-300">"Password"</span>
                        <input name="password" type="password" required autocomplete="current-password"
                            class="mt-1 w-full rounded border border-slate-300 px-3 py-2 dark:border-slate-600"/>
                    </label>
                    <Show when=move || error().is_some()>
                        <p id="login-error" role="alert" class="rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">
                            {error}
                        </p>
                    </Show>
                    <button id="sign-in" type="submit" disabled=move || login.pending().get()
                        class="w-full rounded bg-indigo-600 px-4 py-2 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                        "Sign in"
                    </button>
                </ActionForm>
            </div>
        </div>
    }
}
