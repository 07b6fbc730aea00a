//! The bounce mailbox over real SMTP on a real PostgreSQL: VERP envelope senders on the way
//! out, DSNs and ARF reports mailed back to `--bounce-listen`'s listener, a flood of 10,000
//! from 20 connections (each attributed once, resends write nothing), forged and foreign
//! recipients refused before DATA, and a campaign that pauses itself when its bounces climb.

use std::net::SocketAddr;

use app::api::campaign::CampaignDetail;
use app::domain::{BouncePolicy, JobId, Role, Transition};
use sqlx::PgPool;
use testkit::reports::{arf, dsn, dsn_naming};
use testkit::{ReportClient, SmtpSink};

use crate::support::bounces::{delivered_campaign, set_bounce_domain, tally};
use crate::support::fixtures::run_to_end;
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, marked, spawn_app};

/// The listener with its defaults.
async fn listener(pool: &PgPool) -> SocketAddr {
    crate::support::bounces::listener(pool, mailroom::feedback::listener::Config::default()).await
}

#[tokio::test]
async fn ten_thousand_dsns_from_twenty_connections_are_each_attributed_once() {
    const N: usize = 10_000;
    const CONNECTIONS: usize = 20;
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, "bounce.acme.test").await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", N as i64).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let mail: Vec<(String, String)> = jobs
        .iter()
        .enumerate()
        .map(|(i, (job, to))| {
            let rcpt = app::verp::address(&key, org, job, "bounce.acme.test").unwrap();
            let data = dsn(&format!("flood-{i}"), &rcpt, to, "5.1.1", None);
            (rcpt, data)
        })
        .collect();
    let addr = listener(&pool).await;

    // Each connection mails its share; every report must get 250 after its commit.
    let send = |part: Vec<(String, String)>| async move {
        let mut c = ReportClient::connect(addr).await.unwrap();
        let mut codes = Vec::new();
        for (rcpt, data) in &part {
            codes.push(c.send(rcpt, data).await.unwrap());
        }
        c.quit().await.unwrap();
        codes
    };
    let mut tasks = Vec::new();
    for k in 0..CONNECTIONS {
        let part: Vec<_> = mail.iter().skip(k).step_by(CONNECTIONS).cloned().collect();
        tasks.push(tokio::spawn(send(part)));
    }
    let mut answered = 0;
    for t in tasks {
        for codes in t.await.unwrap() {
            assert_eq!(codes, (250, 250));
            answered += 1;
        }
    }
    assert_eq!(answered, N);
    assert_eq!(
        tally(&pool, org).await,
        (N as i64, N as i64, N as i64, N as i64)
    );
    let by_token: i64 = sqlx::query_scalar(
        "select count(*) from delivery_events where org_id = $1 and matched_by = 'token' and source = 'dsn'
           and kind = 'hard_bounce' and effect = 'suppressed'",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        by_token, N as i64,
        "every one found its delivery by its token"
    );

    // An MTA that lost our 250 mails the same report again: answered 250, nothing new.
    let again: Vec<_> = mail.iter().take(1000).cloned().collect();
    let resent = tokio::spawn(send(again[..500].to_vec()));
    let resent2 = tokio::spawn(send(again[500..].to_vec()));
    for codes in resent
        .await
        .unwrap()
        .into_iter()
        .chain(resent2.await.unwrap())
    {
        assert_eq!(codes, (250, 250));
    }
    assert_eq!(
        tally(&pool, org).await,
        (N as i64, N as i64, N as i64, N as i64)
    );
}

#[tokio::test]
async fn forged_foreign_and_unknown_recipients_are_refused_before_data() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let a = acme.id.0;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let b = globex.id.0;
    set_bounce_domain(&pool, a, "bounce.acme.test").await;
    set_bounce_domain(&pool, b, "bounce.globex.test").await;
    let (_, jobs_a) = delivered_campaign(&pool, a, acme.owner().id.0, "sent", 3).await;
    let (_, jobs_b) = delivered_campaign(&pool, b, globex.owner().id.0, "sent", 1).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let addr = listener(&pool).await;
    let mut c = ReportClient::connect(addr).await.unwrap();
    let (job, to) = &jobs_a[0];
    let genuine = app::verp::address(&key, a, job, "bounce.acme.test").unwrap();
    let (local, _) = genuine.rsplit_once('@').unwrap();
    let tampered = genuine.replacen(
        &format!("-{}", job_sub(job)),
        &format!("-{}", job_sub(job) + 1),
        1,
    );
    let b_token_at_a = app::verp::address(&key, b, &jobs_b[0].0, "bounce.acme.test").unwrap();
    let cases = [
        (
            "another org's domain for A's token",
            format!("{local}@bounce.globex.test"),
            550,
        ),
        ("a tampered job", tampered, 550),
        ("B's token at A's domain", b_token_at_a, 550),
        ("no token", "jane@bounce.acme.test".to_string(), 550),
        (
            "not a bounce domain",
            format!("{local}@elsewhere.test"),
            550,
        ),
    ];
    for (what, rcpt, want) in cases {
        let data = dsn("forged", &rcpt, to, "5.1.1", None);
        assert_eq!(c.send(&rcpt, &data).await.unwrap(), (want, 0), "{what}");
    }
    assert_eq!(tally(&pool, a).await, (0, 0, 0, 0));
    assert_eq!(tally(&pool, b).await, (0, 0, 0, 0));

    // A complaint to the feedback-loop address proves itself by the token in its
    // Original-Mail-From; one without a token is kept, unverified, and suppresses nobody.
    let complaint = arf("c1", "fbl@bounce.acme.test", &genuine, to);
    assert_eq!(
        c.send("fbl@bounce.acme.test", &complaint).await.unwrap(),
        (250, 250)
    );
    let (job1, to1) = &jobs_a[1];
    let unproven = arf("c2", "fbl@bounce.acme.test", "news@acme.test", to1);
    assert_eq!(
        c.send("fbl@bounce.acme.test", &unproven).await.unwrap(),
        (250, 250)
    );
    c.quit().await.unwrap();
    let rows: Vec<(String, Option<String>, String, bool, String)> = sqlx::query_as(
        "select provider_event_id, job_id, matched_by, verified, effect from delivery_events
         where org_id = $1 and source = 'arf' order by id",
    )
    .bind(a)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                format!("c1@isp.test:{to}"),
                Some(job.to_string()),
                "token".into(),
                true,
                "suppressed".into()
            ),
            (
                format!("c2@isp.test:{to1}"),
                Some(job1.to_string()),
                "recipient".into(),
                false,
                "none".into()
            ),
        ]
    );
    let suppressed: Vec<(String, String)> =
        sqlx::query_as("select email_lower, reason from suppressions where org_id = $1")
            .bind(a)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(suppressed, vec![(to.clone(), "complaint".to_string())]);
}

/// The envelope sender of one received message is public (its Return-Path): a report mailed
/// through it that names other addresses must change nothing for them. A DSN naming 150 others
/// and an ARF complaint naming others are kept as unmatched, unverified, with no effect: no
/// suppression, no count towards the campaign's bounce rate, no pause; the genuine report about
/// the token's own recipient still suppresses it.
#[tokio::test]
async fn reports_through_one_token_naming_other_addresses_change_nothing_for_them() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, "bounce.acme.test").await;
    let (campaign, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sending", 600).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let (job_x, x) = &jobs[0];
    let verp_x = app::verp::address(&key, org, job_x, "bounce.acme.test").unwrap();
    let victims: Vec<&str> = jobs[1..151].iter().map(|(_, to)| to.as_str()).collect();
    let addr = listener(&pool).await;
    let mut c = ReportClient::connect(addr).await.unwrap();

    let forged = dsn_naming("forged-dsn", &verp_x, &victims, "5.1.1");
    assert_eq!(c.send(&verp_x, &forged).await.unwrap(), (250, 250));
    let complaint_about_other = arf("forged-arf", "fbl@bounce.acme.test", &verp_x, victims[0]);
    assert_eq!(
        c.send("fbl@bounce.acme.test", &complaint_about_other)
            .await
            .unwrap(),
        (250, 250)
    );
    let complaint_about_stranger = arf(
        "forged-arf-2",
        "fbl@bounce.acme.test",
        &verp_x,
        "ceo@acme.test",
    );
    assert_eq!(
        c.send("fbl@bounce.acme.test", &complaint_about_stranger)
            .await
            .unwrap(),
        (250, 250)
    );
    // A genuine token whose delivery is gone (a purged campaign's) or a test message's token
    // (it went to someone else) vouches for nobody either.
    let purged = JobId::Campaign {
        campaign_id: campaign,
        subscriber_id: i64::from(i32::MAX),
    };
    let test = JobId::Test {
        campaign_id: campaign,
        content_version: 1,
        token: "dialog".into(),
        email_lower: "tester@acme.test".into(),
    };
    for (i, job) in [purged, test].iter().enumerate() {
        let via = app::verp::address(&key, org, job, "bounce.acme.test").unwrap();
        let report = dsn(&format!("orphan-{i}"), &via, victims[1], "5.1.1", None);
        assert_eq!(c.send(&via, &report).await.unwrap(), (250, 250));
    }

    let suppressed: i64 = sqlx::query_scalar("select count(*) from suppressions where org_id = $1")
        .bind(org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        suppressed, 0,
        "nobody named by a forged report is suppressed"
    );
    // Kept, visible as unmatched: the orphan reports, every group the parser read (it reads 100 at most) and both
    // complaints, none verified, none attached to X's delivery.
    let kept: (i64, i64, i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where job_id is null and matched_by = 'none'),
                count(*) filter (where verified), count(*) filter (where effect <> 'none')
         from delivery_events where org_id = $1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, (104, 104, 0, 0));
    let mut conn = pool.acquire().await.unwrap();
    let unmatched = app::db::reports::recent(&mut conn, org, true)
        .await
        .unwrap();
    assert!(
        unmatched.iter().any(|e| e.recipient == "ceo@acme.test"),
        "the forged complaint is listed as unmatched"
    );
    let counts = app::db::reports::campaign_counts(&mut conn, org, campaign)
        .await
        .unwrap();
    assert_eq!((counts.hard_bounces, counts.complaints), (0, 0));
    let status: String = sqlx::query_scalar("select status from campaigns where id = $1")
        .bind(campaign)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "sending", "forged reports cannot pause a campaign");

    // The token still vouches for its own recipient, in any case of the address.
    let genuine = dsn("genuine", &verp_x, &x.to_uppercase(), "5.1.1", None);
    assert_eq!(c.send(&verp_x, &genuine).await.unwrap(), (250, 250));
    c.quit().await.unwrap();
    let suppressed: Vec<(String, String)> =
        sqlx::query_as("select email_lower, reason from suppressions where org_id = $1")
            .bind(org)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(suppressed, vec![(x.clone(), "hard_bounce".to_string())]);
    let counts = app::db::reports::campaign_counts(&mut conn, org, campaign)
        .await
        .unwrap();
    assert_eq!(counts.hard_bounces, 1);
}

fn job_sub(job: &JobId) -> i64 {
    match job {
        JobId::Campaign { subscriber_id, .. } => *subscriber_id,
        _ => unreachable!("a campaign job"),
    }
}

#[tokio::test]
async fn a_campaign_sent_with_verp_then_three_percent_bounced_shows_the_rate_and_suppresses_them() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, "bounce.acme.test").await;
    let (lists, _) = acme.audience(1000).await;
    let id = acme
        .campaign()
        .to(&lists)
        .body("Hello {{ name }}")
        .approved()
        .await
        .0;
    let sink = SmtpSink::start();
    run_to_end(&pool, id, &sink).await;
    let messages = sink.messages();
    assert_eq!(messages.len(), 1000);

    // Every envelope sender is a VERP address at the bounce domain naming its own delivery;
    // the relay's queue id from its 250 reply is kept.
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    for m in &messages {
        let token = app::verp::verify_address(&key, org, &m.from);
        let Some(app::verp::VerpRef::Job(JobId::Campaign { campaign_id, .. })) = token else {
            panic!("{} is not a VERP address of the campaign", m.from);
        };
        assert_eq!(campaign_id, id);
        assert!(m.from.ends_with("@bounce.acme.test"), "{}", m.from);
    }
    let with_relay_id: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where campaign_id = $1 and relay_id like 'SINK%'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(with_relay_id, 1000);

    // 3 % of it bounces back, mailed by the recipients' MTAs to the envelope senders.
    let addr = listener(&pool).await;
    let mut c = ReportClient::connect(addr).await.unwrap();
    let bounced: Vec<&testkit::Received> = messages.iter().step_by(33).take(30).collect();
    for (i, m) in bounced.iter().enumerate() {
        let report = dsn(&format!("e2e-{i}"), &m.from, &m.to[0], "5.1.1", None);
        assert_eq!(c.send(&m.from, &report).await.unwrap(), (250, 250));
    }
    c.quit().await.unwrap();

    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (status, body) = app.call_fn(&admin, CampaignDetail { id }).await;
    assert_eq!(status, 200, "{body}");
    let detail = json(&body);
    assert_eq!(detail["bounces"]["hard_bounces"], 30);
    assert_eq!(detail["bounces"]["delivered"], 1000);
    let html = app.get_html(&admin, &format!("/campaigns/{id}")).await;
    assert_eq!(marked(&html, "bounce-rate").as_deref(), Some("3.0 %"));
    assert_eq!(marked(&html, "hard-bounces").as_deref(), Some("30"));
    assert_eq!(marked(&html, "complaint-rate").as_deref(), Some("0.00 %"));
    let mut suppressed: Vec<String> = sqlx::query_scalar(
        "select email_lower from suppressions where org_id = $1 and reason = 'hard_bounce' order by 1",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut want: Vec<String> = bounced.iter().map(|m| m.to[0].to_lowercase()).collect();
    want.sort();
    suppressed.sort();
    assert_eq!(suppressed, want);
    assert_eq!(
        sqlx::query_scalar::<_, String>("select status from campaigns where id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap(),
        "sent",
        "3 % is under the 5 % that pauses"
    );
}

#[tokio::test]
async fn a_sending_campaign_pauses_itself_once_at_the_bounce_rate_and_says_why() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, "bounce.acme.test").await;
    {
        let mut conn = pool.acquire().await.unwrap();
        let p = BouncePolicy::new(3, 30, 5.0, 0.1, 100).unwrap();
        app::db::reports::save_policy(&mut conn, org, p)
            .await
            .unwrap();
    }
    let (cid, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sending", 200).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let addr = listener(&pool).await;
    // Twelve bounces (6 %) mailed at once over four connections: the tenth crosses 5 %.
    let mut tasks = Vec::new();
    for k in 0..4 {
        let part: Vec<(String, String)> = jobs
            .iter()
            .take(12)
            .skip(k)
            .step_by(4)
            .map(|(job, to)| {
                let rcpt = app::verp::address(&key, org, job, "bounce.acme.test").unwrap();
                (
                    rcpt.clone(),
                    dsn(&format!("p-{to}"), &rcpt, to, "5.1.1", None),
                )
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut c = ReportClient::connect(addr).await.unwrap();
            for (rcpt, data) in &part {
                assert_eq!(c.send(rcpt, data).await.unwrap(), (250, 250));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (status, reason): (String, Option<String>) =
        sqlx::query_as("select status, pause_reason from campaigns where id = $1")
            .bind(cid)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(status, "paused");
    let reason = reason.unwrap();
    assert!(
        reason.contains("in 200 delivered") && reason.contains("limit is 5 %"),
        "{reason}"
    );
    let audits: Vec<(Option<i64>, serde_json::Value)> = sqlx::query_as(
        "select actor_id, after from audit_log where org_id = $1 and action = 'campaign.auto_pause'",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audits.len(), 1, "paused once, audited once");
    assert_eq!(audits[0].0, None, "by no one");
    assert_eq!(audits[0].1["reason"], reason.as_str());

    // An admin resumes it: more bounces do not pause it again (the rates were overruled).
    {
        let mut conn = pool.acquire().await.unwrap();
        app::db::campaign::states::change(
            &mut conn,
            app::domain::OrgId(org),
            app::domain::CampaignId(cid),
            Transition::Resume,
        )
        .await
        .unwrap();
    }
    let mut c = ReportClient::connect(addr).await.unwrap();
    let (job, to) = &jobs[20];
    let rcpt = app::verp::address(&key, org, job, "bounce.acme.test").unwrap();
    assert_eq!(
        c.send(&rcpt, &dsn("after-resume", &rcpt, to, "5.1.1", None))
            .await
            .unwrap(),
        (250, 250)
    );
    let status: String = sqlx::query_scalar("select status from campaigns where id = $1")
        .bind(cid)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "sending");

    // The page says why it paused.
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let html = app.get_html(&owner, &format!("/campaigns/{cid}")).await;
    assert_eq!(
        marked(&html, "pause-reason").as_deref(),
        Some(reason.as_str())
    );
    assert_eq!(marked(&html, "hard-bounces").as_deref(), Some("13"));
}

#[tokio::test]
async fn reports_about_an_erased_subscriber_attach_to_the_hash_and_never_bring_the_address_back() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    set_bounce_domain(&pool, org, "bounce.acme.test").await;
    let (_, jobs) = delivered_campaign(&pool, org, acme.owner().id.0, "sent", 2).await;
    let key = app::signing::Purpose::Verp.key(&pool).await.unwrap();
    let addr = listener(&pool).await;
    let (job, to) = &jobs[0];
    let rcpt = app::verp::address(&key, org, job, "bounce.acme.test").unwrap();
    let mut c = ReportClient::connect(addr).await.unwrap();
    // Mailbox full: counted, its diagnostic quoting the address.
    let before = dsn("before-erasure", &rcpt, to, "5.2.2", None);
    assert_eq!(c.send(&rcpt, &before).await.unwrap(), (250, 250));
    {
        let mut conn = pool.acquire().await.unwrap();
        app::db::subscribers::erase(&mut conn, org, job_sub(job))
            .await
            .unwrap()
            .unwrap();
    }
    // Reported after the erasure: found by its token, kept under the hash.
    let after = dsn("after-erasure", &rcpt, to, "5.1.1", None);
    assert_eq!(c.send(&rcpt, &after).await.unwrap(), (250, 250));
    c.quit().await.unwrap();
    let rows: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
        "select kind, email_lower, diagnostic, job_id from delivery_events where org_id = $1 order by id",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (kind, email, diagnostic, job_id) in &rows {
        assert!(email.starts_with("erased-"), "{kind}: {email}");
        assert_eq!(
            diagnostic, &None,
            "{kind}: the diagnostic quoted the address"
        );
        assert_eq!(job_id.as_deref(), Some(job.to_string().as_str()));
    }
    let clear: i64 = sqlx::query_scalar(
        "select count(*) from delivery_events where strpos(coalesce(diagnostic, '') || email_lower, $1) > 0",
    )
    .bind(to)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(clear, 0, "the address is nowhere in the ledger");
}
