//! The weekly digest (guarantees 1–3): the ticker's chunked claims, forced resends, and the
//! digest's content. SQL lives in `db::digests`, `db::digest_figures` and `db::digest_admin`.

mod build;
mod content;

pub use build::{
    build, preview, resend, tick, BuildError, Resent, TickReport, CHUNK, MANUAL_KEY_MAX_AGE_SECONDS,
};
pub use content::Templates;
