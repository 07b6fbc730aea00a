//! Public sign-up with double opt-in: the hosted page of a list (`/s/<key>`), the endpoint an
//! embedded plain HTML form posts to (the same), and the confirm link (`/s/confirm/<token>`,
//! a page whose button confirms: mail scanners that follow links confirm nothing).
//!
//! Bots are kept out three ways: a honeypot field people never see (filled: answered as a
//! success, nothing recorded), a proof-of-work challenge the page's script solves before the
//! form is sent (a form without a solved, unspent, fresh challenge gets a page that solves one
//! and sends it on: a script-less bot records nothing), and a token bucket per client IP in
//! PostgreSQL, shared by replicas (429 with Retry-After).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::http::plain::public_page as page;
use app::db::signup::{self, Confirmed, Source};
use app::domain::{audience::person_name, EmailAddress};

/// How many sign-ups one client IP may send: a burst, refilled per hour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub burst: f64,
    pub per_hour: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            burst: 10.0,
            per_hour: 10.0,
        }
    }
}

#[derive(Clone)]
struct Signup {
    pool: PgPool,
    limits: Limits,
    key: Arc<OnceCell<Vec<u8>>>,
}

impl Signup {
    async fn key(&self) -> sqlx::Result<&[u8]> {
        self.key
            .get_or_try_init(|| app::signing::Purpose::Signup.key(&self.pool))
            .await
            .map(Vec::as_slice)
    }
}

pub fn routes(pool: PgPool, limits: Limits) -> Router {
    Router::new()
        .route("/s/pow.js", get(script))
        .route("/s/confirm/{token}", get(confirm_page).post(confirm))
        .route("/s/{key}", get(form_page).post(submit))
        .with_state(Signup {
            pool,
            limits,
            key: Arc::default(),
        })
}

/// The script that solves a form's challenge, then sends the form.
const SCRIPT: &str = r#"// Mailroom sign-up: proves the sender spent a little work (no third-party captcha).
(function () {
  var form = document.getElementById('signup');
  if (!form || !window.crypto || !crypto.subtle) return;
  var enc = new TextEncoder();
  function zeros(b) {
    var n = 0;
    for (var i = 0; i < b.length; i++) {
      if (b[i] === 0) { n += 8; continue; }
      return n + Math.clz32(b[i]) - 24;
    }
    return n;
  }
  async function solve() {
    var c = form.elements.pow_challenge.value, bits = Number(c.split('.')[2]);
    for (var n = 0; ; n++) {
      var h = new Uint8Array(await crypto.subtle.digest('SHA-256', enc.encode(c + ':' + n)));
      if (zeros(h) >= bits) return String(n);
    }
  }
  var busy = false;
  async function go(e) {
    if (e) e.preventDefault();
    if (busy) return;
    busy = true;
    var s = document.getElementById('pow-status');
    if (s) s.textContent = 'One moment…';
    form.elements.pow_answer.value = await solve();
    HTMLFormElement.prototype.submit.call(form);
  }
  if (form.dataset.auto === '1') go(); else form.addEventListener('submit', go);
})();
"#;

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        SCRIPT,
    )
        .into_response()
}

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn esc(s: &str) -> String {
    html_escape::encode_double_quoted_attribute(s).into_owned()
}

/// The form: visible fields, the honeypot, and a fresh challenge. `auto`: hidden fields only,
/// solved and sent as soon as the page loads.
fn form(list_key: &str, challenge: &str, email: &str, name: &str, auto: bool) -> String {
    let auto_attr = if auto { " data-auto=\"1\"" } else { "" };
    let fields = if auto {
        format!(
            "<input type=\"hidden\" name=\"email\" value=\"{}\"><input type=\"hidden\" name=\"name\" value=\"{}\">",
            esc(email),
            esc(name)
        )
    } else {
        format!(
            "<p><label>E-mail<br><input type=\"email\" name=\"email\" required maxlength=\"320\" value=\"{}\" autocomplete=\"email\"></label></p>\
             <p><label>Name (optional)<br><input type=\"text\" name=\"name\" maxlength=\"200\" value=\"{}\" autocomplete=\"name\"></label></p>",
            esc(email),
            esc(name)
        )
    };
    format!(
        "<form id=\"signup\" method=\"post\" action=\"/s/{key}\"{auto_attr}>{fields}\
         <p style=\"position:absolute;left:-10000px\" aria-hidden=\"true\"><label>Leave empty<input type=\"text\" name=\"website\" tabindex=\"-1\" autocomplete=\"off\"></label></p>\
         <input type=\"hidden\" name=\"pow_challenge\" value=\"{challenge}\"><input type=\"hidden\" name=\"pow_answer\" value=\"\">\
         <p><button type=\"submit\">{button}</button> <span id=\"pow-status\" role=\"status\"></span></p></form>\
         <noscript><p>This form needs JavaScript: it proves, with a moment of your browser's work, that you are not a bot.</p></noscript>\
         <script src=\"/s/pow.js\" defer></script>",
        key = esc(list_key),
        challenge = esc(challenge),
        button = if auto { "Continue" } else { "Subscribe" },
    )
}

async fn fresh_challenge(s: &Signup, list_key: &str) -> sqlx::Result<String> {
    Ok(app::signup::challenge(
        s.key().await?,
        list_key,
        now_seconds(),
        rand::random(),
    ))
}

async fn form_page(State(s): State<Signup>, Path(key): Path<String>) -> Response {
    let shown = async {
        // The challenge first: its key may need a connection of its own the first time, and a
        // request holding one connection while it waits for another exhausts the pool under
        // a burst of visitors.
        let challenge = fresh_challenge(&s, &key).await?;
        let mut conn = s.pool.acquire().await?;
        let Some(list) = signup::list_by_key(&mut conn, &key).await? else {
            return Ok(None);
        };
        Ok::<_, sqlx::Error>(Some((list, challenge)))
    };
    match shown.await {
        Ok(Some((list, challenge))) => page(
            StatusCode::OK,
            &format!("Subscribe to {}", list.list_name),
            &format!(
                "<p>{org} sends <strong>{list}</strong> by e-mail. Leave your address: we send you a link to confirm, and nothing else until you do.</p>{form}",
                org = html_escape::encode_text(&list.org_name),
                list = html_escape::encode_text(&list.list_name),
                form = form(&key, &challenge, "", "", false),
            ),
        ),
        Ok(None) => no_such_list(),
        Err(e) => unavailable(e),
    }
}

/// What a sign-up form sends.
#[derive(Default)]
struct Submission {
    email: String,
    name: String,
    honeypot: String,
    challenge: String,
    answer: String,
}

impl Submission {
    fn parse(body: &[u8]) -> Self {
        let mut s = Submission::default();
        for (k, v) in url::form_urlencoded::parse(body) {
            let v = v.into_owned();
            match k.as_ref() {
                "email" => s.email = v,
                "name" => s.name = v,
                "website" => s.honeypot = v,
                "pow_challenge" => s.challenge = v,
                "pow_answer" => s.answer = v,
                _ => {}
            }
        }
        s
    }
}

async fn submit(
    State(s): State<Signup>,
    Path(key): Path<String>,
    client: Option<Extension<app::api::Client>>,
    body: axum::body::Bytes,
) -> Response {
    let f = Submission::parse(&body);
    let ip = client.and_then(|c| c.0.ip).map(|ip| ip.to_string());
    let outcome = async {
        // One connection at a time (see `form_page`): the key before it, the rate limit and
        // the transaction after it is given back.
        let secret = s.key().await?;
        let mut conn = s.pool.acquire().await?;
        let Some(list) = signup::list_by_key(&mut conn, &key).await? else {
            return Ok(no_such_list());
        };
        let done = page(
            StatusCode::OK,
            "Check your inbox",
            "<p>Almost done: we sent you a link. Click it to confirm your subscription; until you do, you get nothing else from us.</p>",
        );
        // A bot filled the field people never see: it is told what people are told.
        if !f.honeypot.is_empty() {
            return Ok(done);
        }
        let solved = app::signup::verify_pow(secret, &key, &f.challenge, &f.answer, now_seconds())
            .is_ok()
            && signup::spend_challenge(&mut conn, &f.challenge).await?;
        drop(conn);
        if !solved {
            // No work shown (an embedded form, a bot, a stale page): a page that does it.
            let challenge = fresh_challenge(&s, &key).await?;
            return Ok(page(
                StatusCode::OK,
                "One moment",
                &form(&key, &challenge, &f.email, &f.name, true),
            ));
        }
        let email = match EmailAddress::parse(&f.email) {
            Ok(e) => e,
            Err(e) => {
                return refill(&s, &key, &f, &format!("That address does not work: {e}.")).await
            }
        };
        let name = match person_name(&f.name) {
            Ok(n) => n,
            Err(e) => return refill(&s, &key, &f, &e).await,
        };
        if let Some(ip) = &ip {
            let bucket = format!("signup-ip:{ip}");
            let per_second = s.limits.per_hour / 3600.0;
            app::db::rate_limit::ensure(&s.pool, &bucket, s.limits.burst, per_second).await?;
            if app::db::rate_limit::take(&s.pool, &bucket, 1).await? < 1 {
                let mut r = page(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many sign-ups",
                    "<p>Too many sign-ups came from your network just now. Please try again later.</p>",
                );
                let wait = (3600.0 / s.limits.per_hour).ceil().max(1.0) as u64;
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(wait));
                return Ok(r);
            }
        }
        let mut tx = s.pool.begin().await?;
        signup::request(
            &mut tx,
            list.org_id,
            list.list_id,
            &email,
            &name,
            Source::Form,
            ip.as_deref(),
        )
        .await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(done)
    };
    outcome.await.unwrap_or_else(unavailable)
}

/// The form again with what was wrong (422).
async fn refill(s: &Signup, key: &str, f: &Submission, why: &str) -> sqlx::Result<Response> {
    let challenge = fresh_challenge(s, key).await?;
    Ok(page(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Subscribe",
        &format!(
            "<p role=\"alert\">{}</p>{}",
            html_escape::encode_text(why),
            form(key, &challenge, &f.email, &f.name, false)
        ),
    ))
}

async fn confirm_page(State(s): State<Signup>, Path(token): Path<String>) -> Response {
    let key = match s.key().await {
        Ok(k) => k,
        Err(e) => return unavailable(e),
    };
    if app::signup::verify_confirm(key, &token).is_none() {
        return invalid_link();
    }
    page(
        StatusCode::OK,
        "Confirm your subscription",
        &format!(
            "<form method=\"post\" action=\"/s/confirm/{}\"><button type=\"submit\" id=\"confirm\">Yes, subscribe me</button></form>",
            esc(&token)
        ),
    )
}

async fn confirm(
    State(s): State<Signup>,
    Path(token): Path<String>,
    client: Option<Extension<app::api::Client>>,
) -> Response {
    let ip = client.and_then(|c| c.0.ip).map(|ip| ip.to_string());
    let done = async {
        let Some((org_id, signup_id)) = app::signup::verify_confirm(s.key().await?, &token) else {
            return Ok(None);
        };
        let mut tx = s.pool.begin().await?;
        let outcome = signup::confirm(&mut tx, org_id, signup_id, ip.as_deref()).await?;
        if let Confirmed::Now {
            list_id,
            subscriber_id,
            resubscribed,
        } = &outcome
        {
            let entry = |action| app::db::audit::Entry {
                after: Some(serde_json::json!({ "list": list_id, "signup": signup_id, "ip": ip })),
                ..app::db::audit::Entry::system(
                    org_id,
                    action,
                    "subscriber",
                    Some(subscriber_id.to_string()),
                )
            };
            app::db::audit::record(&mut tx, entry(app::domain::AuditAction::SubscriberConfirm))
                .await?;
            if *resubscribed {
                app::db::audit::record(
                    &mut tx,
                    entry(app::domain::AuditAction::SubscriberResubscribe),
                )
                .await?;
            }
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(Some(outcome))
    };
    match done.await {
        Ok(Some(Confirmed::Now { .. })) => page(
            StatusCode::OK,
            "Subscribed",
            "<p>Thank you: your subscription is confirmed.</p>",
        ),
        Ok(Some(Confirmed::Already)) => page(
            StatusCode::OK,
            "Already confirmed",
            "<p>This link was used already; it confirms once. Nothing changed.</p>",
        ),
        Ok(Some(Confirmed::NotFound)) | Ok(None) => invalid_link(),
        Err(e) => unavailable(e),
    }
}

fn no_such_list() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "No such list",
        "<p>There is no sign-up here. Please check the address.</p>",
    )
}

fn invalid_link() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This confirmation link is not valid. Please use the link from the message itself.</p>",
    )
}

fn unavailable(e: sqlx::Error) -> Response {
    tracing::error!(error = %e, "sign-up failed");
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "<p>We could not record this right now. Please try again in a minute.</p>",
    )
}
