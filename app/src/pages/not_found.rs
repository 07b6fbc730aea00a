use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <div class="p-8">
            <h1 class="text-2xl font-semibold">"Page not found"</h1>
            <a class="text-indigo-700 underline dark:text-indigo-300" href="/">"Back to the overview"</a>
        </div>
    }
}
