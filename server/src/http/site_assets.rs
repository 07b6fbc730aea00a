//! The dashboard's built files (wasm, JS, CSS, icons) inside the executable, so that a release
//! binary copied alone to a server serves the whole hydrated dashboard.
//!
//! `cargo leptos build --release` builds the site first and the server after it (the workspace
//! sets `precompress`, which also writes `.br` and `.gz` beside each file), so the release
//! server embeds the site it was built with. Debug builds embed nothing and read the site from
//! disk (`--site-root`), as rust-embed does without `debug_assertions` off.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use rust_embed::RustEmbed;
use std::fmt::Write;

#[derive(RustEmbed)]
// Relative to server/ (release builds; debug builds never read it).
#[folder = "../target/site/"]
// A plain `cargo build` before any site exists still compiles: the binary then has no site
// inside and looks for one on disk.
#[allow_missing = true]
#[exclude = "*.d.ts"]
#[exclude = "*.d.ts.*"]
struct Site;

/// Whether this binary carries a complete site (release builds made by cargo-leptos).
pub fn embedded() -> bool {
    !cfg!(debug_assertions) && Site::get("pkg/mailroom.js").is_some()
}

/// The embedded file at `path` as a response, or `None` when there is none (the caller renders
/// the app's 404 page). Precompressed variants are sent to clients that accept them; the ETag is
/// the file's SHA-256, so a browser revalidates cheaply and gets a new file after an upgrade.
pub fn response(method: &Method, path: &str, request: &HeaderMap) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let path = path.trim_start_matches('/');
    let file = Site::get(path)?;
    let mut etag = String::with_capacity(66);
    etag.push('"');
    for byte in file.metadata.sha256_hash() {
        let _ = write!(etag, "{byte:02x}");
    }
    etag.push('"');
    let etag = HeaderValue::from_str(&etag).ok()?;
    let builder = Response::builder()
        .header(header::ETAG, etag.clone())
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::VARY, "accept-encoding");
    if request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .any(|v| v == etag || v == "*")
    {
        return builder
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .ok();
    }
    let (data, encoding) = ["br", "gzip"]
        .into_iter()
        .filter(|coding| accepts(request, coding))
        .find_map(|coding| {
            let suffix = if coding == "gzip" { "gz" } else { coding };
            Site::get(&format!("{path}.{suffix}")).map(|f| (f.data, Some(coding)))
        })
        .unwrap_or((file.data, None));
    let mut builder = builder
        .header(header::CONTENT_TYPE, file.metadata.mimetype())
        .header(header::CONTENT_LENGTH, data.len());
    if let Some(coding) = encoding {
        builder = builder.header(header::CONTENT_ENCODING, coding);
    }
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(data.into_owned())
    };
    builder.body(body).ok()
}

/// Whether `Accept-Encoding` allows `coding` (named, with a non-zero quality).
fn accepts(request: &HeaderMap, coding: &str) -> bool {
    request
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            parts
                .next()
                .is_some_and(|name| name.eq_ignore_ascii_case(coding))
                && parts.all(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_none_or(|q| q > 0.0)
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn accept_encoding_is_read_with_its_qualities() {
        assert!(accepts(&with("gzip, deflate, br, zstd"), "br"));
        assert!(accepts(&with("gzip;q=0.5"), "gzip"));
        assert!(!accepts(&with("gzip;q=0"), "gzip"));
        assert!(!accepts(&with("gzip"), "br"));
        assert!(!accepts(&HeaderMap::new(), "gzip"));
    }
}
