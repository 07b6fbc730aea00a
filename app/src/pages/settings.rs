//! Settings: the sender identity, sender authentication (`sender_auth`), the org's time zone
//! (and a link to the digest schedule), and the users with the owner's management actions.
//! Every form is an `ActionForm`, so it works before the wasm has loaded; confirmations are
//! `<details>` panels, which open without it.

use leptos::prelude::*;
use leptos_router::components::A;

use super::action_outcome as outcome;
use super::sender_auth::{SenderAuth, SenderAuthActions};
use crate::api::sender_auth::sender_auth_view;
use crate::api::settings::{
    settings_view, SaveApprovalPolicy, SaveEventRetention, SaveQuietHours, SaveSender, SettingsData,
};
use crate::api::users::{
    users_view, InviteUser, ResetPassword, SetUserDisabled, SetUserRole, UserEntry,
};
use crate::domain::Role;

pub(super) const INPUT: &str =
    "mt-1 block w-full rounded border border-slate-300 px-2 py-1.5 disabled:bg-slate-100 dark:border-slate-600";
pub(super) const BUTTON: &str = "rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50";
pub(super) const SMALL_BUTTON: &str =
    "rounded border border-slate-300 px-2 py-1 hover:bg-slate-100 disabled:opacity-50 dark:border-slate-600 dark:hover:bg-slate-800";

/// The section's tabs; `current` is the path shown.
#[component]
pub fn SettingsTabs(current: &'static str) -> impl IntoView {
    let tab = |href: &'static str, label: &'static str| {
        let class = if href == current {
            "rounded-t border-b-2 border-indigo-600 px-3 py-2 font-medium text-indigo-700 dark:text-indigo-300"
        } else {
            "rounded-t px-3 py-2 text-slate-600 hover:text-slate-900 dark:text-slate-300"
        };
        view! { <A href=href attr:class=class>{label}</A> }
    };
    view! {
        <h1 class="text-2xl font-semibold mb-2">"Settings"</h1>
        <nav aria-label="Settings sections" class="mb-6 flex gap-2 border-b border-slate-200 text-sm dark:border-slate-700">
            {tab("/settings", "Organisation and users")}
            {tab("/settings/relays", "Relays")}
            {tab("/settings/api", "API tokens")}
            {tab("/settings/webhooks", "Event webhooks")}
            {tab("/settings/audit", "Audit log")}
        </nav>
    }
}

#[component]
pub fn SettingsPage() -> impl IntoView {
    let save = ServerAction::<SaveSender>::new();
    let invite = ServerAction::<InviteUser>::new();
    let role = ServerAction::<SetUserRole>::new();
    let disable = ServerAction::<SetUserDisabled>::new();
    let reset = ServerAction::<ResetPassword>::new();
    let approval = ServerAction::<SaveApprovalPolicy>::new();
    let retention = ServerAction::<SaveEventRetention>::new();
    let quiet = ServerAction::<SaveQuietHours>::new();
    let settings = Resource::new(
        move || {
            (
                save.version().get(),
                approval.version().get(),
                retention.version().get(),
            )
        },
        |_| settings_view(),
    );
    let auth_actions = SenderAuthActions::new();
    let auth = Resource::new(move || auth_actions.versions(), |_| sender_auth_view());
    let users = Resource::new(
        move || {
            (
                invite.version().get(),
                role.version().get(),
                disable.version().get(),
                reset.version().get(),
            )
        },
        |_| users_view(),
    );
    let actions = UserActions {
        role,
        disable,
        reset,
    };
    view! {
        <SettingsTabs current="/settings"/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(s) => view! { <Sender s=s.clone() action=save/> <Approval s=s.clone() action=approval/> <EventRetention s=s.clone() action=retention/> <QuietHoursForm s action=quiet/> }.into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match auth.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => view! { <SenderAuth d actions=auth_actions/> }.into_any(),
                }
            })}
        </Suspense>
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="users-heading">
            <h2 id="users-heading" class="text-lg font-semibold mb-3">"Users"</h2>
            {move || outcome(invite.value().get(), "invite-result")}
            {move || outcome(role.value().get(), "role-result")}
            {move || outcome(disable.value().get(), "disable-result")}
            {move || outcome(reset.value().get(), "reset-result")}
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Err(e) => crate::pages::load_error(e),
                        Ok(d) => view! {
                            <UsersTable users=d.users can_manage=d.can_manage actions/>
                            {d.can_manage.then(|| view! { <InviteForm action=invite/> })}
                            {(!d.can_manage).then(|| view! {
                                <p class="mt-3 text-sm text-slate-500 dark:text-slate-400">"Only an owner can invite users or change them."</p>
                            })}
                        }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn Sender(s: SettingsData, action: ServerAction<SaveSender>) -> impl IntoView {
    let disabled = !s.can_manage;
    view! {
        <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="sender-heading">
            <h2 id="sender-heading" class="text-lg font-semibold mb-1">"Sender identity"</h2>
            <p class="mb-3 text-sm text-slate-600 dark:text-slate-300">"Every message of this organisation (campaigns, digests, invitations) is sent with these."</p>
            {move || outcome(action.value().get(), "sender-result")}
            <ActionForm action=action attr:id="sender-form" attr:class="grid gap-3 text-sm md:grid-cols-3">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"From name"</span>
                    <input name="from_name" value=s.from_name.clone() required maxlength="200" disabled=disabled class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"From address"</span>
                    <input name="from_address" type="email" value=s.from_address.clone() required disabled=disabled class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Reply-To " <span class="text-slate-400">"(optional)"</span></span>
                    <input name="reply_to" type="email" value=s.reply_to.clone() disabled=disabled
                        placeholder="Replies go to the From address" class=INPUT/>
                </label>
                {s.can_manage.then(|| view! {
                    <div>
                        <button type="submit" id="save-sender" disabled=move || action.pending().get() class=BUTTON>
                            "Save sender identity"
                        </button>
                    </div>
                })}
            </ActionForm>
            {disabled.then(|| view! { <p class="mt-2 text-sm text-slate-500 dark:text-slate-400">"Only an owner can change the sender identity."</p> })}
            <p class="mt-4 text-sm text-slate-600 dark:text-slate-300" data-test="timezone">
                "Time zone: " <strong>{s.timezone.clone()}</strong>
                " — dates and times in the dashboard are shown in it. The weekly digest's day, hour and time zone are set on the "
                <A href="/digests" attr:class="text-indigo-700 underline dark:text-indigo-300">"Digests page"</A> "."
            </p>
        </section>
    }
}

/// Four eyes or not: whether an admin may approve a campaign they wrote or last edited.
#[component]
fn Approval(s: SettingsData, action: ServerAction<SaveApprovalPolicy>) -> impl IntoView {
    let disabled = !s.can_manage;
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="approval-heading">
            <h2 id="approval-heading" class="text-lg font-semibold mb-1">"Campaign approval"</h2>
            {move || outcome(action.value().get(), "approval-result")}
            <ActionForm action=action attr:id="approval-form" attr:class="flex flex-wrap items-center gap-3 text-sm">
                <label class="flex items-center gap-2">
                    <input type="checkbox" name="allow_self_approval" checked=s.allow_self_approval disabled=disabled data-test="allow-self-approval"/>
                    "Let an admin approve a campaign they wrote or last edited (each such approval is marked in the audit log). Off: another admin must approve it."
                </label>
                {s.can_manage.then(|| view! {
                    <button type="submit" id="save-approval" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
        </section>
    }
}

/// How long the events the SaaS posts are kept.
#[component]
fn EventRetention(s: SettingsData, action: ServerAction<SaveEventRetention>) -> impl IntoView {
    let disabled = !s.can_manage;
    let (low, high) = (
        *crate::domain::event::RETENTION_DAYS.start(),
        *crate::domain::event::RETENTION_DAYS.end(),
    );
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="retention-heading">
            <h2 id="retention-heading" class="text-lg font-semibold mb-1">"Events"</h2>
            <p class="mb-2 text-sm text-slate-600 dark:text-slate-300">
                "Events your application posts to the API are kept this long after they happened, then deleted; segments only see the events kept."
            </p>
            {move || outcome(action.value().get(), "retention-result")}
            <ActionForm action=action attr:id="retention-form" attr:class="flex flex-wrap items-end gap-3 text-sm">
                <label class="block">
                    "Keep events for (days)"
                    <input type="number" name="event_retention_days" min=low max=high required
                        value=s.event_retention_days disabled=disabled class=INPUT data-test="event-retention-days"/>
                </label>
                {s.can_manage.then(|| view! {
                    <button type="submit" id="save-retention" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
        </section>
    }
}

/// When automation mail must not go out.
#[component]
fn QuietHoursForm(s: SettingsData, action: ServerAction<SaveQuietHours>) -> impl IntoView {
    let disabled = !s.can_manage;
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="quiet-heading">
            <h2 id="quiet-heading" class="text-lg font-semibold mb-1">"Quiet hours"</h2>
            <p class="mb-2 text-sm text-slate-600 dark:text-slate-300">
                "An automation's mail that comes due in these hours (the organisation's time zone) waits until they end. Empty: any hour."
            </p>
            {move || outcome(action.value().get(), "quiet-result")}
            <ActionForm action=action attr:id="quiet-form" attr:class="flex flex-wrap items-end gap-3 text-sm">
                <label class="block">
                    "From-to (HH-HH)"
                    <input name="quiet_hours" placeholder="22-07" pattern="[0-2][0-9]-[0-2][0-9]"
                        value=s.quiet_hours disabled=disabled class=INPUT data-test="quiet-hours"/>
                </label>
                {s.can_manage.then(|| view! {
                    <button type="submit" id="save-quiet" disabled=move || action.pending().get() class=BUTTON>"Save"</button>
                })}
            </ActionForm>
        </section>
    }
}

/// The owner's per-user actions.
#[derive(Clone, Copy)]
struct UserActions {
    role: ServerAction<SetUserRole>,
    disable: ServerAction<SetUserDisabled>,
    reset: ServerAction<ResetPassword>,
}

#[component]
fn UsersTable(users: Vec<UserEntry>, can_manage: bool, actions: UserActions) -> impl IntoView {
    view! {
        <div class="overflow-x-auto">
            <table id="users" class="w-full text-sm">
                <thead class="text-left text-slate-500 dark:text-slate-400">
                    <tr>
                        <th class="p-2">"User"</th><th class="p-2">"Role"</th><th class="p-2">"State"</th>
                        <th class="p-2">"Added"</th>
                        {can_manage.then(|| view! { <th class="p-2"><span class="sr-only">"Actions"</span></th> })}
                    </tr>
                </thead>
                <tbody>
                    {users.into_iter().map(|u| view! { <UserRow u can_manage actions/> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

fn state(u: &UserEntry) -> (&'static str, &'static str) {
    match (u.disabled, u.awaiting.as_deref()) {
        (true, _) => (
            "Disabled",
            "bg-slate-200 text-slate-700 dark:text-slate-300",
        ),
        (false, Some("invited")) => (
            "Invitation sent",
            "bg-sky-100 text-sky-800 dark:bg-sky-900 dark:text-sky-200",
        ),
        (false, Some(_)) => (
            "Reset link sent",
            "bg-amber-100 text-amber-800 dark:bg-amber-900 dark:text-amber-300",
        ),
        (false, None) => (
            "Active",
            "bg-green-100 text-green-800 dark:bg-green-900 dark:text-green-200",
        ),
    }
}

#[component]
fn UserRow(u: UserEntry, can_manage: bool, actions: UserActions) -> impl IntoView {
    let (label, class) = state(&u);
    let manage = can_manage.then(|| view! { <UserControls u=u.clone() actions/> });
    view! {
        <tr class="border-t border-slate-100 align-top dark:border-slate-800" data-test="user-row" data-email=u.email.clone()
            data-role=u.role.as_str() data-state=label>
            <td class="p-2">
                <div class="font-medium">{u.name.clone()} {u.is_me.then_some(" (you)")}</div>
                <div class="text-slate-500 dark:text-slate-400">{u.email.clone()}</div>
            </td>
            <td class="p-2" data-test="role">{u.role.as_str()}</td>
            <td class="p-2"><span class=format!("rounded-full px-2 py-0.5 text-xs {class}") data-test="state">{label}</span></td>
            <td class="p-2 whitespace-nowrap text-slate-500 dark:text-slate-400">{u.created.clone()}</td>
            {manage.map(|m| view! { <td class="p-2">{m}</td> })}
        </tr>
    }
}

#[component]
fn UserControls(u: UserEntry, actions: UserActions) -> impl IntoView {
    let UserActions {
        role,
        disable,
        reset,
    } = actions;
    let id = u.id;
    let who = u.name.clone();
    let current = u.role;
    let toggle = if u.disabled {
        view! {
            <ActionForm action=disable>
                <input type="hidden" name="user_id" value=id.to_string()/>
                <input type="hidden" name="disabled" value="false"/>
                <button type="submit" data-test="enable" class=SMALL_BUTTON disabled=move || disable.pending().get()>"Enable"</button>
            </ActionForm>
        }
        .into_any()
    } else {
        view! {
            <details class="relative">
                <summary data-test="disable" class="cursor-pointer list-none rounded border border-slate-300 px-2 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Disable…"</summary>
                <div role="dialog" aria-label=format!("Disable {who}")
                    class="absolute right-0 z-10 mt-2 w-72 rounded-lg border border-slate-200 bg-white p-4 shadow-lg dark:border-slate-700 dark:bg-slate-900">
                    <p class="mb-3">{format!("{who} is signed out everywhere and cannot sign in until enabled again.")}</p>
                    <ActionForm action=disable>
                        <input type="hidden" name="user_id" value=id.to_string()/>
                        <input type="hidden" name="disabled" value="true"/>
                        <button type="submit" data-test="confirm-disable" disabled=move || disable.pending().get()
                            class="rounded bg-red-600 px-3 py-1.5 font-medium text-white hover:bg-red-700 disabled:opacity-50">
                            "Disable"
                        </button>
                    </ActionForm>
                </div>
            </details>
        }
        .into_any()
    };
    let (link_label, link_text, link_button) = if u.awaiting.as_deref() == Some("invited") {
        (
            "Send new link…",
            format!(
                "A new invitation is e-mailed to {}; the earlier link stops working.",
                u.email
            ),
            "Send invitation",
        )
    } else {
        (
            "Reset password…",
            format!(
                "{who}'s password stops working at once and they are signed out everywhere. A link to choose a new one is e-mailed to {}.",
                u.email
            ),
            "Send reset link",
        )
    };
    let reset_panel = (!u.disabled).then(|| {
        view! {
            <details class="relative">
                <summary data-test="reset" class="cursor-pointer list-none rounded border border-slate-300 px-2 py-1 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">{link_label}</summary>
                <div role="dialog" aria-label=format!("New password link for {who}")
                    class="absolute right-0 z-10 mt-2 w-72 rounded-lg border border-slate-200 bg-white p-4 shadow-lg dark:border-slate-700 dark:bg-slate-900">
                    <p class="mb-3">{link_text}</p>
                    <ActionForm action=reset>
                        <input type="hidden" name="user_id" value=id.to_string()/>
                        <button type="submit" data-test="confirm-reset" disabled=move || reset.pending().get() class=BUTTON>
                            {link_button}
                        </button>
                    </ActionForm>
                </div>
            </details>
        }
    });
    view! {
        <div class="flex flex-wrap items-start gap-2">
            <ActionForm action=role attr:class="flex gap-1">
                <input type="hidden" name="user_id" value=id.to_string()/>
                <label>
                    <span class="sr-only">{format!("Role of {}", u.name)}</span>
                    <select name="role" data-test="role-select" class="rounded border border-slate-300 px-1 py-1 dark:border-slate-600">
                        {Role::ALL.into_iter().map(|r| view! {
                            <option value=r.as_str() selected=r == current>{r.as_str()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <button type="submit" data-test="change-role" class=SMALL_BUTTON disabled=move || role.pending().get()>"Change role"</button>
            </ActionForm>
            {toggle}
            {reset_panel}
        </div>
    }
    .into_any()
}

#[component]
fn InviteForm(action: ServerAction<InviteUser>) -> impl IntoView {
    view! {
        <div class="mt-6 border-t border-slate-100 pt-4 dark:border-slate-800">
            <h3 class="font-semibold mb-1">"Invite a user"</h3>
            <p class="mb-3 text-sm text-slate-600 dark:text-slate-300">
                "They receive an e-mail with a link to choose their password (valid for 7 days, once)."
            </p>
            <ActionForm action=action attr:id="invite-form" attr:class="grid gap-3 text-sm md:grid-cols-4 md:items-end">
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"E-mail address"</span>
                    <input name="email" type="email" required class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Name " <span class="text-slate-400">"(optional)"</span></span>
                    <input name="name" maxlength="200" class=INPUT/>
                </label>
                <label class="block">
                    <span class="text-slate-600 dark:text-slate-300">"Role"</span>
                    <select name="role" class=INPUT>
                        <option value="viewer">"viewer — reads everything"</option>
                        <option value="admin" selected>"admin — also acts"</option>
                        <option value="owner">"owner — also manages users and settings"</option>
                    </select>
                </label>
                <div>
                    <button type="submit" id="send-invite" disabled=move || action.pending().get() class=BUTTON>
                        "Send invitation"
                    </button>
                </div>
            </ActionForm>
        </div>
    }
}
