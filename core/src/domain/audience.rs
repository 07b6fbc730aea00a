//! The rules of an org's audience: subscriber statuses, names of people and lists, and how one
//! row of an imported CSV file is checked. Kept free of the CSV parser so the browser build
//! shares them.

use std::collections::HashSet;

use super::EmailAddress;

text_enum! {
    /// Stored as text (`subscribers.status`). Opt-outs are not a status: they are suppressions.
    pub enum SubscriberStatus ("a subscriber status") {
        Confirmed = "confirmed",
        Unconfirmed = "unconfirmed",
        Blocklisted = "blocklisted",
    }
}

text_enum! {
    /// Why an address is suppressed (`suppressions.reason`).
    pub enum SuppressionReason ("a suppression reason") {
        /// The person used an unsubscribe link.
        Unsubscribed = "unsubscribed",
        /// A permanent delivery failure: the address does not exist.
        HardBounce = "hard_bounce",
        /// Temporary failures, repeated past the org's threshold within its window.
        SoftBounce = "soft_bounce",
        /// The person reported the mail as spam.
        Complaint = "complaint",
        /// An admin added it.
        Manual = "manual",
        /// It came with an import.
        Import = "import",
    }
}

impl SuppressionReason {
    /// It stops every kind of mail to the address, a digest to an admin and account mail too
    /// (the address cannot or must not receive anything); the other reasons stop only
    /// campaign content. A suppression for such a reason also replaces a weaker one.
    pub fn stops_all_mail(self) -> bool {
        matches!(
            self,
            SuppressionReason::HardBounce | SuppressionReason::Complaint
        )
    }

    /// The reasons that [`stop all mail`](Self::stops_all_mail), as stored.
    pub fn stopping_all_mail() -> Vec<&'static str> {
        Self::ALL
            .into_iter()
            .filter(|r| r.stops_all_mail())
            .map(Self::as_str)
            .collect()
    }
}

text_enum! {
    /// Where a CSV import stands (`imports.status`; `interrupted` is read, never stored: a
    /// running import whose progress stopped, because the server stopped during it).
    pub enum ImportStatus ("an import status") {
        Running = "running",
        Done = "done",
        Failed = "failed",
        Interrupted = "interrupted",
    }
}

/// The longest name of a person or a list, in characters.
pub const NAME_MAX: usize = 200;

/// A subscriber's name: trimmed, at most [`NAME_MAX`] characters, no control characters. May
/// be empty.
pub fn person_name(input: &str) -> Result<String, String> {
    let name = input.trim();
    if name.chars().count() > NAME_MAX {
        return Err(format!(
            "The name is too long (at most {NAME_MAX} characters)."
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("The name contains a control character (a NUL, tab or line break).".into());
    }
    if name.chars().any(super::text::hidden_control) {
        return Err("The name contains a text-direction override (such as U+202E).".into());
    }
    Ok(name.to_string())
}

/// A list's name: as a person's name, and not empty.
pub fn list_name(input: &str) -> Result<String, String> {
    let name = person_name(input).map_err(|e| e.replace("The name", "The list's name"))?;
    if name.is_empty() {
        return Err("The list's name is empty: give it a name.".into());
    }
    Ok(name)
}

/// A cell starting with one of these is a formula to a spreadsheet (OWASP's CSV injection
/// list): `=`, `+`, `-`, `@`, tab and carriage return.
fn starts_formula(s: &str) -> bool {
    s.starts_with(['=', '+', '-', '@', '\t', '\r'])
}

/// A value as an exported CSV cell: one that a spreadsheet would run as a formula gets a
/// leading `'`, and so does one already starting with `'` before such a character or another
/// `'`, so that [`csv_value`] reads every exported cell back to the value exactly.
pub fn csv_cell(value: &str) -> std::borrow::Cow<'_, str> {
    let quoted = value
        .strip_prefix('\'')
        .is_some_and(|rest| starts_formula(rest) || rest.starts_with('\''));
    if starts_formula(value) || quoted {
        format!("'{value}").into()
    } else {
        value.into()
    }
}

/// An imported CSV cell as the value it stands for: the `'` that [`csv_cell`] (or a
/// spreadsheet) put before a formula character or a `'` is taken off.
pub fn csv_value(cell: &str) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if starts_formula(rest) || rest.starts_with('\'') => rest,
        _ => cell,
    }
}

/// Where the columns of an imported file are, found by its header row (case-insensitive):
/// `email` is required, `name` and `external_id` are optional; other columns are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsvColumns {
    pub email: usize,
    pub name: Option<usize>,
    pub external_id: Option<usize>,
}

/// One checked row of an imported file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvRow {
    pub email: EmailAddress,
    pub name: String,
    /// The SaaS's own id for them; an empty cell is none.
    pub external_id: Option<String>,
}

/// What the earlier rows of a file held: a repeat is reported, never silently merged.
#[derive(Debug, Default)]
pub struct SeenRows {
    addresses: HashSet<String>,
    external_ids: HashSet<String>,
}

impl CsvColumns {
    pub fn from_header(header: &[&[u8]]) -> Result<Self, String> {
        let names: Vec<String> = header
            .iter()
            .map(|h| {
                String::from_utf8_lossy(h)
                    .trim_start_matches('\u{feff}')
                    .trim()
                    .to_lowercase()
            })
            .collect();
        let at = |wanted: &str| names.iter().position(|n| n == wanted);
        let email = at("email").ok_or_else(|| {
            "The file has no \"email\" column: its first line must be a header naming the columns (email, and optionally name).".to_string()
        })?;
        Ok(CsvColumns {
            email,
            name: at("name"),
            external_id: at("external_id"),
        })
    }

    /// Checks one data row against the rules and the earlier rows of the same file.
    pub fn check(&self, fields: &[&[u8]], seen: &mut SeenRows) -> Result<CsvRow, String> {
        let text = |i: usize, what: &str| -> Result<&str, String> {
            let raw = fields.get(i).copied().unwrap_or_default();
            let s = std::str::from_utf8(raw)
                .map_err(|_| format!("the {what} is not valid UTF-8 (save the file as UTF-8)"))?;
            if s.contains('\0') {
                return Err(format!("the {what} contains a NUL character"));
            }
            Ok(csv_value(s))
        };
        let email = text(self.email, "address")?;
        if email.chars().count() > 254 {
            return Err("the address is too long (at most 254 characters)".into());
        }
        let email = EmailAddress::parse(email).map_err(|e| e.to_string())?;
        let name = match self.name {
            Some(i) => text(i, "name")?,
            None => "",
        };
        let name = person_name(name).map_err(|e| lower_first(e.trim_end_matches('.')))?;
        let external_id = match self.external_id {
            Some(i) => match text(i, "external id")?.trim() {
                "" => None,
                x => Some(
                    super::event::external_id("external_id", x)
                        .map_err(|e| format!("the external id: {}", e.fault))?,
                ),
            },
            None => None,
        };
        if seen.addresses.contains(email.lower()) {
            return Err(format!(
                "{} appears earlier in the file (kept once)",
                email.as_str()
            ));
        }
        if let Some(x) = &external_id {
            if !seen.external_ids.insert(x.clone()) {
                return Err(format!(
                    "the external id {x:?} appears earlier in the file (an external id names one subscriber)"
                ));
            }
        }
        seen.addresses.insert(email.lower().to_owned());
        Ok(CsvRow {
            email,
            name,
            external_id,
        })
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_lowercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_neutralised_and_read_back_to_the_same_value() {
        for (value, cell) in [
            ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
            ("+1", "'+1"),
            ("-x@example.org", "'-x@example.org"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("'=x", "''=x"),
            ("''", "'''"),
            ("'Twas", "'Twas"),
            ("'", "'"),
            ("Ann", "Ann"),
            ("", ""),
        ] {
            assert_eq!(csv_cell(value), cell, "{value:?}");
            assert_eq!(csv_value(cell), value, "{cell:?}");
        }
    }

    #[test]
    fn names_and_statuses_are_checked_with_messages_naming_the_field() {
        assert_eq!(person_name("  Ann  ").unwrap(), "Ann");
        assert!(person_name(&"x".repeat(201))
            .unwrap_err()
            .contains("too long"));
        assert!(person_name("a\0b")
            .unwrap_err()
            .contains("control character"));
        assert!(person_name("Ann \u{202E}gpj.exe")
            .unwrap_err()
            .contains("text-direction override"));
        assert!(list_name("\u{2066}News").is_err());
        assert!(list_name(" ").unwrap_err().contains("list's name is empty"));
        assert!(list_name(&"x".repeat(201))
            .unwrap_err()
            .starts_with("The list's name is too long"));
        assert_eq!("blocklisted".parse(), Ok(SubscriberStatus::Blocklisted));
        assert!("gone"
            .parse::<SubscriberStatus>()
            .unwrap_err()
            .contains("\"gone\""));
    }

    #[test]
    fn a_header_names_the_columns_and_each_row_is_checked() {
        assert!(CsvColumns::from_header(&[b"mail", b"name"])
            .unwrap_err()
            .contains("no \"email\" column"));
        let cols = CsvColumns::from_header(&["\u{feff}Name".as_bytes(), b" EMAIL "]).unwrap();
        assert_eq!(
            cols,
            CsvColumns {
                email: 1,
                name: Some(0),
                external_id: None,
            }
        );
        let mut seen = SeenRows::default();
        let r = cols.check(&[b" Ann ", b"Ann@X.org"], &mut seen).unwrap();
        assert_eq!((r.email.as_str(), r.name.as_str()), ("Ann@X.org", "Ann"));
        let err = |f: &[&[u8]], seen: &mut SeenRows| cols.check(f, seen).unwrap_err();
        assert_eq!(
            err(&[b"Ann", b"ann@x.org"], &mut seen),
            "ann@x.org appears earlier in the file (kept once)"
        );
        assert_eq!(
            err(&[b"B", b"nope"], &mut seen),
            "“nope” is not a valid e-mail address"
        );
        assert_eq!(
            err(&[b"\xff\xfe", b"c@x.org"], &mut seen),
            "the name is not valid UTF-8 (save the file as UTF-8)"
        );
        assert_eq!(
            err(&[b"C", b"c\0@x.org"], &mut seen),
            "the address contains a NUL character"
        );
        let long = "n".repeat(1_000_000);
        assert_eq!(
            err(&[long.as_bytes(), b"d@x.org"], &mut seen),
            "the name is too long (at most 200 characters)"
        );
        assert!(err(&[b"E"], &mut seen).contains("empty"), "a short row");
    }

    #[test]
    fn an_external_id_column_is_optional_checked_and_once_per_file() {
        let cols = CsvColumns::from_header(&[b"email", b"External_ID"]).unwrap();
        assert_eq!(cols.external_id, Some(1));
        let mut seen = SeenRows::default();
        let r = cols.check(&[b"a@x.org", b" u-1 "], &mut seen).unwrap();
        assert_eq!(r.external_id.as_deref(), Some("u-1"));
        let r = cols.check(&[b"b@x.org", b""], &mut seen).unwrap();
        assert_eq!(r.external_id, None);
        let e = cols.check(&[b"c@x.org", b"u-1"], &mut seen).unwrap_err();
        assert!(e.contains("appears earlier"), "{e}");
        let e = cols
            .check(&[b"d@x.org", b"tab\tid"], &mut seen)
            .unwrap_err();
        assert!(e.starts_with("the external id"), "{e}");
        // A refused row's address is not taken: fixed on a later line, it goes in.
        assert!(cols.check(&[b"c@x.org", b"u-2"], &mut seen).is_ok());
    }
}
