//! One renderer per kind builds each message at send time from the delivery's typed references
//! (deliveries never carry bodies). Test mail now; digest and campaign mail arrive with their
//! engines.

use anyhow::Context;
use lettre::message::{header::ContentType, Mailbox, Message};
use lettre::Address;

use app::db::deliveries::{Claimed, Sender};
use app::domain::JobId;

pub struct Rendered {
    pub from: Address,
    pub to: Address,
    pub bytes: Vec<u8>,
}

pub fn render(
    message_id_domain: &str,
    sender: Option<&Sender>,
    c: &Claimed,
) -> anyhow::Result<Rendered> {
    let sender = sender.context("no sender identity for the organisation")?;
    let job: JobId = c.job_id.parse()?;
    let from: Address = sender.from_address.parse()?;
    let to: Address = c.recipient.parse()?;
    let (subject, body) = match &job {
        JobId::Test { .. } => (
            "Mailroom test message".to_string(),
            format!("This is a test message from Mailroom.\n\n{}\n", c.job_id),
        ),
        other => anyhow::bail!("no renderer for {} mail yet", other.kind()),
    };
    let mut builder = Message::builder()
        .from(Mailbox::new(Some(sender.from_name.clone()), from.clone()))
        .to(Mailbox::new(None, to.clone()))
        .message_id(Some(job.message_id(message_id_domain)))
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    if let Some(reply_to) = &sender.reply_to {
        builder = builder.reply_to(reply_to.parse()?);
    }
    Ok(Rendered {
        from,
        to,
        bytes: builder.body(body)?.formatted(),
    })
}
