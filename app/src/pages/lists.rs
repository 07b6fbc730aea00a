//! Lists: member counts; create, rename, delete; import a CSV file into a list (a plain
//! multipart form to the server, which shows the import's progress page) and export it.

use leptos::prelude::*;
use leptos_router::components::A;

use crate::api::lists::{lists, CreateList, DeleteList, ListRow, RenameList};

const FIELD: &str =
    "rounded border border-slate-300 px-2 py-1 dark:border-slate-600 dark:bg-slate-900";
const BUTTON: &str = "rounded bg-indigo-600 px-3 py-1 font-medium text-white hover:bg-indigo-700";

#[component]
pub fn ListsPage() -> impl IntoView {
    let create = ServerAction::<CreateList>::new();
    let rename = ServerAction::<RenameList>::new();
    let delete = ServerAction::<DeleteList>::new();
    let all = Resource::new(
        move || {
            (
                create.version().get(),
                rename.version().get(),
                delete.version().get(),
            )
        },
        |_| lists(),
    );
    view! {
        <super::audience::AudienceTabs current="Lists"/>
        {move || super::action_outcome(create.value().get(), "create-result")}
        {move || super::action_outcome(rename.value().get(), "rename-result")}
        {move || super::action_outcome(delete.value().get(), "delete-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match all.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(v) => {
                        let can_act = v.can_act;
                        let new_list = can_act.then(|| view! {
                            <ActionForm action=create attr:class="mb-4 flex items-end gap-2 text-sm">
                                <label class="grid gap-1">"New list"<input name="name" required maxlength="200" class=FIELD data-test="new-list-name"/></label>
                                <button type="submit" data-test="create-list" class=BUTTON>"Create"</button>
                            </ActionForm>
                        });
                        let body = if v.lists.is_empty() {
                            view! { <p data-test="no-lists" class="text-slate-600 dark:text-slate-300">"No lists yet: create one, then import subscribers into it from a CSV file."</p> }.into_any()
                        } else {
                            view! {
                                <div class="grid gap-3">
                                    {v.lists.into_iter().map(|l| view! { <ListCard l can_act rename delete/> }).collect_view()}
                                </div>
                            }.into_any()
                        };
                        view! { {new_list} {body} }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn ListCard(
    l: ListRow,
    can_act: bool,
    rename: ServerAction<RenameList>,
    delete: ServerAction<DeleteList>,
) -> impl IntoView {
    let id = l.id.to_string();
    let members = format!("{} members", super::thousands(l.members));
    let name = l.name.clone();
    let (rename_id, delete_id) = (id.clone(), id.clone());
    let question = format!("Delete the list {name:?}? Its members stay subscribers.");
    let manage = can_act.then(move || view! {
        <div class="mt-3 flex flex-wrap items-end gap-4">
            <ActionForm action=rename attr:class="flex items-end gap-2">
                <input type="hidden" name="id" value=rename_id/>
                <label class="grid gap-1">"Name"<input name="name" required maxlength="200" value=name class=FIELD data-test="rename-name"/></label>
                <button type="submit" data-test="rename" class="rounded border border-slate-300 px-3 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Rename"</button>
            </ActionForm>
            // A plain multipart form: the file goes to the server as it is read, never whole into
            // the page; the answer is the import's progress page.
            <form method="post" action=format!("/api/lists/{}/import", l.id) enctype="multipart/form-data" class="flex items-end gap-2" data-test="import-form">
                <label class="grid gap-1">"Import CSV (columns: email, name)"
                    <input type="file" name="file" accept=".csv,text/csv" required class="text-sm" data-test="import-file"/>
                </label>
                <button type="submit" data-test="import" class=BUTTON>"Import"</button>
            </form>
            <super::Confirm label="Delete" test="delete-list" question>
                <ActionForm action=delete>
                    <super::DangerSubmit label="Delete" test="confirm-delete-list" name="id" value=delete_id/>
                </ActionForm>
            </super::Confirm>
        </div>
    });
    view! {
        <section class="rounded-lg bg-white p-4 text-sm shadow dark:bg-slate-900" data-test="list" data-name=l.name.clone()>
            <div class="flex items-baseline gap-3">
                <h2 class="text-base font-semibold">{l.name.clone()}</h2>
                <A href=format!("/audience?list={}", l.id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300" attr:data-test="members">{members}</A>
                <a href=format!("/api/audience/export.csv?list={}", l.id) download class="text-indigo-700 hover:underline dark:text-indigo-300">"Export CSV"</a>
                <span class="ml-auto text-slate-500 dark:text-slate-400">{format!("created {}", l.created)}</span>
            </div>
            <SignupLinks url=l.signup_url.clone()/>
            {manage}
        </section>
    }
}

/// The list's public sign-up page and a plain HTML form to paste into a website. The form
/// posts to the same page, which proves the visitor is not a bot and sends the confirmation.
#[component]
fn SignupLinks(url: String) -> impl IntoView {
    let embed = format!(
        "<form action=\"{url}\" method=\"post\">\n  <input type=\"email\" name=\"email\" required placeholder=\"you@example.com\">\n  <input type=\"text\" name=\"name\" placeholder=\"Your name\">\n  <!-- Leave this field hidden and empty: bots fill it in. -->\n  <input type=\"text\" name=\"website\" tabindex=\"-1\" autocomplete=\"off\" style=\"position:absolute;left:-10000px\" aria-hidden=\"true\">\n  <button type=\"submit\">Subscribe</button>\n</form>"
    );
    view! {
        <details class="mt-2" data-test="signup">
            <summary class="cursor-pointer text-slate-600 dark:text-slate-300">"Sign-up page and form (double opt-in)"</summary>
            <p class="mt-2">"Sign-up page: " <a href=url.clone() rel="external" class="font-mono text-indigo-700 hover:underline dark:text-indigo-300" data-test="signup-url">{url.clone()}</a></p>
            <p class="mt-2">"Or paste this form into your website. People who sign up get a link to confirm; they join the list when they click it."</p>
            <pre class="mt-1 overflow-x-auto rounded bg-slate-100 p-2 text-xs dark:bg-slate-800" data-test="signup-embed">{embed}</pre>
        </details>
    }
}
