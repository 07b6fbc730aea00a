//! `/api/v1/automations`: the organisation's automations (what they are, who is in them, each
//! step's counts), and people enrolled in or taken out of one. An enrolment names its
//! subscriber by id, address or external id and carries the caller's id for it: the same id
//! posted any number of times, at once or later, is one enrolment.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::automation::{self, EnrolError, Summary};
use app::domain::event::SubscriberRef;
use app::domain::{ApiScope, EmailAddress, OrgId, SubscriberId};

use super::{Body, Id, Problem, RestState, Token};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(one))
        .routes(routes!(enrol))
        .routes(routes!(remove))
}

/// An automation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Automation {
    pub id: i64,
    pub name: String,
    /// `draft`, `active`, `paused` or `stopped`.
    pub status: String,
    /// The version people are enrolled on (absent until one is approved).
    pub live_version: Option<i32>,
    /// The version being edited; above `live_version` while an edit waits for approval.
    pub draft_version: i32,
    /// People on their way through it now.
    pub active: i64,
    /// Every enrolment, finished or not.
    pub enrolled: i64,
}

impl From<Summary> for Automation {
    fn from(s: Summary) -> Self {
        Automation {
            id: s.id,
            name: s.name,
            status: s.status.to_string(),
            live_version: s.live_version,
            draft_version: s.draft_version,
            active: s.active,
            enrolled: s.enrolled,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AutomationList {
    pub data: Vec<Automation>,
}

/// One step's count: how many took it with an outcome, or (`outcome` absent) whose next
/// step it is.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StepCount {
    /// The automation's version the people are on.
    pub version: i32,
    pub step: i32,
    /// `sent`, `skipped`, `waited`, `branched`, `set`, `listed`, `unlisted` or `exited`.
    pub outcome: Option<String>,
    /// Why, for skipped steps.
    pub detail: String,
    pub count: i64,
}

/// An automation with its live definition and each step's counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AutomationDetail {
    #[serde(flatten)]
    pub automation: Automation,
    /// The live version's definition (trigger, re-entry rule, goal, steps).
    #[schema(value_type = Option<Object>)]
    pub definition: Option<serde_json::Value>,
    pub steps: Vec<StepCount>,
}

/// Someone to enrol.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnrolInput {
    /// The caller's id for this enrolment (1 to 200 visible ASCII characters).
    pub id: String,
    /// Exactly one of `subscriber_id`, `email` and `external_id`.
    pub subscriber_id: Option<i64>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    /// What the mail may show as `{{ event.* }}` (a JSON object of at most 16 KiB).
    #[schema(value_type = Option<Object>)]
    pub properties: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Enrolment {
    pub enrolment_id: i64,
    /// False: this id was enrolled before, or the re-entry rule kept them where they are.
    pub new: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    /// How many unfinished enrolments ended.
    pub removed: u64,
}

/// The organisation's automations, by name.
#[utoipa::path(
    get,
    path = "/automations",
    tag = "automations",
    responses((status = 200, description = "The automations.", body = AutomationList)),
    security(("token" = ["automations:read"]))
)]
async fn list(token: Token, State(pool): State<PgPool>) -> Result<Json<AutomationList>, Problem> {
    token.require(ApiScope::AutomationsRead)?;
    let mut conn = pool.acquire().await?;
    let rows = automation::list(&mut conn, OrgId(token.org_id())).await?;
    Ok(Json(AutomationList {
        data: rows.into_iter().map(Automation::from).collect(),
    }))
}

/// One automation, its live definition and each step's counts.
#[utoipa::path(
    get,
    path = "/automations/{id}",
    tag = "automations",
    params(("id" = i64, Path, description = "The automation's id.")),
    responses(
        (status = 200, description = "The automation.", body = AutomationDetail),
        (status = 404, description = "No such automation in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["automations:read"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<Json<AutomationDetail>, Problem> {
    token.require(ApiScope::AutomationsRead)?;
    let org = OrgId(token.org_id());
    let mut conn = pool.acquire().await?;
    let d = automation::get(&mut conn, org, id)
        .await?
        .ok_or_else(|| Problem::not_found("automation"))?;
    let steps = automation::step_counts(&mut conn, org, id).await?;
    Ok(Json(AutomationDetail {
        automation: d.summary.into(),
        definition: d.live.and_then(|l| serde_json::to_value(l).ok()),
        steps: steps
            .into_iter()
            .map(|c| StepCount {
                version: c.version,
                step: c.step,
                outcome: c.outcome.map(|o| o.to_string()),
                detail: c.detail,
                count: c.n,
            })
            .collect(),
    }))
}

/// Enrols a subscriber (the automation must be active or paused).
#[utoipa::path(
    post,
    path = "/automations/{id}/enrolments",
    tag = "automations",
    params(("id" = i64, Path, description = "The automation's id.")),
    request_body = EnrolInput,
    responses(
        (status = 201, description = "Enrolled now.", body = Enrolment),
        (status = 200, description = "Enrolled before under this id (or kept where they are by the re-entry rule).", body = Enrolment),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such automation, or no such subscriber, in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The automation is a draft or stopped, the subscriber is not confirmed, or their enrolment changed meanwhile (send it again).", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The field at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["automations:write"]))
)]
async fn enrol(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
    Body(input): Body<EnrolInput>,
) -> Result<(StatusCode, Json<Enrolment>), Problem> {
    token.require(ApiScope::AutomationsWrite)?;
    let key = app::domain::idempotency_key(&input.id)
        .map_err(|e| Problem::field("#/id", format!("id: {e}")))?;
    let who = match (&input.subscriber_id, &input.email, &input.external_id) {
        (Some(id), None, None) => SubscriberRef::Id(SubscriberId(*id)),
        (None, Some(e), None) => SubscriberRef::Email(
            EmailAddress::parse(e).map_err(|e| Problem::field("#/email", format!("email: {e}")))?,
        ),
        (None, None, Some(x)) => SubscriberRef::External(x.clone()),
        _ => {
            return Err(Problem::field(
                "#/subscriber_id",
                "Name the subscriber by exactly one of subscriber_id, email and external_id.",
            ))
        }
    };
    let context = input
        .properties
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
    app::domain::event::properties("properties", &context)
        .map_err(|e| Problem::field("#/properties", format!("properties: {}", e.fault)))?;
    let org = OrgId(token.org_id());
    let mut tx = pool.begin().await?;
    let subscriber = app::db::events::resolve(&mut tx, org, std::slice::from_ref(&who))
        .await?
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(|| Problem::not_found("subscriber"))?;
    let e = match automation::enrol(&mut tx, org, id, subscriber, key, &context).await {
        Ok(e) => e,
        Err(EnrolError::NotFound) => return Err(Problem::not_found("automation")),
        Err(EnrolError::NoSubscriber) => return Err(Problem::not_found("subscriber")),
        Err(EnrolError::NotConfirmed) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "The subscriber is not confirmed: automations, as campaigns, mail confirmed subscribers only.",
            ))
        }
        Err(EnrolError::NotLive(status)) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                format!("The automation is {status}: it enrols nobody."),
            ))
        }
        Err(EnrolError::Busy) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "The subscriber's enrolment changed while this one was made; send the request again.",
            ))
        }
        Err(EnrolError::Db(e)) => return Err(e.into()),
    };
    if e.new {
        token
            .audit(
                &mut tx,
                app::domain::AuditAction::AutomationEnrol,
                "automation",
                Some(id.to_string()),
                None,
                Some(serde_json::json!({"subscriber_id": subscriber.0, "enrolment_id": e.id})),
            )
            .await?;
    }
    tx.commit().await?;
    let status = if e.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(Enrolment {
            enrolment_id: e.id,
            new: e.new,
        }),
    ))
}

/// Takes a subscriber out of the automation: their unfinished enrolments end.
#[utoipa::path(
    delete,
    path = "/automations/{id}/enrolments/{subscriber_id}",
    tag = "automations",
    params(
        ("id" = i64, Path, description = "The automation's id."),
        ("subscriber_id" = i64, Path, description = "The subscriber's id."),
    ),
    responses(
        (status = 200, description = "How many enrolments ended (0 when none was unfinished).", body = Removed),
        (status = 404, description = "No such automation in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["automations:write"]))
)]
async fn remove(
    token: Token,
    State(pool): State<PgPool>,
    Id((id, subscriber)): Id<(i64, i64)>,
) -> Result<Json<Removed>, Problem> {
    token.require(ApiScope::AutomationsWrite)?;
    let org = OrgId(token.org_id());
    let mut tx = pool.begin().await?;
    if automation::get(&mut tx, org, id).await?.is_none() {
        return Err(Problem::not_found("automation"));
    }
    let removed = automation::remove(&mut tx, org, id, SubscriberId(subscriber)).await?;
    if removed > 0 {
        token
            .audit(
                &mut tx,
                app::domain::AuditAction::AutomationRemove,
                "automation",
                Some(id.to_string()),
                Some(serde_json::json!({"subscriber_id": subscriber})),
                None,
            )
            .await?;
    }
    tx.commit().await?;
    Ok(Json(Removed { removed }))
}
