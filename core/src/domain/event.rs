//! What the sending SaaS tells Mailroom about its people: events (a name, properties, when it
//! happened, the caller's own id for the event) and its own ids for the people themselves.
//! The rules here are the edge's: the API checks each row with them before a statement sees
//! it, and a segment naming an event or an external id is held to the same words.

use chrono::{DateTime, Duration, Utc};

use super::input::{json_input, line_input, InputError, YEARS};
use super::{idempotency_key, EmailAddress, SubscriberId};

/// The most events one request may carry.
pub const EVENTS_MAX: usize = 1_000;
/// The longest event name, in characters.
pub const EVENT_NAME_MAX: usize = 100;
/// The largest properties object of one event, as JSON.
pub const PROPERTIES_MAX_BYTES: usize = 16 * 1024;
/// The longest external id, in characters.
pub const EXTERNAL_ID_MAX: usize = 200;
/// How far ahead of the server's clock an event may say it happened (clocks drift; a day
/// further is a mistake in the caller's units or zone).
pub const FUTURE_SLACK_HOURS: i64 = 24;
/// How long an org keeps events when it has not said otherwise.
pub const DEFAULT_RETENTION_DAYS: i32 = 400;
/// The shortest and longest retention an org may choose (the column's check says the same).
pub const RETENTION_DAYS: std::ops::RangeInclusive<i32> = 1..=3650;

/// How many days an org keeps its events, as a form sends it: a whole number of days within
/// [`RETENTION_DAYS`].
pub fn retention_days(field: &str, raw: &str) -> Result<i32, InputError> {
    let (low, high) = (RETENTION_DAYS.start(), RETENTION_DAYS.end());
    raw.trim()
        .parse::<i32>()
        .ok()
        .filter(|d| RETENTION_DAYS.contains(d))
        .ok_or_else(|| {
            InputError::new(
                field,
                format!("a whole number of days from {low} to {high}"),
            )
        })
}

/// How a request names the subscriber an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscriberRef {
    Id(SubscriberId),
    Email(EmailAddress),
    External(String),
}

/// What to do with an event about someone who is not a subscriber.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownSubscribers {
    /// The row is refused, naming the reference.
    #[default]
    Refuse,
    /// A subscriber named by address is created (unconfirmed, on no list: no campaign
    /// reaches them until they confirm); one named by id or external id is still refused.
    Create,
}

/// An event's name: 1 to [`EVENT_NAME_MAX`] characters, none of them a control character or
/// a space at either end (`signed_up`, `Invited a colleague`).
pub fn event_name(field: &str, raw: &str) -> Result<String, InputError> {
    let name = line_input(field, raw, EVENT_NAME_MAX)?;
    if name.trim().is_empty() {
        return Err(InputError::new(field, "an event needs a name"));
    }
    if name.trim() != name {
        return Err(InputError::new(
            field,
            "an event's name may not start or end with a space",
        ));
    }
    Ok(name.to_owned())
}

/// The caller's id for an event, its identity: as an `Idempotency-Key`, 1 to 200 visible
/// ASCII characters.
pub fn event_key(field: &str, raw: &str) -> Result<String, InputError> {
    idempotency_key(raw).map(str::to_owned).map_err(|_| {
        InputError::new(
            field,
            "an event id is 1 to 200 visible ASCII characters (no spaces)",
        )
    })
}

/// The SaaS's own id for a subscriber: 1 to [`EXTERNAL_ID_MAX`] characters, no control
/// character, no space at either end.
pub fn external_id(field: &str, raw: &str) -> Result<String, InputError> {
    let id = line_input(field, raw, EXTERNAL_ID_MAX)?;
    if id.is_empty() || id.trim() != id {
        return Err(InputError::new(
            field,
            "an external id is 1 to 200 characters with no space at either end",
        ));
    }
    Ok(id.to_owned())
}

/// An event's properties: a JSON object `jsonb` can hold, at most [`PROPERTIES_MAX_BYTES`].
pub fn properties(field: &str, value: &serde_json::Value) -> Result<(), InputError> {
    if !value.is_object() {
        return Err(InputError::new(field, "must be a JSON object"));
    }
    json_input(field, value)?;
    let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
    if size > PROPERTIES_MAX_BYTES {
        return Err(InputError::new(
            field,
            format!("too large ({size} bytes as JSON; at most {PROPERTIES_MAX_BYTES})"),
        ));
    }
    Ok(())
}

/// When an event happened: an RFC 3339 time (with its offset), no further ahead of `now`
/// than [`FUTURE_SLACK_HOURS`] and no older than the org keeps events (an event retention
/// would delete at once, and a retry would then store again).
pub fn occurred_at(
    field: &str,
    raw: &str,
    now: DateTime<Utc>,
    retention_days: i32,
) -> Result<DateTime<Utc>, InputError> {
    let t = DateTime::parse_from_rfc3339(raw)
        .map_err(|_| {
            InputError::new(
                field,
                format!(
                    "{:?} is not an RFC 3339 time such as 2026-12-05T09:30:00Z",
                    super::input::excerpt(raw)
                ),
            )
        })?
        .with_timezone(&Utc);
    let year = chrono::Datelike::year(&t);
    if !YEARS.contains(&year) {
        return Err(InputError::new(
            field,
            format!("the year {year} is out of range"),
        ));
    }
    if t > now + Duration::hours(FUTURE_SLACK_HOURS) {
        return Err(InputError::new(
            field,
            format!("more than {FUTURE_SLACK_HOURS} hours in the future"),
        ));
    }
    if t < now - Duration::days(i64::from(retention_days)) {
        return Err(InputError::new(
            field,
            format!("older than this organisation keeps events ({retention_days} days)"),
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn names_keys_and_external_ids_are_held_to_their_words() {
        assert_eq!(event_name("name", "signed_up").unwrap(), "signed_up");
        assert!(event_name("name", "").is_err());
        assert!(event_name("name", " padded").is_err());
        assert!(event_name("name", "tab\there").is_err());
        assert!(event_name("name", &"n".repeat(EVENT_NAME_MAX + 1)).is_err());
        assert!(event_key("id", "evt_1:a/b").is_ok());
        assert!(event_key("id", "has space").is_err());
        assert!(external_id("external_id", "user-42").is_ok());
        assert!(external_id("external_id", "").is_err());
        assert!(external_id("external_id", "nul\0").is_err());
    }

    #[test]
    fn a_time_is_rfc3339_within_the_future_slack_and_the_retention() {
        let t = occurred_at("at", "2026-06-01T14:00:00+02:00", now(), 400).unwrap();
        assert_eq!(t, now());
        let e = occurred_at("at", "2026-06-03T12:00:00Z", now(), 400).unwrap_err();
        assert!(e.fault.contains("future"), "{e}");
        let e = occurred_at("at", "2025-04-01T00:00:00Z", now(), 400).unwrap_err();
        assert!(e.fault.contains("400 days"), "{e}");
        assert!(occurred_at("at", "2026-06-01 12:00", now(), 400).is_err());
        assert!(occurred_at("at", "+12345-01-01T00:00:00Z", now(), 400).is_err());
    }

    #[test]
    fn properties_are_a_storable_object_of_bounded_size() {
        assert!(properties("p", &serde_json::json!({"plan": "pro"})).is_ok());
        assert!(properties("p", &serde_json::json!([1])).is_err());
        assert!(properties("p", &serde_json::json!({"k": "a\u{0}"})).is_err());
        let big = "x".repeat(PROPERTIES_MAX_BYTES);
        assert!(properties("p", &serde_json::json!({ "k": big })).is_err());
    }
}
