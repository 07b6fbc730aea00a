//! The one rule for every text and time a request brings, server functions and the REST API
//! alike, applied at the edge before the value reaches a statement. PostgreSQL answers an error,
//! not a refusal, for a NUL character in text or in `jsonb`, and for a date whose year it cannot
//! place in a time zone; a value longer than any real one only costs. So each is refused here
//! with a 4xx that names the field, and a refusal quotes at most a short excerpt of what was
//! sent: an error never carries an input back whole.

use std::borrow::Cow;
use std::ops::RangeInclusive;

/// The most characters of a refused value a message quotes (then "…").
pub const EXCERPT_CHARS: usize = 40;

/// The most characters of any error message sent back (then "…"): the backstop for messages
/// that quote what they were given.
pub const MESSAGE_MAX_CHARS: usize = 2_000;

/// The years a date may fall in. chrono parses signed years of any length (`+12345`,
/// `-0044`), and PostgreSQL, asked to place such a local time in an organisation's time zone,
/// answers "time zone displacement out of range"; every date a person means lies within these.
pub const YEARS: RangeInclusive<i32> = 1900..=9999;

/// A value refused at the edge: the field it came in and what is wrong with it, never the
/// value in full. Shown as `<field>: <fault>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {fault}")]
pub struct InputError {
    pub field: String,
    pub fault: String,
}

impl InputError {
    pub fn new(field: &str, fault: impl Into<String>) -> Self {
        InputError {
            field: field.to_owned(),
            fault: fault.into(),
        }
    }
}

const NUL: &str = "a NUL character (\\u0000) cannot be stored";

/// Free text (a body, a template, a reason): at most `max_chars` characters and no NUL, the one
/// character PostgreSQL's text cannot hold. Line breaks and tabs are the text's own.
pub fn text_input<'a>(
    field: &str,
    value: &'a str,
    max_chars: usize,
) -> Result<&'a str, InputError> {
    if value.contains('\0') {
        return Err(InputError::new(field, NUL));
    }
    at_most(field, value, max_chars)?;
    Ok(value)
}

/// One line (an id, a key, an address, a time zone, a filter): at most `max_chars` characters
/// and no control character at all (NUL, tab, line break, DEL, the C1 controls).
pub fn line_input<'a>(
    field: &str,
    value: &'a str,
    max_chars: usize,
) -> Result<&'a str, InputError> {
    if value.chars().any(char::is_control) {
        return Err(InputError::new(
            field,
            "control characters (such as NUL, a tab or a line break) are not allowed",
        ));
    }
    at_most(field, value, max_chars)?;
    Ok(value)
}

fn at_most(field: &str, value: &str, max_chars: usize) -> Result<(), InputError> {
    if value.chars().nth(max_chars).is_some() {
        return Err(InputError::new(
            field,
            format!("too long (at most {max_chars} characters)"),
        ));
    }
    Ok(())
}

/// A date and time in chrono's `format` (`%Y-%m-%dT%H:%M`), in [`YEARS`].
pub fn time_input(
    field: &str,
    value: &str,
    format: &str,
) -> Result<chrono::NaiveDateTime, InputError> {
    let t = chrono::NaiveDateTime::parse_from_str(value, format).map_err(|_| {
        InputError::new(
            field,
            format!(
                "{:?} is not a date and time ({})",
                excerpt(value),
                shown(format)
            ),
        )
    })?;
    let year = chrono::Datelike::year(&t);
    if !YEARS.contains(&year) {
        return Err(InputError::new(
            field,
            format!(
                "the year {year} is out of range (years {} to {})",
                YEARS.start(),
                YEARS.end()
            ),
        ));
    }
    Ok(t)
}

/// A chrono format as a person reads it: `%Y-%m-%dT%H:%M` → `YYYY-MM-DDTHH:MM`.
fn shown(format: &str) -> String {
    [
        ("%Y", "YYYY"),
        ("%m", "MM"),
        ("%d", "DD"),
        ("%H", "HH"),
        ("%M", "MM"),
        ("%S", "SS"),
        ("%.f", ".ffffff"),
    ]
    .iter()
    .fold(format.to_owned(), |s, &(spec, with)| s.replace(spec, with))
}

/// A JSON value PostgreSQL's `jsonb` can store and give back as it came: no NUL character in a
/// key or a string, and no number beyond ±1e300 (`jsonb` prints numbers in full, and a value
/// next to the largest double then reads back as out of range).
pub fn json_input(field: &str, value: &serde_json::Value) -> Result<(), InputError> {
    fn fault(v: &serde_json::Value) -> Option<&'static str> {
        match v {
            serde_json::Value::String(s) if s.contains('\0') => Some(NUL),
            serde_json::Value::Number(n) if n.as_f64().is_some_and(|f| f.abs() > 1e300) => {
                Some("numbers must lie between -1e300 and 1e300")
            }
            serde_json::Value::Array(a) => a.iter().find_map(fault),
            serde_json::Value::Object(m) => m.iter().find_map(|(k, v)| {
                if k.contains('\0') {
                    Some(NUL)
                } else {
                    fault(v)
                }
            }),
            _ => None,
        }
    }
    match fault(value) {
        Some(why) => Err(InputError::new(field, why)),
        None => Ok(()),
    }
}

/// `value` as a message may quote it: its first [`EXCERPT_CHARS`] characters, and "…" when
/// there were more.
pub fn excerpt(value: &str) -> Cow<'_, str> {
    cut(value, EXCERPT_CHARS)
}

/// A message cut to [`MESSAGE_MAX_CHARS`] characters (and "…").
pub fn capped(message: &str) -> Cow<'_, str> {
    cut(message, MESSAGE_MAX_CHARS)
}

fn cut(s: &str, max_chars: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        None => Cow::Borrowed(s),
        Some((at, _)) => Cow::Owned(format!("{}…", &s[..at])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_refuses_nul_and_length_naming_the_field_and_never_quoting_the_value() {
        assert_eq!(text_input("Body", "a\n\tb", 10), Ok("a\n\tb"));
        let nul = text_input("Body", "secret\0", 10).unwrap_err();
        assert_eq!(nul.field, "Body");
        assert!(
            nul.to_string().starts_with("Body: a NUL character"),
            "{nul}"
        );
        assert!(!nul.to_string().contains("secret"));
        let long = "é".repeat(100_000);
        let e = text_input("Body", &long, 99_999).unwrap_err().to_string();
        assert_eq!(e, "Body: too long (at most 99999 characters)");
        assert!(text_input("Body", &long, 100_000).is_ok());
    }

    #[test]
    fn a_line_refuses_every_control_character() {
        for bad in ["a\0", "a\tb", "a\nb", "\u{7f}", "\u{85}"] {
            let e = line_input("Job id", bad, 100).unwrap_err().to_string();
            assert!(e.starts_with("Job id: control characters"), "{bad:?}: {e}");
        }
        assert_eq!(
            line_input("Job id", "campaign:1:2", 100),
            Ok("campaign:1:2")
        );
        assert!(line_input("Job id", &"x".repeat(101), 100)
            .unwrap_err()
            .to_string()
            .contains("too long"));
    }

    #[test]
    fn times_are_parsed_within_the_years_postgresql_places_in_a_zone() {
        let f = "%Y-%m-%dT%H:%M";
        assert!(time_input("Scheduled time", "2030-01-02T09:30", f).is_ok());
        assert!(time_input("Scheduled time", "1900-01-01T00:00", f).is_ok());
        assert!(time_input("Scheduled time", "9999-12-31T23:59", f).is_ok());
        for bad in [
            "+12345-01-01T00:00",
            "-0044-03-15T12:00",
            "1899-12-31T23:59",
        ] {
            let e = time_input("Scheduled time", bad, f)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("Scheduled time: the year"), "{bad}: {e}");
            assert!(e.contains("out of range"), "{bad}: {e}");
        }
        let e = time_input("Scheduled time", "tomorrow", f)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "Scheduled time: \"tomorrow\" is not a date and time (YYYY-MM-DDTHH:MM)"
        );
        let e = time_input("Page", &"9".repeat(100_000), "%Y-%m-%dT%H:%M:%S%.f")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("(YYYY-MM-DDTHH:MM:SS.ffffff)"), "{e}");
    }

    #[test]
    fn json_refuses_what_jsonb_cannot_give_back() {
        let ok = serde_json::json!({ "a": [1, "b", { "c": 1e300 }] });
        assert!(json_input("Sample data", &ok).is_ok());
        for bad in [
            serde_json::json!({ "a": "x\u{0}" }),
            serde_json::json!({ "a\u{0}": 1 }),
            serde_json::json!([[{ "a": 1e301 }]]),
        ] {
            let e = json_input("Sample data", &bad).unwrap_err();
            assert_eq!(e.field, "Sample data", "{bad}");
        }
    }

    #[test]
    fn excerpts_and_messages_are_cut_on_character_boundaries() {
        assert_eq!(excerpt("short"), "short");
        let long = "ü".repeat(100);
        let e = excerpt(&long);
        assert_eq!(e.chars().count(), EXCERPT_CHARS + 1);
        assert!(e.ends_with('…'));
        assert_eq!(capped(&long), long.as_str());
        let huge = "x".repeat(100_000);
        assert_eq!(capped(&huge).chars().count(), MESSAGE_MAX_CHARS + 1);
    }
}
