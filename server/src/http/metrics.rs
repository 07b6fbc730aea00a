//! Prometheus `/metrics`: delivery counts, queue depth and age, and the leader epoch read from
//! the database at scrape time (the same from any replica), plus this process's SMTP latency
//! histogram.

use std::sync::LazyLock;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sqlx::PgPool;
use std::sync::atomic::AtomicU64;

/// Seconds from MAIL FROM to the final reply of one message, by this process.
pub static SMTP_LATENCY: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurabilityState {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteTroubleLabel {
    trouble: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: String,
}

/// The scrape carries the configured bearer token (compared in constant time), or none is set.
fn authorized(edge: &crate::http::state::Edge, headers: &HeaderMap) -> bool {
    let Some(token) = &edge.metrics_token else {
        return true;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let (a, b) = (given.as_bytes(), token.expose().as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn handler(
    State(pool): State<PgPool>,
    State(edge): State<crate::http::state::Edge>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&edge, &headers) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "A metrics token is required (Authorization: Bearer …).",
        )
            .into_response();
    }
    let snapshot = match app::db::metrics::snapshot(&pool).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: database unavailable");
            return (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response();
        }
    };
    let mut registry = Registry::default();
    let deliveries = Family::<Status, Gauge>::default();
    for (status, n) in snapshot.by_status {
        deliveries.get_or_create(&Status { status }).set(n);
    }
    registry.register("mailroom_deliveries", "Deliveries by status", deliveries);
    let depth = Family::<Kind, Gauge>::default();
    for kind in ["test", "digest", "campaign"] {
        depth.get_or_create(&Kind { kind: kind.into() }).set(0);
    }
    for (kind, n) in snapshot.queued_by_kind {
        depth.get_or_create(&Kind { kind }).set(n);
    }
    registry.register(
        "mailroom_delivery_queue_depth",
        "Queued deliveries by kind",
        depth,
    );
    let oldest = Gauge::<f64, AtomicU64>::default();
    oldest.set(snapshot.oldest_queued_seconds);
    registry.register(
        "mailroom_delivery_oldest_queued_seconds",
        "Age of the oldest due delivery still queued",
        oldest,
    );
    let epoch = Gauge::<i64>::default();
    epoch.set(snapshot.leader_epoch);
    registry.register(
        "mailroom_leader_epoch",
        "Epoch of the current leader lease",
        epoch,
    );
    let overdue = Gauge::<f64, AtomicU64>::default();
    overdue.set(snapshot.events_overdue_seconds);
    registry.register(
        "mailroom_events_retention_overdue_seconds",
        "How long past its organisation's retention the oldest stored event is (0: retention keeps up)",
        overdue,
    );
    let r = &snapshot.replication;
    let durability = Family::<DurabilityState, Gauge>::default();
    let now = app::domain::Durability::of(r);
    for d in app::domain::Durability::ALL {
        durability
            .get_or_create(&DurabilityState {
                state: d.as_str().into(),
            })
            .set(i64::from(d == now));
    }
    registry.register(
        "mailroom_database_durability",
        "What a failover of the database can cost: 1 for the state that holds (synchronous: nothing Mailroom acted on is lost)",
        durability,
    );
    let standbys = Gauge::<i64>::default();
    standbys.set(r.standbys);
    registry.register(
        "mailroom_database_standbys",
        "Standbys streaming from the primary",
        standbys,
    );
    let synchronous = Gauge::<i64>::default();
    synchronous.set(r.synchronous_standbys);
    registry.register(
        "mailroom_database_synchronous_standbys",
        "Standbys whose flush Mailroom's commits wait for",
        synchronous,
    );
    let failing = Family::<WriteTroubleLabel, Gauge>::default();
    let trouble = app::db::health::writes_failing().map(|f| f.trouble);
    for t in app::domain::WriteTrouble::ALL {
        failing
            .get_or_create(&WriteTroubleLabel {
                trouble: t.as_str().into(),
            })
            .set(i64::from(Some(t) == trouble));
    }
    registry.register(
        "mailroom_database_writes_failing",
        "1 for the database's trouble while this process's workers cannot write to it (disk_full: nothing is sent until space is freed)",
        failing,
    );
    registry.register(
        "mailroom_smtp_latency_seconds",
        "Seconds from MAIL FROM to the final reply, per message, this process",
        SMTP_LATENCY.clone(),
    );
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::warn!(error = %e, "metrics: encoding failed");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
