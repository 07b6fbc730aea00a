//! `POST /api/v1/events`: the SaaS's events about its people, up to [`EVENTS_MAX`] a request.
//! Each row is checked on its own and answered on its own (stored, duplicate or rejected with
//! the problem naming its index and field); the good rows are stored in one transaction,
//! exactly once per event id however often and however concurrently it is posted.

use std::collections::HashMap;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::events::{self, NewEvent};
use app::domain::event::{self, SubscriberRef, UnknownSubscribers, EVENTS_MAX};
use app::domain::input::InputError;
use app::domain::{ApiScope, EmailAddress, OrgId, SubscriberId};

use super::{Body, FieldError, Problem, RestState, Token};

/// The events route; its body limit is the bulk one (a thousand events with properties are
/// more than an ordinary request's 2 MiB).
pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(record))
}

/// Events to record.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventBatch {
    /// 1 to 1,000 events. Each row is read field by field, so a row that does not fit is
    /// answered on its own and the others are still stored.
    #[schema(value_type = Vec<EventInput>)]
    pub events: Vec<serde_json::Value>,
    /// `refuse` (the default): an event about someone who is not a subscriber is rejected.
    /// `create`: a subscriber named by `email` is created, unconfirmed and on no list.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub unknown_subscribers: UnknownSubscribers,
}

/// One event: who it is about (exactly one of `subscriber_id`, `email`, `external_id`), what
/// happened, and when.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // The row's shape for the document; rows are read field by field.
pub struct EventInput {
    /// The caller's id for this event (1 to 200 visible ASCII characters): the same id
    /// posted again is the same event.
    id: String,
    subscriber_id: Option<i64>,
    email: Option<String>,
    external_id: Option<String>,
    /// 1 to 100 characters (`trial_started`, `invited_colleague`).
    name: String,
    /// A JSON object of at most 16 KiB.
    #[schema(value_type = Option<Object>)]
    properties: Option<serde_json::Value>,
    /// RFC 3339; when left out, the time it was received.
    occurred_at: Option<String>,
}

/// What became of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// Recorded now.
    Stored,
    /// An event with this id was recorded before (or earlier in this request): that one
    /// stands, and this row changed nothing.
    Duplicate,
    /// Not recorded: `error` says why.
    Rejected,
}

/// One row's answer, in the order of the request.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventResult {
    pub status: Fate,
    /// The recorded event's id (for a duplicate, the one recorded first).
    pub event_id: Option<i64>,
    pub subscriber_id: Option<i64>,
    pub error: Option<FieldError>,
}

/// Every row's fate, with the tallies.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventsResult {
    pub stored: usize,
    pub duplicates: usize,
    pub rejected: usize,
    pub results: Vec<EventResult>,
}

/// Records events about the organisation's subscribers, exactly once per event id.
#[utoipa::path(
    post,
    path = "/events",
    tag = "events",
    request_body = EventBatch,
    responses(
        (status = 200, description = "Every acceptable row recorded (or found recorded); the others named.", body = EventsResult),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 16 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No events, too many, or every row rejected (each named).", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["events:write"]))
)]
async fn record(
    token: Token,
    State(pool): State<PgPool>,
    Body(batch): Body<EventBatch>,
) -> Result<Json<EventsResult>, Problem> {
    token.require(ApiScope::EventsWrite)?;
    let n = batch.events.len();
    if n == 0 || n > EVENTS_MAX {
        return Err(Problem::field(
            "#/events",
            format!("events: send 1 to {EVENTS_MAX} events in one request; this one has {n}."),
        ));
    }
    let org = OrgId(token.org_id());
    let mut tx = pool.begin().await?;
    let retention = events::retention_days(&mut tx, org).await?;
    let now = chrono::Utc::now();
    let mut results: Vec<EventResult> = (0..n)
        .map(|_| EventResult {
            status: Fate::Rejected,
            event_id: None,
            subscriber_id: None,
            error: None,
        })
        .collect();
    let mut rows: Vec<(usize, Row)> = Vec::with_capacity(n);
    for (i, v) in batch.events.iter().enumerate() {
        match Row::read(v, now, retention) {
            Ok(r) => rows.push((i, r)),
            Err(e) => results[i].error = Some(at_row(i, e)),
        }
    }

    // Who each row is about; with `create`, the unknown addresses become subscribers and are
    // looked up again (a concurrent request may have created them first).
    let refs: Vec<SubscriberRef> = rows.iter().map(|(_, r)| r.subscriber.clone()).collect();
    let mut found = events::resolve(&mut tx, org, &refs).await?;
    if batch.unknown_subscribers == UnknownSubscribers::Create {
        let unknown: Vec<&EmailAddress> = refs
            .iter()
            .zip(&found)
            .filter_map(|(r, f)| match (r, f) {
                (SubscriberRef::Email(e), None) => Some(e),
                _ => None,
            })
            .collect();
        if !unknown.is_empty() {
            let mut distinct: Vec<&EmailAddress> = Vec::with_capacity(unknown.len());
            for e in unknown {
                if !distinct.iter().any(|d| d.lower() == e.lower()) {
                    distinct.push(e);
                }
            }
            events::create_unknown(&mut tx, org, &distinct).await?;
            found = events::resolve(&mut tx, org, &refs).await?;
        }
    }

    // The rows to store: each known person's, each event id once (a repeat in this request is
    // a duplicate of its first row).
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    let mut to_store: Vec<(usize, NewEvent<'_>)> = Vec::new();
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    for ((i, row), who) in rows.iter().zip(&found) {
        let Some(subscriber) = *who else {
            results[*i].error = Some(at_row(
                *i,
                unknown(&row.subscriber, batch.unknown_subscribers),
            ));
            continue;
        };
        results[*i].subscriber_id = Some(subscriber.0);
        match first_of.get(row.key.as_str()) {
            Some(&first) => repeats.push((*i, first)),
            None => {
                first_of.insert(&row.key, *i);
                to_store.push((
                    *i,
                    NewEvent {
                        key: &row.key,
                        subscriber,
                        name: &row.name,
                        properties: &row.properties,
                        occurred_at: row.occurred_at,
                    },
                ));
            }
        }
    }
    let news: Vec<NewEvent<'_>> = to_store.iter().map(|(_, e)| e.clone()).collect();
    let stored = if news.is_empty() {
        Vec::new()
    } else {
        events::insert(&mut tx, org, &news).await?
    };
    tx.commit().await?;

    for ((i, _), s) in to_store.iter().zip(stored) {
        results[*i].event_id = Some(s.id);
        results[*i].status = if s.new { Fate::Stored } else { Fate::Duplicate };
    }
    for (i, first) in repeats {
        results[i].event_id = results[first].event_id;
        results[i].status = Fate::Duplicate;
    }
    let count = |f: Fate| results.iter().filter(|r| r.status == f).count();
    let (stored, duplicates, rejected) = (
        count(Fate::Stored),
        count(Fate::Duplicate),
        count(Fate::Rejected),
    );
    if rejected == n {
        let errors: Vec<FieldError> = results.into_iter().filter_map(|r| r.error).collect();
        let detail = match errors.as_slice() {
            [one] => one.detail.clone(),
            _ => format!("None of the {n} events was recorded: each row's problem is listed."),
        };
        let mut p = Problem::field("#/events", detail);
        p.errors = errors;
        return Err(p);
    }
    Ok(Json(EventsResult {
        stored,
        duplicates,
        rejected,
        results,
    }))
}

/// A row that passed its checks.
struct Row {
    key: String,
    subscriber: SubscriberRef,
    name: String,
    properties: serde_json::Value,
    occurred_at: chrono::DateTime<chrono::Utc>,
}

const FIELDS: [&str; 7] = [
    "id",
    "subscriber_id",
    "email",
    "external_id",
    "name",
    "properties",
    "occurred_at",
];

impl Row {
    /// Reads one row field by field; the error names the field (relative to the row).
    fn read(
        v: &serde_json::Value,
        now: chrono::DateTime<chrono::Utc>,
        retention_days: i32,
    ) -> Result<Row, InputError> {
        let Some(obj) = v.as_object() else {
            return Err(InputError::new("", "each event is a JSON object"));
        };
        if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(InputError::new(
                "",
                format!(
                    "unknown field {:?} (an event has {})",
                    app::domain::input::excerpt(k),
                    FIELDS.join(", ")
                ),
            ));
        }
        let text = |field: &str| -> Result<Option<&str>, InputError> {
            match obj.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(InputError::new(field, "must be a string")),
            }
        };
        let key = event::event_key(
            "id",
            text("id")?.ok_or_else(|| InputError::new("id", "every event needs an id"))?,
        )?;
        let name = event::event_name(
            "name",
            text("name")?.ok_or_else(|| InputError::new("name", "every event needs a name"))?,
        )?;
        let by_id = match obj.get("subscriber_id") {
            None | Some(serde_json::Value::Null) => None,
            Some(n) => match n.as_i64() {
                Some(id) if id >= 1 => Some(SubscriberRef::Id(SubscriberId(id))),
                _ => {
                    return Err(InputError::new(
                        "subscriber_id",
                        "a subscriber id is a whole number, 1 or more",
                    ))
                }
            },
        };
        let by_email = match text("email")? {
            None => None,
            Some(e) => {
                app::domain::input::line_input("email", e, 254)?;
                Some(SubscriberRef::Email(
                    EmailAddress::parse(e).map_err(|e| InputError::new("email", e.to_string()))?,
                ))
            }
        };
        let by_external = match text("external_id")? {
            None => None,
            Some(x) => Some(SubscriberRef::External(event::external_id(
                "external_id",
                x,
            )?)),
        };
        let mut named = [by_id, by_email, by_external].into_iter().flatten();
        let subscriber = match (named.next(), named.next()) {
            (Some(s), None) => s,
            (None, _) => {
                return Err(InputError::new(
                    "subscriber_id",
                    "name the subscriber by one of subscriber_id, email or external_id",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(InputError::new(
                    "subscriber_id",
                    "name the subscriber by exactly one of subscriber_id, email or external_id",
                ))
            }
        };
        let properties = match obj.get("properties") {
            None | Some(serde_json::Value::Null) => serde_json::json!({}),
            Some(p) => {
                event::properties("properties", p)?;
                p.clone()
            }
        };
        let occurred_at = match text("occurred_at")? {
            None => now,
            Some(t) => event::occurred_at("occurred_at", t, now, retention_days)?,
        };
        Ok(Row {
            key,
            subscriber,
            name,
            properties,
            occurred_at,
        })
    }
}

/// The problem of row `i`, named by its pointer (`#/events/3/occurred_at`).
fn at_row(i: usize, e: InputError) -> FieldError {
    let (pointer, detail) = if e.field.is_empty() {
        (
            format!("#/events/{i}"),
            format!("events[{i}]: {}.", e.fault),
        )
    } else {
        (
            format!("#/events/{i}/{}", e.field),
            format!("events[{i}].{e}."),
        )
    };
    FieldError {
        pointer,
        detail: app::domain::input::capped(&detail).into_owned(),
    }
}

/// Why a row names no one.
fn unknown(r: &SubscriberRef, policy: UnknownSubscribers) -> InputError {
    match r {
        SubscriberRef::Id(id) => InputError::new(
            "subscriber_id",
            format!("there is no subscriber {} in this organisation", id.0),
        ),
        SubscriberRef::Email(_) if policy == UnknownSubscribers::Refuse => InputError::new(
            "email",
            "no subscriber has this address (send \"unknown_subscribers\": \"create\" to create them)",
        ),
        SubscriberRef::Email(_) => InputError::new("email", "no subscriber has this address"),
        SubscriberRef::External(_) => InputError::new(
            "external_id",
            "no subscriber has this external id (name a new person by email to create them)",
        ),
    }
}
