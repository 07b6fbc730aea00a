use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    // A server render answers 404, so clients and probes see the page is missing.
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(axum::http::StatusCode::NOT_FOUND);
    }
    view! {
        <div class="p-8">
            <h1 class="text-2xl font-semibold">"Page not found"</h1>
            <a class="text-indigo-700 underline dark:text-indigo-300" href="/">"Back to the overview"</a>
        </div>
    }
}
