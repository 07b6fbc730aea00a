use leptos::prelude::*;

/// A section whose screens are built by a later issue: says so plainly instead of pretending.
#[component]
pub fn Placeholder(title: &'static str, issue: u32) -> impl IntoView {
    view! {
        <h1 class="text-2xl font-semibold mb-4">{title}</h1>
        <p class="text-slate-600">{format!("This section is being built (issue #{issue}).")}</p>
    }
}

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <div class="p-8">
            <h1 class="text-2xl font-semibold">"Page not found"</h1>
            <a class="text-indigo-700 underline" href="/">"Back to the overview"</a>
        </div>
    }
}
