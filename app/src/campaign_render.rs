//! A campaign's subject and body as templates with per-recipient fields (`{{ name }}`,
//! `{{ email }}`, `{{ unsubscribe_url }}`), compiled once per batch and rendered per message
//! from the content version frozen at approval. A Markdown body goes out as text (the source,
//! filled in) and HTML (rendered); an HTML body as HTML. In HTML every field is escaped, so a
//! subscriber's name can never become markup.

use minijinja::{context, AutoEscape, Environment};

use crate::db::campaigns::Content;
use crate::domain::BodyFormat;

/// What a message says to one recipient.
pub struct Fields<'a> {
    pub name: &'a str,
    pub email: &'a str,
    pub unsubscribe_url: &'a str,
}

/// One recipient's message: at least one of `text` and `html`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
}

/// One campaign's templates, compiled.
pub struct Compiled {
    env: Environment<'static>,
    format: BodyFormat,
    pub content_version: i32,
}

/// The templates' names; `.html` ones escape the fields they fill in.
const SUBJECT: &str = "subject";
const TEXT: &str = "body";
const HTML: &str = "body.html";

impl Compiled {
    pub fn new(c: &Content) -> Result<Self, minijinja::Error> {
        let format: BodyFormat = c.body_format.parse().map_err(|e: String| {
            minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e)
        })?;
        let mut env = Environment::new();
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html") {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        // A missing field is an error, not an empty string.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template_owned(SUBJECT, c.subject.clone())?;
        if format == BodyFormat::Markdown {
            env.add_template_owned(TEXT, c.body.clone())?;
        }
        env.add_template_owned(HTML, c.body.clone())?;
        Ok(Compiled {
            env,
            format,
            content_version: c.content_version,
        })
    }

    pub fn render(&self, f: &Fields<'_>) -> Result<Rendered, minijinja::Error> {
        let cx =
            context! { name => f.name, email => f.email, unsubscribe_url => f.unsubscribe_url };
        let subject = self.env.get_template(SUBJECT)?.render(&cx)?;
        // A subject is one line, whatever a field held.
        let subject = subject.replace(['\r', '\n'], " ");
        let html = self.env.get_template(HTML)?.render(&cx)?;
        Ok(match self.format {
            BodyFormat::Markdown => Rendered {
                subject,
                text: Some(self.env.get_template(TEXT)?.render(&cx)?),
                html: Some(markdown_to_html(&html)),
            },
            BodyFormat::Html => Rendered {
                subject,
                text: None,
                html: Some(html),
            },
        })
    }
}

/// CommonMark with tables and strikethrough. The author's own HTML passes through (admins
/// write campaigns); the fields in it were escaped before.
fn markdown_to_html(source: &str) -> String {
    use pulldown_cmark::{html, Options, Parser};
    let parser = Parser::new_ext(
        source,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH,
    );
    let mut out = String::from("<!DOCTYPE html><html><body>\n");
    html::push_html(&mut out, parser);
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(subject: &str, body: &str) -> Content {
        formatted(subject, body, "markdown")
    }

    fn formatted(subject: &str, body: &str, format: &str) -> Content {
        Content {
            id: 1,
            org_id: 1,
            subject: subject.into(),
            body: body.into(),
            body_format: format.into(),
            content_version: 3,
        }
    }

    #[test]
    fn fields_are_filled_per_recipient_and_subjects_stay_one_line() {
        let c = Compiled::new(&content(
            "Hi {{ name }}",
            "Dear {{ name }} <{{ email }}>\nLeave: {{ unsubscribe_url }}",
        ))
        .unwrap();
        let f = Fields {
            name: "Ann\nEvil: header",
            email: "ann@x.org",
            unsubscribe_url: "https://m/u/t",
        };
        let r = c.render(&f).unwrap();
        assert_eq!(r.subject, "Hi Ann Evil: header");
        assert_eq!(
            r.text.as_deref(),
            Some("Dear Ann\nEvil: header <ann@x.org>\nLeave: https://m/u/t")
        );
    }

    #[test]
    fn markdown_goes_out_as_text_and_html_with_fields_escaped_in_the_html() {
        let c = Compiled::new(&content(
            "x",
            "# Hello {{ name }}\n\n*new* [leave]({{ unsubscribe_url }})",
        ))
        .unwrap();
        let f = Fields {
            name: "<script>alert(1)</script>",
            email: "a@x.org",
            unsubscribe_url: "https://m/u/t?a=1&b=2",
        };
        let r = c.render(&f).unwrap();
        assert_eq!(
            r.text.as_deref(),
            Some("# Hello <script>alert(1)</script>\n\n*new* [leave](https://m/u/t?a=1&b=2)")
        );
        let html = r.html.unwrap();
        assert!(html.contains("<h1>Hello &lt;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("<em>new</em>"), "{html}");
        assert!(
            html.contains("href=\"https://m/u/t?a=1&amp;b=2\""),
            "{html}"
        );
    }

    #[test]
    fn an_html_body_goes_out_as_html_only_with_fields_escaped() {
        let c = Compiled::new(&formatted("x", "<p>Hi <b>{{ name }}</b></p>", "html")).unwrap();
        let f = Fields {
            name: "Tom & <i>Jerry</i>",
            email: "a@x.org",
            unsubscribe_url: "u",
        };
        let r = c.render(&f).unwrap();
        assert_eq!(r.text, None);
        assert_eq!(
            r.html.as_deref(),
            Some("<p>Hi <b>Tom &amp; &lt;i&gt;Jerry&lt;&#x2f;i&gt;</b></p>")
        );
        assert!(Compiled::new(&formatted("x", "", "rtf")).is_err());
    }

    #[test]
    fn an_unknown_field_is_an_error() {
        let c = Compiled::new(&content("x", "{{ nmae }}")).unwrap();
        let f = Fields {
            name: "a",
            email: "b",
            unsubscribe_url: "c",
        };
        assert!(c.render(&f).is_err());
    }
}
