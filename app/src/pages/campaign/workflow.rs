//! The campaign page's workflow panel: who wrote, edited and approved it, and the admin's
//! actions for its state, each behind a confirmation (`<details>` + `ActionForm`, so they work
//! before the wasm has loaded). The approval confirmation shows exactly what is approved: the
//! version, the rendered preview for a real recipient, the recipient estimate and the schedule.

use leptos::prelude::*;

use crate::api::campaign::bin::DeleteCampaign;
use crate::api::campaign::edit::{CampaignAction, CloneCampaign, Problem, Sheet};
use crate::domain::{CampaignStatus, Transition};

/// (verb, button label, what the confirmation says) for each action the state allows: the
/// domain says which transitions are legal from it, the page only words them.
fn actions(s: CampaignStatus) -> Vec<(&'static str, &'static str, &'static str)> {
    Transition::offered_from(s)
        .map(|t| {
            let (label, note) = match t {
                Transition::Submit => (
                    "Submit for approval",
                    "Another admin will review and approve it.",
                ),
                Transition::Approve => ("Approve", ""),
                Transition::Reject => ("Reject", "It goes back to draft with your reason."),
                Transition::Pause => ("Pause", "Sending stops within one message per connection."),
                Transition::Resume => ("Resume", "Sending continues where it stopped."),
                Transition::Cancel => (
                    "Cancel campaign",
                    match s {
                        CampaignStatus::Draft | CampaignStatus::Submitted => {
                            "It will never be sent."
                        }
                        CampaignStatus::Approved => "It will not be sent.",
                        _ => "Nothing not yet sent will be sent.",
                    },
                ),
                // Workers' transitions: never offered.
                Transition::Start | Transition::Finish => ("", ""),
            };
            (t.verb(), label, note)
        })
        .collect()
}

#[component]
pub fn Panel(
    s: Sheet,
    act: ServerAction<CampaignAction>,
    status: Signal<CampaignStatus>,
) -> impl IntoView {
    let schedule = s
        .schedule
        .clone()
        .map(|t| format!("{} ({})", t.replace('T', " "), s.timezone))
        .unwrap_or_else(|| "as soon as it is approved".into());
    let approval = s.approver.clone().map(|who| {
        view! { <li data-test="approved-by">"Approved by " {who} " at " {s.approved_at.clone().unwrap_or_default()}</li> }
    });
    let rejected = s.rejection_reason.clone().filter(|_| s.status == CampaignStatus::Draft).map(|r| {
        view! { <p data-test="rejection" class="mb-3 rounded bg-amber-50 px-3 py-2 text-amber-900 dark:bg-amber-950 dark:text-amber-200">"Rejected: " {r}</p> }
    });
    let (can_delete, delete_id) = (s.can_act, s.id);
    let editable = s.can_act && s.status.content_editable();
    // Offered for the state the campaign is in now (the live reading), not when the page loaded.
    let sheet = s.clone();
    let dialogs = move || {
        let s = sheet.clone();
        let buttons = if s.can_act {
            actions(status.get())
        } else {
            vec![]
        };
        buttons
        .into_iter()
        .map(|(verb, label, note)| {
            let extra = match verb {
                "approve" => view! { <Approval s=s.clone()/> }.into_any(),
                "reject" => view! {
                    <label class="grid gap-1 text-sm">"Reason (the author will read it)"
                        <textarea name="reason" required maxlength="500" rows="2" class="rounded border px-2 py-1"></textarea>
                    </label>
                }.into_any(),
                _ => view! { <p class="text-sm text-slate-600 dark:text-slate-300">{note}</p> }.into_any(),
            };
            view! {
                <details class="rounded border border-slate-200 bg-white dark:border-slate-700 dark:bg-slate-900" data-test=format!("dialog-{verb}")>
                    <summary class="cursor-pointer px-3 py-1.5 font-medium" data-test=format!("open-{verb}")>{label}</summary>
                    <div role="dialog" aria-label=label class="grid gap-2 p-3">
                        <ActionForm action=act attr:class="grid gap-2">
                            <input type="hidden" name="id" value=s.id.to_string()/>
                            <input type="hidden" name="verb" value=verb/>
                            <input type="hidden" name="version" value=s.version.to_string()/>
                            {extra}
                            <button type="submit" data-test=format!("confirm-{verb}") disabled=move || act.pending().get()
                                class="justify-self-start rounded bg-indigo-600 px-3 py-1.5 font-medium text-white hover:bg-indigo-700 disabled:opacity-50">
                                {format!("Yes, {}", label.to_lowercase())}
                            </button>
                        </ActionForm>
                    </div>
                </details>
            }
        })
        .collect_view()
    };
    view! {
        <section class="mb-4 rounded bg-white p-4 shadow dark:bg-slate-900" aria-label="Workflow">
            {rejected}
            <ul class="mb-3 text-sm text-slate-600 dark:text-slate-300">
                <li>"Version " <span data-test="version">{s.version}</span> " · written by " {s.author.clone()} " · last edited by " {s.last_editor.clone()}</li>
                <li>"Goes out " {schedule} " · " <span data-test="estimate">{s.estimate}</span> {if s.started { " recipients" } else { " recipients now" }}</li>
                {s.approved_estimate_differs.map(|shown| view! {
                    <li data-test="estimate-moved">{format!("Approved for {shown} recipients; {} were chosen at the start: the audience's data changed in between.", s.estimate)}</li>
                })}
                {approval}
            </ul>
            <div class="flex flex-wrap items-start gap-2">
                {editable.then(|| view! {
                    <a href=format!("/campaigns/{}/edit", s.id) data-test="edit" class="rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100">"Edit"</a>
                })}
                {s.can_act.then(|| view! { <CloneButton id=s.id/> })}
                {move || (can_delete && status.get().deletable()).then(|| view! { <DeleteDialog id=delete_id/> }.into_any())}
                {dialogs}
            </div>
        </section>
    }.into_any()
}

/// The recipients not reached for sure, with the reason; retrying happens on the Deliveries
/// page (an `unknown` one only on purpose, with a warning there).
#[component]
pub fn Problems(problems: Vec<Problem>) -> impl IntoView {
    if problems.is_empty() {
        return None;
    }
    let rows = problems
        .into_iter()
        .map(|p| {
            let href = format!(
                "/deliveries?status={}&recipient={}",
                p.status,
                leptos_router::location::Url::escape(&p.recipient)
            );
            view! {
                <tr class="border-t border-slate-100 dark:border-slate-800" data-test="problem">
                    <td class="p-2">{p.recipient}</td>
                    <td class="p-2">{p.status.to_string()}</td>
                    <td class="p-2 text-slate-600 dark:text-slate-300">{p.reason}</td>
                    <td class="p-2"><a href=href class="text-sky-700 hover:underline dark:text-sky-300">"Details / retry"</a></td>
                </tr>
            }
        })
        .collect_view();
    Some(view! {
        <section class="mb-4 rounded bg-white p-4 shadow dark:bg-slate-900" aria-label="Not delivered">
            <h2 class="mb-2 font-semibold">"Failed and unknown recipients"</h2>
            <p class="mb-2 text-sm text-slate-600 dark:text-slate-300">"Unknown: the connection broke after the message was handed over; it may have arrived. Retry it only on purpose."</p>
            <table class="w-full text-sm"><tbody>{rows}</tbody></table>
        </section>
    })
}

/// "Delete": to the recycle bin, behind a confirmation.
#[component]
fn DeleteDialog(id: i64) -> impl IntoView {
    let delete = ServerAction::<DeleteCampaign>::new();
    view! {
        <details class="rounded border border-slate-200 bg-white dark:border-slate-700 dark:bg-slate-900" data-test="dialog-delete">
            <summary class="cursor-pointer px-3 py-1.5 font-medium" data-test="open-delete">"Delete"</summary>
            <div role="dialog" aria-label="Delete" class="grid gap-2 p-3">
                <p class="text-sm text-slate-600 dark:text-slate-300">"It goes to the recycle bin, where it can be restored until it is purged."</p>
                <ActionForm action=delete>
                    <crate::pages::DangerSubmit label="Yes, delete" test="confirm-delete" name="id" value=id.to_string()/>
                </ActionForm>
                {move || delete.value().get().and_then(|r| r.err()).map(|e| view! { <p role="alert" class="text-sm text-red-700 dark:text-red-300">{e.to_string()}</p> })}
            </div>
        </details>
    }
}

/// "Clone": a new draft with this campaign's content and lists, opened in the editor.
#[component]
fn CloneButton(id: i64) -> impl IntoView {
    let clone = ServerAction::<CloneCampaign>::new();
    view! {
        <ActionForm action=clone>
            <input type="hidden" name="id" value=id.to_string()/>
            <button type="submit" data-test="clone" class="rounded border border-slate-300 px-3 py-1.5 hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">"Clone"</button>
        </ActionForm>
    }
}

/// What the approver is shown, and approves: this version, for these recipients, at this time.
#[component]
fn Approval(s: Sheet) -> impl IntoView {
    let warning = s.mine.then(|| view! {
        <p class="text-sm text-amber-800 dark:text-amber-300" data-test="four-eyes-note">"You wrote or last edited this campaign: unless your organisation allows self-approval, another admin must approve it."</p>
    });
    let zero = (s.estimate == 0).then(|| view! {
        <p class="text-sm text-red-700 dark:text-red-300" data-test="zero-note">"It would reach nobody now: approval will be refused."</p>
    });
    let preview = match s.preview.clone() {
        Ok(p) => view! { <crate::pages::campaign::preview::PreviewBox p test="approval-preview"/> }
            .into_any(),
        Err(e) => view! { <p class="text-sm text-red-700 dark:text-red-300">{e}</p> }.into_any(),
    };
    view! {
        <p class="text-sm">"You approve version " {s.version} " for " <strong>{s.estimate}</strong> " recipients."</p>
        {warning}
        {zero}
        {preview}
    }
}

#[cfg(test)]
mod tests {
    use super::actions;

    fn verbs(status: &str) -> Vec<&'static str> {
        actions(status.parse().unwrap())
            .into_iter()
            .map(|(v, _, _)| v)
            .collect()
    }

    #[test]
    fn each_state_offers_exactly_the_transitions_the_domain_allows_from_it() {
        assert_eq!(verbs("draft"), ["submit", "cancel"]);
        assert_eq!(verbs("submitted"), ["approve", "reject", "cancel"]);
        assert_eq!(verbs("approved"), ["cancel"]);
        assert_eq!(verbs("sending"), ["pause", "cancel"]);
        assert_eq!(verbs("paused"), ["resume", "cancel"]);
        assert!(verbs("sent").is_empty() && verbs("cancelled").is_empty());
        let cancel = |s: &str| {
            actions(s.parse().unwrap())
                .into_iter()
                .find(|a| a.0 == "cancel")
                .unwrap()
                .2
        };
        assert_eq!(cancel("draft"), "It will never be sent.");
        assert_eq!(cancel("approved"), "It will not be sent.");
        assert_eq!(cancel("paused"), "Nothing not yet sent will be sent.");
    }
}
