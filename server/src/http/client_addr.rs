//! Who is asking: the peer's address or, with `--trust-proxy`, what the reverse proxy in front
//! says. Put in each request's extensions as `app::api::Client` for login throttling and for
//! `Secure` cookies.
//!
//! Trusted, `X-Forwarded-For`'s *last* entry is the client (the one our proxy appended; entries
//! before it come from the client and can be forged), and `X-Forwarded-Proto: https` means the
//! browser used HTTPS. Untrusted, both headers are ignored: anyone could send them.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Request};
use axum::middleware::Next;
use axum::response::Response;

use app::api::Client;

pub async fn layer(
    State(trust_proxy): State<bool>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let client = client(req.headers(), peer, trust_proxy);
    req.extensions_mut().insert(client);
    next.run(req).await
}

pub fn client(headers: &HeaderMap, peer: Option<IpAddr>, trust_proxy: bool) -> Client {
    let last = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|v| !v.is_empty())
    };
    if !trust_proxy {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if headers.contains_key("x-forwarded-for") && !WARNED.swap(true, Ordering::Relaxed) {
            // Behind a proxy every request would seem to come from it, and the per-IP login
            // throttle would then count everybody together.
            tracing::warn!(
                "requests carry X-Forwarded-For but --trust-proxy is off: client addresses are the proxy's"
            );
        }
        return Client {
            ip: peer,
            https: false,
        };
    }
    let forwarded = last("x-forwarded-for").and_then(|v| {
        v.parse::<IpAddr>()
            .ok()
            .or_else(|| v.parse::<SocketAddr>().ok().map(|s| s.ip()))
    });
    Client {
        ip: forwarded.or(peer),
        https: last("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_headers_count_only_when_trusted() {
        let peer = Some("127.0.0.1".parse().unwrap());
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6, 10.0.0.7"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(
            client(&h, peer, false),
            Client {
                ip: peer,
                https: false
            }
        );
        assert_eq!(
            client(&h, peer, true),
            Client {
                ip: Some("10.0.0.7".parse().unwrap()),
                https: true
            }
        );
        let h = headers(&[("x-forwarded-for", "[2001:db8::1]:4711")]);
        assert_eq!(
            client(&h, peer, true).ip,
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(client(&HeaderMap::new(), peer, true).ip, peer);
    }
}
