//! What a one-line name typed by a person may not hold.

/// A character that changes how the text around it reads without being seen: a control
/// character (NUL, tab, line break), or a bidirectional override, embedding, isolate or mark
/// (U+202E turns "txt.exe" into what reads as "exe.txt").
pub fn hidden_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// The message for a name holding one, naming the field.
pub fn hidden_control_message(field: &str) -> String {
    format!(
        "{field}: line breaks, control characters and text-direction overrides are not allowed."
    )
}

/// Whether `name` can name a transactional template (what API requests send): 1 to 64
/// lowercase letters, digits, '-' and '_', starting with a letter or digit.
pub fn template_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.starts_with(['-', '_'])
}

#[cfg(test)]
mod tests {
    #[test]
    fn template_names_are_what_api_requests_can_send() {
        for good in ["receipt", "order-shipped", "a_1", "0"] {
            assert!(super::template_name(good), "{good}");
        }
        for bad in ["", "Receipt", "-x", "_x", "a b", "a\0", &"x".repeat(65)] {
            assert!(!super::template_name(bad), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn bidi_overrides_and_controls_are_found_and_letters_are_not() {
        for c in [
            '\0', '\t', '\n', '\u{202E}', '\u{202A}', '\u{2066}', '\u{2069}', '\u{200F}',
            '\u{061C}',
        ] {
            assert!(hidden_control(c), "{c:?}");
        }
        for c in ['a', 'é', 'ש', 'ع', '漢', ' ', '\u{200D}'] {
            assert!(!hidden_control(c), "{c:?}");
        }
    }
}
