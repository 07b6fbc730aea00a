use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A campaign's state (`campaigns.status`). Every change is a compare-and-set from the states
/// its [`Transition`] allows (DESIGN "State machines").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CampaignStatus {
    Draft,
    Submitted,
    Approved,
    Sending,
    Paused,
    Sent,
    Cancelled,
}

impl CampaignStatus {
    pub const ALL: [CampaignStatus; 7] = [
        CampaignStatus::Draft,
        CampaignStatus::Submitted,
        CampaignStatus::Approved,
        CampaignStatus::Sending,
        CampaignStatus::Paused,
        CampaignStatus::Sent,
        CampaignStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CampaignStatus::Draft => "draft",
            CampaignStatus::Submitted => "submitted",
            CampaignStatus::Approved => "approved",
            CampaignStatus::Sending => "sending",
            CampaignStatus::Paused => "paused",
            CampaignStatus::Sent => "sent",
            CampaignStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for CampaignStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CampaignStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CampaignStatus::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("“{s}” is not a campaign status"))
    }
}

/// A change of a campaign's state: from which states it may happen, and to which it leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
