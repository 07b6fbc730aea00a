//! Mailroom's application crate: compiled with `ssr` into the server binary and with `hydrate`
//! into the browser's wasm. Server-only modules (`db`, `auth`) never reach the wasm build.
// Release builds keep leptos's full view types (debug builds erase them), and the dashboard's
// nested views are deeper than rustc's default query depth of 128.
#![recursion_limit = "256"]

/// Only errors this server reported show on a page after a plain form post (server only).
#[cfg(feature = "ssr")]
pub mod action_error;
/// Server functions: the dashboard's API, each scoped to the signed-in user's organisation.
pub mod api;
/// Passwords, session tokens and cookies (server only).
#[cfg(feature = "ssr")]
pub mod auth;
/// Relay webhooks (bounces, complaints), verified and parsed (server only).
#[cfg(feature = "ssr")]
pub mod bounce;
/// Campaign subject and body templates with per-recipient fields (server only).
#[cfg(feature = "ssr")]
pub mod campaign_render;
/// Where captured mail (no SMTP configured) is kept (server only).
#[cfg(feature = "ssr")]
pub mod capture;
/// Every SQL statement (server only).
#[cfg(feature = "ssr")]
pub mod db;
/// The weekly digest: ticker chunks, forced resends, content (server only).
#[cfg(feature = "ssr")]
pub mod digest;
/// DKIM private keys: generated or pasted, checked, and their DNS record (server only).
#[cfg(feature = "ssr")]
pub mod dkim_key;
/// Domain types: `EmailAddress`, `JobId`, `WeekKey`, `Role` — parsed once at the edge.
pub mod domain;
/// The error type of every server function.
pub mod error;
/// What a bounce or complaint report does, once: attribution, the ledger row, suppression,
/// soft-bounce counting and a campaign's pause (server only).
#[cfg(feature = "ssr")]
pub mod feedback;
/// What pages show, one type each: db reads it, api passes it on (server and browser).
pub mod model;
/// Pages and the layout around them.
pub mod pages;
/// Set-password links for invitations and resets, derived from their job id (server only).
#[cfg(feature = "ssr")]
pub mod password_token;
/// The forced-resend dialog's key, signed so only keys the server issued are accepted.
#[cfg(feature = "ssr")]
pub mod resend_key;
/// One home for signed tags: each purpose's key and context (server only).
#[cfg(feature = "ssr")]
pub mod signing;
/// Sign-up confirm links and proof-of-work challenges, signed (server only).
#[cfg(feature = "ssr")]
pub mod signup;
/// Transactional templates filled in from an API request's data (server only).
#[cfg(feature = "ssr")]
pub mod tx_render;
/// Signed unsubscribe tokens (RFC 8058 one-click), verified against a list of keys (server only).
#[cfg(feature = "ssr")]
pub mod unsubscribe;
/// Signed VERP envelope senders: a mailed bounce names its delivery (server only).
#[cfg(feature = "ssr")]
pub mod verp;

pub use pages::{shell, App};

/// The browser entry point: hydrates the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
