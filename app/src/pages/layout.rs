use leptos::prelude::*;
use leptos_router::components::{Outlet, Redirect, A};

use crate::api::auth::{me, Logout};
use crate::api::CurrentUser;

/// The signed-in sections: the navigation, and the paths behind a session.
const NAV: [(&str, &str); 8] = [
    ("/", "Overview"),
    ("/campaigns", "Campaigns"),
    ("/automations", "Automations"),
    ("/digests", "Digests"),
    ("/audience", "Audience"),
    ("/templates", "Templates"),
    ("/deliveries", "Deliveries"),
    ("/settings", "Settings"),
];

/// Whether `path` is a signed-in page (the Overview or under a section of [`NAV`]): the server
/// sends a browser without a live session from it to /login before rendering anything.
pub fn is_signed_in_page(path: &str) -> bool {
    path == "/"
        || NAV.iter().skip(1).any(|(section, _)| {
            path.strip_prefix(section)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// Every signed-in page: navigation, who is signed in, and the page itself. Nobody signed in →
/// the login page.
///
/// The page (the `Outlet`) sits outside the suspense that waits for the user: a view made
/// inside a `Suspend` is made again when what it awaits resolves, and a page made twice on the
/// server fetches every one of its resources twice.
#[component]
pub fn Layout() -> impl IntoView {
    // Blocking: the server resolves it before sending the page head, so a signed-out request
    // gets a real redirect instead of a page that redirects after loading.
    let user = Resource::new_blocking(|| (), |_| me());
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
                <header class="flex min-h-12 items-center justify-end gap-4 border-b border-slate-200 bg-white px-6 py-3 text-sm dark:border-slate-700 dark:bg-slate-900">
                    <Suspense fallback=|| view! { <span class="text-slate-500 dark:text-slate-400">"…"</span> }>
                        {move || Suspend::new(async move {
                            match user.await {
                                Ok(Some(u)) => view! { <Who user=u logout/> }.into_any(),
                                Ok(None) => view! { <Redirect path="/login"/> }.into_any(),
                                Err(e) => view! { <span class="text-red-700 dark:text-red-300" role="alert">{e.to_string()}</span> }.into_any(),
                            }
                        })}
                    </Suspense>
                </header>
                <main class="p-6">
                    <Outlet/>
                </main>
            </div>
        </div>
    }
}

/// Who is signed in, and the way out.
#[component]
fn Who(user: CurrentUser, logout: ServerAction<Logout>) -> impl IntoView {
    view! {
        <span id="whoami">
            {user.name.clone()} " · " <span class="text-slate-500 dark:text-slate-400">{user.org_name.clone()}</span>
            " · " <span class="text-slate-500 dark:text-slate-400">{user.role.to_string()}</span>
        </span>
        <ActionForm action=logout>
            <button id="logout" type="submit" class="rounded border border-slate-300 px-3 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">
                "Sign out"
            </button>
        </ActionForm>
    }
}

#[cfg(test)]
mod tests {
    use super::is_signed_in_page;

    #[test]
    fn the_signed_in_pages_are_the_sections_and_nothing_beside_them() {
        for path in [
            "/",
            "/campaigns",
            "/campaigns/7/edit",
            "/audience/lists",
            "/settings/audit",
        ] {
            assert!(is_signed_in_page(path), "{path}");
        }
        for path in [
            "/login",
            "/invite/abc",
            "/setup",
            "/u/token",
            "/pkg/mailroom.js",
            "/campaignsx",
            "/favicon.ico",
            "",
        ] {
            assert!(!is_signed_in_page(path), "{path}");
        }
    }
}
