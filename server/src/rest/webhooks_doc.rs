//! The events Mailroom POSTs to an org's webhook endpoints, as the OpenAPI document's `webhooks`
//! (one entry per event type): the body's schema (version 1) and the signature headers. The
//! bodies themselves are built by the triggers of `migrations/20261216000100_webhooks_out.sql`;
//! the tests check every field they send against these schemas.

use serde::Serialize;
use utoipa::openapi::path::{OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::{
    ContentBuilder, HttpMethod, PathItem, PathsBuilder, Ref, Required, ResponseBuilder,
};
use utoipa::{PartialSchema, ToSchema};

use app::domain::WebhookEventType;

/// `message.delivered`, `message.failed`, `message.unknown`: one outcome of one attempt.
#[derive(Serialize, ToSchema)]
pub struct MessageEvent {
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// When the outcome was recorded (UTC, RFC 3339 with milliseconds).
    pub timestamp: String,
    pub data: MessageData,
}

#[derive(Serialize, ToSchema)]
pub struct MessageData {
    /// The message's deterministic id (`GET /api/v1/deliveries/{job_id}`).
    pub job_id: String,
    /// `campaign`, `automation`, `transactional`, `digest`, `confirm`, `invite`, `notice` or
    /// `test`.
    pub kind: String,
    /// Absent once the recipient was erased.
    pub recipient: Option<String>,
    pub attempt: i32,
    pub campaign_id: Option<i64>,
    /// The automation an `automation` message is a step of.
    pub automation_id: Option<i64>,
    pub subscriber_id: Option<i64>,
    pub transactional_message_id: Option<i64>,
    /// The relay's reply.
    pub reply: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Present (true) once the recipient was erased.
    pub erased: Option<bool>,
}

/// `message.bounced`, `message.complained`: a relay's report, recorded once.
#[derive(Serialize, ToSchema)]
pub struct FeedbackEvent {
    #[serde(rename = "type")]
    pub kind: String,
    /// When Mailroom received the report.
    pub timestamp: String,
    pub data: FeedbackData,
}

#[derive(Serialize, ToSchema)]
pub struct FeedbackData {
    /// The message it is about, when matched.
    pub job_id: Option<String>,
    pub kind: Option<String>,
    pub recipient: Option<String>,
    pub campaign_id: Option<i64>,
    pub subscriber_id: Option<i64>,
    pub transactional_message_id: Option<i64>,
    /// `hard` or `soft` (bounces only).
    pub bounce: Option<String>,
    /// Where the report came from (`dsn`, `arf`, `ses`, `postmark`, …).
    pub source: String,
    /// The enhanced status code, when given.
    pub status: Option<String>,
    pub diagnostic: Option<String>,
    /// Whether it suppressed the address.
    pub suppressed: bool,
    pub erased: Option<bool>,
}

/// `subscriber.unsubscribed`, `subscriber.suppressed`, `subscriber.confirmed`,
/// `subscriber.erased`.
#[derive(Serialize, ToSchema)]
pub struct SubscriberEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub timestamp: String,
    pub data: SubscriberData,
}

#[derive(Serialize, ToSchema)]
pub struct SubscriberData {
    /// Confirmed and erased subscribers.
    pub subscriber_id: Option<i64>,
    /// The address (suppressions: its lower-case form). Never in `subscriber.erased`.
    pub email: Option<String>,
    /// The SaaS's own id of a confirmed subscriber.
    pub external_id: Option<String>,
    /// Suppressions: `unsubscribed`, `hard_bounce`, `complaint`, `manual` or `import`.
    pub reason: Option<String>,
    /// Suppressions: what recorded it.
    pub source: Option<String>,
    pub erased: Option<bool>,
}

/// `campaign.sent`, `campaign.paused`.
#[derive(Serialize, ToSchema)]
pub struct CampaignEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub timestamp: String,
    pub data: CampaignData,
}

#[derive(Serialize, ToSchema)]
pub struct CampaignData {
    pub campaign_id: i64,
    pub name: String,
}

/// `link.clicked`: a person followed a tracked link (scanners' clicks are not sent).
#[derive(Serialize, ToSchema)]
pub struct ClickEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub timestamp: String,
    pub data: ClickData,
}

#[derive(Serialize, ToSchema)]
pub struct ClickData {
    /// Where the link led (absent once the subscriber was erased, if it named their address).
    pub url: Option<String>,
    /// The message it was in (absent once the subscriber was erased).
    pub job_id: Option<String>,
    /// The campaign the message was part of (null for an automation's mail).
    pub campaign_id: Option<i64>,
    /// The automation whose step sent it (null for a campaign's mail).
    pub automation_id: Option<i64>,
    pub subscriber_id: Option<i64>,
    /// Present (true) once the link, which named the subscriber's address, was forgotten.
    pub erased: Option<bool>,
}

/// `automation.enrolled`, `automation.completed`, `automation.exited`: one person's way through
/// an automation began, or ended (each once: its key is the enrolment).
#[derive(Serialize, ToSchema)]
pub struct AutomationEvent {
    #[serde(rename = "type")]
    pub kind: String,
    /// When they were enrolled, or when it ended.
    pub timestamp: String,
    pub data: AutomationData,
}

#[derive(Serialize, ToSchema)]
pub struct AutomationData {
    pub automation_id: i64,
    pub enrolment_id: i64,
    /// The automation's version they are on.
    pub version: i32,
    pub subscriber_id: i64,
    /// Their next step (where they left, for `automation.exited`).
    pub step: i32,
    /// `automation.exited`: `goal`, `unsubscribed`, `erased`, `removed`, `branch`, `stopped`,
    /// `step` (an exit step) or `failed` (the database refused one of their steps).
    pub reason: Option<String>,
}

/// `segment.entered`, `segment.left`: someone came to match a saved segment, or no longer
/// does, as a scan found (every `--segment-scan-seconds`; each scan's findings once: its key is
/// the segment, the scan's number and the subscriber).
#[derive(Serialize, ToSchema)]
pub struct SegmentEvent {
    #[serde(rename = "type")]
    pub kind: String,
    /// When the scan found it.
    pub timestamp: String,
    pub data: SegmentData,
}

#[derive(Serialize, ToSchema)]
pub struct SegmentData {
    pub segment_id: i64,
    /// The segment's version the scan evaluated.
    pub version: i32,
    pub subscriber_id: i64,
}

/// `webhook.test`: an owner pressed "Send a test event".
#[derive(Serialize, ToSchema)]
pub struct TestEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub timestamp: String,
    pub data: TestData,
}

#[derive(Serialize, ToSchema)]
pub struct TestData {
    pub endpoint_id: i64,
}

/// The schema (by component name) of an event type's body.
pub fn schema_of(t: WebhookEventType) -> &'static str {
    use WebhookEventType as T;
    match t {
        T::MessageDelivered | T::MessageFailed | T::MessageUnknown => "MessageEvent",
        T::MessageBounced | T::MessageComplained => "FeedbackEvent",
        T::SubscriberUnsubscribed
        | T::SubscriberSuppressed
        | T::SubscriberConfirmed
        | T::SubscriberErased => "SubscriberEvent",
        T::CampaignSent | T::CampaignPaused => "CampaignEvent",
        T::LinkClicked => "ClickEvent",
        T::AutomationEnrolled | T::AutomationCompleted | T::AutomationExited => "AutomationEvent",
        T::SegmentEntered | T::SegmentLeft => "SegmentEvent",
        T::WebhookTest => "TestEvent",
    }
}

/// Adds the `webhooks` section and the events' schemas to the document.
pub fn describe(doc: &mut utoipa::openapi::OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, schema) in [
        ("MessageEvent", MessageEvent::schema()),
        ("MessageData", MessageData::schema()),
        ("FeedbackEvent", FeedbackEvent::schema()),
        ("FeedbackData", FeedbackData::schema()),
        ("SubscriberEvent", SubscriberEvent::schema()),
        ("SubscriberData", SubscriberData::schema()),
        ("CampaignEvent", CampaignEvent::schema()),
        ("CampaignData", CampaignData::schema()),
        ("ClickEvent", ClickEvent::schema()),
        ("ClickData", ClickData::schema()),
        ("AutomationEvent", AutomationEvent::schema()),
        ("AutomationData", AutomationData::schema()),
        ("SegmentEvent", SegmentEvent::schema()),
        ("SegmentData", SegmentData::schema()),
        ("TestEvent", TestEvent::schema()),
        ("TestData", TestData::schema()),
    ] {
        components.schemas.insert(name.to_owned(), schema);
    }
    let header = |name: &str, text: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(text))
            .schema(Some(String::schema()))
            .build()
    };
    let mut hooks = PathsBuilder::new();
    for t in WebhookEventType::ALL {
        let op = OperationBuilder::new()
            .summary(Some(t.describe()))
            .description(Some(
                "Signed the Standard Webhooks way; retried for three days until the endpoint \
                 answers 2xx (408, 429 and 5xx are retried, other answers fail the event). \
                 Dedupe on `webhook-id`. See docs/webhooks.md.",
            ))
            .parameter(header(
                "webhook-id",
                "The event's identity, the same on every attempt.",
            ))
            .parameter(header(
                "webhook-timestamp",
                "When this attempt was signed (Unix seconds).",
            ))
            .parameter(header(
                "webhook-signature",
                "`v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one per secret (two during a rotation), space-separated.",
            ))
            .request_body(Some(
                RequestBodyBuilder::new()
                    .required(Some(Required::True))
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name(schema_of(t))))
                            .build(),
                    )
                    .build(),
            ))
            .response(
                "200",
                ResponseBuilder::new().description("Received (any 2xx).").build(),
            )
            .build();
        hooks = hooks.path(t.as_str(), PathItem::new(HttpMethod::Post, op));
    }
    doc.webhooks = Some(hooks.build());
}
