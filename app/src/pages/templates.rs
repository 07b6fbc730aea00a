//! Templates: the transactional templates API requests name (`POST /api/v1/messages`), a new
//! one, and the editor of one with its preview from the sample data. Plain forms
//! (`ActionForm`), so they work before the wasm has loaded.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::templates::{template, templates, SaveTemplate, TemplateDetail};
use crate::error::AppError;

const FIELD: &str = "rounded border border-slate-300 px-2 py-1 font-mono text-sm dark:border-slate-600 dark:bg-slate-900";
const BUTTON: &str = "justify-self-start rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50";

#[component]
pub fn TemplatesPage() -> impl IntoView {
    let save = ServerAction::<SaveTemplate>::new();
    let data = Resource::new(move || save.version().get(), |_| templates());
    view! {
        <h1 class="mb-2 text-2xl font-semibold">"Templates"</h1>
        <p class="mb-4 text-sm text-slate-600 dark:text-slate-300">
            "Transactional mail your own code sends through the API ("
            <code>"POST /api/v1/messages"</code>
            ", with an Idempotency-Key: a retried request never sends twice). A request names a template and sends the data its fields are filled in from. Every save is a new version; a message keeps the version it was made from."
        </p>
        {move || crate::pages::action_outcome(save.value().get(), "save-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => view! {
                        <section class="mb-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900">
                            {if d.templates.is_empty() {
                                view! { <p class="text-sm text-slate-500 dark:text-slate-400">"None yet."</p> }.into_any()
                            } else {
                                view! {
                                    <crate::pages::DataTable id="templates" headings=&["Name", "Subject", "Version", "Saved"]>
                                        {d.templates.into_iter().map(|t| view! {
                                            <tr class="border-t border-slate-100 dark:border-slate-800" data-test="template">
                                                <td class="p-3"><a href=format!("/templates/{}", t.id) class="font-mono text-indigo-700 hover:underline dark:text-indigo-300">{t.name}</a></td>
                                                <td class="p-3">{t.subject}</td>
                                                <td class="p-3">{t.version}</td>
                                                <td class="p-3">{t.saved} {t.author.map(|a| format!(" by {a}"))}</td>
                                            </tr>
                                        }).collect_view()}
                                    </crate::pages::DataTable>
                                }.into_any()
                            }}
                        </section>
                        {d.can_act.then(|| view! {
                            <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900">
                                <h2 class="mb-3 text-lg font-semibold">"New template"</h2>
                                <TemplateForm save t=None/>
                            </section>
                        })}
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn TemplatePage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    let save = ServerAction::<SaveTemplate>::new();
    let detail = Resource::new(
        move || (id(), save.version().get()),
        |(id, _)| async move {
            match id {
                Some(id) => template(id).await,
                None => Err(AppError::NotFound),
            }
        },
    );
    view! {
        <p class="mb-2 text-sm"><a href="/templates" class="text-sky-700 hover:underline">"← Templates"</a></p>
        {move || crate::pages::action_outcome(save.value().get(), "save-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(t) => {
                        let preview = match t.preview.clone() {
                            Ok(p) => view! { <crate::pages::campaign::preview::PreviewBox p test="preview"/> }.into_any(),
                            Err(e) => view! { <p data-test="preview-problem" class="text-sm text-slate-600 dark:text-slate-300">{e}</p> }.into_any(),
                        };
                        view! {
                            <h1 class="mb-1 text-2xl font-semibold font-mono">{t.name.clone()}</h1>
                            <p class="mb-4 text-sm text-slate-500 dark:text-slate-400" data-test="template-version">
                                {format!("Version {}, saved {}", t.version, t.saved)}
                                {t.author.clone().map(|a| format!(" by {a}"))}
                            </p>
                            <div class="grid gap-6 lg:grid-cols-2">
                                <TemplateForm save t=Some(t)/>
                                <div>
                                    <h2 class="mb-2 font-semibold">"Preview (the sample data filled in)"</h2>
                                    {preview}
                                </div>
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// The editor of a template's parts; a new template without `t`.
#[component]
fn TemplateForm(save: ServerAction<SaveTemplate>, t: Option<TemplateDetail>) -> impl IntoView {
    let can_act = t.as_ref().is_none_or(|t| t.can_act);
    let label = match &t {
        Some(t) => format!("Save (version {} → {})", t.version, t.version + 1),
        None => "Create template".to_string(),
    };
    let field = |f: fn(&TemplateDetail) -> &str| t.as_ref().map(f).unwrap_or_default().to_owned();
    let name = field(|t| &t.name);
    let subject = field(|t| &t.subject);
    let body_text = field(|t| &t.body_text);
    let body_html = field(|t| &t.body_html);
    let sample = t
        .as_ref()
        .map(|t| t.sample_data.clone())
        .unwrap_or_else(|| "{\n  \"name\": \"Ann\"\n}".into());
    view! {
        <ActionForm action=save attr:class="grid gap-3 text-sm" attr:id="template-form">
            {t.as_ref().map(|t| view! {
                <input type="hidden" name="id" value=t.id.to_string()/>
                <input type="hidden" name="expected_version" value=t.version.to_string()/>
            })}
            <label class="grid gap-1">"Name (what API requests send as \"template\")"
                <input name="name" required maxlength="64" pattern="[a-z0-9][a-z0-9_\\-]*" value=name class=FIELD data-test="template-name" placeholder="receipt"/>
            </label>
            <label class="grid gap-1">"Subject"
                <input name="subject" required maxlength="998" value=subject class=FIELD data-test="template-subject" placeholder="Your receipt for order {{ order_id }}"/>
            </label>
            <label class="grid gap-1">"Text body"
                <textarea name="body_text" rows="8" required class=FIELD data-test="template-text">{crate::pages::textarea_text(&body_text)}</textarea>
            </label>
            <label class="grid gap-1">"HTML body (optional; every field is escaped)"
                <textarea name="body_html" rows="8" class=FIELD data-test="template-html">{crate::pages::textarea_text(&body_html)}</textarea>
            </label>
            <label class="grid gap-1">"Sample data (JSON, for the preview)"
                <textarea name="sample_data" rows="5" class=FIELD data-test="template-sample">{crate::pages::textarea_text(&sample)}</textarea>
            </label>
            <span class="text-xs text-slate-500 dark:text-slate-400">
                "Fields are minijinja: {{ name }}, {{ order.total }}, {% for item in items %}…{% endfor %}. {{ email }} is the recipient. A field the data lacks refuses the request (422), so nothing half-filled is sent."
            </span>
            <button type="submit" data-test="save-template" disabled=move || !can_act || save.pending().get() class=BUTTON>{label}</button>
        </ActionForm>
    }
}
