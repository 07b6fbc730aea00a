//! A campaign's subject and body as templates with per-recipient fields (`{{ name }}`,
//! `{{ email }}`, `{{ unsubscribe_url }}`), compiled once per batch and rendered per message
//! from the content version frozen at approval. Plain text for now; Markdown and HTML bodies
//! come with the campaign editor.

use minijinja::{context, Environment};

use crate::db::campaigns::Content;

/// What a message says to one recipient.
pub struct Fields<'a> {
    pub name: &'a str,
    pub email: &'a str,
    pub unsubscribe_url: &'a str,
}

/// One campaign's templates, compiled.
pub struct Compiled {
    env: Environment<'static>,
    pub content_version: i32,
}

impl Compiled {
    pub fn new(c: &Content) -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        // Plain text: nothing to escape; a missing field is an error, not an empty string.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template_owned("subject", c.subject.clone())?;
        env.add_template_owned("body", c.body.clone())?;
        Ok(Compiled {
            env,
            content_version: c.content_version,
        })
    }

    /// (subject, body) for one recipient.
    pub fn render(&self, f: &Fields<'_>) -> Result<(String, String), minijinja::Error> {
        let cx =
            context! { name => f.name, email => f.email, unsubscribe_url => f.unsubscribe_url };
        let subject = self.env.get_template("subject")?.render(&cx)?;
        // A subject is one line, whatever a field held.
        let subject = subject.replace(['\r', '\n'], " ");
        let body = self.env.get_template("body")?.render(&cx)?;
        Ok((subject, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(subject: &str, body: &str) -> Content {
        Content {
            id: 1,
            subject: subject.into(),
            body: body.into(),
            body_format: "markdown".into(),
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
        let (s, b) = c.render(&f).unwrap();
        assert_eq!(s, "Hi Ann Evil: header");
        assert_eq!(
            b,
            "Dear Ann\nEvil: header <ann@x.org>\nLeave: https://m/u/t"
        );
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
