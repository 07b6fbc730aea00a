//! An organisation's identity as typed by whoever creates it (`mailroom org add`, the first-run
//! page): checked here once for both.

use super::text::{hidden_control, hidden_control_message};

/// A short name: lowercase letters, digits and '-', starting with a letter or digit, at most 63
/// (the database's check says the same).
pub fn slug(input: &str) -> Result<String, String> {
    let s = input.trim();
    let ok = s.len() <= 63
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err("use lowercase letters, digits and '-' (at most 63, starting with a letter or digit), e.g. acme".into())
    }
}

/// The organisation's (or its From) name: 1 to 200 characters, nothing hidden in it.
pub fn name(input: &str, field: &str) -> Result<String, String> {
    let s = input.trim();
    if s.is_empty() || s.chars().count() > 200 {
        return Err(format!("{field}: use 1 to 200 characters."));
    }
    if s.chars().any(hidden_control) {
        return Err(hidden_control_message(field));
    }
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_names_are_checked() {
        assert_eq!(slug(" acme-2 ").unwrap(), "acme-2");
        for bad in ["", "-acme", "Acme", "ac me", "ac_me", &"a".repeat(64)] {
            assert!(slug(bad).is_err(), "{bad:?}");
        }
        assert_eq!(name(" Acme Inc ", "Name").unwrap(), "Acme Inc");
        assert!(name("", "Name").unwrap_err().starts_with("Name:"));
        assert!(name("Acme \u{202E}cni", "Name").is_err());
    }
}
