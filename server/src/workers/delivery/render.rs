//! One renderer per kind builds each message at send time from the delivery's typed references
//! (deliveries never carry bodies): test mail, and campaign mail with its RFC 8058 one-click
//! unsubscribe headers, set-password mail (invitations and resets), and the weekly digest (its content was rendered once, when its week was
//! claimed, and is wrapped here per recipient). Each message is signed with its org's DKIM key
//! when the org signs.

use anyhow::Context;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Mailbox, Message, MultiPart};
use lettre::Address;

use app::campaign_render::{Compiled, Extra, Fields, Rendered as CampaignMessage};
use app::db::delivery::{Claimed, Sender};
use app::db::digest::Content as DigestContent;
use app::domain::{JobId, Reference, TxMessageId};
use app::unsubscribe::{Claim, Keys};

pub struct Rendered {
    /// The SMTP envelope sender (MAIL FROM): a VERP address at the org's bounce domain, or its
    /// Return-Path, or its From address.
    pub envelope_from: Address,
    pub to: Address,
    pub bytes: Vec<u8>,
}

/// What links in messages need: the dashboard's public address and the signing keys.
#[derive(Clone, Debug)]
pub struct Links {
    pub public_url: String,
    pub keys: Keys,
}

/// Everything a renderer may read, loaded once per batch.
pub struct Inputs<'a> {
    /// None: the domain of the org's From address.
    pub message_id_domain: Option<&'a str>,
    pub links: &'a Links,
    pub sender: Option<&'a Sender>,
    pub campaign: Option<&'a Compiled>,
    /// The recipient's name, for campaign mail.
    pub subscriber_name: Option<&'a str>,
    pub digest: Option<&'a DigestContent>,
    /// Set-password links (invitations and resets) of the batch.
    pub invites: &'a super::invite::Invites,
    /// Sign-up confirmations of the batch.
    pub confirms: &'a super::confirm::Confirms,
    /// The transactional message's content, rendered when its request was accepted.
    pub transactional: Option<&'a app::db::transactional::Content>,
    /// The account notice's text, fixed when it was made.
    pub notice: Option<&'a app::db::notices::Stored>,
    /// An automation mail step's content and the recipient's fields.
    pub automation: Option<&'a app::db::automation::MailContent>,
    /// The org's DKIM signer (None: it does not sign), or why its key cannot be used.
    pub dkim: Result<Option<&'a super::dkim::Signer>, &'a str>,
    /// Signs VERP envelope senders (loaded when an org of the batch has a bounce domain).
    pub verp_key: Option<&'a [u8]>,
    /// Signs tracked links and pixels (loaded when an org of the batch tracks clicks or opens).
    pub click_key: Option<&'a [u8]>,
}

const LIST_UNSUBSCRIBE: HeaderName = HeaderName::new_from_ascii_str("List-Unsubscribe");
const LIST_UNSUBSCRIBE_POST: HeaderName = HeaderName::new_from_ascii_str("List-Unsubscribe-Post");

/// RFC 8058 one-click unsubscribe headers for bulk mail (campaigns and automations).
fn unsubscribe_headers(
    builder: lettre::message::MessageBuilder,
    link: &str,
) -> lettre::message::MessageBuilder {
    builder
        .raw_header(HeaderValue::new(LIST_UNSUBSCRIBE, format!("<{link}>")))
        .raw_header(HeaderValue::new(
            LIST_UNSUBSCRIBE_POST,
            "List-Unsubscribe=One-Click".into(),
        ))
}

/// What every bulk message gets after its template: the unsubscribe link in the text part,
/// whatever the author's template says, and the org's click and open tracking.
fn bulk_extras(
    cx: &Inputs<'_>,
    sender: &Sender,
    c: &Claimed,
    mut m: CampaignMessage,
    link: &str,
) -> anyhow::Result<CampaignMessage> {
    if let Some(text) = &mut m.text {
        text.push_str(&format!("\n\n--\nUnsubscribe: {link}\n"));
    }
    if let (true, Some(key), Some(html)) = (sender.click_tracking, cx.click_key, m.html.as_deref())
    {
        m.html = Some(super::tracking::track_links(
            html,
            &cx.links.public_url,
            key,
            &c.job.to_string(),
            link,
        )?);
    }
    if let (true, Some(key), Some(html)) = (sender.open_tracking, cx.click_key, m.html.as_deref()) {
        m.html = Some(super::tracking::add_open_pixel(
            html,
            &cx.links.public_url,
            key,
            &c.job.to_string(),
        )?);
    }
    Ok(m)
}

pub fn render(cx: &Inputs<'_>, c: &Claimed) -> anyhow::Result<Rendered> {
    let sender = cx
        .sender
        .context("no sender identity for the organisation")?;
    let dkim = cx
        .dkim
        .map_err(|e| anyhow::anyhow!("cannot sign with the organisation's DKIM key: {e}"))?;
    let from: Address = sender.from_address.parse()?;
    // The Return-Path header itself is the receiving server's to add (RFC 5321 §4.4), from this.
    let verp = sender
        .bounce_domain
        .as_deref()
        .zip(cx.verp_key)
        .and_then(|(domain, key)| app::verp::address(key, c.org.0, &c.job, domain));
    let envelope_from: Address = match (verp, &sender.return_path) {
        (Some(v), _) => v.parse()?,
        (None, Some(r)) => r.parse()?,
        (None, None) => from.clone(),
    };
    let to: Address = c.recipient.as_str().parse()?;
    let message_id = c
        .job
        .message_id(cx.message_id_domain.unwrap_or(from.domain()));
    let mut builder = Message::builder()
        .from(Mailbox::new(Some(sender.from_name.clone()), from))
        .to(Mailbox::new(None, to.clone()))
        .message_id(Some(message_id));
    if let Some(reply_to) = &sender.reply_to {
        builder = builder.reply_to(reply_to.parse()?);
    }
    let job = &c.job;
    let message = match job {
        JobId::Test {
            content_version, ..
        } => match cx.campaign {
            // A test of a campaign: its content as the version the dialog showed, to the address
            // typed in. There is no subscriber, so no working unsubscribe link.
            Some(content) => {
                anyhow::ensure!(
                    content.content_version == *content_version,
                    "the campaign was edited after this test was queued (version {} now, the test was of version {content_version})",
                    content.content_version
                );
                let mut m = content.render(&Fields {
                    name: "Test Recipient",
                    email: c.recipient.as_str(),
                    unsubscribe_url: &format!("{}/u/test-message", cx.links.public_url),
                })?;
                m.subject = format!("[Test] {}", m.subject);
                m
            }
            None => CampaignMessage {
                subject: "Mailroom test message".to_string(),
                text: Some(format!(
                    "This is a test message from Mailroom.\n\n{}\n",
                    c.job
                )),
                html: None,
            },
        },
        JobId::Campaign {
            campaign_id,
            subscriber_id,
        } => {
            let content = cx
                .campaign
                .context("the campaign's content was not loaded")?;
            // Content is frozen at approval; a delivery for another version must not go out
            // with text nobody approved.
            let made_for = match c.reference {
                Reference::Campaign { version, .. } => Some(version),
                _ => None,
            };
            anyhow::ensure!(
                made_for == Some(content.content_version),
                "the campaign's content is version {}, this delivery was made for {made_for:?}",
                content.content_version,
            );
            let link = crate::http::unsubscribe::link(
                &cx.links.public_url,
                &cx.links.keys,
                Claim {
                    org_id: c.org.0,
                    subscriber_id: *subscriber_id,
                    from: app::unsubscribe::Origin::Campaign(*campaign_id),
                },
            );
            builder = unsubscribe_headers(builder, &link);
            let m = content.render(&Fields {
                name: cx.subscriber_name.unwrap_or(""),
                email: c.recipient.as_str(),
                unsubscribe_url: &link,
            })?;
            bulk_extras(cx, sender, c, m, &link)?
        }
        JobId::Automation { step, .. } => {
            let mail = cx
                .automation
                .filter(|m| m.org_id == c.org.0 && m.step == *step)
                .context("the automation step's mail was not loaded (or the step is not a mail)")?;
            let Reference::Automation { subscriber, .. } = c.reference else {
                anyhow::bail!("an automation job without its references");
            };
            let link = crate::http::unsubscribe::link(
                &cx.links.public_url,
                &cx.links.keys,
                Claim {
                    org_id: c.org.0,
                    subscriber_id: subscriber.0,
                    from: app::unsubscribe::Origin::Automation(mail.automation_id),
                },
            );
            builder = unsubscribe_headers(builder, &link);
            let compiled = Compiled::new(&app::db::campaign::Content {
                id: mail.automation_id,
                org_id: mail.org_id,
                subject: mail.subject.clone(),
                body: mail.body.clone(),
                body_format: mail.format,
                content_version: 0,
            })?;
            let m = compiled.render_with(
                &Fields {
                    name: &mail.name,
                    email: c.recipient.as_str(),
                    unsubscribe_url: &link,
                },
                &Extra {
                    attributes: Some(&mail.attributes),
                    event: Some(&mail.context),
                },
            )?;
            bulk_extras(cx, sender, c, m, &link)?
        }
        JobId::Invite { .. } => {
            let (subject, text) =
                super::invite::subject_and_body(cx.invites, &cx.links.public_url, job, c)?;
            CampaignMessage {
                subject,
                text: Some(text),
                html: None,
            }
        }
        JobId::Confirm { .. } => {
            let (subject, text) =
                super::confirm::subject_and_body(cx.confirms, &cx.links.public_url, job)?;
            CampaignMessage {
                subject,
                text: Some(text),
                html: None,
            }
        }
        JobId::Transactional { .. } => {
            let m = cx
                .transactional
                .filter(|m| {
                    c.reference
                        == Reference::Transactional {
                            message: TxMessageId(m.id),
                        }
                        && m.org_id == c.org.0
                })
                .context("the transactional message's content was not loaded")?;
            CampaignMessage {
                subject: m.subject.clone(),
                text: Some(m.body_text.clone()),
                html: m.body_html.clone(),
            }
        }
        JobId::Notice { .. } => {
            let n = cx
                .notice
                .filter(|n| n.org_id == c.org.0)
                .context("the account notice was not loaded")?;
            CampaignMessage {
                subject: n.subject.clone(),
                text: Some(app::domain::notice::sent_text(
                    &n.body,
                    &n.path,
                    &cx.links.public_url,
                )),
                html: None,
            }
        }
        JobId::Digest { .. } => {
            let digest = cx
                .digest
                .filter(|d| matches!(c.reference, Reference::Digest { send, .. } if send.0 == d.id))
                .context("the digest's content was not loaded (or was never stored)")?;
            CampaignMessage {
                subject: digest.subject.clone(),
                text: Some(digest.content_text.clone()),
                html: Some(digest.content_html.clone()),
            }
        }
    };
    let builder = builder.subject(message.subject);
    let message = match (message.text, message.html) {
        (Some(text), Some(html)) => {
            builder.multipart(MultiPart::alternative_plain_html(text, html))?
        }
        (None, Some(html)) => builder.header(ContentType::TEXT_HTML).body(html)?,
        (text, None) => builder
            .header(ContentType::TEXT_PLAIN)
            .body(text.unwrap_or_default())?,
    };
    let mut bytes = message.formatted();
    if let Some(signer) = dkim {
        let header = signer.header_for(&bytes).map_err(anyhow::Error::msg)?;
        bytes.splice(0..0, header.into_bytes());
    }
    Ok(Rendered {
        envelope_from,
        to,
        bytes,
    })
}
