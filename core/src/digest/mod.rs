//! The weekly digest (guarantees 1–3): the ticker's chunked claims, forced resends, and the
//! digest's content. SQL lives in `db::digest`, `db::digest::figures` and `db::digest::admin`.

/// Claiming a due week (tick) or a resend key and building its digest in that transaction.
mod build;
/// The digest's subject, text and HTML, rendered from its figures with minijinja.
mod content;

pub use build::{
    build, preview, resend, tick, BuildError, Resent, TickReport, CHUNK, MANUAL_KEY_MAX_AGE_SECONDS,
};
pub use content::Templates;
