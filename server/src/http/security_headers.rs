//! Security headers on every response, and `Cache-Control: no-store` on all but site files.
//!
//! The Content-Security-Policy allows no inline script but the ones leptos writes with the
//! request's nonce (hydration, streamed Suspense chunks, serialised resources): pages get a
//! policy naming their nonce from [`provide_page_policy`], which runs in the render context where
//! leptos made it; every other response (server functions, files, errors, the unsubscribe
//! pages) gets the same policy without a nonce. Styles may be inline: the e-mail previews are
//! `<iframe sandbox srcdoc>` documents, which inherit this policy, and mail is styled inline.
//! Images come only from us (and `data:`): markup that slipped into a page could otherwise
//! report what it sees to any host, so a preview shows a remote image's alt text instead.
//! Forms post only to us. Frames of ours inside other sites are refused.

use axum::http::{header, HeaderName, HeaderValue};
use axum::Router;
use leptos::prelude::use_context;
use tower_http::set_header::SetResponseHeaderLayer;

/// The policy; `dev` lets the live-reload client (`cargo leptos watch`) open its WebSocket.
pub fn policy(nonce: Option<&str>, dev: bool) -> String {
    let nonce = nonce.map(|n| format!(" 'nonce-{n}'")).unwrap_or_default();
    let connect = if dev { " ws: wss:" } else { "" };
    format!(
        "default-src 'self'; script-src 'self'{nonce} 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
         connect-src 'self'{connect}; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// Called in the context of every page render: sets the policy with this page's nonce.
pub fn provide_page_policy(dev: bool) {
    let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        return;
    };
    if let Ok(v) = HeaderValue::from_str(&policy(Some(&nonce), dev)) {
        response.insert_header(header::CONTENT_SECURITY_POLICY, v);
    }
}

/// Adds the headers to every response of `router` (keeping a page's own policy).
pub fn apply(router: Router, dev: bool) -> Router {
    let fixed = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
    };
    let csp = HeaderValue::from_str(&policy(None, dev))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"));
    router
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            csp,
        ))
        .layer(fixed(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(fixed(header::X_FRAME_OPTIONS, "DENY"))
        // Same-origin requests keep their Referer (leptos sends a plain form post back to it);
        // unsubscribe links, whose path is a token, never leak to other sites.
        .layer(fixed(header::REFERRER_POLICY, "same-origin"))
        // Pages, server-function answers and exports are a signed-in user's data: no browser
        // or proxy keeps a copy. Site files say their own (revalidated by ETag).
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_allows_only_nonced_inline_scripts() {
        let p = policy(Some("abc"), false);
        assert!(
            p.contains("script-src 'self' 'nonce-abc' 'wasm-unsafe-eval';"),
            "{p}"
        );
        let scripts = p
            .split(';')
            .find(|d| d.trim().starts_with("script-src"))
            .unwrap();
        assert!(!scripts.contains("unsafe-inline"), "{p}");
        assert!(p.contains("frame-ancestors 'none'"));
        assert!(p.contains("form-action 'self'"), "{p}");
        assert!(
            p.contains("img-src 'self' data:;"),
            "no image from another host: {p}"
        );
        assert!(!policy(None, false).contains("nonce"));
        assert!(policy(None, true).contains("connect-src 'self' ws: wss:"));
    }
}
