//! Click tracking in campaign mail (only when the org turned it on): every http(s) link of the
//! HTML part becomes `<public url>/c/<token>`, the token naming the delivery and the link's own
//! target, signed. The unsubscribe link and non-web links stay as written; the text part is
//! left alone (its links are the reader's to copy).

use lol_html::{element, rewrite_str, RewriteStrSettings};

/// `html` with its trackable links wrapped for delivery `job_id`; `keep` (the unsubscribe
/// link) is never wrapped.
pub fn track_links(
    html: &str,
    public_url: &str,
    key: &[u8],
    job_id: &str,
    keep: &str,
) -> Result<String, lol_html::errors::RewritingError> {
    rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![element!("a[href]", |el| {
                let Some(raw) = el.get_attribute("href") else {
                    return Ok(());
                };
                // The attribute as written may hold entities (`&amp;`): the target is the
                // decoded URL the reader's client would follow.
                let target = html_escape::decode_html_entities(&raw).trim().to_owned();
                if target == keep || !app::click::trackable(&target) {
                    return Ok(());
                }
                let token = app::click::token(key, job_id, &target);
                el.set_attribute("href", &format!("{public_url}/c/{token}"))?;
                Ok(())
            })],
            ..RewriteStrSettings::new()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn web_links_are_wrapped_and_the_rest_is_left_as_written() {
        let html = r##"<p><a href="https://example.com/a?x=1&amp;y=2">A</a>
            <a href='mailto:hi@example.com'>mail</a> <a href="#top">top</a>
            <a href="https://m.example/u/tok">unsubscribe</a> <a>none</a></p>"##;
        let out = track_links(
            html,
            "https://m.example",
            KEY,
            "c:1:2",
            "https://m.example/u/tok",
        )
        .unwrap();
        let wrapped: Vec<&str> = out.split("https://m.example/c/").skip(1).collect();
        assert_eq!(wrapped.len(), 1, "{out}");
        let token = wrapped[0].split('"').next().unwrap();
        assert_eq!(
            app::click::verify(KEY, token),
            Some(("c:1:2".into(), "https://example.com/a?x=1&y=2".into()))
        );
        for kept in [
            "mailto:hi@example.com",
            "#top",
            "https://m.example/u/tok",
            "<a>none</a>",
        ] {
            assert!(out.contains(kept), "{kept} in {out}");
        }
    }
}
