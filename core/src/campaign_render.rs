//! A campaign's subject and body as templates with per-recipient fields (`{{ name }}`,
//! `{{ email }}`, `{{ unsubscribe_url }}`), compiled once per batch and rendered per message
//! from the content version frozen at approval. A Markdown body goes out as text (the source,
//! filled in) and HTML (rendered); an HTML body as HTML. In HTML every field is escaped, so a
//! subscriber's name can never become markup: in a Markdown body it is escaped for HTML and
//! for Markdown before the Markdown is rendered, so `[x](javascript:…)` or `![x](https://…)`
//! in a name stays text. Rendered links and images never carry a `javascript:`, `vbscript:`
//! or `data:` URL, whoever wrote them.

use minijinja::{context, AutoEscape, Environment, HtmlEscape, Value};

use crate::db::campaign::Content;
use crate::domain::BodyFormat;

/// What a message says to one recipient.
pub struct Fields<'a> {
    pub name: &'a str,
    pub email: &'a str,
    pub unsubscribe_url: &'a str,
}

/// Per-recipient values beyond [`Fields`] (`{{ attributes.* }}`, `{{ event.* }}`); absent
/// ones are undefined, so a template naming them fails rather than printing nothing.
#[derive(Default)]
pub struct Extra<'a> {
    pub attributes: Option<&'a serde_json::Value>,
    pub event: Option<&'a serde_json::Value>,
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

/// The templates' names; `.html` ones escape the fields they fill in, the `.md.html` one (the
/// Markdown source of the HTML part) for Markdown too.
const SUBJECT: &str = "subject";
const TEXT: &str = "body";
const HTML: &str = "body.html";
const MARKDOWN_HTML: &str = "body.md.html";
/// The auto-escape of [`MARKDOWN_HTML`].
const MARKDOWN: &str = "markdown";

impl Compiled {
    pub fn new(c: &Content) -> Result<Self, minijinja::Error> {
        let format = c.body_format;
        let mut env = Environment::new();
        env.set_auto_escape_callback(|name| {
            if name == MARKDOWN_HTML {
                AutoEscape::Custom(MARKDOWN)
            } else if name.ends_with(".html") {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        env.set_formatter(|out, state, value| match state.auto_escape() {
            AutoEscape::Custom(MARKDOWN) if !value.is_safe() => {
                let text = value.to_string();
                write!(out, "{}", escape_markdown(&HtmlEscape(&text).to_string()))
                    .map_err(minijinja::Error::from)
            }
            AutoEscape::Custom(MARKDOWN) => write!(out, "{value}").map_err(minijinja::Error::from),
            _ => minijinja::escape_formatter(out, state, value),
        });
        // A missing field is an error, not an empty string.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template_owned(SUBJECT, c.subject.clone())?;
        match format {
            BodyFormat::Markdown => {
                env.add_template_owned(TEXT, c.body.clone())?;
                env.add_template_owned(MARKDOWN_HTML, c.body.clone())?;
            }
            BodyFormat::Html => env.add_template_owned(HTML, c.body.clone())?,
        }
        Ok(Compiled {
            env,
            format,
            content_version: c.content_version,
        })
    }

    pub fn render(&self, f: &Fields<'_>) -> Result<Rendered, minijinja::Error> {
        self.render_with(f, &Extra::default())
    }

    /// Renders with more fields than a campaign's: an automation's mail also shows the
    /// subscriber's attributes and what its trigger said.
    pub fn render_with(
        &self,
        f: &Fields<'_>,
        extra: &Extra<'_>,
    ) -> Result<Rendered, minijinja::Error> {
        let more = |v: Option<&serde_json::Value>| {
            v.map(Value::from_serialize).unwrap_or(Value::UNDEFINED)
        };
        let (attributes, event) = (more(extra.attributes), more(extra.event));
        let cx = context! {
            name => f.name, email => f.email, unsubscribe_url => f.unsubscribe_url,
            attributes => attributes.clone(), event => event.clone()
        };
        let subject = self.env.get_template(SUBJECT)?.render(&cx)?;
        // A subject is one line, whatever a field held.
        let subject = subject.replace(['\r', '\n'], " ");
        Ok(match self.format {
            BodyFormat::Markdown => {
                // Our own link is escaped for HTML only: Markdown escapes would show in an
                // author's raw HTML (`<a href="{{ unsubscribe_url }}">`), and it holds no
                // Markdown syntax.
                let url = Value::from_safe_string(HtmlEscape(f.unsubscribe_url).to_string());
                let md = context! {
                    name => f.name, email => f.email, unsubscribe_url => url,
                    attributes => attributes, event => event
                };
                let source = self.env.get_template(MARKDOWN_HTML)?.render(&md)?;
                Rendered {
                    subject,
                    text: Some(self.env.get_template(TEXT)?.render(&cx)?),
                    html: Some(markdown_to_html(&source)),
                }
            }
            BodyFormat::Html => Rendered {
                subject,
                text: None,
                html: Some(self.env.get_template(HTML)?.render(&cx)?),
            },
        })
    }
}

/// The Markdown syntax a field could start (links, images, emphasis, code, strikethrough,
/// tables, escapes), backslash-escaped. `&` stays: the field was escaped for HTML first, and
/// its entities must reach the renderer whole.
fn escape_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '!' | '~' | '|') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A link or image address that runs script or carries its own content when followed.
fn refused_url(url: &str) -> bool {
    // Browsers skip leading spaces and controls, and ignore tabs and newlines inside the scheme.
    let scheme: String = url
        .trim_start_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .take_while(|c| *c != ':')
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase();
    url.contains(':') && matches!(scheme.as_str(), "javascript" | "vbscript" | "data")
}

/// CommonMark with tables and strikethrough. The author's own HTML passes through (admins
/// write campaigns); the fields in it were escaped before. A refused link goes nowhere (`#`).
fn markdown_to_html(source: &str) -> String {
    use pulldown_cmark::{html, CowStr, Event, Options, Parser, Tag};
    let parser = Parser::new_ext(
        source,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH,
    )
    .map(|event| match event {
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) if refused_url(&dest_url) => Event::Start(Tag::Link {
            link_type,
            dest_url: CowStr::Borrowed("#"),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) if refused_url(&dest_url) => Event::Start(Tag::Image {
            link_type,
            dest_url: CowStr::Borrowed("#"),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::from("<!DOCTYPE html><html><body>\n");
    html::push_html(&mut out, parser);
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(subject: &str, body: &str) -> Content {
        formatted(subject, body, BodyFormat::Markdown)
    }

    fn formatted(subject: &str, body: &str, format: BodyFormat) -> Content {
        Content {
            id: 1,
            org_id: 1,
            subject: subject.into(),
            body: body.into(),
            body_format: format,
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
        let c = Compiled::new(&formatted(
            "x",
            "<p>Hi <b>{{ name }}</b></p>",
            BodyFormat::Html,
        ))
        .unwrap();
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
        assert!("rtf".parse::<BodyFormat>().is_err());
    }

    /// A subscriber's fields are data in the mail sent to them, never links or images.
    #[test]
    fn markdown_in_a_field_stays_text_and_refused_urls_go_nowhere() {
        let c = Compiled::new(&content(
            "x",
            "Hi {{ name }} ({{ email }})\n\n[leave]({{ unsubscribe_url }}) \
             [a](javascript:alert(1)) [b](<JaVa\tScript:alert(2)>) ![c](data:image/png;base64,AA) \
             [d](https://ok.example/p?q=1)\n\n<p>{{ name }}</p>",
        ))
        .unwrap();
        let f = Fields {
            name: "[click](javascript:alert(1)) ![x](https://tracker.example/p.gif) *b* `c` a\\b Tom & Jerry",
            email: "<https://x.example>@y.org",
            unsubscribe_url: "https://m/u/t?a=1&b=2",
        };
        let html = c.render(&f).unwrap().html.unwrap();
        let urls: Vec<&str> = html
            .split(" href=\"")
            .skip(1)
            .chain(html.split(" src=\"").skip(1))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert!(
            urls.iter()
                .all(|u| !refused_url(u) && !u.contains("tracker")),
            "{urls:?} in {html}"
        );
        assert!(
            !html.contains("<em>b</em>") && !html.contains("<code>c</code>"),
            "{html}"
        );
        assert!(
            html.contains("Hi [click](javascript"),
            "the name reads as typed: {html}"
        );
        assert!(html.contains("a\\b Tom &amp; Jerry"), "{html}");
        assert!(!html.contains("<a href=\"https://x.example"), "{html}");
        assert!(
            html.contains("href=\"https://m/u/t?a=1&amp;b=2\""),
            "{html}"
        );
        assert!(html.contains("href=\"https://ok.example/p?q=1\""), "{html}");
        assert_eq!(html.matches("href=\"#\"").count(), 2, "{html}");
        assert!(html.contains("src=\"#\""), "{html}");
        // The plain-text part is the source filled in as typed.
        let text = c.render(&f).unwrap().text.unwrap();
        assert!(
            text.starts_with("Hi [click](javascript:alert(1))"),
            "{text}"
        );
    }

    #[test]
    fn refused_urls_are_found_however_they_are_spelled() {
        for bad in [
            "javascript:x",
            " JAVASCRIPT:x",
            "java\tscript:x",
            "\u{1}javascript:x",
            "vbscript:x",
            "data:text/html,x",
        ] {
            assert!(refused_url(bad), "{bad:?}");
        }
        for ok in [
            "https://a.example",
            "mailto:a@b.example",
            "/relative",
            "#top",
            "javascript",
        ] {
            assert!(!refused_url(ok), "{ok:?}");
        }
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
