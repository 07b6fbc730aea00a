//! CSV in and out of an org's audience, outside the server functions because both stream:
//! `POST /api/lists/{id}/import` (a form upload, spooled to a temporary file, then read row by
//! row in the background while the import's page shows its progress) and
//! `GET /api/audience/export.csv` (written batch by batch as it is read).
//!
//! An import is one transaction: a file that cannot be read as a whole (no header, no `email`
//! column, not CSV) imports nothing; a bad row is reported with its line and the reason, and the
//! good rows go in. Importing the same file again changes nothing.

use std::path::{Path as FsPath, PathBuf};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRef, Multipart, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use sqlx::PgPool;
use tokio::io::AsyncWriteExt;

use app::api::CurrentUser;
use app::db::imports::{self, Tally};
use app::domain::audience::csv_cell;
use app::domain::{CsvColumns, CsvRow, SeenRows};
use app::error::AppError;

use crate::http::plain::{Refusal, SignedIn};

/// The largest file an import takes (about a million rows of address and name).
pub const MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;
/// Rows written per statement.
const BATCH: usize = 1000;
/// Rows per chunk of an export.
const EXPORT_BATCH: i64 = 2000;

/// The upload, apart: it has its own body limit and timeout (see `http::router`).
pub fn import_routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    PgPool: FromRef<S>,
{
    Router::new().route(
        "/api/lists/{id}/import",
        post(import).layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES + 64 * 1024)),
    )
}

pub fn export_routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    PgPool: FromRef<S>,
{
    Router::new().route("/api/audience/export.csv", get(export))
}

async fn import(
    State(pool): State<PgPool>,
    SignedIn(me): SignedIn,
    Path(list_id): Path<i64>,
    multipart: Multipart,
) -> Result<Response, Refusal> {
    if !me.role.can_act() {
        return Err(AppError::Forbidden.into());
    }
    let mut c = pool.acquire().await?;
    app::db::lists::name(&mut c, me.org_id, list_id)
        .await?
        .ok_or(AppError::NotFound)?;
    drop(c);
    let path =
        std::env::temp_dir().join(format!("mailroom-import-{}.csv", app::auth::dialog_token()));
    // Whatever fails after the spool began, the partial file goes.
    let started = async {
        let file_name = spool(multipart, &path).await?;
        let mut c = pool.acquire().await?;
        Ok::<_, Refusal>(imports::start(&mut c, me.org_id, list_id, me.user_id, &file_name).await?)
    };
    let id = match started.await {
        Ok(id) => id,
        Err(r) => {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(r);
        }
    };
    tokio::spawn(run(pool, me, list_id, id, path));
    Ok(Redirect::to(&format!("/audience/imports/{id}")).into_response())
}

/// Writes the form's `file` field to `path` as it arrives; returns the file's name.
async fn spool(mut multipart: Multipart, path: &FsPath) -> Result<String, Refusal> {
    let bad = |m: &str| Refusal::new(StatusCode::BAD_REQUEST, m);
    let unreadable = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            bad(&format!("The upload could not be read: {}.", e.body_text()))
        }
    };
    loop {
        let Some(mut field) = multipart.next_field().await.map_err(unreadable)? else {
            return Err(bad("No file was sent: choose a CSV file to import."));
        };
        if field.name() != Some("file") {
            continue;
        }
        // Only shown back (the import's row): control characters, which a NUL among could not
        // even be stored, are dropped rather than refused.
        let name: String = field
            .file_name()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        let mut out = tokio::fs::File::create(path).await?;
        let mut size = 0usize;
        while let Some(chunk) = field.chunk().await.map_err(unreadable)? {
            size += chunk.len();
            if size > MAX_IMPORT_BYTES {
                return Err(too_large());
            }
            out.write_all(&chunk).await?;
        }
        out.flush().await?;
        if size == 0 {
            return Err(bad("The file is empty: nothing to import."));
        }
        return Ok(name);
    }
}

fn too_large() -> Refusal {
    Refusal::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "The file is larger than {} MB: split it into smaller files.",
            MAX_IMPORT_BYTES / (1024 * 1024)
        ),
    )
}

/// What the reader hands the writer: checked rows, and the errors of the others.
struct Batch {
    /// Each checked row with its line in the file.
    rows: Vec<(u64, CsvRow)>,
    errors: Vec<(u64, String)>,
    read: u64,
}

/// Reads the spooled file and writes it in one transaction; removes the file at the end.
async fn run(pool: PgPool, me: CurrentUser, list_id: i64, id: i64, path: PathBuf) {
    if let Err(e) = write(&pool, &me, list_id, id, &path).await {
        tracing::error!(import = id, error = %e, "import failed");
        let failed = async {
            let mut c = pool.acquire().await?;
            imports::finish(
                &mut c,
                id,
                &Tally::default(),
                Some("Something went wrong on our side; nothing was imported. Please try again."),
            )
            .await
        };
        if let Err(e) = failed.await {
            tracing::error!(import = id, error = %e, "could not record a failed import");
        }
    }
    let _ = tokio::fs::remove_file(&path).await;
}

async fn write(
    pool: &PgPool,
    me: &CurrentUser,
    list_id: i64,
    id: i64,
    path: &FsPath,
) -> anyhow::Result<()> {
    let (send, mut batches) = tokio::sync::mpsc::channel::<Batch>(4);
    let reading = {
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || read(&path, &send))
    };
    let mut tx = pool.begin().await?;
    let mut t = Tally::default();
    while let Some(b) = batches.recv().await {
        t.rows_read += b.read as i64;
        for (row, error) in b.errors {
            t.refuse(row as i64, error);
        }
        // An external id another subscriber has refuses its row.
        let claimed: Vec<(&str, &str)> = b
            .rows
            .iter()
            .filter_map(|(_, r)| r.external_id.as_deref().map(|x| (r.email.as_str(), x)))
            .collect();
        let taken =
            app::db::subscriber_api::external_ids_taken(&mut tx, me.org_id, &claimed).await?;
        let mut rows = Vec::with_capacity(b.rows.len());
        for (line, r) in b.rows {
            if r.external_id.is_some() && taken.iter().any(|t| t == r.email.as_str()) {
                t.refuse(
                    line as i64,
                    "another subscriber already has this external id".into(),
                );
            } else {
                rows.push(r);
            }
        }
        if !rows.is_empty() {
            let (c, a) = imports::insert_batch(&mut tx, me.org_id, list_id, &rows).await?;
            t.created += c;
            t.added += a;
        }
        imports::report(pool, id, &t).await?;
    }
    match reading.await? {
        Ok(()) => {
            imports::finish(&mut tx, id, &t, None).await?;
            app::db::audit::record(
                &mut tx,
                app::db::audit::Entry {
                    after: Some(serde_json::json!({
                        "import": id, "rows": t.rows_read, "created": t.created, "added": t.added, "errors": t.error_count,
                    })),
                    ..app::db::audit::Entry::by(me, app::domain::AuditAction::ListImport, "list", Some(list_id.to_string()))
                },
            )
            .await?;
            tx.commit().await?;
        }
        Err(message) => {
            tx.rollback().await?;
            let mut c = pool.acquire().await?;
            imports::finish(&mut c, id, &t.rolled_back(), Some(&message)).await?;
        }
    }
    Ok(())
}

/// Reads the file row by row (never whole), checks each row, and sends batches. `Err` is a
/// problem with the file as a whole: then nothing is imported.
fn read(path: &FsPath, out: &tokio::sync::mpsc::Sender<Batch>) -> Result<(), String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_path(path)
        .map_err(|e| format!("The file could not be opened: {e}"))?;
    let mut record = csv::ByteRecord::new();
    let not_csv = |e: csv::Error| format!("The file is not readable as CSV: {e}.");
    if !reader.read_byte_record(&mut record).map_err(not_csv)? {
        return Err("The file is empty: nothing to import.".into());
    }
    let header: Vec<&[u8]> = record.iter().collect();
    let columns = CsvColumns::from_header(&header)?;
    let mut seen = SeenRows::default();
    let mut batch = Batch {
        rows: Vec::new(),
        errors: Vec::new(),
        read: 0,
    };
    while reader.read_byte_record(&mut record).map_err(not_csv)? {
        let line = record.position().map_or(0, |p| p.line());
        // A line with nothing on it is not a row.
        if record.iter().all(|f| f.iter().all(u8::is_ascii_whitespace)) {
            continue;
        }
        batch.read += 1;
        let fields: Vec<&[u8]> = record.iter().collect();
        match columns.check(&fields, &mut seen) {
            Ok(row) => batch.rows.push((line, row)),
            Err(e) => batch.errors.push((line, e)),
        }
        if batch.read as usize >= BATCH {
            let full = std::mem::replace(
                &mut batch,
                Batch {
                    rows: Vec::new(),
                    errors: Vec::new(),
                    read: 0,
                },
            );
            if out.blocking_send(full).is_err() {
                return Err("The import stopped.".into());
            }
        }
    }
    if batch.read > 0 && out.blocking_send(batch).is_err() {
        return Err("The import stopped.".into());
    }
    Ok(())
}

#[derive(Deserialize)]
struct ExportQuery {
    list: Option<String>,
}

/// The org's subscribers (or one list's members) as CSV: email, name, status, created (UTC).
async fn export(
    State(pool): State<PgPool>,
    SignedIn(me): SignedIn,
    Query(q): Query<ExportQuery>,
) -> Result<Response, Refusal> {
    let list_id = match q.list.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            s.parse::<i64>()
                .map_err(|_| Refusal::new(StatusCode::BAD_REQUEST, "The list is not a number."))?,
        ),
    };
    let file = match list_id {
        None => "subscribers.csv".to_string(),
        Some(id) => {
            let mut c = pool.acquire().await?;
            app::db::lists::name(&mut c, me.org_id, id)
                .await?
                .ok_or(AppError::NotFound)?;
            format!("list-{id}.csv")
        }
    };
    let org_id = me.org_id;
    // State: (the last id written, whether the header is out, finished).
    let chunks = futures::stream::unfold((0i64, false, false), move |(after, header, done)| {
        let pool = pool.clone();
        async move {
            if done {
                return None;
            }
            let mut w = csv::Writer::from_writer(Vec::new());
            if !header {
                if let Err(e) = w.write_record(["email", "name", "status", "created"]) {
                    return Some((Err(std::io::Error::other(e)), (after, true, true)));
                }
            }
            let rows = match pool.acquire().await {
                Ok(mut c) => {
                    app::db::subscribers::export_batch(&mut c, org_id, list_id, after, EXPORT_BATCH)
                        .await
                }
                Err(e) => Err(e),
            };
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::error!(error = %e, "export failed");
                    return Some((Err(std::io::Error::other(e)), (after, true, true)));
                }
            };
            let last = rows.last().map(|r| r.id);
            for r in &rows {
                let (email, name) = (csv_cell(&r.email), csv_cell(&r.name));
                let cells: [&str; 4] = [&email, &name, &r.status, &r.created];
                if let Err(e) = w.write_record(cells) {
                    return Some((Err(std::io::Error::other(e)), (after, true, true)));
                }
            }
            let bytes = w
                .into_inner()
                .map_err(|e| std::io::Error::other(e.to_string()));
            let finished = (rows.len() as i64) < EXPORT_BATCH;
            Some((bytes, (last.unwrap_or(after), true, finished)))
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}
