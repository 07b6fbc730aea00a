//! The public set-password page reached from an invitation or reset e-mail: no sign-in, the
//! link is the credential. Setting the password uses the link up and signs the user in.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::invites::{invite_info, AcceptInvite, MIN_PASSWORD};

#[component]
pub fn InvitePage() -> impl IntoView {
    let params = use_params_map();
    let token = Memo::new(move |_| params.read().get("token").unwrap_or_default());
    let accept = ServerAction::<AcceptInvite>::new();
    let link = Resource::new(move || token.get(), invite_info);
    let error = move || {
        accept
            .value()
            .get()
            .and_then(|r| r.err())
            .map(|e| e.to_string())
    };
    view! {
        <div class="min-h-screen flex items-center justify-center p-4">
            <div class="w-full max-w-md rounded-xl bg-white p-8 shadow dark:bg-slate-900">
                <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match link.await {
                            Err(e) => view! {
                                <h1 class="mb-4 text-2xl font-semibold">"This link does not work"</h1>
                                <p id="invite-error" role="alert" class="text-red-700 dark:text-red-300">{e.to_string()}</p>
                                <a href="/login" class="mt-4 inline-block text-indigo-700 underline dark:text-indigo-300">"Sign in"</a>
                            }.into_any(),
                            Ok(info) => {
                                let heading = if info.purpose == crate::domain::LinkPurpose::Invite {
                                    format!("Join {} on Mailroom", info.org_name)
                                } else {
                                    format!("Choose a new password for {}", info.org_name)
                                };
                                view! {
                                    <h1 class="mb-2 text-2xl font-semibold">{heading}</h1>
                                    <p class="mb-6 text-sm text-slate-600 dark:text-slate-300">
                                        "Signing in as " <strong data-test="invite-email">{info.email.clone()}</strong>
                                        ". This link works once, until " {info.expires.clone()} "."
                                    </p>
                                    <ActionForm action=accept attr:id="accept-form" attr:class="space-y-4">
                                        <input type="hidden" name="token" value=token.get_untracked()/>
                                        <label class="block">
                                            <span class="text-sm text-slate-600 dark:text-slate-300">"Your name"</span>
                                            <input name="name" value=info.name.clone() maxlength="200" autocomplete="name"
                                                class="mt-1 w-full rounded border border-slate-300 px-3 py-2 dark:border-slate-600"/>
                                        </label>
                                        <label class="block">
                                            <span class="text-sm text-slate-600 dark:text-slate-300">{format!("Password (at least {MIN_PASSWORD} characters)")}</span>
                                            <input name="password" type="password" required minlength=MIN_PASSWORD.to_string() autocomplete="new-password"
                                                class="mt-1 w-full rounded border border-slate-300 px-3 py-2 dark:border-slate-600"/>
                                        </label>
                                        <Show when=move || error().is_some()>
                                            <p id="accept-error" role="alert" class="rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">{error}</p>
                                        </Show>
                                        <button id="set-password" type="submit" disabled=move || accept.pending().get()
                                            class="w-full rounded bg-indigo-600 px-4 py-2 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                                            "Set password and sign in"
                                        </button>
                                    </ActionForm>
                                }.into_any()
                            }
                        }
                    })}
                </Suspense>
            </div>
        </div>
    }
}
