use serde::{Deserialize, Serialize};
use std::fmt;

/// A syntactically valid e-mail address, and the one place where its comparison form
/// (`email_lower`) is computed. The database stores both; SQL compares only stored values.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EmailAddress {
    original: String,
    lower: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    #[error("the e-mail address is empty")]
    Empty,
    #[error("the e-mail address is longer than 254 characters")]
    TooLong,
    #[error("“{0}” is not a valid e-mail address")]
    Invalid(String),
}

impl EmailAddress {
    pub fn parse(input: &str) -> Result<Self, EmailError> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(EmailError::Empty);
        }
        if trimmed.chars().count() > 254 {
            return Err(EmailError::TooLong);
        }
        // Display names and comments ("Ann <a@b>") are not addresses: reject anything but the
        // bare addr-spec, which the RFC 5322/6531 parser alone would accept.
        if trimmed.contains(['<', '>', '(', ')', ' ', ',', ';']) {
            return Err(EmailError::Invalid(trimmed.to_owned()));
        }
        let parsed = trimmed
            .parse::<email_address::EmailAddress>()
            .map_err(|_| EmailError::Invalid(trimmed.to_owned()))?;
        // A domain needs a dot: "a@localhost" is legal RFC but never a deliverable subscriber.
        if !parsed.domain().contains('.') {
            return Err(EmailError::Invalid(trimmed.to_owned()));
        }
        Ok(Self {
            original: trimmed.to_owned(),
            lower: Self::lowercase_rule(trimmed),
        })
    }

    /// The one lower-casing rule: Unicode lower case of the whole address, local part included.
    /// Strictly the local part is case-sensitive, but no real mailbox provider treats
    /// `Ann@x.org` and `ann@x.org` as two people, so neither do we (for dedupe and suppression).
    fn lowercase_rule(address: &str) -> String {
        address.to_lowercase()
    }

    /// Addresses typed into one field, separated by commas, semicolons, spaces or new lines:
    /// at least one and at most `max`, each valid, duplicates (by comparison form) dropped.
    /// The error names the first bad address.
    pub fn parse_list(input: &str, max: usize) -> Result<Vec<Self>, String> {
        let mut out: Vec<Self> = Vec::new();
        for part in input
            .split([',', ';', ' ', '\n', '\r', '\t'])
            .filter(|p| !p.is_empty())
        {
            let a = Self::parse(part).map_err(|e| sentence(&e.to_string()))?;
            if !out.iter().any(|o| o.lower == a.lower) {
                out.push(a);
            }
        }
        if out.is_empty() {
            return Err("Give at least one e-mail address.".into());
        }
        if out.len() > max {
            return Err(format!(
                "At most {max} addresses at a time ({} given).",
                out.len()
            ));
        }
        Ok(out)
    }

    /// The address as the user typed it (trimmed).
    pub fn as_str(&self) -> &str {
        &self.original
    }

    /// The comparison form stored in every `email_lower` column.
    pub fn lower(&self) -> &str {
        &self.lower
    }

    /// What this address becomes in every row that kept it once its person is erased: a hash
    /// of the comparison form, so their later reports and sends still find those rows while
    /// the address itself is never stored again.
    #[cfg(feature = "ssr")]
    pub fn erased_form(&self) -> String {
        erased_form(&self.lower)
    }
}

/// Marks an `email_lower` that holds an erased address's hash instead of the address.
pub const ERASED_PREFIX: &str = "erased-";

/// [`EmailAddress::erased_form`] of a stored comparison form.
#[cfg(feature = "ssr")]
pub fn erased_form(lower: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{ERASED_PREFIX}{:x}", Sha256::digest(lower.as_bytes()))
}

/// Whether a stored comparison form is an erased address's hash.
pub fn is_erased(lower: &str) -> bool {
    lower.starts_with(ERASED_PREFIX)
}

/// "cannot pause …" → "Cannot pause ….": an error message as a sentence.
pub fn sentence(s: &str) -> String {
    let mut c = s.chars();
    let first = c
        .next()
        .map(|f| f.to_uppercase().collect::<String>())
        .unwrap_or_default();
    format!("{first}{}.", c.as_str())
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

impl TryFrom<String> for EmailAddress {
    type Error = EmailError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<EmailAddress> for String {
    fn from(value: EmailAddress) -> Self {
        value.original
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_addresses_is_split_checked_and_deduplicated() {
        let l = EmailAddress::parse_list("a@x.org, B@x.org;\nb@X.org  c@x.org", 5).unwrap();
        let shown: Vec<&str> = l.iter().map(|a| a.as_str()).collect();
        assert_eq!(shown, ["a@x.org", "B@x.org", "c@x.org"]);
        assert_eq!(
            EmailAddress::parse_list("a@x.org, nope", 5).unwrap_err(),
            "“nope” is not a valid e-mail address."
        );
        assert!(EmailAddress::parse_list(" , ", 5)
            .unwrap_err()
            .contains("at least one"));
        assert!(EmailAddress::parse_list("a@x.org b@x.org c@x.org", 2)
            .unwrap_err()
            .contains("At most 2 addresses at a time (3 given)"));
    }

    #[test]
    fn lower_form_folds_case_everywhere_and_keeps_the_original() {
        let e = EmailAddress::parse("  Ann.Lee@Example.ORG ").unwrap();
        assert_eq!(e.as_str(), "Ann.Lee@Example.ORG");
        assert_eq!(e.lower(), "ann.lee@example.org");
    }

    #[test]
    fn case_variants_share_one_lower_form() {
        let a = EmailAddress::parse("BOB@example.com").unwrap();
        let b = EmailAddress::parse("bob@EXAMPLE.com").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.lower(), b.lower());
    }

    #[test]
    fn non_ascii_local_parts_are_accepted_and_lowercased() {
        let e = EmailAddress::parse("Jürgen.Öz@Beispiel.de").unwrap();
        assert_eq!(e.lower(), "jürgen.öz@beispiel.de");
        // Final-sigma aware lower case: one rule, applied the same way every time.
        let greek = EmailAddress::parse("ΝΙΚΟΣ@Example.gr").unwrap();
        assert_eq!(greek.lower(), "νικος@example.gr");
    }

    #[test]
    fn rejects_garbage_with_a_message_naming_the_input() {
        assert_eq!(EmailAddress::parse("   "), Err(EmailError::Empty));
        for bad in [
            "no-at-sign",
            "a@",
            "@b.org",
            "a b@c.org",
            "Ann <a@b.org>",
            "a@localhost",
        ] {
            let err = EmailAddress::parse(bad).unwrap_err();
            assert!(err.to_string().contains(bad.trim()), "{bad}: {err}");
        }
        let long = format!("{}@example.org", "a".repeat(250));
        assert_eq!(EmailAddress::parse(&long), Err(EmailError::TooLong));
    }

    #[test]
    fn serde_round_trip_validates() {
        let e: EmailAddress = serde_json::from_str("\"X@Y.org\"").unwrap();
        assert_eq!(e.lower(), "x@y.org");
        assert!(serde_json::from_str::<EmailAddress>("\"nope\"").is_err());
    }
}
