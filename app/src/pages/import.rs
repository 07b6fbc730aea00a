//! One CSV import: its progress while it runs (re-read every second once the page is live; a
//! refresh header before), then what it did and the rows it refused, with their reasons.

use leptos::prelude::*;
use leptos_meta::Meta;
use leptos_router::components::A;
use leptos_router::hooks::use_params_map;

use crate::api::lists::{import_status, Import};
use crate::domain::ImportStatus;
use crate::error::AppError;

#[component]
pub fn ImportPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    let tick = RwSignal::new(0u32);
    let status = Resource::new(
        move || (id(), tick.get()),
        |(id, _)| async move {
            match id {
                Some(id) => import_status(id).await,
                None => Err(AppError::NotFound),
            }
        },
    );
    // In the browser: re-read every second while the import runs.
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || {
                let running = status
                    .get_untracked()
                    .and_then(|r| r.ok())
                    .is_some_and(|v| v.status == ImportStatus::Running);
                if running {
                    tick.update(|t| *t += 1);
                }
            },
            std::time::Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
    view! {
        <super::audience::AudienceTabs current="Lists"/>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match status.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(v) => view! { <ImportReport v/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn ImportReport(v: Import) -> impl IntoView {
    let running = v.status == ImportStatus::Running;
    let headline = match v.status {
        ImportStatus::Running => format!("Importing… {} rows read", super::thousands(v.rows_read)),
        ImportStatus::Done => format!(
            "Imported: {} rows read, {} new subscribers, {} added to the list, {} rows refused",
            super::thousands(v.rows_read),
            super::thousands(v.created_subscribers),
            super::thousands(v.added_members),
            super::thousands(v.error_count)
        ),
        ImportStatus::Interrupted => "Interrupted: the server stopped during this import, and nothing of it was imported. Import the file again.".to_string(),
        ImportStatus::Failed => format!(
            "Nothing was imported: {}",
            v.message.clone().unwrap_or_default()
        ),
    };
    let errors = (!v.errors.is_empty()).then(|| {
        let more = v.error_count - v.errors.len() as i64;
        view! {
            <h3 class="mt-4 mb-2 font-semibold">"Rows refused"</h3>
            <table class="w-full rounded bg-white text-sm shadow dark:bg-slate-900" data-test="import-errors">
                <thead class="text-left text-slate-500 dark:text-slate-400"><tr><th class="p-2">"Line"</th><th class="p-2">"Reason"</th></tr></thead>
                <tbody>
                    {v.errors.into_iter().map(|e| view! {
                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="import-error"><td class="p-2">{e.row}</td><td class="p-2">{e.error}</td></tr>
                    }).collect_view()}
                </tbody>
            </table>
            {(more > 0).then(|| view! { <p class="mt-2 text-sm text-slate-600 dark:text-slate-300">{format!("… and {} more.", super::thousands(more))}</p> })}
        }
    });
    view! {
        // Before the wasm has loaded (or without JavaScript), the page refreshes itself.
        {running.then(|| view! { <Meta http_equiv="refresh" content="2"/> })}
        <p class="mb-2 text-sm"><A href="/audience/lists" attr:class="text-indigo-700 underline dark:text-indigo-300">"← Lists"</A></p>
        <h2 class="mb-1 text-xl font-semibold">{format!("Import into {}", v.list_name)}</h2>
        <p class="mb-3 text-sm text-slate-500 dark:text-slate-400">{format!("{} · started {}", v.file_name, v.started)}</p>
        <p role="status" data-test="import-status"
            class=if running { "rounded bg-sky-50 px-3 py-2 text-sky-900 dark:bg-sky-950 dark:text-sky-200" } else if v.status == ImportStatus::Done { "rounded bg-green-50 px-3 py-2 text-green-800 dark:bg-green-950 dark:text-green-200" } else { "rounded bg-red-50 px-3 py-2 text-red-700 dark:bg-red-950 dark:text-red-300" }>
            {headline}
        </p>
        {running.then(|| view! { <progress class="mt-2 w-full" aria-label="Import progress"></progress> })}
        {errors}
    }
}
