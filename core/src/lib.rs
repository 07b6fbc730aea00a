//! Mailroom's core: the domain types, every SQL statement, the renderers, parsers and signed
//! tokens, apart from the Leptos crate so the compiler keeps the layers (nothing here knows a
//! page or a server function) and an edit to a page does not recompile the engine. Compiled
//! with `ssr` for the server; without it only `domain` and `model` remain, for the browser.

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
/// Tracked links: signed redirect tokens and who is a link scanner (server only).
#[cfg(feature = "ssr")]
pub mod click;
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
/// Erasing a subscriber, from the dashboard or the API: one use case (server only).
#[cfg(feature = "ssr")]
pub mod erasure;
/// What a bounce or complaint report does, once: attribution, the ledger row, suppression,
/// soft-bounce counting and a campaign's pause (server only).
#[cfg(feature = "ssr")]
pub mod feedback;
/// What pages show, one type each: db reads it, api passes it on (server and browser).
pub mod model;
/// Set-password links for invitations and resets, derived from their job id (server only).
#[cfg(feature = "ssr")]
pub mod password_token;
/// The forced-resend dialog's key, signed so only keys the server issued are accepted.
#[cfg(feature = "ssr")]
pub mod resend_key;
/// Saving a segment: its name, tree and references checked, then stored (server only).
#[cfg(feature = "ssr")]
pub mod segments;
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
/// Events out: endpoint secrets, Standard Webhooks signatures, public addresses (server only).
#[cfg(feature = "ssr")]
pub mod webhook;
