//! Segments: the list with what each matches now, and the builder: conditions added, changed,
//! nested in all / any / none groups and removed with forms, a live count and sample of the
//! segment as it is being built (a condition at fault is named instead), and saving it. The
//! definition is also shown as JSON, editable, and it is what the form sends, so saving works
//! before the wasm has loaded.

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_params_map;

use crate::api::segments::{
    preview_segment, segment_sheet, segments, BuilderSheet, DeleteSegment, SaveSegment,
};
use crate::domain::segment::{
    DateTest, Engagement, Group, GroupOp, Node, OptinSource, PropertyTest, ValueTest, VALUE_OPS,
};
use crate::domain::{CampaignId, SubscriberStatus};
use crate::error::AppError;

const FIELD: &str =
    "rounded border border-slate-300 px-2 py-1 text-sm dark:border-slate-600 dark:bg-slate-900";
const BUTTON: &str = "rounded bg-indigo-600 px-3 py-1 font-medium text-white hover:bg-indigo-700";
const SMALL: &str = "rounded border border-slate-300 px-2 py-0.5 text-xs hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800";

#[component]
pub fn SegmentsPage() -> impl IntoView {
    let all = Resource::new(|| (), |_| segments());
    view! {
        <super::audience::AudienceTabs current="Segments"/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match all.await {
                    Err(e) => super::load_error(e),
                    Ok(v) => {
                        let new = v.can_act.then(|| view! {
                            <A href="/audience/segments/new" attr:class=BUTTON attr:data-test="new-segment">"New segment"</A>
                        });
                        let body = if v.segments.is_empty() {
                            view! { <p data-test="no-segments" class="mt-4 text-slate-600 dark:text-slate-300">"No segments yet: a segment picks subscribers by their attributes, lists, engagement and events, and a campaign can be sent to it."</p> }.into_any()
                        } else {
                            view! {
                                <div class="mt-4">
                                <super::DataTable test="segments" headings=&["Segment", "Version", "Matches now"]>
                                    {v.segments.into_iter().map(|s| view! {
                                        <tr class="border-t border-slate-100 dark:border-slate-800" data-test="segment-row">
                                            <td class="p-3"><A href=format!("/audience/segments/{}", s.id) attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{s.name}</A></td>
                                            <td class="p-3">{s.version}</td>
                                            <td class="p-3" data-test="segment-count">{s.count}</td>
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
pub fn SegmentBuilderPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || match params.read().get("id").as_deref() {
        Some("new") => Some(0),
        Some(s) => s.parse::<i64>().ok().filter(|id| *id > 0),
        None => None,
    };
    let sheet = Resource::new(id, |id| async move {
        match id {
            Some(id) => segment_sheet(id).await,
            None => Err(AppError::NotFound),
        }
    });
    view! {
        <super::audience::AudienceTabs current="Segments"/>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match sheet.await {
                    Err(e) => super::load_error(e),
                    Ok(s) => view! { <Builder s/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// What the condition rows may name, shared by every row.
#[derive(Clone)]
struct Choices {
    lists: Vec<(i64, String)>,
    campaigns: Vec<(i64, String)>,
}

#[component]
fn Builder(s: BuilderSheet) -> impl IntoView {
    let save = ServerAction::<SaveSegment>::new();
    let delete = ServerAction::<DeleteSegment>::new();
    let tree = RwSignal::new(s.definition.clone());
    let problem = RwSignal::new(None::<String>);
    let choices = StoredValue::new(Choices {
        lists: s.lists.clone(),
        campaigns: s.campaigns.clone(),
    });
    let json = move || tree.with(|t| serde_json::to_string(t).unwrap_or_default());
    let preview = Resource::new(json, preview_segment);
    let (id, version, can_act) = (s.id, s.version, s.can_act);
    let heading = if id == 0 {
        "New segment".to_string()
    } else {
        format!("Segment: {} (version {version})", s.name)
    };
    let deleting = (id != 0 && can_act).then(|| view! {
        <super::Confirm label="Delete" test="delete" question=format!("Delete the segment {:?}? Campaigns still to be sent must not use it.", s.name)>
            <ActionForm action=delete>
                <super::DangerSubmit label="Delete" test="confirm-delete" name="id" value=id.to_string()/>
            </ActionForm>
        </super::Confirm>
    });
    view! {
        <div class="mb-3 flex items-center justify-between gap-3">
            <h2 class="text-xl font-semibold" data-test="segment-heading">{heading}</h2>
            {deleting}
        </div>
        {move || super::action_outcome(save.value().get().map(|r| r.map(|_| "Saved.".to_string())), "save-result")}
        {move || super::action_outcome(delete.value().get(), "delete-result")}
        <div class="grid gap-6 lg:grid-cols-3">
            <div class="lg:col-span-2">
                {move || problem.get().map(|p| view! { <p role="alert" data-test="form-problem" class="mb-2 text-sm text-red-700 dark:text-red-300">{p}</p> })}
                <div data-test="tree">{move || group_view(tree, problem, choices, Vec::new())}</div>
                <ActionForm action=save attr:class="mt-4 grid gap-2 text-sm">
                    <input type="hidden" name="id" value=id.to_string()/>
                    <input type="hidden" name="version" value=version.to_string()/>
                    <label class="grid gap-1">"Name"
                        <input name="name" required maxlength="200" value=s.name.clone() class=FIELD data-test="segment-name"/>
                    </label>
                    <details>
                        <summary class="cursor-pointer text-slate-600 dark:text-slate-300">"Definition (JSON)"</summary>
                        <textarea name="definition" rows="8" class=format!("{FIELD} w-full font-mono") data-test="definition"
                            prop:value=json
                            on:change=move |ev| {
                                match serde_json::from_str::<Group>(&event_target_value(&ev)) {
                                    Ok(g) => { problem.set(None); tree.set(g); }
                                    Err(e) => problem.set(Some(format!("The JSON is not a segment: {e}."))),
                                }
                            }>{super::textarea_text(&serde_json::to_string(&s.definition).unwrap_or_default())}</textarea>
                    </details>
                    {can_act.then(|| view! {
                        <button type="submit" data-test="save-segment" class=format!("{BUTTON} justify-self-start")>"Save"</button>
                    })}
                </ActionForm>
            </div>
            <div>
                <h3 class="mb-2 font-semibold">"Matches now"</h3>
                <Suspense fallback=|| view! { <p>"Counting…"</p> }>
                    {move || Suspend::new(async move {
                        match preview.await {
                            Err(e) => view! { <p role="alert" data-test="preview-problem" class="text-sm text-red-700 dark:text-red-300">{e.to_string()}</p> }.into_any(),
                            Ok(p) => view! {
                                <p class="mb-2 text-2xl font-semibold" data-test="live-count">{p.count}</p>
                                <ul class="text-sm" data-test="sample">
                                    {p.sample.into_iter().map(|(sid, email, name)| view! {
                                        <li data-test="sample-row"><A href=format!("/audience/subscribers/{sid}") attr:class="text-indigo-700 hover:underline dark:text-indigo-300">{email}</A>" "{name}</li>
                                    }).collect_view()}
                                </ul>
                            }.into_any(),
                        }
                    })}
                </Suspense>
            </div>
        </div>
    }
}

/// The group at `path` (child indexes from the root), to change.
fn group_at<'a>(g: &'a mut Group, path: &[usize]) -> Option<&'a mut Group> {
    match path.split_first() {
        None => Some(g),
        Some((i, rest)) => match g.children.get_mut(*i) {
            Some(Node::Group(inner)) => group_at(inner, rest),
            _ => None,
        },
    }
}

fn edit_group(tree: RwSignal<Group>, path: &[usize], f: impl FnOnce(&mut Group)) {
    let path = path.to_vec();
    tree.update(|t| {
        if let Some(g) = group_at(t, &path) {
            f(g);
        }
    });
}

const KINDS: [(&str, &str); 8] = [
    ("attribute", "Attribute"),
    ("list", "List"),
    ("status", "Status"),
    ("source", "Sign-up source"),
    ("signed_up", "Signed up"),
    ("engagement", "Engagement"),
    ("event", "Event"),
    ("group", "Group of conditions"),
];

fn kind_of(n: &Node) -> &'static str {
    match n {
        Node::Group(_) => "group",
        Node::Attribute { .. } => "attribute",
        Node::List { .. } => "list",
        Node::Status { .. } => "status",
        Node::Source { .. } => "source",
        Node::SignedUp { .. } => "signed_up",
        Node::Engagement { .. } => "engagement",
        Node::Event { .. } => "event",
    }
}

/// A new condition of `kind`, ready to be filled in.
fn fresh(kind: &str, c: &Choices) -> Node {
    match kind {
        "list" => Node::List {
            list_id: c.lists.first().map_or(0, |l| l.0),
            member: true,
        },
        "status" => Node::Status {
            status: SubscriberStatus::Confirmed,
        },
        "source" => Node::Source {
            source: OptinSource::Signup,
        },
        "signed_up" => Node::SignedUp {
            test: DateTest::WithinDays { days: 30 },
        },
        "engagement" => Node::Engagement {
            what: Engagement::Received,
            campaign_id: None,
            within_days: Some(30),
        },
        "event" => Node::Event {
            name: String::new(),
            did: true,
            at_least: 1,
            within_days: Some(30),
            property: None,
            since_enrolment: false,
        },
        "group" => Node::Group(Group {
            op: GroupOp::Any,
            children: Vec::new(),
        }),
        _ => Node::Attribute {
            name: String::new(),
            test: ValueTest::TextEquals {
                value: String::new(),
            },
        },
    }
}

fn group_view(
    tree: RwSignal<Group>,
    problem: RwSignal<Option<String>>,
    choices: StoredValue<Choices>,
    path: Vec<usize>,
) -> AnyView {
    let Some(g) = tree.with(|t| {
        let mut t = t.clone();
        group_at(&mut t, &path).cloned()
    }) else {
        return ().into_any();
    };
    let depth = path.len();
    let here = path.clone();
    let op_select = {
        let here = here.clone();
        view! {
            <select class=FIELD data-test="group-op" on:change=move |ev| {
                let op = match event_target_value(&ev).as_str() { "any" => GroupOp::Any, "none" => GroupOp::None, _ => GroupOp::All };
                edit_group(tree, &here, |g| g.op = op);
            }>
                <option value="all" selected=g.op == GroupOp::All>"all of"</option>
                <option value="any" selected=g.op == GroupOp::Any>"any of"</option>
                <option value="none" selected=g.op == GroupOp::None>"none of"</option>
            </select>
        }
    };
    let add = {
        let here = here.clone();
        view! {
            <select class=FIELD data-test="add-condition" on:change=move |ev| {
                let kind = event_target_value(&ev);
                if kind.is_empty() { return; }
                let node = choices.with_value(|c| fresh(&kind, c));
                edit_group(tree, &here, |g| g.children.push(node));
            }>
                <option value="" selected=true>"+ add…"</option>
                {KINDS.iter().map(|(k, label)| view! { <option value=*k>{*label}</option> }).collect_view()}
            </select>
        }
    };
    let rows = g
        .children
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut child = here.clone();
            child.push(i);
            let remove = {
                let here = here.clone();
                view! {
                    <button type="button" class=SMALL data-test="remove-condition" on:click=move |_| {
                        edit_group(tree, &here, |g| { if i < g.children.len() { g.children.remove(i); } });
                    }>"remove"</button>
                }
            };
            let body = match n {
                Node::Group(_) => group_view(tree, problem, choices, child),
                other => condition_view(tree, problem, choices, here.clone(), i, other.clone()),
            };
            view! {
                <li class="flex items-start gap-2" data-test="condition">
                    <div class="flex-1">{body}</div>
                    {remove}
                </li>
            }
        })
        .collect_view();
    let empty = g.children.is_empty().then(|| {
        let says = match g.op {
            GroupOp::All | GroupOp::None => "(no conditions: everyone)",
            GroupOp::Any => "(no conditions: no one)",
        };
        view! { <li class="text-sm text-slate-500 dark:text-slate-400">{says}</li> }
    });
    let frame = if depth == 0 {
        "grid gap-2"
    } else {
        "grid gap-2 border-l-2 border-indigo-200 pl-3 dark:border-indigo-800"
    };
    view! {
        <div class=frame data-test="group">
            <div class="flex items-center gap-2 text-sm">"Subscribers matching " {op_select} {add}</div>
            <ul class="grid gap-2">{rows}{empty}</ul>
        </div>
    }
    .into_any()
}

/// One condition's fields; a change replaces the condition in its group.
fn condition_view(
    tree: RwSignal<Group>,
    problem: RwSignal<Option<String>>,
    choices: StoredValue<Choices>,
    group: Vec<usize>,
    index: usize,
    n: Node,
) -> AnyView {
    let set = {
        let group = group.clone();
        move |node: Node| {
            problem.set(None);
            edit_group(tree, &group, |g| {
                if let Some(slot) = g.children.get_mut(index) {
                    *slot = node;
                }
            });
        }
    };
    let kind = {
        let set = set.clone();
        let current = kind_of(&n);
        view! {
            <select class=FIELD data-test="condition-kind" on:change=move |ev| {
                let k = event_target_value(&ev);
                set(choices.with_value(|c| fresh(&k, c)));
            }>
                {KINDS.iter().map(|(k, label)| view! { <option value=*k selected=*k == current>{*label}</option> }).collect_view()}
            </select>
        }
    };
    let fields: AnyView = match n.clone() {
        Node::Group(_) => ().into_any(),
        Node::Attribute { name, test } => value_test_fields(
            "attribute",
            name,
            test,
            move |name, test| set(Node::Attribute { name, test }),
            problem,
        ),
        Node::List { list_id, member } => {
            let (s1, s2) = (set.clone(), set.clone());
            let lists = choices.with_value(|c| c.lists.clone());
            view! {
                <select class=FIELD data-test="list-member" on:change=move |ev| s1(Node::List { list_id, member: event_target_value(&ev) == "on" })>
                    <option value="on" selected=member>"is on"</option>
                    <option value="off" selected=!member>"is not on"</option>
                </select>
                <select class=FIELD data-test="list-id" on:change=move |ev| s2(Node::List { list_id: event_target_value(&ev).parse().unwrap_or(0), member })>
                    {lists.into_iter().map(|(id, name)| view! { <option value=id.to_string() selected=id == list_id>{name}</option> }).collect_view()}
                </select>
            }
            .into_any()
        }
        Node::Status { status } => view! {
            <select class=FIELD data-test="status" on:change=move |ev| {
                if let Ok(s) = event_target_value(&ev).parse() { set(Node::Status { status: s }); }
            }>
                {SubscriberStatus::ALL.into_iter().map(|s| view! { <option value=s.as_str() selected=s == status>{s.as_str()}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        Node::Source { source } => view! {
            <select class=FIELD data-test="source" on:change=move |ev| {
                if let Ok(s) = event_target_value(&ev).parse() { set(Node::Source { source: s }); }
            }>
                {OptinSource::ALL.into_iter().map(|s| view! { <option value=s.as_str() selected=s == source>{s.as_str()}</option> }).collect_view()}
            </select>
        }
        .into_any(),
        Node::SignedUp { test } => {
            let as_value = ValueTest::Date { test };
            let (op, raw) = as_value.form_parts();
            let raw2 = raw.clone();
            let s2 = set.clone();
            let date_test = |o: &str, r: &str| match ValueTest::from_form(o, r) {
                Ok(ValueTest::Date { test }) => Ok(test),
                Ok(_) => Err("not a date test".to_string()),
                Err(e) => Err(e),
            };
            view! {
                <select class=FIELD data-test="signed-up-op" on:change=move |ev| {
                    let o = event_target_value(&ev);
                    let t = date_test(&o, &raw2).or_else(|_| date_test(&o, "30")).or_else(|_| date_test(&o, "2026-01-01"));
                    if let Ok(test) = t { set(Node::SignedUp { test }); }
                }>
                    {VALUE_OPS.iter().filter(|(k, _)| k.starts_with("date_")).map(|(k, label)| view! { <option value=*k selected=*k == op>{label.trim_start_matches("is a date ")}</option> }).collect_view()}
                </select>
                <input class=FIELD value=raw data-test="signed-up-value" on:change=move |ev| {
                    match date_test(op, &event_target_value(&ev)) {
                        Ok(test) => s2(Node::SignedUp { test }),
                        Err(e) => problem.set(Some(format!("Signed up: {e}."))),
                    }
                }/>
            }
            .into_any()
        }
        Node::Engagement {
            what,
            campaign_id,
            within_days,
        } => {
            let (s1, s2, s3) = (set.clone(), set.clone(), set.clone());
            let campaigns = choices.with_value(|c| c.campaigns.clone());
            view! {
                <select class=FIELD data-test="engagement-what" on:change=move |ev| {
                    if let Ok(w) = event_target_value(&ev).parse() { s1(Node::Engagement { what: w, campaign_id, within_days }); }
                }>
                    {Engagement::ALL.into_iter().map(|w| view! { <option value=w.as_str() selected=w == what>{w.as_str()}</option> }).collect_view()}
                </select>
                <select class=FIELD data-test="engagement-campaign" on:change=move |ev| {
                    let c = event_target_value(&ev).parse().ok().map(CampaignId);
                    s2(Node::Engagement { what, campaign_id: c, within_days });
                }>
                    <option value="" selected=campaign_id.is_none()>"any campaign"</option>
                    {campaigns.into_iter().map(|(id, name)| view! { <option value=id.to_string() selected=campaign_id == Some(CampaignId(id))>{name}</option> }).collect_view()}
                </select>
                {days_input(within_days, "engagement-days", move |d| s3(Node::Engagement { what, campaign_id, within_days: d }), problem)}
            }
            .into_any()
        }
        Node::Event {
            name,
            did,
            at_least,
            within_days,
            property,
            since_enrolment,
        } => {
            let rebuild = {
                let (name, property) = (name.clone(), property.clone());
                move |f: &dyn Fn(&mut Node)| {
                    let mut n = Node::Event {
                        name: name.clone(),
                        did,
                        at_least,
                        within_days,
                        property: property.clone(),
                        since_enrolment,
                    };
                    f(&mut n);
                    n
                }
            };
            let (s1, s2, s3, s4, s5) = (set.clone(), set.clone(), set.clone(), set.clone(), set);
            let (r1, r2, r3, r4, r5) = (rebuild.clone(), rebuild.clone(), rebuild.clone(), rebuild.clone(), rebuild);
            // No property test: an empty name (typing one adds the test).
            let (property_name, property_test) = match &property {
                Some(p) => (p.name.clone(), p.test.clone()),
                None => (String::new(), ValueTest::TextEquals { value: String::new() }),
            };
            view! {
                <select class=FIELD data-test="event-did" on:change=move |ev| {
                    let d = event_target_value(&ev) == "did";
                    s1(r1(&|n| if let Node::Event { did, at_least, .. } = n { *did = d; if !d { *at_least = 1; } }));
                }>
                    <option value="did" selected=did>"did"</option>
                    <option value="never" selected=!did>"never did"</option>
                </select>
                <input class=FIELD placeholder="event name" value=name data-test="event-name"
                    on:change=move |ev| { let v = event_target_value(&ev); s2(r2(&|n| if let Node::Event { name, .. } = n { *name = v.clone(); })); }/>
                {did.then(|| view! {
                    <label class="text-sm">"at least "
                        <input class=format!("{FIELD} w-16") type="number" min="1" value=at_least.to_string() data-test="event-times"
                            on:change=move |ev| {
                                let k = event_target_value(&ev).parse().unwrap_or(1);
                                s3(r3(&|n| if let Node::Event { at_least, .. } = n { *at_least = k; }));
                            }/>
                        " times"
                    </label>
                })}
                {days_input(within_days, "event-days", move |d| s4(r4(&|n| if let Node::Event { within_days, .. } = n { *within_days = d; })), problem)}
                <span class="text-sm">"with"</span>
                {value_test_fields(
                    "property",
                    property_name,
                    property_test,
                    move |key: String, test| {
                        let p = (!key.trim().is_empty()).then(|| PropertyTest { name: key.trim().to_string(), test });
                        s5(r5(&|n| if let Node::Event { property, .. } = n { *property = p.clone(); }));
                    },
                    problem,
                )}
            }
            .into_any()
        }
    };
    view! { <div class="flex flex-wrap items-center gap-2">{kind}{fields}</div> }.into_any()
}

/// The key, operator and value of a test of one member of a JSON object (an attribute, or an
/// event's property); `what` names the fields (`attribute-name`, `property-op`, …). Each
/// change calls `set` with the key and the test they make; a value that does not fit its
/// operator is named in `problem` instead.
fn value_test_fields(
    what: &'static str,
    name: String,
    test: ValueTest,
    set: impl Fn(String, ValueTest) + Clone + 'static,
    problem: RwSignal<Option<String>>,
) -> AnyView {
    let (op, raw) = test.form_parts();
    let (s1, s2, s3) = (set.clone(), set.clone(), set);
    let (name1, name2) = (name.clone(), name.clone());
    let raw2 = raw.clone();
    let shown = if what == "attribute" {
        "Attribute"
    } else {
        "Property"
    };
    view! {
        <input class=FIELD placeholder=what value=name data-test=format!("{what}-name")
            on:change=move |ev| {
                let t = ValueTest::from_form(op, &raw).unwrap_or(ValueTest::Exists);
                s1(event_target_value(&ev), t);
            }/>
        <select class=FIELD data-test=format!("{what}-op") on:change=move |ev| {
            // Keep the value where it fits the new operator; otherwise start it empty.
            let o = event_target_value(&ev);
            let t = ValueTest::from_form(&o, &raw2)
                .or_else(|_| ValueTest::from_form(&o, ""))
                .unwrap_or(ValueTest::Exists);
            s2(name1.clone(), t);
        }>
            {VALUE_OPS.iter().map(|(k, label)| view! { <option value=*k selected=*k == op>{*label}</option> }).collect_view()}
        </select>
        {(op != "exists").then(|| view! {
            <input class=FIELD placeholder="value" value=test.form_parts().1 data-test=format!("{what}-value")
                on:change=move |ev| {
                    match ValueTest::from_form(op, &event_target_value(&ev)) {
                        Ok(t) => s3(name2.clone(), t),
                        Err(e) => problem.set(Some(format!("{shown} {name2:?}: {e}."))),
                    }
                }/>
        })}
    }
    .into_any()
}

/// "within the last N days" (empty: ever).
fn days_input(
    days: Option<u32>,
    test: &'static str,
    set: impl Fn(Option<u32>) + 'static,
    problem: RwSignal<Option<String>>,
) -> impl IntoView {
    view! {
        <label class="text-sm">"within the last "
            <input class=format!("{FIELD} w-20") type="number" min="1" placeholder="ever" value=days.map(|d| d.to_string()).unwrap_or_default() data-test=test
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    match v.trim() {
                        "" => set(None),
                        t => match t.parse::<u32>() {
                            Ok(d) => set(Some(d)),
                            Err(_) => problem.set(Some(format!("{t:?} is not a number of days."))),
                        },
                    }
                }/>
            " days"
        </label>
    }
}
