//! Security headers over real HTTP: pages carry a Content-Security-Policy whose nonce is on every
//! inline script the page has (streamed or not) and differs per response; every other response
//! carries the policy without a nonce; frames, sniffing and referrers are denied everywhere; and
//! session cookies are `Secure` with `--secure-cookies` or behind a trusted HTTPS proxy.

use app::domain::Role;
use mailroom::http::Edge;
use reqwest::header::HeaderMap;

use crate::support::helpers::{draft, test_db};
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app, spawn_app_with};

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} header in {h:?}"))
        .to_str()
        .unwrap()
}

/// Checks the fixed headers and returns the policy.
fn checked(h: &HeaderMap) -> String {
    assert_eq!(header(h, "x-content-type-options"), "nosniff");
    assert_eq!(header(h, "x-frame-options"), "DENY");
    assert_eq!(header(h, "referrer-policy"), "same-origin");
    let csp = header(h, "content-security-policy").to_owned();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("object-src 'none'"), "{csp}");
    let scripts = csp
        .split(';')
        .find(|d| d.trim().starts_with("script-src"))
        .unwrap_or_else(|| panic!("no script-src in {csp}"));
    assert!(!scripts.contains("unsafe-inline"), "{csp}");
    csp
}

fn nonce_of(csp: &str) -> String {
    let start = csp
        .find("'nonce-")
        .unwrap_or_else(|| panic!("no nonce in {csp}"))
        + 7;
    csp[start..start + csp[start..].find('\'').unwrap()].to_owned()
}

/// Every `<script` tag of `body` carries `nonce="<nonce>"`; returns how many there are.
fn scripts_all_nonced(body: &str, nonce: &str) -> usize {
    let tags: Vec<&str> = body
        .match_indices("<script")
        .map(|(i, _)| &body[i..i + body[i..].find('>').unwrap()])
        .collect();
    for tag in &tags {
        assert!(tag.contains(&format!("nonce=\"{nonce}\"")), "{tag}");
    }
    tags.len()
}

#[tokio::test]
async fn pages_carry_a_fresh_nonce_that_every_inline_script_has() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut conn = pool.acquire().await.unwrap();
    let campaign = draft(&mut conn, org, acme.owner().id.0, "Hello").await;
    drop(conn);
    let app = spawn_app(pool).await;

    let page = |c: reqwest::Client, path: String| async move {
        let r = c.get(&path).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let csp = checked(r.headers());
        (csp, r.text().await.unwrap())
    };
    let (csp, body) = page(client(&app), format!("{}/login", app.base)).await;
    let nonce = nonce_of(&csp);
    assert!(scripts_all_nonced(&body, &nonce) >= 1, "{body}");
    let (again, _) = page(client(&app), format!("{}/login", app.base)).await;
    assert_ne!(nonce_of(&again), nonce);

    // Signed in: the overview streams its parts in (out of order), the editor renders whole.
    let c = acme.owner().signed_in(&app).await;
    for path in ["/".to_owned(), format!("/campaigns/{campaign}/edit")] {
        let (csp, body) = page(c.clone(), format!("{}{path}", app.base)).await;
        assert!(scripts_all_nonced(&body, &nonce_of(&csp)) >= 1, "{path}");
    }
    // A page that is not there is a page too.
    let r = client(&app)
        .get(format!("{}/no/such/page", app.base))
        .send()
        .await
        .unwrap();
    let csp = checked(r.headers());
    scripts_all_nonced(&r.text().await.unwrap(), &nonce_of(&csp));
}

#[tokio::test]
async fn every_other_response_has_the_headers_without_a_nonce() {
    let app = spawn_app(test_db().await).await;
    let c = client(&app);
    let responses = [
        c.get(format!("{}/healthz", app.base)),
        c.post(format!("{}/api/login", app.base))
            .form(&[("email", "a@b.example"), ("password", "x")]),
        c.post(format!("{}/api/me", app.base)),
        c.get(format!("{}/u/not-a-token", app.base)),
        c.get(format!("{}/api/campaigns/1/progress", app.base)),
        c.get(format!("{}/api/audience/export.csv", app.base)),
    ];
    for r in responses {
        let r = r.send().await.unwrap();
        let csp = checked(r.headers());
        assert!(!csp.contains("nonce"), "{} {csp}", r.url());
    }
}

#[tokio::test]
async fn session_cookies_are_secure_when_configured_or_behind_a_trusted_https_proxy() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let api = |secure_cookies| app::api::ApiConfig {
        secure_cookies,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    };
    let proxied = Edge {
        trust_proxy: true,
        ..Edge::default()
    };
    let cases = [
        (api(false), Edge::default(), None, false),
        (api(true), Edge::default(), None, true),
        (api(false), Edge::default(), Some("https"), false),
        (api(false), proxied.clone(), Some("https"), true),
        (api(false), proxied, Some("http"), false),
    ];
    for (api, edge, proto, secure) in cases {
        let app = spawn_app_with(pool.clone(), api, edge).await;
        let mut r = client(&app)
            .post(format!("{}/api/login", app.base))
            .form(&[("email", email.as_str()), ("password", password.as_str())]);
        if let Some(p) = proto {
            r = r.header("x-forwarded-proto", p);
        }
        let r = r.send().await.unwrap();
        let cookie = header(r.headers(), "set-cookie");
        assert_eq!(cookie.contains("; Secure"), secure, "{proto:?}: {cookie}");
    }
}

/// Nothing behind a session is kept by a browser or a proxy: signed-in pages, server-function
/// answers and the CSV export say `no-store`.
#[tokio::test]
async fn responses_behind_a_session_are_never_stored() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let c = acme.owner().signed_in(&app).await;
    for path in ["/", "/campaigns", "/settings", "/api/audience/export.csv"] {
        let r = c.get(format!("{}{path}", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(r.headers(), "cache-control"), "no-store", "{path}");
    }
    let r = c
        .post(format!("{}/api/overview", app.base))
        .header("origin", &app.base)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(r.headers(), "cache-control"), "no-store");
}

/// A request must name one of our hosts (DNS rebinding: a page on another name that resolves to
/// us is refused); health probes, addressed by IP, are exempt.
#[tokio::test]
async fn only_requests_to_a_known_host_name_are_answered() {
    let pool = test_db().await;
    let api = app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    };
    let edge = Edge {
        allowed_hosts: vec!["mail.example.org".into(), "127.0.0.1".into()],
        ..Edge::default()
    };
    let app = spawn_app_with(pool, api, edge).await;
    let c = client(&app);
    let port = app.base.rsplit(':').next().unwrap().to_owned();
    let get = |host: String, path: &'static str| {
        let c = c.clone();
        let url = format!("{}{path}", app.base);
        async move {
            c.get(url)
                .header("host", host)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    for host in [
        format!("127.0.0.1:{port}"),
        "MAIL.example.org".into(),
        "mail.example.org.:443".into(),
    ] {
        assert_eq!(get(host.clone(), "/login").await, 200, "{host}");
    }
    for host in [
        "rebind.attacker.example".to_string(),
        format!("evil.example:{port}"),
        String::new(),
    ] {
        assert_eq!(get(host.clone(), "/login").await, 421, "{host}");
        assert_eq!(get(host.clone(), "/api/overview").await, 421, "{host}");
        assert_eq!(get(host.clone(), "/healthz").await, 200, "{host}");
    }
}
