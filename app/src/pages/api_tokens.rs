//! Settings › API tokens: the tokens the SaaS's code calls `/api/v1` with, a new one (shown
//! once), and revoking one.

use leptos::prelude::*;

use super::action_outcome as outcome;
use super::settings::{SettingsTabs, BUTTON, INPUT};
use super::{Confirm, DangerSubmit, DataTable, ShownOnce};
use crate::api::api_tokens::{api_tokens, CreateApiToken, RevokeApiToken};
use crate::domain::ApiScope;

#[component]
pub fn ApiTokensPage() -> impl IntoView {
    let create = ServerAction::<CreateApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    let data = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| api_tokens(),
    );
    view! {
        <SettingsTabs current="/settings/api"/>
        <p class="mb-4 text-sm text-slate-600 dark:text-slate-300">
            "Your own code calls Mailroom's REST API at /api/v1 with one of these tokens, sent as "
            <code>"Authorization: Bearer <token>"</code>
            ". What each endpoint takes and answers is in the "
            <a href="/api/v1/openapi.json" rel="external" class="text-indigo-700 underline dark:text-indigo-300" data-test="openapi-link">"OpenAPI document"</a>
            "."
        </p>
        {move || outcome(revoke.value().get(), "revoke-result")}
        {move || create.value().get().map(|r| match r {
            Ok(c) => view! {
                <ShownOnce what=format!("Token “{}” created.", c.name) value=c.token test="create-result" value_test="api-token-value"/>
            }.into_any(),
            Err(e) => outcome(Some(Err(e)), "create-result").into_any(),
        })}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => {
                        let can_manage = d.can_manage;
                        view! {
                            <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="tokens-heading">
                                <h2 id="tokens-heading" class="text-lg font-semibold mb-3">"API tokens"</h2>
                                {if d.tokens.is_empty() {
                                    view! { <p class="text-sm text-slate-500 dark:text-slate-400">"None yet."</p> }.into_any()
                                } else {
                                    view! {
                                        <DataTable id="api-tokens" headings=&["Name", "Scopes", "Created", "Last used", ""]>
                                            {d.tokens.into_iter().map(|t| {
                                                let scopes = t.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
                                                view! {
                                                    <tr class="border-t border-slate-100 dark:border-slate-800" data-test="api-token">
                                                        <td class="p-3">{t.name.clone()}</td>
                                                        <td class="p-3 font-mono text-xs">{scopes}</td>
                                                        <td class="p-3">{t.created} {t.created_by.map(|n| format!(" by {n}"))}</td>
                                                        <td class="p-3">{t.last_used.unwrap_or_else(|| "never".into())}</td>
                                                        <td class="p-3">{match (t.revoked, can_manage) {
                                                            (true, _) => view! { <span class="text-slate-500">"revoked"</span> }.into_any(),
                                                            (false, true) => view! {
                                                                <Confirm label="Revoke" question=format!("Revoke “{}”? Its next request is refused.", t.name) test="revoke">
                                                                    <ActionForm action=revoke>
                                                                        <DangerSubmit label="Revoke" test="confirm-revoke" name="id" value=t.id.to_string()/>
                                                                    </ActionForm>
                                                                </Confirm>
                                                            }.into_any(),
                                                            (false, false) => ().into_any(),
                                                        }}</td>
                                                    </tr>
                                                }
                                            }).collect_view()}
                                        </DataTable>
                                    }.into_any()
                                }}
                                {can_manage.then(|| view! { <NewToken action=create/> })}
                            </section>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn NewToken(action: ServerAction<CreateApiToken>) -> impl IntoView {
    view! {
        <ActionForm action=action attr:id="api-token-form" attr:class="mt-4 space-y-3 text-sm">
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Name"</span>
                <input name="name" type="text" required maxlength="100" placeholder="billing service" class=INPUT/>
            </label>
            <fieldset>
                <legend class="text-slate-600 dark:text-slate-300">"Scopes"</legend>
                {ApiScope::ALL.iter().enumerate().map(|(k, s)| view! {
                    <label class="mr-4 inline-flex items-center gap-1">
                        <input type="checkbox" name=format!("scopes[{k}]") value=s.as_str() data-test="scope"/>
                        <span class="font-mono text-xs">{s.as_str()}</span>
                        <span class="text-slate-500">{format!("({})", s.describe())}</span>
                    </label>
                }).collect_view()}
            </fieldset>
            <button type="submit" id="create-api-token" disabled=move || action.pending().get() class=BUTTON>"Create token"</button>
        </ActionForm>
    }
}
