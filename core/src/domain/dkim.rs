use serde::{Deserialize, Serialize};
use std::fmt;

/// A DKIM signing domain (`d=`): a DNS host name of at least two labels, stored lower case
/// without a trailing dot. The DNS record is published under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DkimDomain(String);

/// A DKIM selector (`s=`): one or more DNS labels naming the key under `_domainkey`, so a
/// domain can publish several keys (one per sender, or a new one when rotating).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DkimSelector(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DkimNameError {
    #[error("it is empty")]
    Empty,
    #[error("“{0}” is not a DNS name: use letters, digits and hyphens in dot-separated labels of at most 63 characters, none starting or ending with a hyphen")]
    Invalid(String),
    #[error("“{0}” needs at least one dot (example.com, not example)")]
    NoDot(String),
}

/// RFC 1035 host name labels (letters, digits, inner hyphens), the syntax DKIM requires for
/// both the selector and the domain (RFC 6376 §3.1, `sub-domain`).
fn labels(input: &str) -> Result<String, DkimNameError> {
    let name = input.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() {
        return Err(DkimNameError::Empty);
    }
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(DkimNameError::Invalid(
            super::input::excerpt(input.trim()).into_owned(),
        ));
    }
    Ok(name)
}

impl DkimDomain {
    pub fn parse(input: &str) -> Result<Self, DkimNameError> {
        let name = labels(input)?;
        if !name.contains('.') {
            return Err(DkimNameError::NoDot(name));
        }
        Ok(Self(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether mail from `address` is aligned with this domain for DMARC (relaxed alignment:
    /// the From domain is this domain or one below it).
    pub fn aligns_with(&self, address: &str) -> bool {
        let Some((_, from_domain)) = address.rsplit_once('@') else {
            return false;
        };
        let from_domain = from_domain.to_ascii_lowercase();
        from_domain == self.0 || from_domain.ends_with(&format!(".{}", self.0))
    }
}

impl DkimSelector {
    pub fn parse(input: &str) -> Result<Self, DkimNameError> {
        labels(input).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The DNS name the public key is published under.
    pub fn record_name(&self, domain: &DkimDomain) -> String {
        format!("{}._domainkey.{}", self.0, domain.0)
    }
}

macro_rules! string_newtype {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = DkimNameError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::parse(&s)
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.0
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
string_newtype!(DkimDomain);
string_newtype!(DkimSelector);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_lower_case_host_names_with_a_dot() {
        assert_eq!(
            DkimDomain::parse(" Mail.Example.COM. ").unwrap().as_str(),
            "mail.example.com"
        );
        assert_eq!(DkimDomain::parse(""), Err(DkimNameError::Empty));
        assert!(matches!(
            DkimDomain::parse("localhost"),
            Err(DkimNameError::NoDot(_))
        ));
        for bad in [
            "exa mple.com",
            "-a.com",
            "a-.com",
            "a..com",
            "a_b.com",
            "ü.com",
            "x@y.com",
        ] {
            assert!(
                matches!(DkimDomain::parse(bad), Err(DkimNameError::Invalid(_))),
                "{bad}"
            );
        }
        assert!(DkimDomain::parse(&format!("{}.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn selectors_are_one_or_more_labels_and_name_the_record() {
        let s = DkimSelector::parse("Mailroom2026").unwrap();
        let d = DkimDomain::parse("example.com").unwrap();
        assert_eq!(s.record_name(&d), "mailroom2026._domainkey.example.com");
        assert!(DkimSelector::parse("eu.mr1").is_ok());
        assert!(DkimSelector::parse("mr 1").is_err());
        assert!(DkimSelector::parse("").is_err());
    }

    #[test]
    fn alignment_is_relaxed_dmarc_alignment() {
        let d = DkimDomain::parse("example.com").unwrap();
        assert!(d.aligns_with("news@example.com"));
        assert!(d.aligns_with("news@Mail.Example.com"));
        assert!(!d.aligns_with("news@badexample.com"));
        assert!(!d.aligns_with("news@example.org"));
    }
}
