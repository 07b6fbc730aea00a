//! The REST API as a client calls it: a token made in Settings, and requests with or without it.

use app::api::api_tokens::CreateApiToken;
use app::domain::ApiScope;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::test_app::{json, TestApp};

/// A token of the signed-in owner's org with these scopes.
pub async fn token(
    app: &TestApp,
    owner: &reqwest::Client,
    name: &str,
    scopes: &[ApiScope],
) -> String {
    let (status, body) = app
        .call_fn(
            owner,
            CreateApiToken {
                name: name.into(),
                scopes: scopes.iter().map(|s| s.as_str().to_string()).collect(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let t = json(&body)["token"].as_str().unwrap().to_string();
    crate::support::canary::api_token(&t);
    t
}

/// `method path` with `token` (or none); (status, headers, JSON body or Null).
pub async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    send(app, method, path, token, None).await
}

/// `method path` with `token` (or none) and a JSON body (or none).
pub async fn send(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let c = reqwest::Client::new();
    let mut r = c.request(method.parse().unwrap(), format!("{}{path}", app.base));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        // A key on every body: endpoints that need one find it, the others ignore it.
        r = r
            .header("content-type", "application/json")
            .header("idempotency-key", "tenancy")
            .body(b.to_string());
    }
    let r = r.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    let text = r.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    };
    (status, headers, body)
}
