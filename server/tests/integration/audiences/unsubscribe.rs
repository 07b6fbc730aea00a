//! Campaign mail carries RFC 8058 one-click unsubscribe headers with a signed token; the
//! one-click POST suppresses (CSRF-exempt by design), a GET only shows a confirmation page.

use app::domain::Role;
use mailroom::workers::delivery::Worker;
use reqwest::StatusCode;
use sqlx::PgPool;

use crate::support::fixtures::campaign_deliveries;
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::spawn_app;
use testkit::SmtpSink;

async fn suppressions(pool: &PgPool) -> Vec<(String, String, String)> {
    sqlx::query_as("select email_lower, reason, source from suppressions order by email_lower")
        .fetch_all(pool)
        .await
        .unwrap()
}

fn header<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    message
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

#[tokio::test]
async fn one_click_unsubscribe_from_a_sent_campaign_suppresses_and_a_get_never_does() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails = vec!["Ann@Example.org".to_string()];
    let (cid, jobs) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "u");
    assert_eq!(worker.drain().await.unwrap(), 1);

    let got = sink.messages();
    assert_eq!(got.len(), 1);
    let message = got[0].data.replace("\r\n", "\n");
    let list_unsubscribe = header(&message, "List-Unsubscribe").expect("List-Unsubscribe");
    assert_eq!(
        header(&message, "List-Unsubscribe-Post"),
        Some("List-Unsubscribe=One-Click")
    );
    let link = list_unsubscribe
        .strip_prefix("<http://mailroom.test/u/")
        .and_then(|l| l.strip_suffix('>'))
        .unwrap_or_else(|| panic!("{list_unsubscribe}"));
    // The footer too (the body may be quoted-printable: undo its soft line breaks).
    let body = message.replace("=\n", "");
    assert!(
        body.contains(&format!("Unsubscribe: http://mailroom.test/u/{link}")),
        "{message}"
    );
    let token = link.to_string();

    let app = spawn_app(pool.clone()).await;
    let http = reqwest::Client::new();
    let url = format!("{}/u/{token}", app.base);

    // A GET (a link scanner, a prefetch, a person) only asks.
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let text = page.text().await.unwrap();
    assert!(
        text.contains("Ann@Example.org") && text.contains("<form method=\"post\""),
        "{text}"
    );
    assert!(
        suppressions(&pool).await.is_empty(),
        "a GET never unsubscribes"
    );

    // The one-click POST, as a mail client sends it: no cookie, and from another origin.
    let click = || {
        http.post(&url)
            .header("Origin", "https://mail.example.net")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
    };
    assert_eq!(click().send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        suppressions(&pool).await,
        vec![(
            "ann@example.org".to_string(),
            "unsubscribed".to_string(),
            format!("unsubscribe link, campaign {cid}")
        )]
    );
    assert_eq!(
        click().send().await.unwrap().status(),
        StatusCode::OK,
        "twice is fine"
    );
    assert_eq!(suppressions(&pool).await.len(), 1);

    // A forged or altered token is a plain 404 that says nothing about why.
    for bad in [
        token.replacen(&format!("{org}."), &format!("{}.", org + 1), 1),
        format!("{token}x"),
        "1.2.3.AAAA".to_string(),
    ] {
        let r = http
            .post(format!("{}/u/{bad}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{bad}");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("not valid") && !body.to_lowercase().contains("hmac"),
            "{body}"
        );
    }

    // The same address on the next campaign is suppressed at claim, before any network call.
    let (_, next) = campaign_deliveries(
        &pool,
        org,
        acme.owner().id.0,
        "sending",
        &["ann@example.org".to_string()],
    )
    .await;
    assert!(app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap()
        .is_empty());
    let (status,): (String,) = sqlx::query_as("select status from deliveries where job_id = $1")
        .bind(&next[0])
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "suppressed");
    assert_ne!(jobs[0], next[0]);
}

#[tokio::test]
async fn the_dashboard_still_refuses_cross_site_writes() {
    let pool = test_db().await;
    let app = spawn_app(pool).await;
    let r = reqwest::Client::new()
        .post(format!("{}/api/logout", app.base))
        .header("Origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "only /u/ is exempt");
}

#[tokio::test]
async fn generated_keys_are_stored_once_and_shared_by_every_replica() {
    use app::unsubscribe::Claim;
    use mailroom::http::unsubscribe::load_keys;
    let pool = test_db().await;
    let (a, b) = tokio::join!(load_keys(&pool, None), load_keys(&pool, None));
    let claim = Claim {
        org_id: 1,
        subscriber_id: 2,
        from: app::unsubscribe::Origin::Campaign(3),
    };
    assert_eq!(b.unwrap().verify(&a.unwrap().sign(claim)), Some(claim));
    let (stored,): (i64,) = sqlx::query_as("select count(*) from secrets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 1);

    let bad = load_keys(&pool, Some("not base64!")).await.unwrap_err();
    assert!(
        bad.to_string().contains("MAILROOM_UNSUBSCRIBE_KEYS"),
        "{bad}"
    );
    let short = load_keys(&pool, Some("c2hvcnQ=")).await.unwrap_err();
    assert!(short.to_string().contains("at least 16 bytes"), "{short}");
}

#[tokio::test]
async fn the_preference_page_takes_a_subscriber_off_the_lists_they_uncheck_and_onto_none() {
    use app::db::audience;
    use app::domain::EmailAddress;
    use app::unsubscribe::Claim;
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut tx = pool.begin().await.unwrap();
    let news = audience::create_list(&mut tx, org, "News").await.unwrap();
    let events = audience::create_list(&mut tx, org, "Events <live>")
        .await
        .unwrap();
    let other = audience::create_list(&mut tx, org, "Other").await.unwrap();
    let ann = EmailAddress::parse("ann@example.org").unwrap();
    let ids = audience::insert_subscribers(&mut tx, org, &[(ann, "Ann".into())])
        .await
        .unwrap();
    audience::add_members(&mut tx, org, news, &ids)
        .await
        .unwrap();
    audience::add_members(&mut tx, org, events, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let token = crate::support::helpers::test_keys().sign(Claim {
        org_id: org,
        subscriber_id: ids[0],
        from: app::unsubscribe::Origin::Campaign(1),
    });
    let app = spawn_app(pool.clone()).await;
    let http = reqwest::Client::new();

    let page = http
        .get(format!("{}/u/{token}", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!("value=\"{news}\" checked> News")),
        "{page}"
    );
    assert!(page.contains("Events &lt;live&gt;"), "escaped: {page}");
    assert!(!page.contains("Other"), "only their own lists: {page}");

    // Keep News (and try to join Other, which the form never offers): off Events only.
    let r = http
        .post(format!("{}/u/{token}/lists", app.base))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("keep={news}&keep={other}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("You are off Events &lt;live&gt;."));
    let lists: Vec<i64> = sqlx::query_scalar(
        "select list_id from list_members where subscriber_id = $1 order by list_id",
    )
    .bind(ids[0])
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(lists, [news]);
    assert!(suppressions(&pool).await.is_empty(), "not unsubscribed");
    let audited: (Option<i64>, String) =
        sqlx::query_as("select actor_id, action from audit_log where object_id = $1")
            .bind(ids[0].to_string())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(audited, (None, "subscriber.preferences".to_string()));
    let r = http
        .post(format!("{}/u/{token}x/lists", app.base))
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
