use serde::{Deserialize, Serialize};
use std::str::FromStr;

text_enum! {
    /// A campaign's state (`campaigns.status`). Every change is a compare-and-set from the states
    /// its [`Transition`] allows (DESIGN "State machines").
    pub enum CampaignStatus ("a campaign status") {
        Draft = "draft",
        Submitted = "submitted",
        Approved = "approved",
        Sending = "sending",
        Paused = "paused",
        Sent = "sent",
        Cancelled = "cancelled",
    }
}

/// A new campaign is a draft.
impl Default for CampaignStatus {
    fn default() -> Self {
        CampaignStatus::Draft
    }
}

impl CampaignStatus {
    /// The states whose content an editor may still change (saving a submitted campaign sends
    /// it back to draft).
    pub const CONTENT_EDITABLE: [CampaignStatus; 2] =
        [CampaignStatus::Draft, CampaignStatus::Submitted];

    pub fn content_editable(self) -> bool {
        Self::CONTENT_EDITABLE.contains(&self)
    }

    /// The states a campaign may be deleted (to the recycle bin) in: never while it could
    /// still send.
    pub const DELETABLE: [CampaignStatus; 3] = [
        CampaignStatus::Draft,
        CampaignStatus::Sent,
        CampaignStatus::Cancelled,
    ];

    pub fn deletable(self) -> bool {
        Self::DELETABLE.contains(&self)
    }
}

/// A change of a campaign's state: from which states it may happen, and to which it leads.
/// Sent and read by its [`Transition::verb`] (`"submit"`, …): the dashboard's forms post it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    Submit,
    Approve,
    Reject,
    /// Approved and due → sending (the worker that wins it materialises the recipients).
    Start,
    Pause,
    Resume,
    Cancel,
    /// Sending with nothing left to send → sent.
    Finish,
}

impl Transition {
    /// The states this change may start from: the `WHERE status = any(…)` of its statement.
    pub fn from(self) -> &'static [CampaignStatus] {
        use CampaignStatus::*;
        match self {
            Transition::Submit => &[Draft],
            Transition::Approve | Transition::Reject => &[Submitted],
            Transition::Start => &[Approved],
            Transition::Pause | Transition::Finish => &[Sending],
            Transition::Resume => &[Paused],
            Transition::Cancel => &[Draft, Submitted, Approved, Sending, Paused],
        }
    }

    pub fn to(self) -> CampaignStatus {
        match self {
            Transition::Submit => CampaignStatus::Submitted,
            Transition::Approve => CampaignStatus::Approved,
            Transition::Reject => CampaignStatus::Draft,
            Transition::Start | Transition::Resume => CampaignStatus::Sending,
            Transition::Pause => CampaignStatus::Paused,
            Transition::Cancel => CampaignStatus::Cancelled,
            Transition::Finish => CampaignStatus::Sent,
        }
    }

    /// The transitions an admin asks for (the others are the workers'), in the order the
    /// campaign page offers them.
    pub const BY_ADMINS: [Transition; 6] = [
        Transition::Submit,
        Transition::Approve,
        Transition::Reject,
        Transition::Pause,
        Transition::Resume,
        Transition::Cancel,
    ];

    /// An admin's transition by its name.
    pub fn from_verb(verb: &str) -> Option<Transition> {
        Self::BY_ADMINS.into_iter().find(|t| t.verb() == verb)
    }

    /// The admin's transitions legal from `s`, in the page's order.
    pub fn offered_from(s: CampaignStatus) -> impl Iterator<Item = Transition> {
        Self::BY_ADMINS
            .into_iter()
            .filter(move |t| t.allowed_from(s))
    }

    pub fn verb(self) -> &'static str {
        match self {
            Transition::Submit => "submit",
            Transition::Approve => "approve",
            Transition::Reject => "reject",
            Transition::Start => "start",
            Transition::Pause => "pause",
            Transition::Resume => "resume",
            Transition::Cancel => "cancel",
            Transition::Finish => "finish",
        }
    }

    pub fn participle(self) -> &'static str {
        match self {
            Transition::Submit => "submitted",
            Transition::Approve => "approved",
            Transition::Reject => "rejected",
            Transition::Start => "started",
            Transition::Pause => "paused",
            Transition::Resume => "resumed",
            Transition::Cancel => "cancelled",
            Transition::Finish => "finished",
        }
    }

    pub fn allowed_from(self, s: CampaignStatus) -> bool {
        self.from().contains(&s)
    }
}

/// A state change refused because the campaign is in another state (someone else changed it
/// first, or the change makes no sense from there).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot {} this campaign: it is {current} (only a {} campaign can be {})", .transition.verb(), .transition.from().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" or "), .transition.participle())]
pub struct TransitionError {
    pub transition: Transition,
    pub current: CampaignStatus,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_parses_back() {
        for s in CampaignStatus::ALL {
            assert_eq!(s.as_str().parse::<CampaignStatus>(), Ok(s));
        }
        assert!("done".parse::<CampaignStatus>().is_err());
    }

    #[test]
    fn transitions_follow_the_state_machine() {
        use CampaignStatus::*;
        assert!(Transition::Pause.allowed_from(Sending));
        assert!(!Transition::Pause.allowed_from(Paused));
        assert!(Transition::Resume.allowed_from(Paused));
        assert!(!Transition::Cancel.allowed_from(Sent));
        assert!(!Transition::Start.allowed_from(Submitted));
        assert_eq!(Transition::Reject.to(), Draft);
    }

    #[test]
    fn a_refusal_names_the_current_state() {
        let e = TransitionError {
            transition: Transition::Pause,
            current: CampaignStatus::Sent,
        };
        assert_eq!(
            e.to_string(),
            "cannot pause this campaign: it is sent (only a sending campaign can be paused)"
        );
    }
}

/// How a campaign's body is written. Markdown goes out as text (the source) and HTML (rendered);
/// HTML goes out as HTML. Stored as text (`campaigns.body_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    #[default]
    Markdown,
    Html,
}

impl BodyFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            BodyFormat::Markdown => "markdown",
            BodyFormat::Html => "html",
        }
    }
}

impl FromStr for BodyFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "markdown" => Ok(BodyFormat::Markdown),
            "html" => Ok(BodyFormat::Html),
            other => Err(format!(
                "The body format {:?} is not one of markdown or html.",
                super::input::excerpt(other)
            )),
        }
    }
}

stored_as_text!(BodyFormat);

/// A draft's editable content, checked: a name of 1–200 characters, a one-line subject of at
/// most 300, a body of at most 200,000, and a schedule (`YYYY-MM-DDTHH:MM`, the org's local
/// time) or none (as soon as approved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CampaignContent {
    pub name: String,
    pub subject: String,
    pub body: String,
    pub format: BodyFormat,
    pub schedule: Option<String>,
}

impl CampaignContent {
    pub fn parse(
        name: &str,
        subject: &str,
        body: &str,
        format: &str,
        schedule: &str,
    ) -> Result<Self, String> {
        let format: BodyFormat = match format.trim() {
            "" => BodyFormat::default(),
            f => f.parse()?,
        };
        let name = name.trim();
        if name.is_empty() {
            return Err("The name is empty: give the campaign a name.".into());
        }
        if name.chars().count() > 200 {
            return Err("The name is too long (at most 200 characters).".into());
        }
        if name.chars().any(super::text::hidden_control) {
            return Err(super::text::hidden_control_message("The name"));
        }
        let subject = subject.trim();
        if subject.contains(['\r', '\n']) {
            return Err("The subject must be one line.".into());
        }
        if subject.chars().count() > 300 {
            return Err("The subject is too long (at most 300 characters).".into());
        }
        if body.chars().count() > 200_000 {
            return Err("The body is too long (at most 200,000 characters).".into());
        }
        // The lengths are checked above, in this type's own words.
        for (field, text) in [("Subject", subject), ("Body", body)] {
            super::input::text_input(field, text, usize::MAX).map_err(|e| format!("{e}."))?;
        }
        let schedule = schedule.trim();
        let schedule = if schedule.is_empty() {
            None
        } else {
            // Written back in the one form the statement reads (chrono also takes `+2030`,
            // `2030-1-2T9:30`), and only in the years PostgreSQL places in the org's zone.
            let at = super::input::time_input("Scheduled time", schedule, "%Y-%m-%dT%H:%M")
                .map_err(|e| format!("{e}."))?;
            Some(at.format("%Y-%m-%dT%H:%M").to_string())
        };
        Ok(CampaignContent {
            name: name.into(),
            subject: subject.into(),
            body: body.replace("\r\n", "\n"),
            format,
            schedule,
        })
    }
}

#[cfg(test)]
mod content_tests {
    use super::*;

    #[test]
    fn content_is_checked_with_messages_that_name_the_field() {
        assert!(CampaignContent::parse("Sale \u{202E}gnp", "", "", "", "")
            .unwrap_err()
            .contains("text-direction overrides"));
        let ok = CampaignContent::parse(
            " Launch ",
            "Hi {{ name }}",
            "a\r\nb",
            "",
            "2030-01-02T09:30",
        )
        .unwrap();
        assert_eq!(ok.name, "Launch");
        assert_eq!(ok.body, "a\nb");
        assert_eq!(ok.schedule.as_deref(), Some("2030-01-02T09:30"));
        assert_eq!(
            CampaignContent::parse("x", "", "", "", "")
                .unwrap()
                .schedule,
            None
        );
        let err = |n: &str, s: &str, b: &str, t: &str| {
            CampaignContent::parse(n, s, b, "", t).unwrap_err()
        };
        assert!(err(" ", "", "", "").contains("name is empty"));
        assert!(err(&"n".repeat(201), "", "", "").contains("name is too long"));
        assert!(err("x", "a\nb", "", "").contains("one line"));
        assert!(err("x", &"s".repeat(301), "", "").contains("subject is too long"));
        assert!(err("x", "", "\0", "").contains("NUL"));
        assert!(err("x", "", "", "tomorrow").contains("\"tomorrow\" is not a date"));
        for far in ["+12345-01-01T00:00", "-0044-03-15T12:00"] {
            assert!(
                err("x", "", "", far).starts_with("Scheduled time: the year"),
                "{far}"
            );
        }
        assert!(err("x", "a\0", "", "").starts_with("Subject: a NUL"));
        let odd = CampaignContent::parse("x", "", "", "", "2030-1-2T9:30").unwrap();
        assert_eq!(odd.schedule.as_deref(), Some("2030-01-02T09:30"));
        let html = CampaignContent::parse("x", "", "<p>hi</p>", "html", "").unwrap();
        assert_eq!(html.format, BodyFormat::Html);
        assert_eq!(ok.format, BodyFormat::Markdown, "markdown unless said");
        assert!(CampaignContent::parse("x", "", "", "rtf", "")
            .unwrap_err()
            .contains("\"rtf\" is not one of markdown or html"));
    }

    #[test]
    fn admins_ask_for_their_transitions_by_name_only() {
        for t in [
            Transition::Submit,
            Transition::Approve,
            Transition::Reject,
            Transition::Start,
            Transition::Pause,
            Transition::Resume,
            Transition::Cancel,
            Transition::Finish,
        ] {
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::from(t.verb()),
                "a transition travels as its verb"
            );
        }
        assert_eq!(Transition::from_verb("approve"), Some(Transition::Approve));
        assert_eq!(
            Transition::from_verb("start"),
            None,
            "a worker's transition"
        );
        assert_eq!(Transition::from_verb("finish"), None);
        assert_eq!(Transition::from_verb("delete"), None);
    }
}
