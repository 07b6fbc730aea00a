//! A segment's definition: one typed tree of conditions combined with all / any / none,
//! shared by the dashboard's builder, the API (as JSON) and the database layer, which compiles
//! it to one parameterised predicate (`db::segment`). Checked once, at the edge, with each
//! error naming the node it is about (`children[2].children[0].name`).
//!
//! What each condition means is said here, once; the SQL and the test's in-memory evaluator
//! both follow these words:
//! - an attribute is a top-level key of the subscriber's attributes (never a path); a text
//!   test matches only a string value, a number test only a number, a boolean test only a
//!   boolean, a date test only a string that starts with a calendar date (`YYYY-MM-DD`, the
//!   rest ignored); text comparisons are exact (case and accents count);
//! - dates ("before", "after", "within the last N days") are calendar days in the
//!   organisation's time zone; "within the last N days" counts today as one of them;
//! - engagement and events look back whole 24-hour periods from now.

use serde::{Deserialize, Serialize};

use super::input::{line_input, text_input, InputError};
use super::{CampaignId, SubscriberStatus};

/// The deepest a tree may nest (the root group is depth 1).
pub const MAX_DEPTH: usize = 8;
/// The most nodes (groups and conditions) a tree may hold.
pub const MAX_NODES: usize = 100;
/// The longest attribute or property name, in characters.
pub const NAME_MAX: usize = 64;
/// The longest text value, in characters.
pub const VALUE_MAX: usize = 500;
/// The most values an `in` test may list.
pub const IN_MAX: usize = 100;
/// The longest look-back, in days (ten years).
pub const DAYS_MAX: u32 = 3_650;
/// The most times an event condition may ask for.
pub const TIMES_MAX: u32 = 1_000_000;

/// How a group combines its children: every one, at least one, or none of them. An empty
/// `all` matches everyone, an empty `any` no one, an empty `none` everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupOp {
    All,
    Any,
    None,
}

/// A group of nodes; a segment's definition is its root group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub op: GroupOp,
    #[serde(default)]
    pub children: Vec<Node>,
}

/// A group or a condition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Node {
    Group(Group),
    /// A test of one of the subscriber's attributes.
    Attribute {
        name: String,
        test: ValueTest,
    },
    /// On (or, with `member: false`, not on) one of the organisation's lists.
    List {
        list_id: i64,
        #[serde(default = "yes")]
        member: bool,
    },
    Status {
        status: SubscriberStatus,
    },
    /// How they came to be a subscriber.
    Source {
        source: OptinSource,
    },
    /// When they became a subscriber.
    SignedUp {
        test: DateTest,
    },
    /// What became of the campaigns sent to them.
    Engagement {
        what: Engagement,
        /// One campaign of the organisation; none: any campaign.
        campaign_id: Option<CampaignId>,
        within_days: Option<u32>,
    },
    /// Did (or, with `did: false`, never did) an event, at least `at_least` times, within the
    /// last `within_days` days, with a property that passes `property`.
    Event {
        name: String,
        #[serde(default = "yes")]
        did: bool,
        #[serde(default = "once")]
        at_least: u32,
        within_days: Option<u32>,
        property: Option<PropertyTest>,
        /// Counts only events since the person was enrolled: for an automation's branch (a
        /// saved segment has no enrolment, and refuses it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        since_enrolment: bool,
    },
}

fn yes() -> bool {
    true
}

fn once() -> u32 {
    1
}

/// A test of one property of an event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyTest {
    pub name: String,
    pub test: ValueTest,
}

/// A test of a JSON value, by the type it must have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ValueTest {
    /// The key is there (with any value, null included).
    Exists,
    TextEquals {
        value: String,
    },
    TextContains {
        value: String,
    },
    TextStartsWith {
        value: String,
    },
    TextIn {
        values: Vec<String>,
    },
    NumberEquals {
        value: f64,
    },
    NumberLess {
        value: f64,
    },
    NumberGreater {
        value: f64,
    },
    Bool {
        value: bool,
    },
    Date {
        test: DateTest,
    },
}

/// A test of a calendar day.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum DateTest {
    /// Strictly before this day (`YYYY-MM-DD`).
    Before { date: chrono::NaiveDate },
    /// Strictly after this day.
    After { date: chrono::NaiveDate },
    /// Today or one of the `days - 1` days before it.
    WithinDays { days: u32 },
}

text_enum! {
    /// What a campaign's message to them came to.
    pub enum Engagement ("an engagement") {
        /// The relay accepted it.
        Received = "received",
        /// The relay accepted it and no bounce was reported for it.
        Delivered = "delivered",
        /// A bounce (hard or soft) was reported for it.
        Bounced = "bounced",
        /// They reported it as spam.
        Complained = "complained",
        /// They followed a tracked link in it (click tracking on; link scanners' clicks
        /// excluded).
        Clicked = "clicked",
    }
}

text_enum! {
    /// How a subscriber came to be one (`subscribers.optin_source`).
    pub enum OptinSource ("a sign-up source") {
        Dashboard = "dashboard",
        Import = "import",
        Api = "api",
        Signup = "signup",
    }
}

/// A tree refused: the node it is about, by its path from the root, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {fault}")]
pub struct TreeError {
    /// `children[2].children[0].name`; empty for the root itself.
    pub path: String,
    pub fault: String,
}

impl TreeError {
    /// The node as a JSON pointer under `root` (`#/definition/children/2/name`).
    pub fn pointer(&self, root: &str) -> String {
        let mut p = root.to_owned();
        for part in self.path.split('.').filter(|s| !s.is_empty()) {
            match part.split_once('[') {
                Some((name, index)) => {
                    p.push('/');
                    p.push_str(name);
                    p.push('/');
                    p.push_str(index.trim_end_matches(']'));
                }
                None => {
                    p.push('/');
                    p.push_str(part);
                }
            }
        }
        p
    }
}

/// The value tests a form offers, by the word the form sends and the words it shows.
pub const VALUE_OPS: [(&str, &str); 12] = [
    ("exists", "is set"),
    ("text_equals", "is"),
    ("text_contains", "contains"),
    ("text_starts_with", "starts with"),
    ("text_in", "is one of (comma-separated)"),
    ("number_equals", "= (number)"),
    ("number_less", "< (number)"),
    ("number_greater", "> (number)"),
    ("bool", "is (true or false)"),
    ("date_before", "is a date before (YYYY-MM-DD)"),
    ("date_after", "is a date after (YYYY-MM-DD)"),
    ("date_within_days", "is a date within the last (days)"),
];

impl ValueTest {
    /// The test a form's operator and text make; the error says what the text should be.
    pub fn from_form(op: &str, raw: &str) -> Result<ValueTest, String> {
        let raw = raw.trim();
        let number = || {
            raw.parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or_else(|| format!("{raw:?} is not a number"))
        };
        let date = || {
            chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d")
                .map_err(|_| format!("{raw:?} is not a date (YYYY-MM-DD)"))
        };
        Ok(match op {
            "exists" => ValueTest::Exists,
            "text_equals" => ValueTest::TextEquals { value: raw.into() },
            "text_contains" => ValueTest::TextContains { value: raw.into() },
            "text_starts_with" => ValueTest::TextStartsWith { value: raw.into() },
            "text_in" => ValueTest::TextIn {
                values: raw.split(',').map(|v| v.trim().to_owned()).collect(),
            },
            "number_equals" => ValueTest::NumberEquals { value: number()? },
            "number_less" => ValueTest::NumberLess { value: number()? },
            "number_greater" => ValueTest::NumberGreater { value: number()? },
            "bool" => ValueTest::Bool {
                value: match raw {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("{raw:?} is neither true nor false")),
                },
            },
            "date_before" => ValueTest::Date {
                test: DateTest::Before { date: date()? },
            },
            "date_after" => ValueTest::Date {
                test: DateTest::After { date: date()? },
            },
            "date_within_days" => ValueTest::Date {
                test: DateTest::WithinDays {
                    days: raw
                        .parse()
                        .map_err(|_| format!("{raw:?} is not a number of days"))?,
                },
            },
            other => return Err(format!("{other:?} is not a test")),
        })
    }

    /// The form's operator and text for this test (what `from_form` reads back).
    pub fn form_parts(&self) -> (&'static str, String) {
        let n = |v: &f64| v.to_string();
        match self {
            ValueTest::Exists => ("exists", String::new()),
            ValueTest::TextEquals { value } => ("text_equals", value.clone()),
            ValueTest::TextContains { value } => ("text_contains", value.clone()),
            ValueTest::TextStartsWith { value } => ("text_starts_with", value.clone()),
            ValueTest::TextIn { values } => ("text_in", values.join(", ")),
            ValueTest::NumberEquals { value } => ("number_equals", n(value)),
            ValueTest::NumberLess { value } => ("number_less", n(value)),
            ValueTest::NumberGreater { value } => ("number_greater", n(value)),
            ValueTest::Bool { value } => ("bool", value.to_string()),
            ValueTest::Date { test } => match test {
                DateTest::Before { date } => ("date_before", date.to_string()),
                DateTest::After { date } => ("date_after", date.to_string()),
                DateTest::WithinDays { days } => ("date_within_days", days.to_string()),
            },
        }
    }
}

/// A segment's name: as a list's (trimmed, 1 to 200 characters, no control character).
pub fn segment_name(input: &str) -> Result<String, String> {
    super::audience::list_name(input).map_err(|e| e.replace("list's", "segment's"))
}

impl Group {
    /// Checks the whole tree: its size and depth, and every condition's names and values.
    pub fn check(&self) -> Result<(), TreeError> {
        let mut nodes = 0;
        check_group(self, "", 1, &mut nodes, Anchor::None)
    }

    /// As [`Group::check`], for a condition evaluated for one enrolled person (an
    /// automation's branch): events may be counted since their enrolment.
    pub fn check_enrolled(&self) -> Result<(), TreeError> {
        let mut nodes = 0;
        check_group(self, "", 1, &mut nodes, Anchor::Enrolment)
    }

    /// Every list id the tree names, in order, with its node's path.
    pub fn lists(&self) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        walk(self, "", &mut |path, n| {
            if let Node::List { list_id, .. } = n {
                out.push((path.to_owned(), *list_id));
            }
        });
        out
    }

    /// Every campaign id the tree names, in order, with its node's path.
    pub fn campaigns(&self) -> Vec<(String, CampaignId)> {
        let mut out = Vec::new();
        walk(self, "", &mut |path, n| {
            if let Node::Engagement {
                campaign_id: Some(c),
                ..
            } = n
            {
                out.push((path.to_owned(), *c));
            }
        });
        out
    }
}

fn child_path(parent: &str, i: usize) -> String {
    if parent.is_empty() {
        format!("children[{i}]")
    } else {
        format!("{parent}.children[{i}]")
    }
}

fn field_path(node: &str, field: &str) -> String {
    if node.is_empty() {
        field.to_owned()
    } else {
        format!("{node}.{field}")
    }
}

fn walk(g: &Group, path: &str, f: &mut impl FnMut(&str, &Node)) {
    for (i, n) in g.children.iter().enumerate() {
        let p = child_path(path, i);
        f(&p, n);
        if let Node::Group(inner) = n {
            walk(inner, &p, f);
        }
    }
}

fn fail(path: String, fault: impl Into<String>) -> TreeError {
    TreeError {
        path,
        fault: fault.into(),
    }
}

/// What a condition may count events from besides the clock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    None,
    Enrolment,
}

fn check_group(
    g: &Group,
    path: &str,
    depth: usize,
    nodes: &mut usize,
    anchor: Anchor,
) -> Result<(), TreeError> {
    if depth > MAX_DEPTH {
        return Err(fail(
            path.to_owned(),
            format!("groups nest at most {MAX_DEPTH} deep"),
        ));
    }
    for (i, n) in g.children.iter().enumerate() {
        *nodes += 1;
        let p = child_path(path, i);
        if *nodes > MAX_NODES {
            return Err(fail(
                p,
                format!("a segment holds at most {MAX_NODES} conditions and groups"),
            ));
        }
        match n {
            Node::Group(inner) => check_group(inner, &p, depth + 1, nodes, anchor)?,
            other => check_condition(other, &p, anchor)?,
        }
    }
    Ok(())
}

fn check_condition(n: &Node, path: &str, anchor: Anchor) -> Result<(), TreeError> {
    let at = |field: &str| field_path(path, field);
    match n {
        Node::Group(_) => Ok(()),
        Node::Attribute { name, test } => {
            key_name(&at("name"), name)?;
            check_value_test(test, &at("test"))
        }
        Node::List { list_id, .. } => positive_id(&at("list_id"), *list_id),
        Node::Status { .. } | Node::Source { .. } => Ok(()),
        Node::SignedUp { test } => check_date_test(test, &at("test")),
        Node::Engagement {
            campaign_id,
            within_days,
            ..
        } => {
            if let Some(c) = campaign_id {
                positive_id(&at("campaign_id"), c.0)?;
            }
            days(&at("within_days"), *within_days)
        }
        Node::Event {
            name,
            did,
            at_least,
            within_days,
            property,
            since_enrolment,
        } => {
            if *since_enrolment && anchor != Anchor::Enrolment {
                return Err(fail(
                    at("since_enrolment"),
                    "\"since enrolment\" belongs in an automation's branch: a segment has no enrolment",
                ));
            }
            super::event::event_name(&at("name"), name)
                .map_err(|e| fail(e.field.clone(), e.fault))?;
            if !(1..=TIMES_MAX).contains(at_least) {
                return Err(fail(
                    at("at_least"),
                    format!("at least 1 to {TIMES_MAX} times"),
                ));
            }
            if !did && *at_least != 1 {
                return Err(fail(
                    at("at_least"),
                    "\"never did\" takes no count (leave at_least at 1)",
                ));
            }
            days(&at("within_days"), *within_days)?;
            if let Some(p) = property {
                check_property(p, &at("property"))?;
            }
            Ok(())
        }
    }
}

fn check_value_test(t: &ValueTest, path: &str) -> Result<(), TreeError> {
    let value = |v: &str| -> Result<(), TreeError> {
        text_input(&field_path(path, "value"), v, VALUE_MAX)
            .map(drop)
            .map_err(tree)
    };
    let number = |v: f64| -> Result<(), TreeError> {
        if v.is_finite() && v.abs() <= 1e300 {
            Ok(())
        } else {
            Err(fail(
                field_path(path, "value"),
                "a number between -1e300 and 1e300",
            ))
        }
    };
    match t {
        ValueTest::Exists | ValueTest::Bool { .. } => Ok(()),
        ValueTest::TextEquals { value: v }
        | ValueTest::TextContains { value: v }
        | ValueTest::TextStartsWith { value: v } => value(v),
        ValueTest::TextIn { values } => {
            if values.is_empty() || values.len() > IN_MAX {
                return Err(fail(
                    field_path(path, "values"),
                    format!("list 1 to {IN_MAX} values"),
                ));
            }
            for (i, v) in values.iter().enumerate() {
                text_input(
                    &format!("{}[{i}]", field_path(path, "values")),
                    v,
                    VALUE_MAX,
                )
                .map_err(tree)?;
            }
            Ok(())
        }
        ValueTest::NumberEquals { value: v }
        | ValueTest::NumberLess { value: v }
        | ValueTest::NumberGreater { value: v } => number(*v),
        ValueTest::Date { test } => check_date_test(test, &field_path(path, "test")),
    }
}

fn check_date_test(t: &DateTest, path: &str) -> Result<(), TreeError> {
    match t {
        DateTest::Before { date } | DateTest::After { date } => {
            let year = chrono::Datelike::year(date);
            if super::input::YEARS.contains(&year) {
                Ok(())
            } else {
                Err(fail(
                    field_path(path, "date"),
                    format!("the year {year} is out of range"),
                ))
            }
        }
        DateTest::WithinDays { days: d } => days(&field_path(path, "days"), Some(*d)),
    }
}

fn tree(e: InputError) -> TreeError {
    fail(e.field, e.fault)
}

/// An attribute or property name: a key, taken as written (quotes, dots and `->` are part of
/// it, never syntax), 1 to [`NAME_MAX`] characters, no control character.
/// Checks a property test standing at `path` (its name and its value test).
pub fn check_property(p: &PropertyTest, path: &str) -> Result<(), TreeError> {
    key_name(&field_path(path, "name"), &p.name)?;
    check_value_test(&p.test, &field_path(path, "test"))
}

/// Checks an attribute or property name standing at `path`.
pub fn key_name(path: &str, name: &str) -> Result<(), TreeError> {
    line_input(path, name, NAME_MAX).map_err(tree)?;
    if name.is_empty() {
        return Err(fail(path.to_owned(), "a name is needed"));
    }
    Ok(())
}

fn positive_id(path: &str, id: i64) -> Result<(), TreeError> {
    if id >= 1 {
        Ok(())
    } else {
        Err(fail(path.to_owned(), "an id is 1 or more"))
    }
}

fn days(path: &str, d: Option<u32>) -> Result<(), TreeError> {
    match d {
        Some(d) if !(1..=DAYS_MAX).contains(&d) => {
            Err(fail(path.to_owned(), format!("1 to {DAYS_MAX} days")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Group {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_tree_reads_from_json_as_the_api_and_the_builder_send_it() {
        let g = parse(serde_json::json!({
            "op": "all",
            "children": [
                {"type": "attribute", "name": "plan", "test": {"op": "text_in", "values": ["pro", "team"]}},
                {"type": "event", "name": "invited_colleague", "did": false, "within_days": 30},
                {"type": "group", "op": "any", "children": [
                    {"type": "list", "list_id": 7},
                    {"type": "engagement", "what": "bounced", "campaign_id": null, "within_days": 90},
                ]},
            ]
        }));
        assert!(g.check().is_ok());
        assert_eq!(g.lists(), vec![("children[2].children[0]".into(), 7)]);
        let back: Group = serde_json::from_value(serde_json::to_value(&g).unwrap()).unwrap();
        assert_eq!(back, g);
        assert!(serde_json::from_value::<Group>(serde_json::json!({
            "op": "all", "children": [{"type": "list", "list_id": 1, "extra": 1}]
        }))
        .is_err());
    }

    #[test]
    fn each_error_names_its_node() {
        let g = parse(serde_json::json!({"op": "all", "children": [
            {"type": "status", "status": "confirmed"},
            {"type": "group", "op": "none", "children": [
                {"type": "attribute", "name": "", "test": {"op": "exists"}},
            ]},
        ]}));
        let e = g.check().unwrap_err();
        assert_eq!(e.path, "children[1].children[0].name");
        let g = parse(serde_json::json!({"op": "all", "children": [
            {"type": "event", "name": "x", "within_days": 0},
        ]}));
        assert_eq!(g.check().unwrap_err().path, "children[0].within_days");
        let g = parse(serde_json::json!({"op": "any", "children": [
            {"type": "attribute", "name": "n", "test": {"op": "text_in", "values": ["a", "b\u{0}"]}},
        ]}));
        assert_eq!(g.check().unwrap_err().path, "children[0].test.values[1]");
    }

    #[test]
    fn a_path_reads_as_a_json_pointer() {
        let e = TreeError {
            path: "children[2].children[0].test.values[1]".into(),
            fault: String::new(),
        };
        assert_eq!(
            e.pointer("#/definition"),
            "#/definition/children/2/children/0/test/values/1"
        );
        assert_eq!(
            segment_name(" ").unwrap_err(),
            "The segment's name is empty: give it a name."
        );
    }

    #[test]
    fn a_form_s_operator_and_text_read_back_as_they_were_written() {
        for (op, _) in VALUE_OPS {
            let raw = match op {
                "exists" => "",
                "text_in" => "a, b",
                "bool" => "true",
                "date_before" | "date_after" => "2026-03-01",
                o if o.starts_with("number") || o == "date_within_days" => "7",
                _ => "pro",
            };
            let t = ValueTest::from_form(op, raw).unwrap();
            assert_eq!(t.form_parts(), (op, raw.to_string()), "{op}");
        }
        assert!(ValueTest::from_form("number_less", "seven")
            .unwrap_err()
            .contains("not a number"));
        assert!(ValueTest::from_form("date_after", "1/3/2026").is_err());
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let mut g = Group {
            op: GroupOp::All,
            children: vec![],
        };
        for _ in 0..MAX_DEPTH - 1 {
            g = Group {
                op: GroupOp::Any,
                children: vec![Node::Group(g)],
            };
        }
        assert!(g.check().is_ok(), "{MAX_DEPTH} deep");
        let deeper = Group {
            op: GroupOp::All,
            children: vec![Node::Group(g)],
        };
        assert!(deeper.check().unwrap_err().fault.contains("nest"));
        let wide = Group {
            op: GroupOp::All,
            children: (0..=MAX_NODES)
                .map(|_| Node::Status {
                    status: SubscriberStatus::Confirmed,
                })
                .collect(),
        };
        assert_eq!(
            wide.check().unwrap_err().path,
            format!("children[{MAX_NODES}]")
        );
    }

    #[test]
    fn hostile_names_are_names_not_syntax() {
        for name in [
            "a'b",
            "$1",
            "x; drop table subscribers",
            "-- c",
            "a->>'b'",
            "{a,b}",
            "a.b",
        ] {
            let g = Group {
                op: GroupOp::All,
                children: vec![Node::Attribute {
                    name: name.into(),
                    test: ValueTest::Exists,
                }],
            };
            assert!(g.check().is_ok(), "{name}");
        }
        let nul = Group {
            op: GroupOp::All,
            children: vec![Node::Attribute {
                name: "a\u{0}".into(),
                test: ValueTest::Exists,
            }],
        };
        assert!(nul.check().is_err());
    }
}
