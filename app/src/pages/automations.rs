//! Automations: the list, and one automation's page: its builder (the trigger, the re-entry
//! rule, the goal, and a list of steps with mails, waits and branches, added, changed and
//! removed with forms; the whole definition also as editable JSON, which is what the form
//! sends, so saving works before the wasm has loaded), a mail step's preview, approval by a
//! second admin, pause / resume / stop, each step's live counts and the people in it.

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_params_map;

use crate::api::automations::{
    automation_sheet, automations, preview_automation_mail, ApproveAutomation, AutomationView,
    ControlAutomation, SaveAutomation,
};
use crate::domain::automation::{
    AutomationStatus, Definition, Jump, Reentry, Step, Trigger, Weekday,
};
use crate::domain::segment::{Group, GroupOp};
use crate::domain::BodyFormat;
use crate::error::AppError;

const FIELD: &str =
    "rounded border border-slate-300 px-2 py-1 text-sm dark:border-slate-600 dark:bg-slate-900";
const BUTTON: &str = "rounded bg-indigo-600 px-3 py-1 font-medium text-white hover:bg-indigo-700";
const SMALL: &str = "rounded border border-slate-300 px-2 py-0.5 text-xs hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800";

#[component]
pub fn AutomationsPage() -> impl IntoView {
    let all = Resource::new(|| (), |_| automations());
    view! {
        <h2 class="mb-3 text-xl font-semibold">"Automations"</h2>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match all.await {
                    Err(e) => super::load_error(e),
                    Ok(v) => {
                        let new = v.can_act.then(|| view! {
                            <A href="/automations/new" attr:class=BUTTON attr:data-test="new-automation">"New automation"</A>
                        });
                        let body = if v.rows.is_empty() {
                            view! { <p data-test="no-automations" class="mt-4 text-slate-600 dark:text-slate-300">"No automations yet: an automation sends lifecycle mail (a welcome series, a nudge, a reminder) in steps, each once per person."</p> }.into_any()
                        } else {
                            view! {
                                <div class="mt-4">
                                <super::DataTable test="automations" headings=&["Automation", "Status", "Live version", "In it now", "Enrolled"]>
                                    {v.rows.into_iter().map(|a| view! {
                                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="automation-row">
                                            <td class="p-3"><A href=format!("/automations/{}", a.id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{a.name}</A></td>
                                            <td class="p-3" data-test="automation-status">{a.status.to_string()}{a.waiting.then_some(" · an edit waits for approval")}</td>
                                            <td class="p-3">{a.live_version.map(|v| v.to_string()).unwrap_or_else(|| "—".into())}</td>
                                            <td class="p-3" data-test="automation-active">{a.active}</td>
                                            <td class="p-3">{a.enrolled}</td>
                                        </tr>
                                    }).collect_view()}
                                </super::DataTable>
                                </div>
                            }.into_any()
                        };
                        view! { {new} {body} }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn AutomationPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || match params.read().get("id").as_deref() {
        Some("new") => Some(0),
        Some(s) => s.parse::<i64>().ok().filter(|id| *id > 0),
        None => None,
    };
    let sheet = Resource::new(id, |id| async move {
        match id {
            Some(id) => automation_sheet(id).await,
            None => Err(AppError::NotFound),
        }
    });
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match sheet.await {
                    Err(e) => super::load_error(e),
                    Ok(s) => view! { <Automation s/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Automation(s: AutomationView) -> impl IntoView {
    let save = ServerAction::<SaveAutomation>::new();
    let approve = ServerAction::<ApproveAutomation>::new();
    let control = ServerAction::<ControlAutomation>::new();
    let def = RwSignal::new(s.definition.clone());
    let problem = RwSignal::new(None::<String>);
    let lists = StoredValue::new(s.lists.clone());
    let segments = StoredValue::new(s.segments.clone());
    let json = move || def.with(|d| serde_json::to_string_pretty(d).unwrap_or_default());
    let (id, can_act, status) = (s.id, s.can_act, s.status);
    let heading = if id == 0 {
        "New automation".to_string()
    } else {
        format!("Automation: {}", s.name)
    };
    let state_line = (id != 0).then(|| {
        let live = s
            .live_version
            .map(|v| format!("version {v} is live"))
            .unwrap_or_else(|| "never approved".into());
        let waiting = s
            .waiting_editor
            .as_ref()
            .map(|e| format!(" · version {} by {e} waits for approval", s.draft_version))
            .unwrap_or_default();
        view! { <p class="mb-3 text-sm text-slate-600 dark:text-slate-300" data-test="automation-state">{format!("{status} · {live}{waiting}")}</p> }
    });
    let approving = (can_act && s.waiting_editor.is_some() && s.may_approve && status != AutomationStatus::Stopped).then(|| view! {
        <ActionForm action=approve attr:class="inline">
            <input type="hidden" name="id" value=id.to_string()/>
            <input type="hidden" name="version" value=s.draft_version.to_string()/>
            <button type="submit" class=BUTTON data-test="approve-automation">{format!("Approve version {}", s.draft_version)}</button>
        </ActionForm>
    });
    let controls = (can_act && id != 0).then(|| {
        let button = |action: &'static str, label: &'static str| view! {
            <ActionForm action=control attr:class="inline">
                <input type="hidden" name="id" value=id.to_string()/>
                <input type="hidden" name="action" value=action/>
                <button type="submit" class=SMALL data-test=format!("{action}-automation")>{label}</button>
            </ActionForm>
        };
        view! {
            {(status == AutomationStatus::Active).then(|| button("pause", "Pause"))}
            {(status == AutomationStatus::Paused).then(|| button("resume", "Resume"))}
            {status.enrols().then(|| view! {
                <super::Confirm label="Stop" test="stop" question="Stop this automation for good? Everyone in it leaves, and its mail not yet sent is not sent.".to_string()>
                    <ActionForm action=control>
                        <input type="hidden" name="action" value="stop"/>
                        <super::DangerSubmit label="Stop" test="confirm-stop" name="id" value=id.to_string()/>
                    </ActionForm>
                </super::Confirm>
            })}
        }
    });
    let steps_table = (!s.steps.is_empty()).then(|| view! {
        <h3 class="mb-2 mt-6 font-semibold">"Steps, live"</h3>
        <super::DataTable test="step-counts" headings=&["Version", "Step", "What", "Why", "People"]>
            {s.steps.iter().cloned().map(|c| view! {
                <tr class="border-t border-slate-100 dark:border-slate-800" data-test="step-count">
                    <td class="p-3">{c.version}</td><td class="p-3">{c.step}</td><td class="p-3">{c.what}</td><td class="p-3">{c.detail}</td>
                    <td class="p-3" data-test="step-count-n">{c.n}</td>
                </tr>
            }).collect_view()}
        </super::DataTable>
    });
    let people = (!s.people.is_empty()).then(|| view! {
        <h3 class="mb-2 mt-6 font-semibold">"People (newest first)"</h3>
        <super::DataTable test="automation-people" headings=&["Subscriber", "Version", "State", "Next step", "Due"]>
            {s.people.iter().cloned().map(|p| view! {
                <tr class="border-t border-slate-100 dark:border-slate-800" data-test="automation-person">
                    <td class="p-3"><A href=format!("/audience/subscribers/{}", p.subscriber_id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{p.email}</A></td>
                    <td class="p-3">{p.version}</td><td class="p-3">{p.state}</td><td class="p-3">{p.step}</td>
                    <td class="p-3">{p.due.unwrap_or_default()}</td>
                </tr>
            }).collect_view()}
        </super::DataTable>
    });
    let editable = can_act && status != AutomationStatus::Stopped;
    view! {
        <div class="mb-3 flex flex-wrap items-center justify-between gap-3">
            <h2 class="text-xl font-semibold" data-test="automation-heading">{heading}</h2>
            <div class="flex items-center gap-2">{approving}{controls}</div>
        </div>
        {state_line}
        {move || super::action_outcome(save.value().get().map(|r| r.map(|_| "Saved.".to_string())), "save-result")}
        {move || super::action_outcome(approve.value().get(), "approve-result")}
        {move || super::action_outcome(control.value().get(), "control-result")}
        {move || problem.get().map(|p| view! { <p role="alert" data-test="form-problem" class="mb-2 text-sm text-red-700 dark:text-red-300">{p}</p> })}
        <div class="grid gap-4" data-test="builder">
            {move || trigger_view(def, lists, segments)}
            <ol class="grid gap-3" data-test="steps">
                {move || def.with(|d| d.steps.len()).eq(&0).then(|| view! { <li class="text-sm text-slate-500">"No steps yet."</li> })}
                {move || (0..def.with(|d| d.steps.len())).map(|i| step_view(def, lists, i)).collect_view()}
            </ol>
            <div class="flex items-center gap-2 text-sm">
                <select class=FIELD data-test="add-step" on:change=move |ev| {
                    let kind = event_target_value(&ev);
                    if let Some(step) = fresh(&kind, lists) {
                        def.update(|d| d.steps.push(step));
                    }
                }>
                    <option value="" selected=true>"+ add a step…"</option>
                    {STEP_KINDS.iter().map(|(k, label)| view! { <option value=*k>{*label}</option> }).collect_view()}
                </select>
            </div>
        </div>
        <ActionForm action=save attr:class="mt-4 grid gap-2 text-sm">
            <input type="hidden" name="id" value=id.to_string()/>
            <label class="grid gap-1">"Name"
                <input name="name" required maxlength="200" value=s.name.clone() class=FIELD data-test="automation-name"/>
            </label>
            <details>
                <summary class="cursor-pointer text-slate-600 dark:text-slate-300">"Definition (JSON)"</summary>
                <textarea name="definition" rows="12" class=format!("{FIELD} w-full font-mono") data-test="definition"
                    prop:value=json
                    on:change=move |ev| {
                        match serde_json::from_str::<Definition>(&event_target_value(&ev)) {
                            Ok(d) => { problem.set(None); def.set(d); }
                            Err(e) => problem.set(Some(format!("The JSON is not an automation: {e}."))),
                        }
                    }>{super::textarea_text(&serde_json::to_string_pretty(&s.definition).unwrap_or_default())}</textarea>
            </details>
            {editable.then(|| view! {
                <button type="submit" data-test="save-automation" class=format!("{BUTTON} justify-self-start")>
                    {if s.live_version.is_some() { "Save as a new version (needs approval)" } else { "Save draft" }}
                </button>
            })}
        </ActionForm>
        {steps_table}
        {people}
    }
}

const STEP_KINDS: [(&str, &str); 8] = [
    ("email", "Send a mail"),
    ("wait", "Wait a while"),
    ("wait_until", "Wait until a day and hour"),
    ("branch", "Branch on a condition"),
    ("set_attribute", "Set an attribute"),
    ("add_to_list", "Add to a list"),
    ("remove_from_list", "Remove from a list"),
    ("exit", "Exit"),
];

fn fresh(kind: &str, lists: StoredValue<Vec<(i64, String)>>) -> Option<Step> {
    let first_list = lists.with_value(|l| l.first().map_or(0, |l| l.0));
    Some(match kind {
        "email" => Step::Email {
            subject: "Hello {{ name }}".into(),
            body: "…".into(),
            format: BodyFormat::Markdown,
        },
        "wait" => Step::Wait {
            days: 1,
            hours: 0,
            minutes: 0,
        },
        "wait_until" => Step::WaitUntil {
            weekday: Some(Weekday::Monday),
            hour: 9,
        },
        "branch" => Step::Branch {
            condition: Group {
                op: GroupOp::All,
                children: Vec::new(),
            },
            then: Jump::Next,
            otherwise: Jump::Exit,
        },
        "set_attribute" => Step::SetAttribute {
            name: "onboarded".into(),
            value: serde_json::Value::Bool(true),
        },
        "add_to_list" => Step::AddToList {
            list_id: first_list,
        },
        "remove_from_list" => Step::RemoveFromList {
            list_id: first_list,
        },
        "exit" => Step::Exit,
        _ => return None,
    })
}

fn edit_step(def: RwSignal<Definition>, i: usize, f: impl FnOnce(&mut Step)) {
    def.update(|d| {
        if let Some(s) = d.steps.get_mut(i) {
            f(s);
        }
    });
}

fn list_select(
    lists: StoredValue<Vec<(i64, String)>>,
    current: i64,
    test: &'static str,
    set: impl Fn(i64) + 'static,
) -> impl IntoView {
    view! {
        <select class=FIELD data-test=test on:change=move |ev| {
            if let Ok(id) = event_target_value(&ev).parse() { set(id); }
        }>
            {lists.with_value(|ls| ls.iter().map(|(lid, name)| view! {
                <option value=lid.to_string() selected=*lid == current>{name.clone()}</option>
            }).collect_view())}
        </select>
    }
}

/// Changes the date trigger's attribute, offset and yearly flag.
fn edit_date(def: RwSignal<Definition>, f: impl FnOnce(&mut String, &mut i32, &mut bool)) {
    def.update(|d| {
        if let Trigger::Date {
            attribute,
            offset_days,
            yearly,
        } = &mut d.trigger
        {
            f(attribute, offset_days, yearly);
        }
    })
}

fn trigger_view(
    def: RwSignal<Definition>,
    lists: StoredValue<Vec<(i64, String)>>,
    segments: StoredValue<Vec<(i64, String)>>,
) -> AnyView {
    let d = def.get();
    let kind = d.trigger.kind();
    let detail = match &d.trigger {
        Trigger::ListJoined { list_id } => list_select(lists, *list_id, "trigger-list", move |id| {
            def.update(|d| d.trigger = Trigger::ListJoined { list_id: id })
        })
        .into_any(),
        Trigger::Event { name, .. } => view! {
            <input class=FIELD placeholder="event name" value=name.clone() data-test="trigger-event" on:change=move |ev| {
                let name = event_target_value(&ev);
                def.update(|d| if let Trigger::Event { name: n, .. } = &mut d.trigger { *n = name; });
            }/>
        }
        .into_any(),
        Trigger::Api => view! { <span class="text-slate-500">"(enrolled through the API)"</span> }.into_any(),
        Trigger::SegmentEntered { segment_id, version } => {
            let pinned = version.map(|v| format!("(as of its version {v}; saving again takes its latest)"));
            view! {
                {list_select(segments, *segment_id, "trigger-segment", move |id| {
                    def.update(|d| d.trigger = Trigger::SegmentEntered { segment_id: id, version: None })
                })}
                <span class="text-slate-500">{pinned}</span>
            }
            .into_any()
        }
        Trigger::Date { attribute, offset_days, yearly } => {
            view! {
                <input class=FIELD placeholder="attribute (a date)" value=attribute.clone() data-test="trigger-attribute" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    edit_date(def, move |a, _, _| *a = v);
                }/>
                <input type="number" class=format!("{FIELD} w-24") value=offset_days.to_string() data-test="trigger-offset" on:change=move |ev| {
                    if let Ok(v) = event_target_value(&ev).parse::<i32>() { edit_date(def, move |_, o, _| *o = v); }
                }/>
                "days after it (negative: before)"
                <label class="flex items-center gap-1">
                    <input type="checkbox" checked=*yearly data-test="trigger-yearly" on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        edit_date(def, move |_, _, y| *y = on);
                    }/>
                    "every year"
                </label>
            }
            .into_any()
        }
    };
    let goal = d.goal.as_ref().map(|g| g.event.clone()).unwrap_or_default();
    view! {
        <div class="grid gap-2 rounded border border-slate-200 p-3 text-sm dark:border-slate-700" data-test="trigger">
            <div class="flex flex-wrap items-center gap-2">
                "Enrol when"
                <select class=FIELD data-test="trigger-kind" on:change=move |ev| {
                    let first = lists.with_value(|l| l.first().map_or(0, |l| l.0));
                    let t = match event_target_value(&ev).as_str() {
                        "event" => Trigger::Event { name: String::new(), property: None },
                        "segment_entered" => Trigger::SegmentEntered {
                            segment_id: segments.with_value(|l| l.first().map_or(0, |l| l.0)),
                            version: None,
                        },
                        "api" => Trigger::Api,
                        "date" => Trigger::Date { attribute: "trial_ends".into(), offset_days: -3, yearly: false },
                        _ => Trigger::ListJoined { list_id: first },
                    };
                    def.update(|d| d.trigger = t);
                }>
                    <option value="list_joined" selected=kind == "list_joined">"they join the list"</option>
                    <option value="event" selected=kind == "event">"the SaaS reports the event"</option>
                    <option value="api" selected=kind == "api">"the API enrols them"</option>
                    <option value="date" selected=kind == "date">"a date of theirs comes"</option>
                    <option value="segment_entered" selected=kind == "segment_entered">"they enter the segment"</option>
                </select>
                {detail}
            </div>
            <div class="flex flex-wrap items-center gap-2">
                "Again?"
                <select class=FIELD data-test="reentry" on:change=move |ev| {
                    if let Ok(r) = event_target_value(&ev).parse::<Reentry>() { def.update(|d| d.reentry = r); }
                }>
                    <option value="once" selected=d.reentry == Reentry::Once>"never: once ever"</option>
                    <option value="per_trigger" selected=d.reentry == Reentry::PerTrigger>"once per triggering event"</option>
                    <option value="after_leaving" selected=d.reentry == Reentry::AfterLeaving>"again after they leave"</option>
                </select>
                "Goal event (they leave when it happens)"
                <input class=FIELD placeholder="none" value=goal data-test="goal-event" on:change=move |ev| {
                    let name = event_target_value(&ev);
                    def.update(|d| d.goal = (!name.trim().is_empty()).then(|| crate::domain::automation::Goal { event: name.trim().to_owned(), property: None }));
                }/>
            </div>
        </div>
    }
    .into_any()
}

fn jump_select(
    def: RwSignal<Definition>,
    i: usize,
    current: Jump,
    otherwise: bool,
) -> impl IntoView {
    let len = def.with(|d| d.steps.len());
    let value = |j: Jump| match j {
        Jump::Next => "next".to_string(),
        Jump::Exit => "exit".to_string(),
        Jump::GoTo(n) => n.to_string(),
    };
    let now = value(current);
    let targets: Vec<usize> = (i + 2..=len).collect();
    view! {
        <select class=FIELD data-test=if otherwise { "branch-else" } else { "branch-then" } on:change=move |ev| {
            let v = event_target_value(&ev);
            let j = match v.as_str() { "next" => Jump::Next, "exit" => Jump::Exit, n => match n.parse() { Ok(n) => Jump::GoTo(n), Err(_) => return } };
            edit_step(def, i, |s| if let Step::Branch { then, otherwise: o, .. } = s { if otherwise { *o = j } else { *then = j } });
        }>
            <option value="next" selected=now == "next">"go on"</option>
            <option value="exit" selected=now == "exit">"exit"</option>
            {targets.into_iter().map(|t| {
                let label = if t == len { "go to the end".to_string() } else { format!("go to step {t}") };
                view! { <option value=t.to_string() selected=now == t.to_string()>{label}</option> }
            }).collect_view()}
        </select>
    }
}

fn number(
    def: RwSignal<Definition>,
    i: usize,
    value: u32,
    max: u32,
    test: &'static str,
    set: fn(&mut Step, u32),
) -> impl IntoView {
    view! {
        <input type="number" min="0" max=max.to_string() value=value.to_string() class=format!("{FIELD} w-20") data-test=test
            on:change=move |ev| {
                if let Ok(v) = event_target_value(&ev).parse::<u32>() { edit_step(def, i, |s| set(s, v.min(max))); }
            }/>
    }
}

fn step_view(
    def: RwSignal<Definition>,
    lists: StoredValue<Vec<(i64, String)>>,
    i: usize,
) -> AnyView {
    let Some(step) = def.with(|d| d.steps.get(i).cloned()) else {
        return ().into_any();
    };
    let preview = RwSignal::new(None::<Result<(String, String), String>>);
    let label = STEP_KINDS
        .iter()
        .find(|(k, _)| *k == kind_of(&step))
        .map_or("", |(_, l)| *l);
    let body = match step {
        Step::Email { subject, body, format } => view! {
            <div class="grid gap-1">
                <input class=FIELD value=subject data-test="mail-subject" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    edit_step(def, i, |s| if let Step::Email { subject, .. } = s { *subject = v });
                }/>
                <textarea rows="4" class=format!("{FIELD} font-mono") data-test="mail-body" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    edit_step(def, i, |s| if let Step::Email { body, .. } = s { *body = v });
                }>{super::textarea_text(&body)}</textarea>
                <div class="flex items-center gap-2">
                    <select class=FIELD data-test="mail-format" on:change=move |ev| {
                        let f = if event_target_value(&ev) == "html" { BodyFormat::Html } else { BodyFormat::Markdown };
                        edit_step(def, i, |s| if let Step::Email { format, .. } = s { *format = f });
                    }>
                        <option value="markdown" selected=format == BodyFormat::Markdown>"Markdown"</option>
                        <option value="html" selected=format == BodyFormat::Html>"HTML"</option>
                    </select>
                    <button type="button" class=SMALL data-test="preview-mail" on:click=move |_| {
                        let json = def.with(|d| serde_json::to_string(d).unwrap_or_default());
                        leptos::task::spawn_local(async move {
                            preview.set(Some(preview_automation_mail(json, i).await.map_err(|e| e.to_string())));
                        });
                    }>"Preview"</button>
                    <span class="text-xs text-slate-500">"Fields: {{ name }}, {{ email }}, {{ attributes.* }}, {{ event.* }}"</span>
                </div>
                {move || preview.get().map(|p| match p {
                    Ok((subject, text)) => view! {
                        <div class="rounded bg-slate-100 p-2 text-xs dark:bg-slate-800" data-test="mail-preview">
                            <p class="font-semibold">{subject}</p><pre class="whitespace-pre-wrap">{text}</pre>
                        </div>
                    }.into_any(),
                    Err(e) => view! { <p role="alert" class="text-xs text-red-700 dark:text-red-300" data-test="mail-preview-problem">{e}</p> }.into_any(),
                })}
            </div>
        }
        .into_any(),
        Step::Wait { days, hours, minutes } => view! {
            <div class="flex items-center gap-2">
                {number(def, i, days, 366, "wait-days", |s, v| if let Step::Wait { days, .. } = s { *days = v })}"days"
                {number(def, i, hours, 23, "wait-hours", |s, v| if let Step::Wait { hours, .. } = s { *hours = v })}"hours"
                {number(def, i, minutes, 59, "wait-minutes", |s, v| if let Step::Wait { minutes, .. } = s { *minutes = v })}"minutes"
            </div>
        }
        .into_any(),
        Step::WaitUntil { weekday, hour } => {
            const DAYS: [(&str, Option<Weekday>); 8] = [
                ("any day", None),
                ("Monday", Some(Weekday::Monday)),
                ("Tuesday", Some(Weekday::Tuesday)),
                ("Wednesday", Some(Weekday::Wednesday)),
                ("Thursday", Some(Weekday::Thursday)),
                ("Friday", Some(Weekday::Friday)),
                ("Saturday", Some(Weekday::Saturday)),
                ("Sunday", Some(Weekday::Sunday)),
            ];
            view! {
                <div class="flex items-center gap-2">
                    "until"
                    <select class=FIELD data-test="wait-weekday" on:change=move |ev| {
                        let pick = event_target_value(&ev);
                        let w = DAYS.iter().find(|(l, _)| *l == pick).and_then(|(_, w)| *w);
                        edit_step(def, i, |s| if let Step::WaitUntil { weekday, .. } = s { *weekday = w });
                    }>
                        {DAYS.iter().map(|(label, w)| view! { <option value=*label selected=*w == weekday>{*label}</option> }).collect_view()}
                    </select>
                    "at"
                    {number(def, i, u32::from(hour), 23, "wait-hour", |s, v| if let Step::WaitUntil { hour, .. } = s { *hour = u8::try_from(v).unwrap_or(23) })}
                    ":00, their time (the subscriber's timezone attribute, else the organisation's)"
                </div>
            }
            .into_any()
        }
        Step::Branch { condition, then, otherwise } => view! {
            <div class="grid gap-1">
                "If they match (segment JSON):"
                <textarea rows="3" class=format!("{FIELD} font-mono") data-test="branch-condition" on:change=move |ev| {
                    if let Ok(g) = serde_json::from_str::<Group>(&event_target_value(&ev)) {
                        edit_step(def, i, |s| if let Step::Branch { condition, .. } = s { *condition = g });
                    }
                }>{super::textarea_text(&serde_json::to_string(&condition).unwrap_or_default())}</textarea>
                <div class="flex items-center gap-2">"then" {jump_select(def, i, then, false)} "else" {jump_select(def, i, otherwise, true)}</div>
            </div>
        }
        .into_any(),
        Step::SetAttribute { name, value } => view! {
            <div class="flex items-center gap-2">
                <input class=FIELD value=name data-test="attribute-name" on:change=move |ev| {
                    let v = event_target_value(&ev);
                    edit_step(def, i, |s| if let Step::SetAttribute { name, .. } = s { *name = v });
                }/>
                "="
                <input class=format!("{FIELD} font-mono") value=value.to_string() data-test="attribute-value" on:change=move |ev| {
                    let raw = event_target_value(&ev);
                    let v = serde_json::from_str(&raw).unwrap_or(serde_json::Value::String(raw));
                    edit_step(def, i, |s| if let Step::SetAttribute { value, .. } = s { *value = v });
                }/>
            </div>
        }
        .into_any(),
        Step::AddToList { list_id } => list_select(lists, list_id, "step-list", move |id| {
            edit_step(def, i, |s| if let Step::AddToList { list_id } = s { *list_id = id })
        })
        .into_any(),
        Step::RemoveFromList { list_id } => list_select(lists, list_id, "step-list", move |id| {
            edit_step(def, i, |s| if let Step::RemoveFromList { list_id } = s { *list_id = id })
        })
        .into_any(),
        Step::Exit => view! { <span class="text-slate-500">"They leave the automation here."</span> }.into_any(),
    };
    view! {
        <li class="rounded border border-slate-200 p-3 text-sm dark:border-slate-700" data-test="step">
            <div class="mb-2 flex items-center justify-between">
                <span class="font-semibold">{format!("Step {i}: {label}")}</span>
                <button type="button" class=SMALL data-test="remove-step" on:click=move |_| {
                    def.update(|d| { if i < d.steps.len() { d.steps.remove(i); } });
                }>"remove"</button>
            </div>
            {body}
        </li>
    }
    .into_any()
}

fn kind_of(s: &Step) -> &'static str {
    match s {
        Step::Email { .. } => "email",
        Step::Wait { .. } => "wait",
        Step::WaitUntil { .. } => "wait_until",
        Step::Branch { .. } => "branch",
        Step::SetAttribute { .. } => "set_attribute",
        Step::AddToList { .. } => "add_to_list",
        Step::RemoveFromList { .. } => "remove_from_list",
        Step::Exit => "exit",
    }
}
