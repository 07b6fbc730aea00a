//! The draft editor: name, subject and body (templates with `{{ name }}`, `{{ email }}`,
//! `{{ unsubscribe_url }}`), the audience (lists and segments sent to or left out), schedule in the org's time zone; a preview for a
//! real recipient and the recipient estimate, refreshed after each save. A plain form
//! (`ActionForm`), so it works before the wasm has loaded.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::campaign::edit::{campaign_sheet, SaveCampaign, Sheet};
use crate::api::campaign::test_send::{SendTest, MAX_TEST_ADDRESSES};
use crate::domain::{BodyFormat, CampaignStatus};
use crate::error::AppError;

#[component]
pub fn EditorPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    let save = ServerAction::<SaveCampaign>::new();
    let test = ServerAction::<SendTest>::new();
    let sheet = Resource::new(
        move || (id(), save.version().get()),
        |(id, _)| async move {
            match id {
                Some(id) => campaign_sheet(id).await,
                None => Err(AppError::NotFound),
            }
        },
    );
    view! {
        {move || id().map(|id| view! {
            <p class="mb-2 text-sm"><a href=format!("/campaigns/{id}") class="text-sky-700 hover:underline">"← Campaign"</a></p>
        })}
        {move || crate::pages::action_outcome(save.value().get(), "save-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match sheet.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(s) => view! { <Editor s save test/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

const FIELD: &str = "rounded border border-slate-300 px-2 py-1 dark:border-slate-600";

#[component]
fn Editor(
    s: Sheet,
    save: ServerAction<SaveCampaign>,
    test: ServerAction<SendTest>,
) -> impl IntoView {
    let lists = s
        .lists
        .iter()
        .enumerate()
        .map(|(k, l)| {
            view! {
                <div class="flex flex-wrap items-center gap-3">
                    <label class="flex items-center gap-2">
                        <input type="checkbox" name=format!("lists[{k}]") value=l.id.to_string() checked=l.chosen data-test="list-choice"/>
                        {l.name.clone()} <span class="text-slate-500 dark:text-slate-400">{format!("({} members)", l.members)}</span>
                    </label>
                    <label class="flex items-center gap-1 text-sm text-slate-600 dark:text-slate-300">
                        <input type="checkbox" name=format!("excluded_lists[{k}]") value=l.id.to_string() checked=l.excluded data-test="list-exclude"/>
                        "leave out"
                    </label>
                </div>
            }
        })
        .collect_view();
    let segments = s
        .segments
        .iter()
        .enumerate()
        .map(|(k, g)| {
            view! {
                <div class="flex flex-wrap items-center gap-3">
                    <label class="flex items-center gap-2">
                        <input type="checkbox" name=format!("segments[{k}]") value=g.id.to_string() checked=g.chosen data-test="segment-choice"/>
                        {format!("Segment: {}", g.name)}
                    </label>
                    <label class="flex items-center gap-1 text-sm text-slate-600 dark:text-slate-300">
                        <input type="checkbox" name=format!("excluded_segments[{k}]") value=g.id.to_string() checked=g.excluded data-test="segment-exclude"/>
                        "leave out"
                    </label>
                </div>
            }
        })
        .collect_view();
    let preview = match s.preview.clone() {
        Ok(p) => view! { <crate::pages::campaign::preview::PreviewBox p test="preview"/> }.into_any(),
        Err(e) => view! { <p data-test="preview-problem" class="text-sm text-slate-600 dark:text-slate-300">{e}</p> }
            .into_any(),
    };
    let locked = !s.status.content_editable();
    let test_form = view! { <TestSend s=s.clone() test/> };
    view! {
        <h1 class="mb-1 text-2xl font-semibold">"Edit campaign"</h1>
        {(s.status == CampaignStatus::Submitted).then(|| view! {
            <p class="mb-3 rounded bg-amber-50 px-3 py-2 text-sm text-amber-900 dark:bg-amber-950 dark:text-amber-200">"It is submitted: saving sends it back to draft, and it must be submitted and approved again."</p>
        })}
        {locked.then(|| view! {
            <p class="mb-3 rounded bg-slate-100 px-3 py-2 text-sm dark:bg-slate-800">{format!("It is {}: its content can no longer change.", s.status)}</p>
        })}
        <div class="grid gap-6 lg:grid-cols-2">
            <ActionForm action=save attr:class="grid gap-3">
                <input type="hidden" name="id" value=s.id.to_string()/>
                <input type="hidden" name="version" value=s.version.to_string()/>
                <label class="grid gap-1">"Name"
                    <input name="name" required maxlength="200" value=s.name.clone() class=FIELD/>
                </label>
                <label class="grid gap-1">"Subject"
                    <input name="subject" maxlength="300" value=s.subject.clone() class=FIELD data-test="subject"/>
                </label>
                <label class="grid gap-1">"Body format"
                    <select name="format" class=FIELD data-test="format">
                        <option value="markdown" selected=s.format == BodyFormat::Markdown>"Markdown (sent as HTML and text)"</option>
                        <option value="html" selected=s.format == BodyFormat::Html>"HTML"</option>
                    </select>
                </label>
                <label class="grid gap-1">"Body"
                    <textarea name="body" rows="10" class=FIELD data-test="body">{crate::pages::textarea_text(&s.body)}</textarea>
                </label>
                <span class="text-xs text-slate-500 dark:text-slate-400">"Fields: {{ name }}, {{ email }}, {{ unsubscribe_url }} (an unsubscribe link is also added to every message)."</span>
                <fieldset class="grid gap-1">
                    <legend>"Send to (members of any chosen list or segment, minus those left out)"</legend>
                    {lists}
                    {segments}
                </fieldset>
                <label class="grid gap-1">{format!("Send at ({}; empty: as soon as approved)", s.timezone)}
                    <input type="datetime-local" name="schedule" value=s.schedule.clone().unwrap_or_default() class=FIELD/>
                </label>
                <button type="submit" data-test="save" disabled=move || locked || save.pending().get()
                    class="justify-self-start rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                    {format!("Save (version {} → {})", s.version, s.version + 1)}
                </button>
            </ActionForm>
            <div>
                <h2 class="mb-2 font-semibold">"Preview"</h2>
                {preview}
                <p class="mt-2 text-sm">"Recipients now (after de-duplication and suppression): " <strong data-test="estimate">{s.estimate}</strong></p>
                {test_form}
            </div>
        </div>
    }
}

/// Sends the version shown to a few addresses. The form carries this page's dialog token: a
/// double click queues each message once.
#[component]
fn TestSend(s: Sheet, test: ServerAction<SendTest>) -> impl IntoView {
    if !s.can_act {
        return ().into_any();
    }
    view! {
        <ActionForm action=test attr:class="mt-4 grid gap-2 rounded border border-slate-200 p-3 text-sm dark:border-slate-700">
            <h2 class="font-semibold">"Send a test"</h2>
            <input type="hidden" name="id" value=s.id.to_string()/>
            <input type="hidden" name="version" value=s.version.to_string()/>
            <input type="hidden" name="token" value=s.test_token.clone()/>
            <label class="grid gap-1">{format!("To (up to {MAX_TEST_ADDRESSES} addresses; it does not count as sending the campaign)")}
                <input name="addresses" required class=FIELD data-test="test-addresses" placeholder="you@example.com"/>
            </label>
            {move || crate::pages::action_outcome(test.value().get(), "test-result")}
            <button type="submit" data-test="send-test" disabled=move || test.pending().get()
                class="justify-self-start rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100 disabled:opacity-50 dark:border-slate-600 dark:hover:bg-slate-800">
                {format!("Send version {} as a test", s.version)}
            </button>
        </ActionForm>
    }
    .into_any()
}
