//! The digest's text, HTML and subject, rendered from its figures with minijinja templates
//! (HTML auto-escaped). Rendered once per digest and stored on its `digest_sends` row.

use std::sync::OnceLock;

use minijinja::{context, Environment};

use crate::db::digest::figures::{Figures, CAMPAIGNS_LISTED};
use crate::db::digest::StoredContent;

const HTML: &str = include_str!("templates/digest.html");
const TEXT: &str = include_str!("templates/digest.txt");

/// The templates a digest is rendered with. Built in; tests may pass others.
pub struct Templates {
    env: Environment<'static>,
}

impl Templates {
    /// `html` is auto-escaped, `text` is not.
    pub fn new(html: &str, text: &str) -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.add_template_owned("digest.html", html.to_owned())?;
        env.add_template_owned("digest.txt", text.to_owned())?;
        Ok(Templates { env })
    }

    /// Mailroom's own templates, compiled once.
    pub fn builtin() -> &'static Templates {
        static BUILTIN: OnceLock<Templates> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            // The built-in templates are part of the binary and covered by tests.
            Templates::new(HTML, TEXT).expect("the built-in digest templates compile")
        })
    }

    /// Renders one digest. `id` is the digest send it is stored on.
    pub fn render(&self, id: i64, f: &Figures) -> Result<StoredContent, minijinja::Error> {
        let range = format!(
            "{} – {} ({})",
            f.local_start.format("%a %-d %b %Y %H:%M"),
            f.local_end.format("%a %-d %b %Y %H:%M"),
            f.timezone
        );
        let suppressed_total: i64 = f.suppressed.iter().map(|s| s.count).sum();
        let reported = |kind: &str| {
            f.reported
                .iter()
                .filter(|r| r.kind == kind)
                .map(|r| r.count)
                .sum::<i64>()
        };
        let (hard, soft, complaints) = (
            reported("hard_bounce"),
            reported("soft_bounce"),
            reported("complaint"),
        );
        let quiet = f.campaigns_total == 0
            && f.subscribers_gained == 0
            && suppressed_total == 0
            && f.unknown == 0
            && f.failed == 0
            && hard + soft + complaints == 0;
        let cx = context! {
            org_name => &f.org_name,
            range => &range,
            campaigns => &f.campaigns.0,
            campaigns_total => f.campaigns_total,
            campaigns_more => (f.campaigns_total - CAMPAIGNS_LISTED).max(0),
            subscribers_gained => f.subscribers_gained,
            suppressed => &f.suppressed.0,
            suppressed_total => suppressed_total,
            unknown => f.unknown,
            failed => f.failed,
            hard_bounces => hard,
            soft_bounces => soft,
            complaints => complaints,
            quiet => quiet,
        };
        Ok(StoredContent {
            id,
            subject: format!(
                "Weekly digest for {}: {} – {}",
                f.org_name,
                f.local_start.format("%-d %b"),
                f.local_end.format("%-d %b %Y")
            ),
            html: self.env.get_template("digest.html")?.render(&cx)?,
            text: self.env.get_template("digest.txt")?.render(&cx)?,
        })
    }
}
