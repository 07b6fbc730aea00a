//! Login throttling over real HTTP against a real database: a burst slows down then locks that
//! address from that IP only; many IPs on one address lock only the IPs that failed; one IP on
//! many addresses locks that IP; locks end; concurrent attempts check no more passwords than the
//! policy allows; two replicas share the counts; an unknown address gets the same answers at the
//! same steps and takes the same time.

use std::time::{Duration, Instant};

use app::domain::login_throttle::{ACCOUNT, IP, PAIR};
use app::domain::Role;
use mailroom::http::Edge;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app_with, TestApp};

const WRONG: &str = "Wrong e-mail address or password.";
const LOCKED: &str = "Too many failed sign-in attempts. Try again in ";

#[derive(Debug, PartialEq)]
enum Outcome {
    SignedIn,
    Wrong,
    /// With the wait the answer gave (seconds, from `Retry-After`).
    Locked(u64),
}

/// An app that believes `X-Forwarded-For`, so each attempt can come from the IP it names.
async fn app(pool: sqlx::PgPool) -> TestApp {
    let api = app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    };
    let edge = Edge {
        trust_proxy: true,
        ..Edge::default()
    };
    spawn_app_with(pool, api, edge).await
}

async fn attempt(app: &TestApp, email: &str, password: &str, ip: &str) -> Outcome {
    let r = client(app)
        .post(format!("{}/api/login", app.base))
        .header("x-forwarded-for", ip)
        .form(&[("email", email), ("password", password)])
        .send()
        .await
        .unwrap();
    if r.headers().get("set-cookie").is_some() {
        return Outcome::SignedIn;
    }
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    match retry_after {
        Some(s) => {
            assert!(body.contains(LOCKED), "{body}");
            assert_eq!(status, 429, "{body}");
            Outcome::Locked(s)
        }
        None => {
            assert!(body.contains(WRONG), "{body}");
            assert_eq!(status, 422, "{body}");
            Outcome::Wrong
        }
    }
}

fn locked(o: &Outcome) -> bool {
    matches!(o, Outcome::Locked(s) if *s >= 1)
}

#[tokio::test]
async fn a_burst_slows_down_then_locks_that_address_from_that_ip_only_on_every_replica_and_ends() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let app = app(pool.clone()).await;
    let replica = self::app(pool.clone()).await;
    let a = "203.0.113.1";

    for _ in 0..PAIR.free + 1 {
        assert_eq!(attempt(&app, email, "guess", a).await, Outcome::Wrong);
    }
    // Locked now, even for the right password, with the wait in the message and the header.
    let o = attempt(&app, email, password, a).await;
    assert!(matches!(o, Outcome::Locked(1..=2)), "{o:?}");
    assert!(locked(&attempt(&replica, email, password, a).await));
    // The same person from elsewhere is not locked out.
    assert_eq!(
        attempt(&app, email, password, "198.51.100.7").await,
        Outcome::SignedIn
    );

    // More failures lock for longer, up to the cap: push the count far up, then show it ends.
    sqlx::query("update login_throttle set failures = 50 where scope = 'pair'")
        .execute(&pool)
        .await
        .unwrap();
    let o = attempt(&app, email, password, a).await;
    assert!(
        matches!(o, Outcome::Locked(s) if s > 800 && s <= PAIR.cap_seconds as u64),
        "{o:?}"
    );
    sqlx::query(
        "update login_throttle set last_failure_at = last_failure_at - make_interval(secs => $1)",
    )
    .bind(PAIR.cap_seconds as f64 + 1.0)
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(attempt(&app, email, password, a).await, Outcome::SignedIn);
    // Success forgot that pair's failures: a mistake now is a plain wrong password.
    assert_eq!(attempt(&app, email, "typo", a).await, Outcome::Wrong);
}

#[tokio::test]
async fn many_ips_guessing_one_address_are_locked_but_a_clean_ip_with_the_password_gets_in() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let app = app(pool).await;
    for i in 1..=ACCOUNT.free + 1 {
        let ip = format!("10.0.0.{i}");
        assert_eq!(attempt(&app, email, "guess", &ip).await, Outcome::Wrong);
    }
    assert!(locked(&attempt(&app, email, password, "10.0.0.1").await));
    assert_eq!(
        attempt(&app, email, password, "10.9.9.9").await,
        Outcome::SignedIn
    );
}

#[tokio::test]
async fn one_ip_spraying_many_addresses_is_locked_for_every_address() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let app = app(pool).await;
    let sprayer = "2001:db8:7:7::1";
    for i in 0..=IP.free {
        let target = format!("user{i}@spray.example");
        assert_eq!(
            attempt(&app, &target, "guess", sprayer).await,
            Outcome::Wrong
        );
    }
    assert!(locked(&attempt(&app, email, password, sprayer).await));
    // The whole /64 is one source.
    assert!(locked(
        &attempt(&app, email, password, "2001:db8:7:7::2").await
    ));
    assert_eq!(
        attempt(&app, email, password, "2001:db8:8:8::1").await,
        Outcome::SignedIn
    );
}

#[tokio::test]
async fn concurrent_attempts_check_no_more_passwords_than_the_policy_allows() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let email = acme.owner().email.clone();
    let app = std::sync::Arc::new(app(pool).await);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (app, email) = (app.clone(), email.clone());
            tokio::spawn(async move { attempt(&app, &email, "guess", "192.0.2.9").await })
        })
        .collect();
    let mut wrong = 0;
    for t in tasks {
        match t.await.unwrap() {
            Outcome::Wrong => wrong += 1,
            o => assert!(locked(&o), "{o:?}"),
        }
    }
    assert_eq!(wrong, PAIR.free + 1);
}

#[tokio::test]
async fn an_unknown_address_gets_the_same_answers_at_the_same_steps_in_the_same_time() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let known = &acme.owner().email;
    let unknown = "nobody@acme.example";
    let app = app(pool).await;

    let mut answers = [Vec::new(), Vec::new()];
    for (n, email) in [known.as_str(), unknown].iter().enumerate() {
        for _ in 0..PAIR.free + 2 {
            let o = attempt(&app, email, "guess", &format!("192.0.2.{}", 10 + n)).await;
            answers[n].push(locked(&o));
        }
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0].last(), Some(&true));

    // Each attempt from its own IP (no throttling): the unknown address pays the same Argon2
    // verification as a wrong password does. Medians, alternating, to ride out noise.
    let known = &acme.admin(0).email;
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..7 {
        for (n, email) in [known.as_str(), unknown].iter().enumerate() {
            let ip = format!("198.18.{n}.{i}");
            let started = Instant::now();
            assert_eq!(attempt(&app, email, "guess", &ip).await, Outcome::Wrong);
            times[n].push(started.elapsed());
        }
    }
    let median = |t: &mut Vec<Duration>| {
        t.sort();
        t[t.len() / 2]
    };
    let (k, u) = (median(&mut times[0]), median(&mut times[1]));
    // Within 3x either way (without the dummy verification: ~23 ms against ~4 ms here).
    assert!(u * 3 >= k && k * 3 >= u, "known {k:?}, unknown {u:?}");
}
