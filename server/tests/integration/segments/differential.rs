//! The segment compiler against an independent evaluator: random worlds (subscribers with
//! attributes of every JSON type, case-variant addresses, erased rows, list memberships,
//! campaign deliveries and bounce or complaint reports, events with properties; organisations
//! in time zones fourteen hours ahead of UTC and eleven behind, at a random minute of the day)
//! and random trees (nesting, negation, empty groups, other organisations' list and campaign
//! ids) are written to PostgreSQL, and each tree's SQL answer must equal the answer of
//! `Model::matches`, written here from the words in `domain::segment` and nothing else.
//!
//! Seeded (`SEGMENT_SEED`), so a failure repeats; `SEGMENT_CASES` worlds of
//! [`TREES_PER_WORLD`] trees each (60 by default: 1,500 trees; `bench/segments.sh` runs ten
//! times as many). proptest shrinks a failing world and tree to a small one.

use std::collections::{BTreeSet, HashMap};

use app::domain::segment::{
    DateTest, Engagement, Group, GroupOp, Node, OptinSource, PropertyTest, ValueTest,
};
use app::domain::{CampaignId, OrgId, SubscriberStatus};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};

use crate::support::helpers::{draft, org_with_users, test_db};

const TREES_PER_WORLD: usize = 25;
const LISTS: usize = 3;
const CAMPAIGNS: usize = 2;
/// (zone, hours ahead of UTC): neither has summer time, so the model can use the offset.
const ZONES: [(&str, i64); 3] = [
    ("UTC", 0),
    ("Pacific/Kiritimati", 14),
    ("Pacific/Pago_Pago", -11),
];
const KEYS: [&str; 6] = ["plan", "seats", "vip", "trial_end", "it's", "a->>'b'"];
const EVENT_NAMES: [&str; 3] = ["signed_in", "invited", "upgraded"];
const TEXTS: [&str; 9] = [
    "pro",
    "Pro",
    "team",
    "",
    "pr",
    "2026-03-09",
    "2026-03-10T23:30:00Z",
    "2026-13-01",
    "é",
];
const NUMBERS: [f64; 6] = [-1.0, 0.0, 1.5, 3.0, 10.0, 1e20];
const DAYS: [u32; 4] = [1, 2, 7, 30];

fn base_now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-10T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

// ---- The world, as generated ----

#[derive(Clone, Debug)]
struct Sub {
    upper: bool,
    status: SubscriberStatus,
    source: Option<OptinSource>,
    created_ago: i64,
    attributes: Vec<(usize, Value)>,
    erased: bool,
    lists: BTreeSet<usize>,
}

#[derive(Clone, Debug)]
struct Delivery {
    sub: usize,
    campaign: usize,
    delivered: bool,
    ago: i64,
    /// A report about it: (0 hard bounce, 1 soft bounce, 2 complaint), minutes ago.
    report: Option<(u8, i64)>,
    /// A click on a tracked link in it: (by a scanner, minutes ago).
    click: Option<(bool, i64)>,
}

#[derive(Clone, Debug)]
struct Event {
    sub: usize,
    name: usize,
    ago: i64,
    properties: Vec<(usize, Value)>,
}

#[derive(Clone, Debug)]
struct World {
    zone: usize,
    minute_of_day: i64,
    subs: Vec<Sub>,
    deliveries: Vec<Delivery>,
    events: Vec<Event>,
    trees: Vec<Group>,
}

/// Minutes ago: mostly within a few days (where "today", the day edges and the short
/// windows are), sometimes up to forty days.
fn ago() -> impl Strategy<Value = i64> {
    prop_oneof![3 => 0i64..(4 * 24 * 60), 1 => 0i64..(40 * 24 * 60)]
}

fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => (0..TEXTS.len()).prop_map(|i| json!(TEXTS[i])),
        2 => (0..NUMBERS.len()).prop_map(|i| json!(NUMBERS[i])),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
        1 => Just(json!([1])),
        1 => Just(json!({"plan": "pro"})),
        // A date near now (often): every date test meets its edges.
        3 => (-3i64..3).prop_map(|d| json!((base_now().date_naive() + Duration::days(d))
            .format("%Y-%m-%d")
            .to_string())),
    ]
}

fn pairs() -> impl Strategy<Value = Vec<(usize, Value)>> {
    proptest::collection::vec((0..KEYS.len(), json_value()), 0..4)
}

fn status() -> impl Strategy<Value = SubscriberStatus> {
    (0..SubscriberStatus::ALL.len()).prop_map(|i| SubscriberStatus::ALL[i])
}

fn sub() -> impl Strategy<Value = Sub> {
    (
        any::<bool>(),
        status(),
        proptest::option::of((0..OptinSource::ALL.len()).prop_map(|i| OptinSource::ALL[i])),
        ago(),
        pairs(),
        proptest::bool::weighted(0.1),
        proptest::collection::btree_set(0..LISTS, 0..=LISTS),
    )
        .prop_map(
            |(upper, status, source, created_ago, attributes, erased, lists)| Sub {
                upper,
                status,
                source,
                created_ago,
                attributes,
                erased,
                lists,
            },
        )
}

fn world() -> impl Strategy<Value = World> {
    (
        0..ZONES.len(),
        0i64..(24 * 60),
        proptest::collection::vec(sub(), 4..16),
    )
        .prop_flat_map(|(zone, minute_of_day, subs)| {
            let n = subs.len();
            let delivery = (
                0..n,
                0..CAMPAIGNS,
                any::<bool>(),
                ago(),
                proptest::option::of((0u8..3, ago())),
                proptest::option::of((any::<bool>(), ago())),
            )
                .prop_map(|(sub, campaign, delivered, ago, report, click)| Delivery {
                    sub,
                    campaign,
                    delivered,
                    ago,
                    report,
                    click,
                });
            let event = (0..n, 0..EVENT_NAMES.len(), ago(), pairs()).prop_map(
                |(sub, name, ago, properties)| Event {
                    sub,
                    name,
                    ago,
                    properties,
                },
            );
            (
                Just(zone),
                Just(minute_of_day),
                Just(subs),
                proptest::collection::vec(delivery, 0..12),
                proptest::collection::vec(event, 0..30),
                proptest::collection::vec(tree(), TREES_PER_WORLD),
            )
        })
        .prop_map(
            |(zone, minute_of_day, subs, deliveries, events, trees)| World {
                zone,
                minute_of_day,
                subs,
                deliveries,
                events,
                trees,
            },
        )
}

fn date_test() -> impl Strategy<Value = DateTest> {
    let date = (-3i64..3).prop_map(|d| base_now().date_naive() + Duration::days(d));
    prop_oneof![
        date.clone().prop_map(|date| DateTest::Before { date }),
        date.prop_map(|date| DateTest::After { date }),
        (0..DAYS.len()).prop_map(|i| DateTest::WithinDays { days: DAYS[i] }),
    ]
}

fn value_test() -> impl Strategy<Value = ValueTest> {
    let text = (0..TEXTS.len()).prop_map(|i| TEXTS[i].to_string());
    let number = (0..NUMBERS.len()).prop_map(|i| NUMBERS[i]);
    prop_oneof![
        Just(ValueTest::Exists),
        text.clone()
            .prop_map(|value| ValueTest::TextEquals { value }),
        text.clone()
            .prop_map(|value| ValueTest::TextContains { value }),
        text.clone()
            .prop_map(|value| ValueTest::TextStartsWith { value }),
        proptest::collection::vec(text, 1..3).prop_map(|values| ValueTest::TextIn { values }),
        number
            .clone()
            .prop_map(|value| ValueTest::NumberEquals { value }),
        number
            .clone()
            .prop_map(|value| ValueTest::NumberLess { value }),
        number.prop_map(|value| ValueTest::NumberGreater { value }),
        any::<bool>().prop_map(|value| ValueTest::Bool { value }),
        date_test().prop_map(|test| ValueTest::Date { test }),
        date_test().prop_map(|test| ValueTest::Date { test }),
    ]
}

/// List ids 1..=LISTS and campaign ids 1..=CAMPAIGNS stand for the world's own (swapped for
/// their real ids once written); one more stands for another organisation's.
fn condition() -> impl Strategy<Value = Node> {
    let days = proptest::option::of((0..DAYS.len()).prop_map(|i| DAYS[i]));
    prop_oneof![
        // Attributes are where most of the rules are: weighted up.
        3 => ((0..KEYS.len()), value_test()).prop_map(|(k, test)| Node::Attribute {
            name: KEYS[k].to_string(),
            test,
        }),
        1 => ((1..=LISTS as i64 + 1), any::<bool>())
            .prop_map(|(list_id, member)| Node::List { list_id, member }),
        1 => status().prop_map(|status| Node::Status { status }),
        1 => (0..OptinSource::ALL.len()).prop_map(|i| Node::Source {
            source: OptinSource::ALL[i]
        }),
        1 => date_test().prop_map(|test| Node::SignedUp { test }),
        1 => (
            (0..Engagement::ALL.len()),
            proptest::option::of(1..=CAMPAIGNS as i64 + 1),
            days.clone(),
        )
            .prop_map(|(w, c, within_days)| Node::Engagement {
                what: Engagement::ALL[w],
                campaign_id: c.map(CampaignId),
                within_days,
            }),
        1 => (
            (0..EVENT_NAMES.len()),
            any::<bool>(),
            1u32..4,
            days,
            proptest::option::of(((0..KEYS.len()), value_test())),
        )
            .prop_map(|(n, did, at_least, within_days, property)| Node::Event {
                name: EVENT_NAMES[n].to_string(),
                did,
                at_least: if did { at_least } else { 1 },
                within_days,
                property: property.map(|(k, test)| PropertyTest {
                    name: KEYS[k].to_string(),
                    test,
                }),
                since_enrolment: false,
            }),
    ]
}

fn op() -> impl Strategy<Value = GroupOp> {
    prop_oneof![2 => Just(GroupOp::Any), 1 => Just(GroupOp::All), 1 => Just(GroupOp::None)]
}

/// Mostly one to three children (trees that split their world), sometimes none (an empty
/// group's meaning is part of the contract too).
fn children<T: std::fmt::Debug + Clone>(
    node: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<T>> {
    prop_oneof![9 => proptest::collection::vec(node, 1..4), 1 => Just(Vec::new())]
}

fn tree() -> impl Strategy<Value = Group> {
    let node = condition().prop_recursive(3, 16, 3, |inner| {
        (op(), children(inner)).prop_map(|(op, children)| Node::Group(Group { op, children }))
    });
    (op(), children(node)).prop_map(|(op, children)| Group { op, children })
}

// ---- Writing it ----

struct Written {
    org: OrgId,
    now: DateTime<Utc>,
    offset: i64,
    sub_ids: Vec<i64>,
    list_ids: Vec<i64>,
    campaign_ids: Vec<i64>,
}

fn attrs(pairs: &[(usize, Value)]) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in pairs {
        m.insert(KEYS[*k].to_string(), v.clone());
    }
    Value::Object(m)
}

async fn write(pool: &sqlx::PgPool, w: &World, n: usize) -> Written {
    let (zone, offset) = ZONES[w.zone];
    let (org, users) = org_with_users(pool, &format!("seg{n}"), &[app::domain::Role::Owner]).await;
    sqlx::query("update orgs set timezone = $2 where id = $1")
        .bind(org)
        .bind(zone)
        .execute(pool)
        .await
        .unwrap();
    let now = base_now() + Duration::minutes(w.minute_of_day);
    let mut conn = pool.acquire().await.unwrap();
    let mut list_ids = Vec::new();
    for l in 0..LISTS {
        list_ids.push(
            sqlx::query_scalar::<_, i64>(
                "insert into lists (org_id, name) values ($1, $2) returning id",
            )
            .bind(org)
            .bind(format!("L{l}"))
            .fetch_one(&mut *conn)
            .await
            .unwrap(),
        );
    }
    let mut campaign_ids = Vec::new();
    for c in 0..CAMPAIGNS {
        campaign_ids.push(draft(&mut conn, org, users[0].0, &format!("C{c}")).await);
    }
    let mut sub_ids = Vec::new();
    for (i, s) in w.subs.iter().enumerate() {
        // Odd rows share the address of the row before in another spelling, or have their own.
        let email = match (i % 2, s.upper) {
            (1, true) => format!("P{}@EX.org", i / 2),
            (1, false) => format!("q{i}@ex.org"),
            _ => format!("p{}@ex.org", i / 2),
        };
        let id: i64 = sqlx::query_scalar(
            "insert into subscribers (org_id, email, email_lower, status, optin_source, attributes,
                                      created_at, erased_at)
             values ($1, $2, lower($2), $3, $4, $5, $6, case when $7 then $6 end) returning id",
        )
        .bind(org)
        .bind(&email)
        .bind(s.status.as_str())
        .bind(s.source.map(OptinSource::as_str))
        .bind(attrs(&s.attributes))
        .bind(now - Duration::minutes(s.created_ago))
        .bind(s.erased)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        for l in &s.lists {
            sqlx::query(
                "insert into list_members (org_id, list_id, subscriber_id) values ($1, $2, $3)",
            )
            .bind(org)
            .bind(list_ids[*l])
            .bind(id)
            .execute(&mut *conn)
            .await
            .unwrap();
        }
        sub_ids.push(id);
    }
    for (k, d) in w.deliveries.iter().enumerate() {
        let job = format!("seg:{org}:{k}");
        sqlx::query(
            "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower,
                                     campaign_id, content_version, subscriber_id, status, finished_at)
             values ($1, $2, 'campaign', 2, 'x@ex.org', 'x@ex.org', $3, 1, $4, $5, $6)",
        )
        .bind(&job)
        .bind(org)
        .bind(campaign_ids[d.campaign])
        .bind(sub_ids[d.sub])
        .bind(if d.delivered { "delivered" } else { "failed" })
        .bind(now - Duration::minutes(d.ago))
        .execute(&mut *conn)
        .await
        .unwrap();
        if let Some((scanner, ago)) = d.click {
            sqlx::query(
                "insert into link_clicks (org_id, campaign_id, job_id, subscriber_id, url, clicked_at, scanner)
                 values ($1, $2, $3, $4, 'https://example.com/', $5, $6)",
            )
            .bind(org)
            .bind(campaign_ids[d.campaign])
            .bind(&job)
            .bind(sub_ids[d.sub])
            .bind(now - Duration::minutes(ago))
            .bind(scanner)
            .execute(&mut *conn)
            .await
            .unwrap();
        }
        if let Some((kind, ago)) = d.report {
            sqlx::query(
                "insert into delivery_events (org_id, source, provider_event_id, kind, job_id,
                                              matched_by, email_lower, effect, received_at)
                 values ($1, 'generic', $2, $3, $2, 'message_id', 'x@ex.org', 'none', $4)",
            )
            .bind(org)
            .bind(&job)
            .bind(["hard_bounce", "soft_bounce", "complaint"][kind as usize])
            .bind(now - Duration::minutes(ago))
            .execute(&mut *conn)
            .await
            .unwrap();
        }
    }
    for (k, e) in w.events.iter().enumerate() {
        if w.subs[e.sub].erased {
            continue;
        }
        sqlx::query(
            "insert into events (org_id, key, subscriber_id, name, properties, occurred_at)
             values ($1, $2, $3, $4, $5, $6)",
        )
        .bind(org)
        .bind(format!("e{k}"))
        .bind(sub_ids[e.sub])
        .bind(EVENT_NAMES[e.name])
        .bind(attrs(&e.properties))
        .bind(now - Duration::minutes(e.ago))
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    Written {
        org: OrgId(org),
        now,
        offset,
        sub_ids,
        list_ids,
        campaign_ids,
    }
}

/// The tree with its stand-in ids swapped for the world's real ones; the one past the end
/// becomes an id of another organisation (`foreign`).
fn real_ids(g: &Group, w: &Written, foreign_list: i64, foreign_campaign: i64) -> Group {
    Group {
        op: g.op,
        children: g
            .children
            .iter()
            .map(|n| match n {
                Node::Group(inner) => {
                    Node::Group(real_ids(inner, w, foreign_list, foreign_campaign))
                }
                Node::List { list_id, member } => Node::List {
                    list_id: w
                        .list_ids
                        .get(*list_id as usize - 1)
                        .copied()
                        .unwrap_or(foreign_list),
                    member: *member,
                },
                Node::Engagement {
                    what,
                    campaign_id,
                    within_days,
                } => Node::Engagement {
                    what: *what,
                    campaign_id: campaign_id.map(|c| {
                        CampaignId(
                            w.campaign_ids
                                .get(c.0 as usize - 1)
                                .copied()
                                .unwrap_or(foreign_campaign),
                        )
                    }),
                    within_days: *within_days,
                },
                other => other.clone(),
            })
            .collect(),
    }
}

// ---- The independent evaluator ----

struct Model<'a> {
    w: &'a World,
    now: DateTime<Utc>,
    offset: i64,
    /// Index of each real list / campaign id in the world (others': absent).
    list_index: HashMap<i64, usize>,
    campaign_index: HashMap<i64, usize>,
}

impl Model<'_> {
    fn today(&self) -> NaiveDate {
        (self.now + Duration::hours(self.offset)).date_naive()
    }

    /// The first instant of `day` in the org's zone.
    fn day_start(&self, day: NaiveDate) -> DateTime<Utc> {
        day.and_hms_opt(0, 0, 0).unwrap().and_utc() - Duration::hours(self.offset)
    }

    fn first_day(&self, days: u32) -> NaiveDate {
        self.today() - Duration::days(i64::from(days) - 1)
    }

    fn minutes_ago(&self, m: i64) -> DateTime<Utc> {
        self.now - Duration::minutes(m)
    }

    fn since(&self, days: Option<u32>) -> DateTime<Utc> {
        days.map_or(DateTime::<Utc>::MIN_UTC, |d| {
            self.now - Duration::days(i64::from(d))
        })
    }

    fn group(&self, g: &Group, s: usize) -> bool {
        let mut each = g.children.iter().map(|n| self.node(n, s));
        match g.op {
            GroupOp::All => each.all(|b| b),
            GroupOp::Any => each.any(|b| b),
            GroupOp::None => !each.any(|b| b),
        }
    }

    fn value(&self, v: Option<&Value>, t: &ValueTest) -> bool {
        match (t, v) {
            (ValueTest::Exists, v) => v.is_some(),
            (_, None) => false,
            (ValueTest::TextEquals { value }, Some(Value::String(s))) => s == value,
            (ValueTest::TextContains { value }, Some(Value::String(s))) => {
                s.contains(value.as_str())
            }
            (ValueTest::TextStartsWith { value }, Some(Value::String(s))) => {
                s.starts_with(value.as_str())
            }
            (ValueTest::TextIn { values }, Some(Value::String(s))) => values.contains(s),
            (ValueTest::NumberEquals { value }, Some(Value::Number(n))) => {
                n.as_f64() == Some(*value)
            }
            (ValueTest::NumberLess { value }, Some(Value::Number(n))) => {
                n.as_f64().is_some_and(|n| n < *value)
            }
            (ValueTest::NumberGreater { value }, Some(Value::Number(n))) => {
                n.as_f64().is_some_and(|n| n > *value)
            }
            (ValueTest::Bool { value }, Some(Value::Bool(b))) => b == value,
            (ValueTest::Date { test }, Some(Value::String(s))) => {
                let b = s.as_bytes();
                let digits = |r: std::ops::Range<usize>| {
                    r.into_iter()
                        .all(|i| b.get(i).is_some_and(u8::is_ascii_digit))
                };
                if !(digits(0..4)
                    && b.get(4) == Some(&b'-')
                    && digits(5..7)
                    && b.get(7) == Some(&b'-')
                    && digits(8..10))
                {
                    return false;
                }
                // Compared as text, as the words say (`2026-13-01` sorts after December).
                let day = &s[..10];
                let text = |d: NaiveDate| d.format("%Y-%m-%d").to_string();
                match test {
                    DateTest::Before { date } => day < text(*date).as_str(),
                    DateTest::After { date } => day > text(*date).as_str(),
                    DateTest::WithinDays { days } => {
                        day >= text(self.first_day(*days)).as_str()
                            && day <= text(self.today()).as_str()
                    }
                }
            }
            _ => false,
        }
    }

    fn node(&self, n: &Node, s: usize) -> bool {
        let sub = &self.w.subs[s];
        match n {
            Node::Group(g) => self.group(g, s),
            Node::Attribute { name, test } => {
                let a = attrs(&sub.attributes);
                self.value(a.get(name), test)
            }
            Node::List { list_id, member } => {
                let on = self
                    .list_index
                    .get(list_id)
                    .is_some_and(|l| sub.lists.contains(l));
                on == *member
            }
            Node::Status { status } => sub.status == *status,
            Node::Source { source } => sub.source == Some(*source),
            Node::SignedUp { test } => {
                let at = self.minutes_ago(sub.created_ago);
                match test {
                    DateTest::Before { date } => at < self.day_start(*date),
                    DateTest::After { date } => at >= self.day_start(*date + Duration::days(1)),
                    DateTest::WithinDays { days } => at >= self.day_start(self.first_day(*days)),
                }
            }
            Node::Engagement {
                what,
                campaign_id,
                within_days,
            } => {
                let since = self.since(*within_days);
                self.w.deliveries.iter().any(|d| {
                    let campaign_ok = match campaign_id {
                        None => true,
                        Some(c) => self.campaign_index.get(&c.0) == Some(&d.campaign),
                    };
                    let bounced = |r: &Option<(u8, i64)>| matches!(r, Some((0 | 1, _)));
                    d.sub == s
                        && campaign_ok
                        && match what {
                            Engagement::Received => d.delivered && self.minutes_ago(d.ago) >= since,
                            Engagement::Delivered => {
                                d.delivered && self.minutes_ago(d.ago) >= since && !bounced(&d.report)
                            }
                            Engagement::Bounced => {
                                matches!(d.report, Some((0 | 1, at)) if self.minutes_ago(at) >= since)
                            }
                            Engagement::Complained => {
                                matches!(d.report, Some((2, at)) if self.minutes_ago(at) >= since)
                            }
                            Engagement::Clicked => {
                                matches!(d.click, Some((false, at)) if self.minutes_ago(at) >= since)
                            }
                        }
                })
            }
            Node::Event {
                name,
                did,
                at_least,
                within_days,
                property,
                since_enrolment: _,
            } => {
                let since = self.since(*within_days);
                let n = self
                    .w
                    .events
                    .iter()
                    .filter(|e| {
                        e.sub == s
                            && EVENT_NAMES[e.name] == name
                            && self.minutes_ago(e.ago) >= since
                            && property.as_ref().is_none_or(|p| {
                                self.value(attrs(&e.properties).get(&p.name), &p.test)
                            })
                    })
                    .count();
                if *did {
                    n >= *at_least as usize
                } else {
                    n == 0
                }
            }
        }
    }
}

#[test]
fn segment_sql_matches_an_independent_evaluator_on_random_worlds_and_trees() {
    let cases: u32 = std::env::var("SEGMENT_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("SEGMENT_SEED")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20261205);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = rt.block_on(test_db());
    // Another organisation's list and campaign, for trees that name them.
    let (foreign_list, foreign_campaign) = rt.block_on(async {
        let (other, users) = org_with_users(&pool, "other", &[app::domain::Role::Owner]).await;
        let mut conn = pool.acquire().await.unwrap();
        let list: i64 = sqlx::query_scalar(
            "insert into lists (org_id, name) values ($1, 'theirs') returning id",
        )
        .bind(other)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        (list, draft(&mut conn, other, users[0].0, "theirs").await)
    });
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let checked = std::sync::atomic::AtomicUsize::new(0);
    // Trees that split their world (some match, some do not): the ones that tell.
    let telling = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&world(), |w| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rt.block_on(async {
            let written = write(&pool, &w, n).await;
            let model = Model {
                w: &w,
                now: written.now,
                offset: written.offset,
                list_index: written
                    .list_ids
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (*l, i))
                    .collect(),
                campaign_index: written
                    .campaign_ids
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (*c, i))
                    .collect(),
            };
            let mut conn = pool.acquire().await.unwrap();
            let clock = app::db::segment::clock(&mut conn, written.org, Some(written.now))
                .await
                .unwrap();
            assert_eq!(clock.today, model.today(), "the org's day");
            for t in &w.trees {
                let tree = real_ids(t, &written, foreign_list, foreign_campaign);
                prop_assert!(tree.check().is_ok(), "{:?}", tree.check());
                let sql: Vec<i64> = app::db::segment::ids(&mut conn, written.org, &tree, &clock)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{e}")))?;
                let expected: Vec<i64> = (0..w.subs.len())
                    .filter(|s| !w.subs[*s].erased && model.group(&tree, *s))
                    .map(|s| written.sub_ids[s])
                    .collect();
                prop_assert_eq!(
                    &sql,
                    &expected,
                    "tree {}",
                    serde_json::to_string(&tree).unwrap()
                );
                let count = app::db::segment::count(&mut conn, written.org, &tree, &clock)
                    .await
                    .unwrap();
                prop_assert_eq!(count as usize, expected.len());
                checked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let live = w.subs.iter().filter(|s| !s.erased).count();
                if !expected.is_empty() && expected.len() < live {
                    telling.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let checked = checked.into_inner();
    assert!(
        checked >= cases as usize * TREES_PER_WORLD,
        "{checked} trees checked"
    );
    let telling = telling.into_inner();
    assert!(
        telling * 4 >= checked,
        "only {telling} of {checked} trees split their world"
    );
    eprintln!(
        "segments: {checked} trees over {cases} worlds agreed, {telling} of them splitting their world (seed {seed})"
    );
}
