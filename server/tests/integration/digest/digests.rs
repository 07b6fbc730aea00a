//! The digest arbiter (guarantee 1): one scheduled digest per org per local ISO week, decided by
//! `UNIQUE (org_id, week_key)`, with due-ness computed in SQL from an injected clock.

use std::collections::BTreeMap;

use app::db::digest::{claim_due_weeks, org_chunk};
use app::db::orgs::NewOrg;
use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use sqlx::PgPool;

use crate::support::helpers::test_db;

async fn org(pool: &PgPool, slug: &str, tz: &str, weekday: i16, hour: i16) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    let id = app::db::orgs::create(
        &mut conn,
        NewOrg {
            name: slug,
            slug,
            timezone: tz,
            from_name: slug,
            from_address: "news@example.org",
        },
    )
    .await
    .unwrap();
    sqlx::query("update orgs set digest_weekday = $2, digest_hour = $3 where id = $1")
        .bind(id)
        .bind(weekday)
        .bind(hour)
        .execute(&mut *conn)
        .await
        .unwrap();
    id
}

/// The ids of the orgs due at `now`, in id order.
async fn due_ids(conn: &mut sqlx::PgConnection, now: DateTime<Utc>) -> Vec<i64> {
    let mut ids: Vec<i64> = org_chunk(conn, Some(now), None, 100_000)
        .await
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    ids.sort();
    ids
}

async fn claim_all(pool: &PgPool, now: DateTime<Utc>) -> usize {
    let mut conn = pool.acquire().await.unwrap();
    let ids = due_ids(&mut conn, now).await;
    claim_due_weeks(&mut conn, Some(now), &ids)
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn the_arbiter_is_a_unique_index_and_a_racing_claim_waits_then_sends_nothing() {
    let pool = test_db().await;
    let (unique,): (bool,) = sqlx::query_as(
        "select i.indisunique from pg_index i join pg_class t on t.oid = i.indrelid
         where t.relname = 'digest_sends'
           and (select array_agg(a.attname order by k.n) from unnest(i.indkey) with ordinality k(attnum, n)
                join pg_attribute a on a.attrelid = t.oid and a.attnum = k.attnum) = array['org_id', 'week_key']::name[]",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(unique);

    let id = org(&pool, "acme", "Europe/Paris", 1, 9).await;
    let monday_ten = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(); // 10:00 in Paris
    let mut first = pool.begin().await.unwrap();
    let claimed = claim_due_weeks(&mut first, Some(monday_ten), &[id])
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (claimed[0].week_key.as_str(), claimed[0].kind.as_str()),
        ("2026-W49", "scheduled")
    );
    // A second tick while the first claim is uncommitted waits on the unique index ...
    let racer = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            claim_due_weeks(&mut conn, Some(monday_ten), &[id])
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!racer.is_finished(), "the second claim waits for the first");
    first.commit().await.unwrap();
    // ... and once the first commits, it claims nothing.
    assert!(racer.await.unwrap().is_empty());
    assert_eq!(claim_all(&pool, monday_ten + Duration::hours(1)).await, 0);
}

#[tokio::test]
async fn a_window_missed_by_more_than_a_day_is_recorded_as_skipped_never_sent_late() {
    let pool = test_db().await;
    org(&pool, "acme", "UTC", 1, 9).await;
    let wednesday = Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let ids = due_ids(&mut conn, wednesday).await;
    let got = claim_due_weeks(&mut conn, Some(wednesday), &ids)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].week_key.as_str(), got[0].kind.as_str()),
        ("2026-W49", "skipped")
    );
    // Before Monday's slot the next week is not due; at it, it is.
    let sunday = Utc.with_ymd_and_hms(2026, 12, 6, 23, 0, 0).unwrap();
    assert_eq!(claim_all(&pool, sunday).await, 0);
    assert_eq!(claim_all(&pool, sunday + Duration::hours(10)).await, 1);
}

#[tokio::test]
async fn racing_claimers_claim_each_due_org_once() {
    let pool = test_db().await;
    for i in 0..1000 {
        org(&pool, &format!("o{i}"), "UTC", 1, 9).await;
    }
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 9, 30, 0).unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let ids = due_ids(&mut conn, monday).await;
    drop(conn);
    let racers = (0..10).map(|_| {
        let (pool, ids) = (pool.clone(), ids.clone());
        tokio::spawn(async move {
            let mut n = 0;
            for chunk in ids.chunks(100) {
                let mut tx = pool.begin().await.unwrap();
                n += claim_due_weeks(&mut tx, Some(monday), chunk)
                    .await
                    .unwrap()
                    .len();
                tx.commit().await.unwrap();
            }
            n
        })
    });
    let total: usize = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert_eq!(total, 1000);
    assert_eq!(
        claim_all(&pool, monday).await,
        0,
        "a repeated tick claims nothing"
    );
}

/// Hourly ticks from 2020 to 2030 in zones with odd offsets and DST rules: every local ISO week
/// gets exactly one scheduled digest, none twice, none skipped.
/// Orgs whose slots meet the hard cases of local time.
const SWEEP_ZONES: [(&str, &str, i16, i16); 5] = [
    ("auckland", "Pacific/Auckland", 1, 9),
    ("stjohns", "America/St_Johns", 3, 2),
    ("chatham", "Pacific/Chatham", 5, 23),
    ("kathmandu", "Asia/Kathmandu", 7, 0),
    // Cuba changes to and from summer time at midnight: a Sunday-00:00 slot falls into
    // the gap once a year.
    ("havana", "America/Havana", 7, 0),
];

/// Ticks every hour from 2020 to `SWEEP_END` (2030 unless set), one ticker per org in
/// parallel, each tick the real claim statement; `gated`: only when [`org_chunk`] says the org
/// is due, as the ticker does. Checks one digest per local ISO week, none skipped; returns how
/// many claim statements ran and how many weeks they claimed.
async fn sweep_hourly(gated: bool) -> (usize, usize) {
    let pool = test_db().await;
    let mut ids = BTreeMap::new();
    for (slug, tz, day, hour) in SWEEP_ZONES {
        ids.insert(org(&pool, slug, tz, day, hour).await, slug);
    }
    let start = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
    let end_year = std::env::var("SWEEP_END")
        .ok()
        .and_then(|y| y.parse().ok())
        .unwrap_or(2030);
    let end = Utc.with_ymd_and_hms(end_year, 1, 1, 0, 0, 0).unwrap();
    let sweeps = ids.keys().map(|&id| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            let mut now = start;
            let mut claims = 0;
            while now < end {
                let due = !gated || due_ids(&mut conn, now).await.contains(&id);
                if due {
                    claim_due_weeks(&mut conn, Some(now), &[id]).await.unwrap();
                    claims += 1;
                }
                now += Duration::hours(1);
            }
            claims
        })
    });
    let mut claims = 0;
    for s in futures::future::join_all(sweeps).await {
        claims += s.unwrap();
    }
    // The sweep starts mid-week: a slot more than a day before the start was truly missed.
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "select org_id, week_key, kind from digest_sends
         where scheduled_at + interval '1 day' > $1 order by org_id, scheduled_at",
    )
    .bind(start)
    .fetch_all(&pool)
    .await
    .unwrap();
    for (id, slug) in &ids {
        let weeks: Vec<&(i64, String, String)> = rows.iter().filter(|r| r.0 == *id).collect();
        let skipped: Vec<_> = weeks.iter().filter(|w| w.2 != "scheduled").collect();
        assert!(skipped.is_empty(), "{slug}: skipped {skipped:?}");
        // Consecutive ISO weeks, each once: the year-week pairs step by exactly one week.
        let keys: Vec<(i32, u32)> = weeks
            .iter()
            .map(|w| {
                let (y, wk) = w.1.split_once("-W").unwrap();
                (y.parse().unwrap(), wk.parse().unwrap())
            })
            .collect();
        for pair in keys.windows(2) {
            let next =
                chrono::NaiveDate::from_isoywd_opt(pair[0].0, pair[0].1, chrono::Weekday::Mon)
                    .unwrap()
                    + Duration::days(7);
            let expected = (next.iso_week().year(), next.iso_week().week());
            assert_eq!(pair[1], expected, "{slug}: after {:?}", pair[0]);
        }
        assert!(
            keys.len() >= 52 * (end_year - 2020) as usize,
            "{slug}: {} weeks",
            keys.len()
        );
    }
    let weeks: i64 = sqlx::query_scalar("select count(*) from digest_sends")
        .fetch_one(&pool)
        .await
        .unwrap();
    (claims, weeks as usize)
}

#[tokio::test]
async fn an_hourly_sweep_over_ten_years_sends_one_digest_per_local_week() {
    sweep_hourly(false).await;
}

/// The same sweep through the orgs' due times: the same weeks, each org looked at about once a
/// week instead of every hour (a tick's cost follows the orgs that are due).
#[tokio::test]
async fn a_sweep_through_due_times_sends_the_same_weeks_looking_once_a_week() {
    let (claims, weeks) = sweep_hourly(true).await;
    // One look per week claimed, and one more per org (its first, when it is new).
    assert!(
        claims <= weeks + SWEEP_ZONES.len(),
        "{claims} claim statements for {weeks} weeks"
    );
}

/// The ticker reads only the orgs that are due: a new org at once, then each at its next slot
/// and not before; a changed schedule makes an org due again at once, whoever saved it.
#[tokio::test]
async fn a_tick_reads_only_due_orgs_and_a_changed_schedule_is_due_at_once() {
    let pool = test_db().await;
    let a = org(&pool, "a", "UTC", 1, 9).await;
    // Wednesday 00:00 in Kathmandu (UTC+5:45): Tuesday 18:15 UTC.
    let b = org(&pool, "b", "Asia/Kathmandu", 3, 0).await;
    let mut conn = pool.acquire().await.unwrap();
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 9, 30, 0).unwrap();
    let mut due = async |now: DateTime<Utc>| due_ids(&mut conn, now).await;
    assert_eq!(due(monday).await, [a, b]);
    // a's week, and b's last week as skipped: a new org starts at its latest slot.
    assert_eq!(claim_all(&pool, monday).await, 2);
    assert_eq!(due(monday + Duration::hours(1)).await, Vec::<i64>::new());
    let b_slot = Utc.with_ymd_and_hms(2026, 12, 1, 18, 15, 0).unwrap();
    assert_eq!(due(b_slot - Duration::seconds(1)).await, Vec::<i64>::new());
    assert_eq!(due(b_slot).await, [b]);
    let a_next = Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap();
    assert_eq!(due(a_next - Duration::seconds(1)).await, [b]);
    assert_eq!(due(a_next).await, [a, b]);
    assert_eq!(claim_all(&pool, b_slot).await, 1);
    assert_eq!(due(a_next - Duration::seconds(1)).await, Vec::<i64>::new());

    // The schedule saved as the Digests page saves it: a is due at once; saving it unchanged,
    // or changing another column of the org, does not make it due.
    let mut c = pool.acquire().await.unwrap();
    let schedule = |weekday, tz: &str| app::db::digest::admin::Schedule {
        weekday,
        hour: 9,
        timezone: tz.into(),
    };
    app::db::digest::admin::save_schedule(&mut c, a, &schedule(1, "UTC"))
        .await
        .unwrap();
    sqlx::query("update orgs set name = 'A' where id = $1")
        .bind(a)
        .execute(&mut *c)
        .await
        .unwrap();
    assert_eq!(due(monday + Duration::hours(1)).await, Vec::<i64>::new());
    app::db::digest::admin::save_schedule(&mut c, a, &schedule(2, "UTC"))
        .await
        .unwrap();
    assert_eq!(due(monday + Duration::hours(1)).await, [a]);
    // Tuesday 09:00 has not come: nothing to claim, and a is next due then.
    assert_eq!(claim_all(&pool, monday + Duration::hours(1)).await, 0);
    let tuesday = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
    assert_eq!(due(tuesday - Duration::seconds(1)).await, Vec::<i64>::new());
    assert_eq!(due(tuesday).await, [a]);
    app::db::digest::admin::save_schedule(&mut c, b, &schedule(3, "Europe/Berlin"))
        .await
        .unwrap();
    assert_eq!(
        due(monday + Duration::hours(1)).await,
        [b],
        "a new time zone"
    );
}

/// The due time is the next slot's instant in the org's own time zone, across clock changes:
/// a due time computed an hour off would still claim the week, so the instants are checked.
#[tokio::test]
async fn the_next_due_time_is_the_local_slot_across_clock_changes() {
    let pool = test_db().await;
    let berlin = org(&pool, "berlin", "Europe/Berlin", 1, 9).await;
    let mut conn = pool.acquire().await.unwrap();
    let at = |d: u32, m: u32, h: u32| Utc.with_ymd_and_hms(2026, m, d, h, 0, 0).unwrap();
    let second = Duration::seconds(1);
    // Spring: Monday 23 March 09:00 CET is 08:00 UTC; on 29 March the clocks go forward, so
    // Monday 30 March 09:00 CEST is 07:00 UTC.
    assert_eq!(
        claim_all(&pool, at(23, 3, 8) + Duration::minutes(30)).await,
        1
    );
    assert!(due_ids(&mut conn, at(30, 3, 7) - second).await.is_empty());
    assert_eq!(due_ids(&mut conn, at(30, 3, 7)).await, [berlin]);
    // Autumn: Monday 19 October 09:00 CEST is 07:00 UTC; on 25 October the clocks go back, so
    // Monday 26 October 09:00 CET is 08:00 UTC.
    // Away since March: this week's digest and 29 skipped weeks, W14 to W43.
    assert_eq!(
        claim_all(&pool, at(19, 10, 7) + Duration::minutes(30)).await,
        30
    );
    assert!(due_ids(&mut conn, at(26, 10, 8) - second).await.is_empty());
    assert_eq!(due_ids(&mut conn, at(26, 10, 8)).await, [berlin]);
    assert_eq!(claim_all(&pool, at(26, 10, 8)).await, 1);
    assert_eq!(
        weeks_of(&pool, berlin).await.last(),
        Some(&("2026-W44".to_string(), "scheduled".to_string()))
    );
}

/// A claim racing a schedule save: the save holds the org's row, so the claim (started on the
/// old schedule) waits on it (first at its insert's foreign-key check), then finds another
/// schedule when it moves the due time and leaves the org due, for the next tick to look at
/// under the new one.
#[tokio::test]
async fn a_claim_that_raced_a_schedule_save_leaves_the_org_due() {
    let pool = test_db().await;
    let a = org(&pool, "a", "UTC", 1, 9).await;
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 9, 30, 0).unwrap();
    let mut save = pool.begin().await.unwrap();
    app::db::digest::admin::save_schedule(
        &mut save,
        a,
        &app::db::digest::admin::Schedule {
            weekday: 1,
            hour: 8,
            timezone: "UTC".into(),
        },
    )
    .await
    .unwrap();
    let claim = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut conn = pool.acquire().await.unwrap();
            claim_due_weeks(&mut conn, Some(monday), &[a])
                .await
                .unwrap()
        })
    };
    // The claim's statement has begun (on the old schedule) once its backend waits for a lock.
    let started = std::time::Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar("select count(*) from pg_locks where not granted")
            .fetch_one(&pool)
            .await
            .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(!claim.is_finished(), "the claim did not wait for the save");
        assert!(started.elapsed().as_secs() < 30, "the claim never waited");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    save.commit().await.unwrap();
    assert_eq!(
        claim.await.unwrap().len(),
        1,
        "this week, by the schedule it read"
    );
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(due_ids(&mut conn, monday).await, [a]);
    // The next tick looks under the new schedule: the week is claimed already.
    assert_eq!(claim_all(&pool, monday).await, 0);
    assert_eq!(due_ids(&mut conn, monday).await, Vec::<i64>::new());
}

/// The weeks an org has rows for, oldest first: (week key, kind).
async fn weeks_of(pool: &PgPool, org: i64) -> Vec<(String, String)> {
    sqlx::query_as(
        "select week_key, kind from digest_sends where org_id = $1 and kind <> 'manual' order by scheduled_at",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// After an outage, the first tick lands in the first occurrence of the doubled hour of the
/// autumn clock change (02:00–03:00 happens twice in Berlin on 2026-10-25): the missed week is
/// recorded as skipped there and then, and this week's digest goes out at its slot (the second
/// 02:00, the instant PostgreSQL gives that local time).
#[tokio::test]
async fn a_tick_inside_the_doubled_autumn_hour_records_the_missed_week_and_sends_this_one() {
    let pool = test_db().await;
    let (berlin, london, stjohns) = (
        org(&pool, "berlin", "Europe/Berlin", 7, 2).await,
        org(&pool, "london", "Europe/London", 7, 1).await,
        org(&pool, "stjohns", "America/St_Johns", 7, 1).await,
    );
    // Each org's week 41 went out; then Mailroom was down through week 42's slot.
    assert_eq!(
        claim_all(&pool, Utc.with_ymd_and_hms(2026, 10, 11, 5, 0, 0).unwrap()).await,
        3
    );
    // 00:15 UTC = 02:15 CEST (Berlin, first pass); London's doubled hour is 01:00 BST/GMT at
    // 00:00–01:00 UTC and St John's 01:00 on 2026-11-01 (a week later).
    let cases = [
        (
            berlin,
            Utc.with_ymd_and_hms(2026, 10, 25, 0, 15, 0).unwrap(),
            Utc.with_ymd_and_hms(2026, 10, 25, 1, 5, 0).unwrap(),
            "2026-W43",
        ),
        (
            london,
            Utc.with_ymd_and_hms(2026, 10, 25, 0, 30, 0).unwrap(),
            Utc.with_ymd_and_hms(2026, 10, 25, 1, 5, 0).unwrap(),
            "2026-W43",
        ),
    ];
    for (id, first_pass, after_slot, this_week) in cases {
        let mut conn = pool.acquire().await.unwrap();
        let got = claim_due_weeks(&mut conn, Some(first_pass), &[id])
            .await
            .unwrap();
        let got: Vec<(&str, &str)> = got
            .iter()
            .map(|w| (w.week_key.as_str(), w.kind.as_str()))
            .collect();
        assert_eq!(
            got,
            [("2026-W42", "skipped")],
            "the missed week, at the first tick"
        );
        let got = claim_due_weeks(&mut conn, Some(after_slot), &[id])
            .await
            .unwrap();
        let got: Vec<(&str, &str)> = got
            .iter()
            .map(|w| (w.week_key.as_str(), w.kind.as_str()))
            .collect();
        assert_eq!(got, [(this_week, "scheduled")]);
    }
    // St John's (UTC-2:30 summer, -3:30 winter): 01:00 local happens twice on 2026-11-01, first
    // at 03:30 UTC. Weeks 42 and 43 were missed.
    let mut conn = pool.acquire().await.unwrap();
    let first_pass = Utc.with_ymd_and_hms(2026, 11, 1, 3, 40, 0).unwrap();
    let got = claim_due_weeks(&mut conn, Some(first_pass), &[stjohns])
        .await
        .unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    let got = claim_due_weeks(&mut conn, Some(first_pass + Duration::hours(1)), &[stjohns])
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    let weeks = weeks_of(&pool, stjohns).await;
    let want = [
        ("2026-W41", "scheduled"),
        ("2026-W42", "skipped"),
        ("2026-W43", "skipped"),
        ("2026-W44", "scheduled"),
    ];
    assert_eq!(weeks, want.map(|(w, k)| (w.to_string(), k.to_string())));
}

/// An outage of several weeks: each missed week gets its own skipped row, none is sent late,
/// and the history has no hole.
#[tokio::test]
async fn every_week_a_long_outage_missed_is_recorded_as_skipped() {
    let pool = test_db().await;
    let id = org(&pool, "acme", "UTC", 1, 9).await;
    let monday = Utc.with_ymd_and_hms(2026, 11, 2, 9, 30, 0).unwrap();
    assert_eq!(claim_all(&pool, monday).await, 1);
    // Down for four weeks and a day: back on Tuesday of the fifth week, after its slot's day.
    let back = monday + Duration::days(29) + Duration::hours(2);
    assert_eq!(claim_all(&pool, back).await, 4);
    assert_eq!(claim_all(&pool, back).await, 0, "each once");
    let weeks = weeks_of(&pool, id).await;
    let want = [
        ("2026-W45", "scheduled"),
        ("2026-W46", "skipped"),
        ("2026-W47", "skipped"),
        ("2026-W48", "skipped"),
        ("2026-W49", "skipped"),
    ];
    assert_eq!(weeks, want.map(|(w, k)| (w.to_string(), k.to_string())));
    // A new org starts at its latest slot: no history is invented before it existed.
    let new = org(&pool, "new", "UTC", 1, 9).await;
    assert_eq!(claim_all(&pool, back).await, 1);
    assert_eq!(weeks_of(&pool, new).await.len(), 1);

    // Down for 100 weeks, back an hour after the slot: exactly 52 rows in all (README: "at most
    // 52"), this week's scheduled and the 51 before it skipped; older weeks get no row.
    let away = org(&pool, "away", "UTC", 1, 9).await;
    let mut conn = pool.acquire().await.unwrap();
    let first = claim_due_weeks(&mut conn, Some(monday), &[away])
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let later = monday + Duration::weeks(100) + Duration::hours(1);
    let got = claim_due_weeks(&mut conn, Some(later), &[away])
        .await
        .unwrap();
    assert_eq!(got.len(), 52, "{got:?}");
    let scheduled = got
        .iter()
        .filter(|w| w.kind.as_str() == "scheduled")
        .count();
    assert_eq!(scheduled, 1, "{got:?}");
    let again = claim_due_weeks(&mut conn, Some(later), &[away])
        .await
        .unwrap();
    assert!(again.is_empty(), "each once: {again:?}");
    let weeks = weeks_of(&pool, away).await;
    assert_eq!(weeks.len(), 1 + 52);
    let at = |i: usize| (weeks[i].0.as_str(), weeks[i].1.as_str());
    assert_eq!(at(0), ("2026-W45", "scheduled"));
    assert_eq!(at(1), ("2027-W41", "skipped"), "the oldest of the 52");
    assert_eq!(at(51), ("2028-W39", "skipped"));
    assert_eq!(at(52), ("2028-W40", "scheduled"));
}
