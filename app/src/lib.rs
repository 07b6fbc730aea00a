//! Mailroom's application crate: compiled with `ssr` into the server binary and with `hydrate`
//! into the browser's wasm. Server-only modules (`db`, `auth`) never reach the wasm build.
//! The core (domain, db, renderers, parsers) is the `mailroom_core` crate, re-exported here
//! under its old paths.
// Release builds keep leptos's full view types (debug builds erase them), and the dashboard's
// nested views are deeper than rustc's default query depth of 128.
#![recursion_limit = "256"]

/// Only errors this server reported show on a page after a plain form post (server only).
#[cfg(feature = "ssr")]
pub mod action_error;
/// Server functions: the dashboard's API, each scoped to the signed-in user's organisation.
pub mod api;
/// The error type of every server function.
pub mod error;
/// Pages and the layout around them.
pub mod pages;

#[cfg(feature = "ssr")]
pub use mailroom_core::{
    auth, bounce, campaign_render, capture, click, db, digest, dkim_key, erasure, feedback,
    password_token, resend_key, segments, signing, signup, tx_render, unsubscribe, verp, webhook,
};
pub use mailroom_core::{domain, model};

pub use pages::{shell, App};

/// The browser entry point: hydrates the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
