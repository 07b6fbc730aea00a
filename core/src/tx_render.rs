//! Transactional templates: a subject, a text body and an optional HTML body, each a
//! minijinja template filled in from the request's `data` (and `email`, the recipient). A
//! field the template uses and the data lacks is an error, not an empty string: the API
//! answers it as the caller's 422 before anything is queued. In the HTML body every field is
//! escaped, so data can never become markup.

use minijinja::{AutoEscape, Environment, Value};

/// One message as a template and data make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub subject: String,
    pub text: String,
    pub html: Option<String>,
}

/// A template's three parts, as stored in a version.
pub struct Source<'a> {
    pub subject: &'a str,
    pub text: &'a str,
    pub html: Option<&'a str>,
}

/// What went wrong, naming the part (`subject`, `body_text`, `body_html`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part}: {detail}")]
pub struct TemplateError {
    pub part: &'static str,
    pub detail: String,
}

const PARTS: [&str; 3] = ["subject", "body_text", "body_html"];

fn env<'s>(src: &Source<'s>) -> Result<Environment<'s>, TemplateError> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|name| {
        if name == "body_html" {
            AutoEscape::Html
        } else {
            AutoEscape::None
        }
    });
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for (part, text) in PARTS
        .into_iter()
        .zip([Some(src.subject), Some(src.text), src.html])
    {
        if let Some(text) = text {
            env.add_template(part, text).map_err(|e| TemplateError {
                part,
                detail: describe(&e),
            })?;
        }
    }
    Ok(env)
}

/// Checks that each part compiles (what a save checks).
pub fn check(src: &Source<'_>) -> Result<(), TemplateError> {
    env(src).map(drop)
}

/// Renders the template for `email` with `data` (a JSON object).
pub fn render(
    src: &Source<'_>,
    email: &str,
    data: &serde_json::Value,
) -> Result<Rendered, TemplateError> {
    let env = env(src)?;
    let mut cx = data.clone();
    if let Some(map) = cx.as_object_mut() {
        map.entry("email").or_insert_with(|| email.into());
    }
    let cx = Value::from_serialize(&cx);
    let part = |part: &'static str| -> Result<String, TemplateError> {
        env.get_template(part)
            .and_then(|t| t.render(&cx))
            .map_err(|e| TemplateError {
                part,
                detail: describe(&e),
            })
    };
    Ok(Rendered {
        // A subject is one line, whatever a field held.
        subject: part("subject")?.replace(['\r', '\n'], " "),
        text: part("body_text")?,
        html: match src.html {
            Some(_) => Some(part("body_html")?),
            None => None,
        },
    })
}

/// The SHA-256 of a request's JSON in a canonical form (object keys sorted, no spaces), so
/// the same payload sent again with other key order or spacing has the same fingerprint.
pub fn fingerprint(request: &serde_json::Value) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    fn write(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::from(k.as_str()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut s = String::new();
    write(request, &mut s);
    Sha256::digest(s.as_bytes()).to_vec()
}

/// minijinja's message with the line it points at, without the template's name (the part
/// names it) or the debug dump.
fn describe(e: &minijinja::Error) -> String {
    let mut s = match e.detail() {
        Some(d) => format!("{}: {d}", kind_words(e.kind())),
        None => kind_words(e.kind()).to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (line {line})"));
    }
    s
}

fn kind_words(k: minijinja::ErrorKind) -> String {
    match k {
        minijinja::ErrorKind::UndefinedError => {
            "a field the template uses is missing from the data".into()
        }
        minijinja::ErrorKind::SyntaxError => "syntax error".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn src<'a>(subject: &'a str, text: &'a str, html: Option<&'a str>) -> Source<'a> {
        Source {
            subject,
            text,
            html,
        }
    }

    #[test]
    fn data_fills_the_parts_and_is_escaped_in_html_only() {
        let r = render(
            &src(
                "Receipt {{ order.id }}\nfor you",
                "Hi {{ name }} <{{ email }}>",
                Some("<p>Hi {{ name }}</p>"),
            ),
            "ann@example.com",
            &json!({"name": "<b>Ann</b>", "order": {"id": 42}}),
        )
        .unwrap();
        assert_eq!(r.subject, "Receipt 42 for you");
        assert_eq!(r.text, "Hi <b>Ann</b> <ann@example.com>");
        assert_eq!(
            r.html.as_deref(),
            Some("<p>Hi &lt;b&gt;Ann&lt;&#x2f;b&gt;</p>")
        );
    }

    #[test]
    fn the_fingerprint_ignores_key_order_and_spacing_only() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"to":"a@b.c","data":{"x":1,"y":[1,{"b":2,"a":1}]}}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(
            r#"{ "data": { "y": [1, {"a": 1, "b": 2}], "x": 1 }, "to": "a@b.c" }"#,
        )
        .unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c = json!({"to": "a@b.c", "data": {"x": 2, "y": [1, {"a": 1, "b": 2}]}});
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn a_missing_field_or_bad_syntax_names_the_part() {
        let e = render(&src("x", "Hi {{ name }}", None), "a@b.c", &json!({})).unwrap_err();
        assert_eq!(e.part, "body_text");
        assert!(e.detail.contains("missing"), "{e}");
        let e = check(&src("{{ x", "", None)).unwrap_err();
        assert_eq!(e.part, "subject");
        assert!(e.detail.contains("syntax"), "{e}");
    }
}
