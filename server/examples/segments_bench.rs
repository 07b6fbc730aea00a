//! Segments at scale, against one `mailroom serve` (release) on its embedded PostgreSQL:
//! - events in: `api_events` events through `POST /api/v1/events` in batches of 1,000
//!   (`clients` batches at a time, each naming its subscriber by the SaaS's `external_id`):
//!   events/s and CPU ms per 1,000 events (replica, PostgreSQL); then 10 of those batches again,
//!   every row checked to come back a duplicate;
//! - the rest of `events` seeded by SQL (not measured), so the counts read `subscribers`
//!   people with 5 attributes each and `events` events over the last year;
//! - the count of a 3-condition segment (an attribute, an event within 30 days, a list)
//!   through `GET /api/v1/segments/{id}/count`: p50, p99 and max over `runs` requests; and of
//!   "trial users who never invited a colleague" (a negated event);
//! - materialising a campaign to a segment of about half the people (`campaign::start_due`:
//!   the start and its `INSERT … SELECT DISTINCT ON` in one transaction), beside a statement
//!   written by hand for the same rows run bare in `psql` (rolled back), the rows checked equal.
//!
//! Run through `bench/segments.sh`. Usage: segments_bench <mailroom binary>
//! [subscribers=1000000] [events=10000000] [api_events=1000000] [clients=4] [runs=50]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;

use app::db::campaign::edit::Audience;
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;

const TOKEN: &str = "mrk_benchbenchbenchbenchbenchbenchbenchbench";

/// The event names, with how many of every 20 events carry each.
const NAMES: [(&str, u64); 5] = [
    ("login", 8),
    ("page_view", 6),
    ("invite_sent", 3),
    ("upgrade", 2),
    ("export", 1),
];

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// `n` confirmed subscribers `p{i}@bench.example` with external ids `u{i}` and 5 attributes
/// (plan, seats, trial, country, last_login); list A holds 8 in 10 of them, list B 1 in 3.
async fn seed_people(pool: &PgPool, org: i64, lists: (i64, i64), n: i64) -> anyhow::Result<()> {
    sqlx::query(
        "insert into subscribers (org_id, email, email_lower, name, status, optin_source,
                                  external_id, attributes, created_at)
         select $1, 'p' || i || '@bench.example', 'p' || i || '@bench.example', 'Person ' || i,
                'confirmed', 'import', 'u' || i,
                jsonb_build_object(
                    'plan', (array['free', 'pro', 'team', 'enterprise'])[i % 4 + 1],
                    'seats', i % 50,
                    'trial', i % 5 = 0,
                    'country', (array['DE', 'FR', 'US', 'GB', 'NL', 'SE', 'ES', 'IT'])[i % 8 + 1],
                    'last_login', to_char(date '2026-01-01' + (i % 300)::int, 'YYYY-MM-DD')),
                timestamptz '2024-01-01' + (i % 700) * interval '1 day'
         from generate_series(1, $2::bigint) i",
    )
    .bind(org)
    .bind(n)
    .execute(pool)
    .await?;
    sqlx::query(
        "insert into list_members (org_id, list_id, subscriber_id)
         select org_id, $2, id from subscribers where org_id = $1 and id % 10 < 8",
    )
    .bind(org)
    .bind(lists.0)
    .execute(pool)
    .await?;
    sqlx::query(
        "insert into list_members (org_id, list_id, subscriber_id)
         select org_id, $2, id from subscribers where org_id = $1 and id % 3 = 0",
    )
    .bind(org)
    .bind(lists.1)
    .execute(pool)
    .await?;
    // VACUUM cannot run in the implicit transaction of a multi-statement string.
    for table in ["subscribers", "list_members"] {
        sqlx::raw_sql(&format!("vacuum analyze {table}"))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Event `k` of the API's share, as the SaaS would post it: about subscriber `u{…}` (spread
/// over all `people`), named by [`NAMES`]' shares, some time in the last year.
fn api_event(k: u64, people: u64, now: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    let who = (k.wrapping_mul(2_654_435_761) % people) + 1;
    let mut slot = k % 20;
    let mut name = NAMES[0].0;
    for (n, share) in NAMES {
        if slot < share {
            name = n;
            break;
        }
        slot -= share;
    }
    let ago = chrono::Duration::seconds((k.wrapping_mul(40_503) % (365 * 86_400)) as i64);
    serde_json::json!({
        "id": format!("ev-{k}"),
        "external_id": format!("u{who}"),
        "name": name,
        "properties": {"source": if k.is_multiple_of(3) { "mobile" } else { "web" }, "n": k % 100},
        "occurred_at": (now - ago).to_rfc3339(),
    })
}

/// Posts events `from..to` in batches of 1,000, `clients` at a time; each batch must come
/// back with `want` rows stored (the rest duplicates).
async fn post_events(
    origin: &str,
    (from, to): (u64, u64),
    people: u64,
    clients: usize,
    want_stored: bool,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let client = reqwest::Client::new();
    let now = chrono::Utc::now();
    let batches = (from..to).step_by(1000).map(|start| {
        let client = client.clone();
        let url = format!("{origin}/api/v1/events");
        async move {
            let end = (start + 1000).min(to);
            let rows: Vec<_> = (start..end).map(|k| api_event(k, people, now)).collect();
            let r = client
                .post(&url)
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(serde_json::json!({ "events": rows }).to_string())
                .send()
                .await?;
            let status = r.status();
            let answer: serde_json::Value = serde_json::from_str(&r.text().await?)?;
            let n = end - start;
            let (stored, duplicates) = (answer["stored"].as_u64(), answer["duplicates"].as_u64());
            let expected = if want_stored {
                (Some(n), Some(0))
            } else {
                (Some(0), Some(n))
            };
            if !status.is_success() || (stored, duplicates) != expected {
                bail!(
                    "events answered {status}: {}",
                    answer.to_string().chars().take(300).collect::<String>()
                );
            }
            anyhow::Ok(())
        }
    });
    let mut sending = futures::stream::iter(batches).buffer_unordered(clients.max(1));
    while let Some(done) = sending.next().await {
        done?;
    }
    Ok(())
}

/// The rest of the `events` by SQL, 1,000,000 a statement: subscribers at random, names by
/// [`NAMES`]' shares, times over the last year.
async fn seed_events(pool: &PgPool, org: i64, already: i64, total: i64) -> anyhow::Result<()> {
    let (low, high): (i64, i64) =
        sqlx::query_as("select min(id), max(id) from subscribers where org_id = $1")
            .bind(org)
            .fetch_one(pool)
            .await?;
    let mut conn = pool.acquire().await?;
    sqlx::query("select setseed(0.38)")
        .execute(&mut *conn)
        .await?;
    let mut from = already;
    while from < total {
        let to = (from + 1_000_000).min(total);
        sqlx::query(
            "insert into events (org_id, key, subscriber_id, name, properties, occurred_at)
             select $1, 'seed-' || g, $4 + floor(random() * ($5 - $4 + 1))::bigint,
                    case when r < 0.40 then 'login' when r < 0.70 then 'page_view'
                         when r < 0.85 then 'invite_sent' when r < 0.95 then 'upgrade'
                         else 'export' end,
                    jsonb_build_object('source', case when g % 3 = 0 then 'mobile' else 'web' end,
                                       'n', g % 100),
                    now() - random() * interval '365 days'
             from (select g, random() as r from generate_series($2::bigint, $3::bigint - 1) g) t",
        )
        .bind(org)
        .bind(from)
        .bind(to)
        .bind(low)
        .bind(high)
        .execute(&mut *conn)
        .await?;
        from = to;
    }
    sqlx::raw_sql("vacuum analyze events")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Saves `definition` as a segment through the API: its id.
async fn segment(origin: &str, name: &str, definition: serde_json::Value) -> anyhow::Result<i64> {
    let r = reqwest::Client::new()
        .post(format!("{origin}/api/v1/segments"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(serde_json::json!({"name": name, "definition": definition}).to_string())
        .send()
        .await?;
    let status = r.status();
    let answer: serde_json::Value = serde_json::from_str(&r.text().await?)?;
    answer["id"]
        .as_i64()
        .with_context(|| format!("saving the segment answered {status}: {answer}"))
}

/// `runs` counts of segment `id` through the API, one at a time: (the count, p50, p99, max ms).
async fn time_counts(origin: &str, id: i64, runs: usize) -> anyhow::Result<(i64, f64, f64, f64)> {
    let client = reqwest::Client::new();
    let mut took = Vec::with_capacity(runs);
    let mut count = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let r = client
            .get(format!("{origin}/api/v1/segments/{id}/count"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        let answer: serde_json::Value = serde_json::from_str(&r.text().await?)?;
        took.push(t.elapsed());
        let n = answer["count"]
            .as_i64()
            .with_context(|| format!("the count answered {answer}"))?;
        if count.is_some_and(|c| c != n) {
            bail!("the count moved between runs: {count:?} then {n}");
        }
        count = Some(n);
    }
    took.sort();
    Ok((
        count.unwrap_or_default(),
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        percentile(&took, 1.0),
    ))
}

/// Runs `sql` in `psql` on the bench's database inside a transaction rolled back: (its single
/// value, seconds).
fn psql_rolled_back(data: &std::path::Path, sql: &str) -> anyhow::Result<(String, f64)> {
    let t = Instant::now();
    let out = Command::new("psql")
        .arg("-h")
        .arg(data.join("postgres"))
        .args([
            "-U",
            "mailroom",
            "-d",
            embedded_pg::DATABASE,
            "-v",
            "ON_ERROR_STOP=1",
            "-qAt",
            "-c",
        ])
        .arg(format!("begin; {sql}; rollback;"))
        .stderr(Stdio::inherit())
        .output()?;
    let took = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("psql failed: {}", out.status);
    }
    Ok((String::from_utf8(out.stdout)?.trim().to_string(), took))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).context(
        "usage: segments_bench <mailroom binary> [subscribers] [events] [api_events] [clients] [runs]",
    )?;
    let people: i64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let total: i64 = args.get(3).map_or(Ok(10_000_000), |s| s.parse())?;
    let api_events: i64 = args.get(4).map_or(Ok(1_000_000), |s| s.parse())?;
    let clients: usize = args.get(5).map_or(Ok(4), |s| s.parse())?;
    let runs: usize = args.get(6).map_or(Ok(50), |s| s.parse())?;
    let api_events = api_events.min(total);

    // BENCH_REUSE_DATA names a directory an earlier run kept (BENCH_KEEP_DATA): its people
    // and events are measured again, without seeding or the events-in round.
    let (dir, made) = match std::env::var_os("BENCH_REUSE_DATA") {
        Some(kept) => (std::path::PathBuf::from(kept), None),
        None => {
            let made = tempfile::Builder::new()
                .prefix("mrsegbench")
                .tempdir_in("/tmp")?;
            (made.path().to_path_buf(), Some(made))
        }
    };
    let data = dir.as_path();
    let pg = EmbeddedPg::open(data, embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, (owner, approver), lists) = if made.is_some() {
        let (org, admins) =
            support::org_with_admins(&pool, "bench", "a@bench.example", "x-password-1").await?;
        let lists = (
            support::list(&pool, org, "Newsletter").await?,
            support::list(&pool, org, "Product updates").await?,
        );
        support::api_token(&pool, org, admins.0, TOKEN).await?;
        let t = Instant::now();
        seed_people(&pool, org, lists, people).await?;
        println!(
            "seeded {people} subscribers with 5 attributes on 2 lists in {:.1}s (not measured)",
            t.elapsed().as_secs_f64()
        );
        (org, admins, lists)
    } else {
        kept_bench(&pool).await?
    };
    // Segment names are unique per org: a run on kept data adds its own mark.
    let mark = match made {
        Some(_) => String::new(),
        None => format!(" ({})", chrono::Utc::now().timestamp()),
    };

    let postmaster = support::postmaster_pid(data)?;
    // The bench calls the API only: serve gets a stand-in for the dashboard's files, so no
    // site needs building first.
    let site = data.join("site");
    std::fs::create_dir_all(site.join("pkg"))?;
    std::fs::write(site.join("pkg").join("mailroom.js"), "")?;
    let (mut replica, origin) =
        support::api_replica(bin, data, &site, "/tmp/bench-segments-serve.log")?;
    let outcome = async {
        support::ready(&origin, Duration::from_secs(60)).await?;

        if made.is_some() {
            // Events in.
            let before = support::cpu_seconds(replica.id(), postmaster);
            let started = Instant::now();
            post_events(
                &origin,
                (0, api_events as u64),
                people as u64,
                clients,
                true,
            )
            .await?;
            let took = started.elapsed().as_secs_f64();
            let after = support::cpu_seconds(replica.id(), postmaster);
            let per = |c: f64| c * 1000.0 * 1000.0 / api_events as f64;
            println!(
                "POST /api/v1/events: {api_events} events in batches of 1,000, {clients} at a time: {:.0} events/s; CPU ms per 1,000 events: replica {:.0}, PostgreSQL {:.0}",
                api_events as f64 / took,
                per(after.0 - before.0),
                per(after.1 - before.1),
            );
            let again = api_events.min(10_000) as u64;
            let started = Instant::now();
            post_events(&origin, (0, again), people as u64, clients, false).await?;
            println!(
                "  the first {again} again: every row a duplicate, {:.0} events/s",
                again as f64 / started.elapsed().as_secs_f64()
            );
            let stored: i64 = sqlx::query_scalar("select count(*) from events where org_id = $1")
                .bind(org)
                .fetch_one(&pool)
                .await?;
            if stored != api_events {
                bail!("{api_events} distinct event ids made {stored} events");
            }

            let t = Instant::now();
            seed_events(&pool, org, api_events, total).await?;
            println!(
                "seeded the other {} events by SQL in {:.1}s (not measured)",
                total - api_events,
                t.elapsed().as_secs_f64()
            );
        }

        // Counts.
        let three = segment(
            &origin,
            &format!("{}{mark}", "Pro, logged in this month, on the newsletter"),
            serde_json::json!({"op": "all", "children": [
                {"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": "pro"}},
                {"type": "event", "name": "login", "within_days": 30},
                {"type": "list", "list_id": lists.0},
            ]}),
        )
        .await?;
        let (n, p50, p99, max) = time_counts(&origin, three, runs).await?;
        println!(
            "count, 3 conditions (attribute, event within 30 days, list): {n} of {people}; {runs} runs: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms"
        );
        let never = segment(
            &origin,
            &format!("{}{mark}", "Trial users who never invited a colleague"),
            serde_json::json!({"op": "all", "children": [
                {"type": "attribute", "name": "trial", "test": {"op": "bool", "value": true}},
                {"type": "event", "name": "invite_sent", "did": false},
            ]}),
        )
        .await?;
        let (n, p50, p99, max) = time_counts(&origin, never, runs).await?;
        println!(
            "count, trial and never did invite_sent: {n} of {people}; {runs} runs: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms"
        );

        // Materialisation.
        let half = segment(
            &origin,
            &format!("{}{mark}", "Paying, on the newsletter, seen in half a year"),
            serde_json::json!({"op": "all", "children": [
                {"type": "attribute", "name": "plan", "test": {"op": "text_in", "values": ["pro", "team", "enterprise"]}},
                {"type": "list", "list_id": lists.0},
                {"type": "event", "name": "page_view", "within_days": 180},
            ]}),
        )
        .await?;
        let audience = Audience {
            segments: vec![half],
            ..Audience::default()
        };
        let body = "Dear {{ name }}, this is the bench campaign.";
        let id = support::approved_campaign(
            &pool,
            org,
            (owner, approver),
            &audience,
            "Bench",
            body,
            false,
        )
        .await?;
        let now = || sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>("select now()");
        let t0 = now().fetch_one(&pool).await?;
        let t = Instant::now();
        let started = mailroom::workers::campaign::start_due(&pool).await?;
        let engine = t.elapsed().as_secs_f64();
        let t1 = now().fetch_one(&pool).await?;
        let sends: i64 = sqlx::query_scalar("select count(*) from sends where campaign_id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await?;
        println!("materialise a segment campaign (start + INSERT … SELECT DISTINCT ON, one transaction): {started:?}, {sends} recipients in {engine:.2}s");
        let bare_id = support::approved_campaign(
            &pool,
            org,
            (owner, approver),
            &audience,
            "Bench (bare)",
            body,
            true,
        )
        .await?;
        let sql = BARE_SEGMENT_SQL
            .replace("$1", &org.to_string())
            .replace("$2", &bare_id.to_string())
            .replace("$3", &lists.0.to_string())
            .replace("$4", &format!("'{}'", t0.to_rfc3339()));
        let (rows, bare) = psql_rolled_back(data, &sql)?;
        // The engine's window starts at its own now, between t0 and t1: only people whose
        // sole page view fell in between may differ.
        let edge: i64 = sqlx::query_scalar(
            "select count(distinct subscriber_id) from events where org_id = $1
             and name = 'page_view' and occurred_at >= $2 - interval '180 days'
             and occurred_at < $3 - interval '180 days'",
        )
        .bind(org)
        .bind(t0)
        .bind(t1)
        .fetch_one(&pool)
        .await?;
        let rows: i64 = rows
            .parse()
            .with_context(|| format!("psql printed {rows}"))?;
        if (rows - sends).abs() > edge {
            bail!("the bare statement chose {rows} recipients, the engine {sends}");
        }
        println!(
            "  the same rows by a hand-written statement, bare in psql (rolled back): {bare:.2}s → engine/bare {:.2}",
            engine / bare
        );
        anyhow::Ok(())
    };
    let result = outcome.await;
    let stopped = support::stop(&mut replica).map(drop);
    pool.close().await;
    pg.shutdown().await?;
    if let Some(made) = made.filter(|_| std::env::var_os("BENCH_KEEP_DATA").is_some()) {
        // For studying plans afterwards (pg_ctl as the database user), or BENCH_REUSE_DATA.
        println!("data kept in {}", made.keep().display());
    }
    result.and(stopped)
}

/// The org, its two admins and its two lists in a directory an earlier run kept.
async fn kept_bench(pool: &PgPool) -> anyhow::Result<(i64, (i64, i64), (i64, i64))> {
    let org: i64 = sqlx::query_scalar("select id from orgs where slug = 'bench'")
        .fetch_one(pool)
        .await?;
    let user = |email: &'static str| {
        sqlx::query_scalar::<_, i64>("select id from users where org_id = $1 and email = $2")
            .bind(org)
            .bind(email)
    };
    let list = |name: &'static str| {
        sqlx::query_scalar::<_, i64>("select id from lists where org_id = $1 and name = $2")
            .bind(org)
            .bind(name)
    };
    Ok((
        org,
        (
            user("a@bench.example").fetch_one(pool).await?,
            user("admin@bench.example").fetch_one(pool).await?,
        ),
        (
            list("Newsletter").fetch_one(pool).await?,
            list("Product updates").fetch_one(pool).await?,
        ),
    ))
}

/// The materialised segment's recipients written by hand ($1 org, $2 campaign, $3 list, $4 the
/// instant "180 days" counts back from): what the same rows cost at the least.
const BARE_SEGMENT_SQL: &str = "with added as (
         insert into sends (org_id, campaign_id, subscriber_id, email_lower, job_id)
         select distinct on (s.email_lower) s.org_id, $2::bigint, s.id, s.email_lower,
                'campaign:' || $2::bigint || ':' || s.id
         from subscribers s
         where s.org_id = $1 and s.status = 'confirmed' and s.erased_at is null
           and s.attributes ->> 'plan' in ('pro', 'team', 'enterprise')
           and exists (select 1 from list_members lm
                       where lm.list_id = $3 and lm.subscriber_id = s.id)
           and exists (select 1 from events e
                       where e.org_id = s.org_id and e.subscriber_id = s.id
                         and e.name = 'page_view' and e.occurred_at >= $4::timestamptz - interval '180 days')
           and not exists (select 1 from suppressions x
                           where x.org_id = s.org_id and x.email_lower = s.email_lower)
         order by s.email_lower, s.created_at, s.id
         on conflict do nothing
         returning 1
     )
     select count(*) from added";
