//! An automation: lifecycle mail in steps (a welcome series, a nudge when something did not
//! happen), each step taken once per person (DESIGN guarantee 14).
//!
//! Its definition is one typed value (serde; shared by the dashboard, the API and the
//! database layer): what enrols people (the trigger), whether someone may be enrolled again
//! (the re-entry rule), the goal event that ends their way early, and the steps. Checked once,
//! at the edge, with each error naming its field (`steps[2].condition.children[0].name`).
//!
//! What a step means is said here, once:
//! - a mail step queues one message, whose job id is `automation:<org>:<enrolment>:<step>`;
//! - a wait for a duration resumes that long after the wait was reached; a wait until an hour
//!   (on a weekday, when given) resumes at the next such local time strictly after it was
//!   reached, in the zone of the subscriber's `timezone` attribute when PostgreSQL knows that
//!   zone, else the org's. A local time a spring-forward skips is read as the clock before the
//!   change reads it (02:30 becomes 03:30); one a fall-back repeats is its later occurrence;
//! - a branch goes forward only (to a later step, or to the end), so no step is visited twice;
//! - before every step the person leaves if the goal event happened since they were enrolled,
//!   if their address is suppressed for any reason (an unsubscribe included), or if they were
//!   erased.

use serde::{Deserialize, Serialize};

use super::input::{line_input, text_input};
use super::segment::{check_property, key_name, Group, PropertyTest, TreeError};
use super::BodyFormat;

/// The most steps an automation may have.
pub const STEPS_MAX: usize = 50;
/// The longest wait, in minutes (one year).
pub const WAIT_MAX_MINUTES: u64 = 366 * 24 * 60;
/// The longest mail subject and body, in characters.
pub const SUBJECT_MAX: usize = 200;
pub const BODY_MAX: usize = 100_000;
/// The attribute a subscriber's own time zone is read from.
pub const TIMEZONE_ATTRIBUTE: &str = "timezone";

text_enum! {
    /// An automation's state (`automations.status`).
    pub enum AutomationStatus ("an automation status") {
        /// Never approved: nobody is enrolled.
        Draft = "draft",
        /// Enrols people and takes their steps.
        Active = "active",
        /// Still enrols people, but takes no step until resumed.
        Paused = "paused",
        /// Ended for good: every enrolment was stopped, nobody is enrolled again.
        Stopped = "stopped",
    }
}

impl AutomationStatus {
    /// Its triggers enrol people.
    pub fn enrols(self) -> bool {
        matches!(self, AutomationStatus::Active | AutomationStatus::Paused)
    }
}

text_enum! {
    /// Whether someone may be enrolled again (`automations.reentry`).
    pub enum Reentry ("a re-entry rule") {
        /// Once ever, whatever triggers again.
        Once = "once",
        /// Once for each triggering event, list join or API enrolment, even at the same time.
        PerTrigger = "per_trigger",
        /// Again after their last enrolment ended, never two at a time.
        AfterLeaving = "after_leaving",
    }
}

text_enum! {
    /// Where one person's way through an automation stands (`enrolments.state`).
    pub enum EnrolmentState ("an enrolment state") {
        Active = "active",
        /// Every step was taken.
        Completed = "completed",
        /// They left before the end (see the [`ExitReason`]).
        Exited = "exited",
        /// The automation was stopped.
        Stopped = "stopped",
    }
}

text_enum! {
    /// Why someone left an automation before its end (`enrolments.exit_reason`).
    pub enum ExitReason ("an exit reason") {
        /// The goal event happened.
        Goal = "goal",
        /// Their address is suppressed (they unsubscribed, bounced, complained, or an admin
        /// suppressed it).
        Unsubscribed = "unsubscribed",
        /// They were erased.
        Erased = "erased",
        /// An admin or the API took them out.
        Removed = "removed",
        /// A branch sent them to the exit.
        Branch = "branch",
        /// The automation was stopped.
        Stopped = "stopped",
        /// They reached an exit step.
        Step = "step",
        /// The database refused one of their steps (the server log says why); the others in
        /// the same batch went on.
        Failed = "failed",
    }
}

text_enum! {
    /// What became of one step for one person (`enrolment_steps.outcome`).
    pub enum StepOutcome ("a step outcome") {
        /// Its mail was queued.
        Sent = "sent",
        /// Not taken: the detail says why.
        Skipped = "skipped",
        Waited = "waited",
        Branched = "branched",
        /// An attribute was set.
        Set = "set",
        /// Added to a list.
        Listed = "listed",
        /// Removed from a list.
        Unlisted = "unlisted",
        /// They left here.
        Exited = "exited",
    }
}

/// What enrols people.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// Joining a list (a double opt-in counts when it is confirmed).
    ListJoined { list_id: i64 },
    /// An event from the events API, by name, with a property condition.
    Event {
        name: String,
        #[serde(default)]
        property: Option<PropertyTest>,
    },
    /// Only the API (and the dashboard) enrol people.
    Api,
    /// A date in an attribute (`YYYY-MM-DD…`, as segments read dates): `offset_days` after it
    /// (before it when negative), in the org's calendar; with `yearly`, on every anniversary
    /// (a 29 February one on 28 February in other years).
    Date {
        attribute: String,
        #[serde(default)]
        offset_days: i32,
        #[serde(default)]
        yearly: bool,
    },
    /// Entering a saved segment: matching it at a scan after not matching it at the one
    /// before. The first scan of a segment version only notes who matches, so switching the
    /// automation on enrols nobody who already did. `version` is the segment's version when
    /// this automation version was saved (the server sets it): an edit of the segment reaches
    /// the automation through a new, approved automation version, as everything it sends does.
    SegmentEntered {
        segment_id: i64,
        #[serde(default)]
        version: Option<i32>,
    },
}

/// The longest a date trigger may reach before or after its date, in days.
pub const DATE_OFFSET_MAX: i32 = 3_650;

impl Trigger {
    /// Its name as stored in `automations.trigger_kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::ListJoined { .. } => "list_joined",
            Trigger::Event { .. } => "event",
            Trigger::Api => "api",
            Trigger::Date { .. } => "date",
            Trigger::SegmentEntered { .. } => "segment_entered",
        }
    }
}

/// An event that ends someone's way early: they reached what the automation was for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    pub event: String,
    #[serde(default)]
    pub property: Option<PropertyTest>,
}

/// A day of the week, for waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weekday {
    Sunday,
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
}

impl Weekday {
    /// PostgreSQL's `extract(dow …)`: 0 is Sunday.
    pub fn dow(self) -> i32 {
        self as i32
    }
}

/// Where a branch goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jump {
    /// The step after the branch.
    Next,
    /// A later step (by index; the number of steps is the end).
    GoTo(usize),
    /// They leave the automation.
    Exit,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A mail, personalised like a campaign's (`{{ name }}`, `{{ email }}`,
    /// `{{ unsubscribe_url }}`) and by `{{ attributes.* }}` and the triggering event's
    /// `{{ event.* }}` properties.
    Email {
        subject: String,
        body: String,
        #[serde(default)]
        format: BodyFormat,
    },
    /// Waits a duration.
    Wait {
        #[serde(default)]
        days: u32,
        #[serde(default)]
        hours: u32,
        #[serde(default)]
        minutes: u32,
    },
    /// Waits until the next `hour` o'clock (on `weekday`, when given), in the subscriber's
    /// time zone, else the org's.
    WaitUntil {
        #[serde(default)]
        weekday: Option<Weekday>,
        hour: u8,
    },
    /// Goes where the condition (the segment language, evaluated for this person now) says.
    Branch {
        condition: Group,
        #[serde(default = "next")]
        then: Jump,
        #[serde(default = "next", rename = "else")]
        otherwise: Jump,
    },
    /// Sets one of the subscriber's attributes.
    SetAttribute {
        name: String,
        value: serde_json::Value,
    },
    AddToList {
        list_id: i64,
    },
    RemoveFromList {
        list_id: i64,
    },
    /// They leave here.
    Exit,
}

fn next() -> Jump {
    Jump::Next
}

impl Step {
    /// The wait's length in minutes, for a duration wait.
    pub fn wait_minutes(&self) -> Option<u64> {
        match *self {
            Step::Wait {
                days,
                hours,
                minutes,
            } => Some(u64::from(days) * 1440 + u64::from(hours) * 60 + u64::from(minutes)),
            _ => None,
        }
    }

    /// What the dashboard calls it.
    pub fn describe(&self) -> String {
        match self {
            Step::Email { subject, .. } => format!("Send “{subject}”"),
            Step::Wait { .. } => {
                let m = self.wait_minutes().unwrap_or(0);
                let (d, h, mm) = (m / 1440, m / 60 % 24, m % 60);
                let mut parts = Vec::new();
                if d > 0 {
                    parts.push(format!("{d} d"));
                }
                if h > 0 {
                    parts.push(format!("{h} h"));
                }
                if mm > 0 {
                    parts.push(format!("{mm} min"));
                }
                format!("Wait {}", parts.join(" "))
            }
            Step::WaitUntil { weekday, hour } => match weekday {
                Some(w) => format!("Wait until {w:?} {hour:02}:00 (their time)"),
                None => format!("Wait until {hour:02}:00 (their time)"),
            },
            Step::Branch { .. } => "Branch on a condition".into(),
            Step::SetAttribute { name, .. } => format!("Set the attribute “{name}”"),
            Step::AddToList { list_id } => format!("Add to list {list_id}"),
            Step::RemoveFromList { list_id } => format!("Remove from list {list_id}"),
            Step::Exit => "Exit".into(),
        }
    }
}

/// An automation's whole definition, one version of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub trigger: Trigger,
    pub reentry: Reentry,
    #[serde(default)]
    pub goal: Option<Goal>,
    pub steps: Vec<Step>,
}

fn fail(path: impl Into<String>, fault: impl Into<String>) -> TreeError {
    TreeError {
        path: path.into(),
        fault: fault.into(),
    }
}

fn under(path: &str, e: TreeError) -> TreeError {
    let path = if e.path.is_empty() {
        path.to_owned()
    } else {
        format!("{path}.{}", e.path)
    };
    fail(path, e.fault)
}

fn event(path: &str, name: &str) -> Result<(), TreeError> {
    super::event::event_name(path, name)
        .map(drop)
        .map_err(|e| fail(e.field, e.fault))
}

impl Definition {
    /// Checks every part; the error names the field it is about.
    pub fn check(&self) -> Result<(), TreeError> {
        match &self.trigger {
            Trigger::ListJoined { list_id } if *list_id < 1 => {
                return Err(fail("trigger.list_id", "an id is 1 or more"))
            }
            Trigger::SegmentEntered { segment_id, .. } if *segment_id < 1 => {
                return Err(fail("trigger.segment_id", "an id is 1 or more"))
            }
            Trigger::Event { name, property } => {
                event("trigger.name", name)?;
                if let Some(p) = property {
                    check_property(p, "trigger.property")?;
                }
            }
            Trigger::Date {
                attribute,
                offset_days,
                ..
            } => {
                key_name("trigger.attribute", attribute)?;
                if offset_days.abs() > DATE_OFFSET_MAX {
                    return Err(fail(
                        "trigger.offset_days",
                        format!("at most {DATE_OFFSET_MAX} days before or after"),
                    ));
                }
            }
            _ => {}
        }
        if let Some(g) = &self.goal {
            event("goal.event", &g.event)?;
            if let Some(p) = &g.property {
                check_property(p, "goal.property")?;
            }
        }
        if self.steps.is_empty() || self.steps.len() > STEPS_MAX {
            return Err(fail("steps", format!("1 to {STEPS_MAX} steps")));
        }
        let end = self.steps.len();
        for (i, s) in self.steps.iter().enumerate() {
            let at = |f: &str| format!("steps[{i}].{f}");
            match s {
                Step::Email { subject, body, .. } => {
                    let subject = line_input(&at("subject"), subject, SUBJECT_MAX)
                        .map_err(|e| fail(e.field, e.fault))?;
                    if subject.trim().is_empty() {
                        return Err(fail(at("subject"), "a mail needs a subject"));
                    }
                    let body = text_input(&at("body"), body, BODY_MAX)
                        .map_err(|e| fail(e.field, e.fault))?;
                    if body.trim().is_empty() {
                        return Err(fail(at("body"), "a mail needs a body"));
                    }
                }
                Step::Wait { .. } => {
                    let m = s.wait_minutes().unwrap_or(0);
                    if m == 0 || m > WAIT_MAX_MINUTES {
                        return Err(fail(
                            format!("steps[{i}]"),
                            "a wait lasts 1 minute to 366 days",
                        ));
                    }
                }
                Step::WaitUntil { hour, .. } => {
                    if *hour > 23 {
                        return Err(fail(at("hour"), "an hour is 0 to 23"));
                    }
                }
                Step::Branch {
                    condition,
                    then,
                    otherwise,
                } => {
                    condition
                        .check_enrolled()
                        .map_err(|e| under(&at("condition"), e))?;
                    for (field, j) in [("then", then), ("else", otherwise)] {
                        if let Jump::GoTo(to) = j {
                            if *to <= i || *to > end {
                                return Err(fail(
                                    at(field),
                                    format!(
                                        "a branch goes forward: to a step after {i}, or to {end} (the end)"
                                    ),
                                ));
                            }
                        }
                    }
                }
                Step::SetAttribute { name, value } => {
                    key_name(&at("name"), name)?;
                    if name == TIMEZONE_ATTRIBUTE && !value.is_string() {
                        return Err(fail(at("value"), "a time zone is text"));
                    }
                    super::input::json_input(&at("value"), value)
                        .map_err(|e| fail(e.field, e.fault))?;
                    if value.to_string().len() > 10_000 {
                        return Err(fail(at("value"), "at most 10,000 characters of JSON"));
                    }
                }
                Step::AddToList { list_id } | Step::RemoveFromList { list_id } => {
                    if *list_id < 1 {
                        return Err(fail(at("list_id"), "an id is 1 or more"));
                    }
                }
                Step::Exit => {}
            }
        }
        Ok(())
    }

    /// Every branch's condition, with its field.
    pub fn conditions(&self) -> Vec<(String, &Group)> {
        self.steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Step::Branch { condition, .. } => {
                    Some((format!("steps[{i}].condition"), condition))
                }
                _ => None,
            })
            .collect()
    }

    /// Every list id it names (its trigger's, its steps', its branches'), with the field.
    pub fn lists(&self) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        if let Trigger::ListJoined { list_id } = self.trigger {
            out.push(("trigger.list_id".to_owned(), list_id));
        }
        for (i, s) in self.steps.iter().enumerate() {
            match s {
                Step::AddToList { list_id } | Step::RemoveFromList { list_id } => {
                    out.push((format!("steps[{i}].list_id"), *list_id))
                }
                Step::Branch { condition, .. } => out.extend(
                    condition
                        .lists()
                        .into_iter()
                        .map(|(p, id)| (format!("steps[{i}].condition.{p}"), id)),
                ),
                _ => {}
            }
        }
        out
    }

    /// The mail steps, by index.
    pub fn mails(&self) -> impl Iterator<Item = (usize, &Step)> {
        self.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Step::Email { .. }))
    }
}

/// The org's quiet hours for automation mail: from `start` o'clock to `end` o'clock, local
/// time (past midnight when `start > end`). Written `22-07`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuietHours {
    pub start: u8,
    pub end: u8,
}

impl QuietHours {
    /// Reads `HH-HH` (`22-07`); an empty text is no quiet hours. The error names the field.
    pub fn parse(field: &str, raw: &str) -> Result<Option<QuietHours>, super::input::InputError> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(None);
        }
        let bad = || {
            super::input::InputError::new(
                field,
                "give two different hours as HH-HH, such as 22-07 (from 22:00 to 07:00)",
            )
        };
        let (a, b) = raw.split_once('-').ok_or_else(bad)?;
        let hour = |s: &str| -> Option<u8> {
            (s.len() == 2)
                .then(|| s.parse::<u8>().ok())
                .flatten()
                .filter(|h| *h < 24)
        };
        let (start, end) = (hour(a).ok_or_else(bad)?, hour(b).ok_or_else(bad)?);
        if start == end {
            return Err(bad());
        }
        Ok(Some(QuietHours { start, end }))
    }

    /// Whether `hour` (local) is inside them.
    pub fn covers(self, hour: u8) -> bool {
        if self.start < self.end {
            (self.start..self.end).contains(&hour)
        } else {
            hour >= self.start || hour < self.end
        }
    }
}

impl std::fmt::Display for QuietHours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}-{:02}", self.start, self.end)
    }
}

/// What taking one step decided, for the database layer to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Move {
    /// Go on to `next` now.
    Continue { next: usize },
    /// Sleep, then go on to `next`.
    Sleep { next: usize, wait: Sleep },
    /// They leave.
    Leave(ExitReason),
}

/// How long a wait sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sleep {
    Minutes(u64),
    Until { dow: Option<i32>, hour: i32 },
}

/// Where a branch's jump lands, from step `at`.
pub fn land(at: usize, j: Jump) -> Option<usize> {
    match j {
        Jump::Next => Some(at + 1),
        Jump::GoTo(to) => Some(to),
        Jump::Exit => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Definition {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_welcome_series_reads_from_json_and_checks() {
        let d = parse(serde_json::json!({
            "trigger": {"type": "list_joined", "list_id": 3},
            "reentry": "once",
            "goal": {"event": "upgraded"},
            "steps": [
                {"type": "email", "subject": "Welcome {{ name }}", "body": "Hi"},
                {"type": "wait", "days": 2},
                {"type": "branch", "condition": {"op": "all", "children": [
                    {"type": "event", "name": "invited", "within_days": 3}]},
                 "then": {"go_to": 4}},
                {"type": "email", "subject": "Invite a colleague", "body": "…"},
                {"type": "wait_until", "weekday": "monday", "hour": 9},
                {"type": "set_attribute", "name": "onboarded", "value": true},
                {"type": "exit"}
            ]
        }));
        assert_eq!(d.check(), Ok(()));
        assert_eq!(d.mails().count(), 2);
        assert_eq!(d.lists(), vec![("trigger.list_id".to_owned(), 3)]);
        assert_eq!(d.steps[1].wait_minutes(), Some(2 * 1440));
    }

    #[test]
    fn faults_name_their_field() {
        let mut d = parse(serde_json::json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "steps": [{"type": "wait"}]
        }));
        assert_eq!(d.check().unwrap_err().path, "steps[0]");
        d.steps = vec![
            Step::Exit,
            Step::Branch {
                condition: Group {
                    op: super::super::segment::GroupOp::All,
                    children: vec![],
                },
                then: Jump::GoTo(1),
                otherwise: Jump::Next,
            },
        ];
        assert_eq!(d.check().unwrap_err().path, "steps[1].then");
        d.steps[1] = Step::Branch {
            condition: Group {
                op: super::super::segment::GroupOp::All,
                children: vec![super::super::segment::Node::Attribute {
                    name: String::new(),
                    test: super::super::segment::ValueTest::Exists,
                }],
            },
            then: Jump::GoTo(2),
            otherwise: Jump::Exit,
        };
        assert_eq!(
            d.check().unwrap_err().path,
            "steps[1].condition.children[0].name"
        );
        d.steps = vec![Step::WaitUntil {
            weekday: None,
            hour: 24,
        }];
        assert_eq!(d.check().unwrap_err().path, "steps[0].hour");
        d.steps = vec![];
        assert_eq!(d.check().unwrap_err().path, "steps");
        // Unknown fields and step types are refused when read.
        assert!(serde_json::from_value::<Definition>(serde_json::json!({
            "trigger": {"type": "api"}, "reentry": "once",
            "steps": [{"type": "sms", "text": "x"}]
        }))
        .is_err());
    }

    #[test]
    fn quiet_hours_read_back_and_wrap_past_midnight() {
        let q = QuietHours::parse("q", "22-07").unwrap().unwrap();
        assert_eq!(q.to_string(), "22-07");
        assert!(q.covers(23) && q.covers(0) && q.covers(6));
        assert!(!q.covers(7) && !q.covers(21));
        let day = QuietHours::parse("q", "12-14").unwrap().unwrap();
        assert!(day.covers(13) && !day.covers(14) && !day.covers(11));
        assert_eq!(QuietHours::parse("q", " ").unwrap(), None);
        for bad in ["7-22", "22-22", "24-01", "22:07", "x"] {
            assert_eq!(QuietHours::parse("q", bad).unwrap_err().field, "q", "{bad}");
        }
    }

    #[test]
    fn jumps_land_forward_or_nowhere() {
        assert_eq!(land(2, Jump::Next), Some(3));
        assert_eq!(land(2, Jump::GoTo(5)), Some(5));
        assert_eq!(land(2, Jump::Exit), None);
        assert_eq!(
            serde_json::to_value(Jump::GoTo(4)).unwrap(),
            serde_json::json!({"go_to": 4})
        );
    }
}
