use app::api::auth::Logout;
use app::api::campaign::Campaigns;
use app::api::overview::GetOverview;
use app::domain::Role;
use reqwest::redirect;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app};

#[tokio::test]
async fn health_and_readiness_reflect_the_database() {
    let app = spawn_app(test_db().await).await;
    let c = client(&app);
    assert_eq!(
        c.get(format!("{}/healthz", app.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.get(format!("{}/readyz", app.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    app.pool.close().await;
    let r = c.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "database unavailable");
}

#[tokio::test]
async fn an_unknown_path_is_the_apps_not_found_page_with_status_404() {
    let app = spawn_app(test_db().await).await;
    let r = client(&app)
        .get(format!("{}/no/such/page", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("Page not found"));
}

#[tokio::test]
async fn login_sets_an_http_only_session_and_logout_ends_it() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let app = spawn_app(pool).await;
    let c = client(&app);

    // Signed out: the overview is refused, the page sends the browser to /login.
    let (status, body) = app.call_fn(&c, GetOverview {}).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("NotSignedIn"), "{body}");

    let r = app.login(&c, &email.to_uppercase(), password).await;
    assert!(
        r.status().is_redirection() || r.status().is_success(),
        "{}",
        r.status()
    );
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );

    let (status, body) = app.call_fn(&c, GetOverview {}).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"org_name\":\"acme\""), "{body}");

    let page = c
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Sign out"),
        "signed-in page renders the layout"
    );

    app.call_fn(&c, Logout {}).await;
    let (_, body) = app.call_fn(&c, GetOverview {}).await;
    assert!(
        body.contains("NotSignedIn"),
        "session ended server-side: {body}"
    );
}

#[tokio::test]
async fn wrong_password_and_unknown_user_get_the_same_clear_error() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Admin]).await;
    let app = spawn_app(pool).await;
    let c = client(&app);
    let wrong = app
        .login(&c, &acme.admin(0).email, "not the password")
        .await;
    assert!(wrong.headers().get("set-cookie").is_none());
    let wrong = wrong.text().await.unwrap();
    let unknown = app
        .login(&c, "nobody@acme.example", "whatever")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        wrong.contains("Wrong e-mail address or password."),
        "{wrong}"
    );
    assert_eq!(wrong, unknown, "no user enumeration");
    let garbage = app
        .login(&c, "not-an-address", "x")
        .await
        .text()
        .await
        .unwrap();
    assert!(garbage.contains("not a valid e-mail address"), "{garbage}");
}

#[tokio::test]
async fn cross_site_writes_are_refused() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Admin]).await;
    let app = spawn_app(pool).await;
    let evil = reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap();
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("origin", "null"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let r = evil
            .post(format!("{}/api/login", app.base))
            .header(name, value)
            .form(&[
                ("email", acme.admin(0).email.as_str()),
                ("password", acme.admin(0).password.as_str()),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{name}: {value}");
        assert!(r.headers().get("set-cookie").is_none());
    }
    // Behind a reverse proxy the public host comes as X-Forwarded-Host: same origin, accepted.
    let r = evil
        .post(format!("{}/api/login", app.base))
        .header("origin", "https://mail.example.com")
        .header("x-forwarded-host", "mail.example.com")
        .form(&[
            ("email", acme.admin(0).email.as_str()),
            ("password", acme.admin(0).password.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), 403);
    assert!(r.headers().get("set-cookie").is_some());
    // Reads stay open (the page itself, health).
    assert_eq!(
        evil.get(format!("{}/login", app.base))
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn every_read_is_scoped_to_the_signed_in_organisation() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let org_a = alpha.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let org_b = beta.id.0;
    let mut tx = pool.begin().await.unwrap();
    let sub = app::domain::EmailAddress::parse("x@y.org").unwrap();
    app::db::audience::insert_subscribers(&mut tx, org_b, &[(sub, "X".into())])
        .await
        .unwrap();
    crate::support::helpers::draft(&mut tx, org_b, beta.owner().id.0, "Beta secret plan").await;
    crate::support::helpers::draft(&mut tx, org_a, alpha.owner().id.0, "Alpha launch").await;
    tx.commit().await.unwrap();

    let app = spawn_app(pool).await;
    let c = client(&app);
    app.login(&c, &alpha.owner().email, &alpha.owner().password)
        .await;
    let (_, overview) = app.call_fn(&c, GetOverview {}).await;
    assert!(
        overview.contains("\"subscribers\":0"),
        "alpha has no subscribers: {overview}"
    );
    let (_, campaigns) = app
        .call_fn(
            &c,
            Campaigns {
                status: String::new(),
            },
        )
        .await;
    assert!(campaigns.contains("Alpha launch"), "{campaigns}");
    assert!(!campaigns.contains("Beta secret plan"), "{campaigns}");
}

#[tokio::test]
async fn server_errors_reach_the_browser_without_internals() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let c = client(&app);
    app.login(&c, &acme.owner().email, &acme.owner().password)
        .await;
    // Break the schema under the running app: the error must not name the table.
    sqlx::query("alter table suppressions rename to suppressions_gone")
        .execute(&pool)
        .await
        .unwrap();
    let (status, body) = app.call_fn(&c, GetOverview {}).await;
    assert_eq!(status, 500);
    assert!(body.contains("Internal"), "{body}");
    assert!(
        !body.contains("suppressions") && !body.contains("relation"),
        "{body}"
    );
}

#[tokio::test]
async fn a_password_change_ends_the_users_sessions() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let c = client(&app);
    app.login(&c, &acme.owner().email, &acme.owner().password)
        .await;
    assert_eq!(app.call_fn(&c, GetOverview {}).await.0, 200);
    let email = app::domain::EmailAddress::parse(&acme.owner().email).unwrap();
    assert!(app::db::user::set_password(
        &pool,
        &email,
        &app::auth::hash_password("a new password!").unwrap()
    )
    .await
    .unwrap());
    let (_, body) = app.call_fn(&c, GetOverview {}).await;
    assert!(body.contains("NotSignedIn"), "{body}");
    let nobody = app::domain::EmailAddress::parse("nobody@acme.example").unwrap();
    assert!(!app::db::user::set_password(&pool, &nobody, "h")
        .await
        .unwrap());
}

/// After a plain (no-JS) form post fails, the page it returns to shows the server's error; a
/// link carrying an error the server did not sign, or signed for another browser, shows none.
#[tokio::test]
async fn a_page_shows_only_form_errors_this_server_signed_for_this_browser() {
    use base64::Engine;
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool).await;
    let no_js_login = |c: reqwest::Client| {
        let base = app.base.clone();
        let email = acme.owner().email.clone();
        async move {
            let r = c
                .post(format!("{base}/api/login"))
                .header("accept", "text/html")
                .header("referer", format!("{base}/login?next=%2Fcampaigns"))
                .form(&[("email", email.as_str()), ("password", "not the password")])
                .send()
                .await
                .unwrap();
            assert!(r.status().is_redirection(), "{}", r.status());
            r.headers()["location"].to_str().unwrap().to_owned()
        }
    };
    let page = |c: &reqwest::Client, url: String| {
        let c = c.clone();
        async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };

    let browser = client(&app);
    let location = no_js_login(browser.clone()).await;
    assert!(
        location.contains("__err=") && location.contains("__sig="),
        "{location}"
    );
    assert!(location.contains("next=%2Fcampaigns"), "{location}");
    let shown = page(&browser, location.clone()).await;
    assert!(
        shown.contains("login-error") && shown.contains("Wrong e-mail address or password."),
        "the server's own error is shown"
    );

    // A forged error: the attacker's words, unsigned, or with a signature made up.
    let forged = base64::engine::general_purpose::URL_SAFE.encode(
        serde_json::to_vec(&app::error::AppError::Invalid(
            "Your account is locked: call +1 555 0100 to unlock it.".into(),
        ))
        .unwrap(),
    );
    for url in [
        format!("{}/login?__path=/api/login&__err={forged}", app.base),
        format!(
            "{}/login?__path=/api/login&__err={forged}&__sig=AAAA",
            app.base
        ),
    ] {
        let body = page(&browser, url).await;
        assert!(!body.contains("call +1 555"), "forged error shown");
        assert!(!body.contains("login-error"));
    }
    // A genuine error link (it may quote what its sender typed), opened by another browser:
    // not shown there, still shown in the browser it was reported to.
    let other = client(&app);
    let body = page(&other, location.clone()).await;
    assert!(
        !body.contains("login-error"),
        "another browser's error shown"
    );
    assert!(page(&browser, location).await.contains("login-error"));
}

/// Every dashboard page sends a browser without a live session to the sign-in page with a
/// real redirect (never a 200 page saying "Please sign in."), with no cookie, a stale one, or a
/// forged one, however often it asks.
#[tokio::test]
async fn every_dashboard_page_redirects_a_browser_without_a_live_session() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool).await;
    let stale = acme.owner().signed_in(&app).await;
    let (status, _) = app.call_fn(&stale, Logout {}).await;
    assert!(status.is_success() || status.is_redirection());
    let pages = [
        "/campaigns/bin",
        "/",
        "/campaigns",
        "/campaigns/1",
        "/campaigns/1/edit",
        "/digests",
        "/digests/resend",
        "/audience",
        "/audience/subscribers/1",
        "/audience/lists",
        "/audience/imports/1",
        "/audience/suppressions",
        "/deliveries",
        "/deliveries/message?job=x",
        "/settings",
        "/settings/audit",
    ];
    let plain = client(&app);
    let browser_accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    for (cookie, accept) in [
        (None, Some(browser_accept)),
        (
            Some("mailroom_session=stale-or-forged-token"),
            Some(browser_accept),
        ),
        (Some("mailroom_session="), Some(browser_accept)),
        // A client that does not say it takes HTML (curl, a monitoring probe).
        (None, None),
        (Some("mailroom_session=stale-or-forged-token"), None),
    ] {
        for round in 0..5 {
            for path in pages {
                let mut r = plain.get(format!("{}{path}", app.base));
                if let Some(c) = cookie {
                    r = r.header("cookie", c);
                }
                if let Some(a) = accept {
                    r = r.header("accept", a);
                }
                let r = r.send().await.unwrap();
                let status = r.status();
                let location = r.headers().get("location").cloned();
                let body = r.text().await.unwrap();
                assert!(
                    status.is_redirection(),
                    "{path} with {cookie:?}, accept {accept:?} (round {round}): {status} {}",
                    body.get(body.len().saturating_sub(1500)..)
                        .unwrap_or_default()
                );
                assert_eq!(location.unwrap(), "/login", "{path}");
            }
        }
    }
    // The browser that signed out, with its own (now stale) cookie.
    for path in pages {
        let r = stale
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_redirection(), "{path}: {}", r.status());
    }
}
