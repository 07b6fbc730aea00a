//! Settings › Event webhooks: where the org's events are sent, each endpoint's health and latest
//! attempts, and the owner's controls (add, on/off, rotate, test, replay, delete).

use leptos::prelude::*;

use super::action_outcome as outcome;
use super::settings::{SettingsTabs, BUTTON, INPUT, SMALL_BUTTON};
use super::{Confirm, DangerSubmit, DataTable, ShownOnce};
use crate::api::webhooks::{
    event_endpoints, CreateEventEndpoint, DeleteEventEndpoint, ReplayEvent, RotateEventEndpoint,
    SaveClickTracking, SaveOpenTracking, SetEventEndpointEnabled, ShownSecret, TestEventEndpoint,
};
use crate::domain::webhook::{WEBHOOK_MAX_IN_FLIGHT, WEBHOOK_MAX_IN_FLIGHT_LIMIT};
use crate::domain::{WebhookEventType, WebhookStatus};
use crate::model::{EventAttempt, EventEndpoint};

#[derive(Clone, Copy)]
struct Actions {
    enable: ServerAction<SetEventEndpointEnabled>,
    rotate: ServerAction<RotateEventEndpoint>,
    delete: ServerAction<DeleteEventEndpoint>,
    test: ServerAction<TestEventEndpoint>,
    replay: ServerAction<ReplayEvent>,
    tracking: ServerAction<SaveClickTracking>,
    opens: ServerAction<SaveOpenTracking>,
}

#[component]
pub fn WebhooksPage() -> impl IntoView {
    let create = ServerAction::<CreateEventEndpoint>::new();
    let a = Actions {
        enable: ServerAction::new(),
        rotate: ServerAction::new(),
        delete: ServerAction::new(),
        test: ServerAction::new(),
        replay: ServerAction::new(),
        tracking: ServerAction::new(),
        opens: ServerAction::new(),
    };
    let data = Resource::new(
        move || {
            (
                create.version().get(),
                a.enable.version().get(),
                a.rotate.version().get(),
                a.delete.version().get(),
                a.test.version().get(),
                a.replay.version().get(),
                a.tracking.version().get(),
                a.opens.version().get(),
            )
        },
        |_| event_endpoints(),
    );
    let shown = move |r: Option<Result<ShownSecret, crate::error::AppError>>, test| {
        r.map(|r| match r {
            Ok(s) => view! {
                <ShownOnce what=format!("The signing secret of {}.", s.url) value=s.secret test="secret-result" value_test="endpoint-secret"/>
            }.into_any(),
            Err(e) => outcome(Some(Err(e)), test).into_any(),
        })
    };
    view! {
        <SettingsTabs current="/settings/webhooks"/>
        <p class="mb-4 text-sm text-slate-600 dark:text-slate-300">
            "Mailroom tells your own code what happened to its mail: each event is POSTed as JSON, signed the "
            <a href="https://www.standardwebhooks.com/" rel="external" class="text-indigo-700 underline dark:text-indigo-300">"Standard Webhooks"</a>
            " way, and retried for three days until your endpoint answers 2xx. Every attempt of one event carries the same "
            <code>"webhook-id"</code>": dedupe on it."
        </p>
        {move || shown(create.value().get(), "create-result")}
        {move || shown(a.rotate.value().get(), "rotate-result")}
        {move || outcome(a.enable.value().get(), "enable-result")}
        {move || outcome(a.delete.value().get(), "delete-result")}
        {move || outcome(a.test.value().get(), "test-result")}
        {move || outcome(a.replay.value().get(), "replay-result")}
        {move || outcome(a.tracking.value().get(), "tracking-result")}
        {move || outcome(a.opens.value().get(), "opens-result")}
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Err(e) => crate::pages::load_error(e),
                    Ok(d) => {
                        let can_manage = d.can_manage;
                        view! {
                            <section class="rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby="endpoints-heading">
                                <h2 id="endpoints-heading" class="text-lg font-semibold mb-3">"Endpoints"</h2>
                                {if d.endpoints.is_empty() {
                                    view! { <p class="text-sm text-slate-500 dark:text-slate-400">"None yet."</p> }.into_any()
                                } else {
                                    d.endpoints.into_iter().zip(d.attempts).map(|(e, attempts)| view! {
                                        <Endpoint e attempts can_manage a/>
                                    }).collect_view().into_any()
                                }}
                                {can_manage.then(|| view! { <NewEndpoint action=create/> })}
                            </section>
                            <Switch heading="Click tracking" id="tracking" text=if d.click_tracking {
                                "On: links in the HTML of campaign mail lead through this Mailroom, which counts each click (link scanners apart) and sends link.clicked events. The link itself goes only where the message's link went."
                            } else {
                                "Off: links in campaign mail go straight to their target and nothing is counted."
                            }>
                                {can_manage.then(|| view! {
                                    <ActionForm action=a.tracking attr:class="mt-2 text-sm">
                                        <input type="hidden" name="enabled" value=(!d.click_tracking).to_string()/>
                                        <button type="submit" class=SMALL_BUTTON data-test="toggle-tracking">{if d.click_tracking { "Turn off" } else { "Turn on" }}</button>
                                    </ActionForm>
                                })}
                            </Switch>
                            <Switch heading="Open tracking (unreliable)" id="opens" text=if d.open_tracking {
                                "On: the HTML of campaign mail carries a one-pixel image from this Mailroom, and each fetch of it counts as an open (machines apart). Unreliable: many mail clients block images, and some (Apple Mail's privacy protection) fetch every image on arrival, so treat opens as a rough sign only."
                            } else {
                                "Off: campaign mail carries no tracking pixel. Opens are unreliable (clients block images or fetch them all on arrival); clicks are the better measure."
                            }>
                                {can_manage.then(|| view! {
                                    <ActionForm action=a.opens attr:class="mt-2 text-sm">
                                        <input type="hidden" name="enabled" value=(!d.open_tracking).to_string()/>
                                        <button type="submit" class=SMALL_BUTTON data-test="toggle-opens">{if d.open_tracking { "Turn off" } else { "Turn on" }}</button>
                                    </ActionForm>
                                })}
                            </Switch>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn Endpoint(
    e: EventEndpoint,
    attempts: Vec<EventAttempt>,
    can_manage: bool,
    a: Actions,
) -> impl IntoView {
    let id = e.id.to_string();
    let events = e
        .event_types
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let health = match (&e.enabled, &e.disabled_reason, &e.failing_since) {
        (false, Some(why), _) => {
            format!("Off. {why} Events queued before wait; new ones are not written for it.")
        }
        (false, None, _) => {
            "Off (turned off by an owner): events queued before wait; new ones are not written for it."
                .to_owned()
        }
        (true, _, Some(since)) => {
            format!("Failing since {since}: it is turned off after a day of failures.")
        }
        (true, _, None) => "Healthy.".to_owned(),
    };
    let alarm = !e.enabled || e.failing_since.is_some();
    view! {
        <article class="mb-4 border-t border-slate-100 pt-3 dark:border-slate-800" data-test="endpoint">
            <p class="font-mono text-sm break-all" data-test="endpoint-url">{e.url.clone()}</p>
            <p class="text-xs text-slate-500 dark:text-slate-400">{format!("Events: {events}. Up to {} requests at once. Added {}.", e.max_in_flight, e.created)}</p>
            <p role=alarm.then_some("alert") data-test="endpoint-health"
                class=if alarm { "text-sm text-red-700 dark:text-red-300" } else { "text-sm text-green-700 dark:text-green-300" }>
                {health}
            </p>
            <p class="text-sm" data-test="endpoint-counts">
                {format!("{} pending, {} delivered, {} failed.", e.pending, e.delivered, e.failed)}
                {e.rotating_until.map(|u| format!(" The previous secret also signs until {u}."))}
            </p>
            {can_manage.then(|| {
                let (id2, id3, id4) = (id.clone(), id.clone(), id.clone());
                view! {
                    <div class="my-2 flex flex-wrap gap-2 text-sm">
                        <ActionForm action=a.enable>
                            <input type="hidden" name="id" value=id.clone()/>
                            <input type="hidden" name="enabled" value=(!e.enabled).to_string()/>
                            <button type="submit" class=SMALL_BUTTON data-test="toggle">{if e.enabled { "Turn off" } else { "Turn on" }}</button>
                        </ActionForm>
                        <ActionForm action=a.test>
                            <input type="hidden" name="id" value=id2/>
                            <button type="submit" class=SMALL_BUTTON data-test="send-test">"Send a test event"</button>
                        </ActionForm>
                        <Confirm label="Rotate secret" question="Make a new secret? The current one keeps signing beside it for a day.".to_owned() test="rotate">
                            <ActionForm action=a.rotate>
                                <DangerSubmit label="Rotate" test="confirm-rotate" name="id" value=id3/>
                            </ActionForm>
                        </Confirm>
                        <Confirm label="Delete" question=format!("Delete {}? Its queued events are dropped.", e.url) test="delete">
                            <ActionForm action=a.delete>
                                <DangerSubmit label="Delete" test="confirm-delete" name="id" value=id4/>
                            </ActionForm>
                        </Confirm>
                    </div>
                }
            })}
            {(!attempts.is_empty()).then(|| view! {
                <DataTable test="attempts" headings=&["When", "Event", "Attempt", "Answer", "Latency", "Now", ""]>
                    {attempts.into_iter().map(|t| view! { <Attempt t can_manage replay=a.replay/> }).collect_view()}
                </DataTable>
            })}
        </article>
    }
}

#[component]
fn Attempt(t: EventAttempt, can_manage: bool, replay: ServerAction<ReplayEvent>) -> impl IntoView {
    let answer = match (t.http_status, &t.error) {
        (Some(s), _) => s.to_string(),
        (None, Some(e)) => e.clone(),
        (None, None) => "no answer".to_owned(),
    };
    let settled = t.status != WebhookStatus::Pending;
    view! {
        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="attempt">
            <td class="p-2 whitespace-nowrap">{t.at}</td>
            <td class="p-2"><span class="font-mono text-xs">{t.event_type.as_str()}</span><br/><span class="font-mono text-xs text-slate-500">{t.message_id.clone()}</span></td>
            <td class="p-2">{t.attempt}</td>
            <td class="p-2" title=t.response.clone().unwrap_or_default()>{answer}</td>
            <td class="p-2">{format!("{} ms", t.latency_ms)}</td>
            <td class="p-2">{t.status.as_str()}</td>
            <td class="p-2">{(can_manage && settled).then(|| view! {
                <ActionForm action=replay>
                    <input type="hidden" name="message_id" value=t.message_id.clone()/>
                    <button type="submit" class=SMALL_BUTTON data-test="replay">"Replay"</button>
                </ActionForm>
            })}</td>
        </tr>
    }
}

#[component]
fn NewEndpoint(action: ServerAction<CreateEventEndpoint>) -> impl IntoView {
    view! {
        <ActionForm action=action attr:id="endpoint-form" attr:class="mt-4 space-y-3 text-sm">
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"URL"</span>
                <input name="url" type="url" required maxlength="2000" placeholder="https://example.com/hooks/mailroom" class=INPUT/>
            </label>
            <fieldset>
                <legend class="text-slate-600 dark:text-slate-300">"Events"</legend>
                {WebhookEventType::ALL.iter().filter(|t| **t != WebhookEventType::WebhookTest).enumerate().map(|(k, t)| view! {
                    <label class="mr-4 inline-flex items-center gap-1">
                        <input type="checkbox" name=format!("event_types[{k}]") value=t.as_str() checked data-test="event-type"/>
                        <span class="font-mono text-xs">{t.as_str()}</span>
                        <span class="text-slate-500">{format!("({})", t.describe())}</span>
                    </label>
                }).collect_view()}
            </fieldset>
            <label class="block">
                <span class="text-slate-600 dark:text-slate-300">"Requests at once (across every Mailroom replica)"</span>
                <input name="max_in_flight" type="number" min="1" max=WEBHOOK_MAX_IN_FLIGHT_LIMIT value=WEBHOOK_MAX_IN_FLIGHT required class=INPUT/>
            </label>
            <button type="submit" id="create-endpoint" disabled=move || action.pending().get() class=BUTTON>"Add endpoint"</button>
        </ActionForm>
    }
}

/// A tracking switch: its state in words and, for an owner, the form that flips it.
#[component]
fn Switch(
    heading: &'static str,
    id: &'static str,
    text: &'static str,
    children: Children,
) -> impl IntoView {
    view! {
        <section class="mt-6 rounded-lg bg-white p-4 shadow dark:bg-slate-900" aria-labelledby=format!("{id}-heading")>
            <h2 id=format!("{id}-heading") class="text-lg font-semibold mb-2">{heading}</h2>
            <p class="text-sm text-slate-600 dark:text-slate-300" data-test=format!("{id}-state")>{text}</p>
            {children()}
        </section>
    }
}
