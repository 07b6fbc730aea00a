use leptos::prelude::*;
use leptos_router::components::{Outlet, Redirect, A};

use crate::api::auth::{me, Logout};
use crate::api::CurrentUser;

const NAV: [(&str, &str); 6] = [
    ("/", "Overview"),
    ("/campaigns", "Campaigns"),
    ("/digests", "Digests"),
    ("/audience", "Audience"),
    ("/deliveries", "Deliveries"),
    ("/settings", "Settings"),
];

/// Every signed-in page: navigation, who is signed in, and the page itself. Nobody signed in →
/// the login page.
#[component]
pub fn Layout() -> impl IntoView {
    // Blocking: the server resolves it before sending the page head, so a signed-out request
    // gets a real redirect instead of a page that redirects after loading.
    let user = Resource::new_blocking(|| (), |_| me());
    view! {
        <Suspense fallback=|| view! { <p class="p-8 text-slate-500 dark:text-slate-400">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match user.await {
                    Ok(Some(u)) => view! { <Signed user=u/> }.into_any(),
                    Ok(None) => view! { <Redirect path="/login"/> }.into_any(),
                    Err(e) => view! { <p class="p-8 text-red-700 dark:text-red-300" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Signed(user: CurrentUser) -> impl IntoView {
    let logout = ServerAction::<Logout>::new();
    view! {
        <div class="min-h-screen md:flex">
            <nav class="bg-slate-900 text-slate-100 md:w-56 md:min-h-screen p-4 flex md:flex-col gap-1">
                <div class="font-semibold text-lg mb-4 mr-4">"✉ Mailroom"</div>
                {NAV
                    .into_iter()
                    .map(|(href, label)| {
                        view! {
                            <A href=href exact=true attr:class="block rounded px-3 py-2 hover:bg-slate-700 aria-[current=page]:bg-slate-700">
                                {label}
                            </A>
                        }
                    })
                    .collect_view()}
            </nav>
            <div class="flex-1">
                <header class="flex items-center justify-end gap-4 border-b border-slate-200 bg-white px-6 py-3 text-sm dark:border-slate-700 dark:bg-slate-900">
                    <span id="whoami">
                        {user.name.clone()} " · " <span class="text-slate-500 dark:text-slate-400">{user.org_name.clone()}</span>
                        " · " <span class="text-slate-500 dark:text-slate-400">{user.role.to_string()}</span>
                    </span>
                    <ActionForm action=logout>
                        <button id="logout" type="submit" class="rounded border border-slate-300 px-3 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">
                            "Sign out"
                        </button>
                    </ActionForm>
                </header>
                <main class="p-6">
                    <Outlet/>
                </main>
            </div>
        </div>
    }
}
