//! Click tracking in campaign mail (only when the org turned it on): every http(s) link of the
//! HTML part becomes `<public url>/c/<token>`, the token naming the delivery and the link's own
//! target, signed. The unsubscribe link and non-web links stay as written; the text part is
//! left alone (its links are the reader's to copy). Open tracking (a separate opt-in): a
//! one-pixel image at `<public url>/o/<token>`, the token naming the delivery alone.

use std::cell::Cell;
use std::rc::Rc;

use lol_html::html_content::ContentType;
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

/// `html` with delivery `job_id`'s open-tracking pixel at the end of its body (at the end of
/// the document when it has no `<body>`).
pub fn add_open_pixel(
    html: &str,
    public_url: &str,
    key: &[u8],
    job_id: &str,
) -> Result<String, lol_html::errors::RewritingError> {
    let img = format!(
        r#"<img src="{public_url}/o/{}" width="1" height="1" alt="" style="display:block;border:0;width:1px;height:1px">"#,
        app::click::open_token(key, job_id)
    );
    // Before the first `</body>`, once; a document without one gets it at its end.
    let placed = Rc::new(Cell::new(false));
    let mut out = rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![element!("body", |el| {
                let (placed, img) = (placed.clone(), img.clone());
                let before_end: lol_html::EndTagHandler<'static> = Box::new(move |end| {
                    if !placed.get() {
                        end.before(&img, ContentType::Html);
                        placed.set(true);
                    }
                    Ok(())
                });
                if let Some(handlers) = el.end_tag_handlers() {
                    handlers.push(before_end);
                }
                Ok(())
            })],
            ..RewriteStrSettings::new()
        },
    )?;
    if !placed.get() {
        out.push_str(&img);
    }
    Ok(out)
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

    #[test]
    fn the_pixel_goes_once_at_the_end_of_the_body_and_names_only_its_delivery() {
        let pixel = |html: &str| add_open_pixel(html, "https://m.example", KEY, "c:1:2").unwrap();
        let whole = pixel("<html><body><p>Hi</p></body></html>");
        assert_eq!(whole.matches("https://m.example/o/").count(), 1, "{whole}");
        assert!(whole.ends_with(r#"height:1px"></body></html>"#), "{whole}");
        let twice = pixel("<body><p>Hi</p></body><body></body>");
        assert_eq!(twice.matches("/o/").count(), 1, "{twice}");
        let unclosed = pixel("<html><body><p>Hi</p>");
        assert_eq!(unclosed.matches("/o/").count(), 1, "{unclosed}");
        let fragment = pixel("<p>Hi</p>");
        assert!(fragment.starts_with("<p>Hi</p><img "), "{fragment}");
        let token = fragment
            .split("https://m.example/o/")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .unwrap();
        assert_eq!(app::click::verify_open(KEY, token), Some("c:1:2".into()));
    }
}
