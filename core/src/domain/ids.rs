//! Row ids as types of their own, so that a function taking an organisation, a campaign and a
//! user cannot be handed them in the wrong order. Each is the `bigint` of its table; on the
//! server it reads and writes itself as that column (and arrays of it).

macro_rules! id_type {
    ($($(#[$meta:meta])* $t:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            serde::Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(feature = "ssr", derive(sqlx::Type), sqlx(transparent))]
        pub struct $t(pub i64);

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $t {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map($t)
            }
        }

        impl From<$t> for i64 {
            fn from(id: $t) -> i64 {
                id.0
            }
        }
    )+};
}

id_type! {
    /// An organisation (`orgs.id`): the scope of every other row.
    OrgId,
    /// A campaign (`campaigns.id`).
    CampaignId,
    /// A subscriber (`subscribers.id`).
    SubscriberId,
    /// A user of the dashboard (`users.id`).
    UserId,
    /// One org's digest for one week (`digest_sends.id`).
    DigestSendId,
    /// A transactional message sent through the API (`tx_messages.id`).
    TxMessageId,
    /// A pending or confirmed double opt-in (`signups.id`).
    SignupId,
    /// A notice Mailroom sends an org's owners about their account (`notices.id`).
    NoticeId,
    /// An automation (`automations.id`).
    AutomationId,
    /// One person's way through an automation (`enrolments.id`).
    EnrolmentId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_and_parse_as_their_number() {
        assert_eq!(CampaignId(42).to_string(), "42");
        assert_eq!("42".parse::<CampaignId>().unwrap(), CampaignId(42));
        assert!("4x".parse::<OrgId>().is_err());
        assert_eq!(serde_json::to_string(&UserId(7)).unwrap(), "7");
    }
}
