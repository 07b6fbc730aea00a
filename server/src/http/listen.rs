//! Accepting HTTP connections so that no client can hold the server: a request head must
//! arrive within a time limit (a connection that never finishes its head is closed), and one
//! client address (an IPv6 client by its /64) holds at most so many connections (more are
//! closed at once; the bounce listener counts its clients with the same `Counts`). Each connection
//! is served by hyper's HTTP/1.1 (browsers speak HTTP/2 only over TLS, which a reverse proxy
//! in front ends; detecting HTTP/2 first would wait for a silent client's first byte with no
//! timeout), without upgrades (nothing here uses them), the client's address in `ConnectInfo`. On shutdown no new
//! connection is taken and the open ones finish their requests.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::Service;

use crate::ops::shutdown::Shutdown;

/// How long a connection may hold the server without sending a whole request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Time from a connection's start (or the end of its previous request) to the end of the
    /// request head.
    pub header_read_timeout: Duration,
    /// Connections one client address (an IPv6 client: its /64) may hold at once; 0: no cap
    /// (behind a reverse proxy, every connection comes from the proxy).
    pub per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            per_client: 128,
        }
    }
}

/// Open connections per client, the one rule for every listener (HTTP here, SMTP in
/// `bounce_intake`): a client is its address, an IPv6 client its /64 and an IPv4-mapped one its
/// IPv4 address (`login_throttle::ip_key`, as sign-in throttling counts them), so one host
/// cannot get around its cap by rotating through its network. A [`Slot`] gives its place back
/// when dropped.
#[derive(Clone, Default)]
pub(crate) struct Counts(Arc<Mutex<HashMap<String, usize>>>);

/// One connection's place in [`Counts`].
pub(crate) struct Slot {
    counts: Counts,
    client: String,
}

impl Counts {
    /// A place for one more connection from `ip`, or `None` when its client already holds
    /// `cap` (0: no cap).
    pub(crate) fn take(&self, ip: IpAddr, cap: usize) -> Option<Slot> {
        let client = app::domain::login_throttle::ip_key(ip);
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(client.clone()).or_insert(0);
        if cap > 0 && *n >= cap {
            return None;
        }
        *n += 1;
        Some(Slot {
            counts: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.client);
            }
        }
    }
}

/// Serves `router` on `listener` until `shutdown`, then waits for open requests to finish.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, shutdown: Shutdown) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let counts = Counts::default();
    let mut refused_logged = false;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.requested() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (or a transient error): wait instead of spinning;
                    // the head timeout and the per-client cap free descriptors.
                    tracing::warn!(error = %e, "cannot accept a connection; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = counts.take(peer.ip(), limits.per_client) else {
            if !refused_logged {
                tracing::warn!(client = %peer.ip(), cap = limits.per_client,
                    "a client holds the most connections allowed; closing its new ones");
                refused_logged = true;
            }
            drop(stream);
            continue;
        };
        refused_logged = false;
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().call(req)
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A client that goes away mid-request is not the server's error.
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_at_most_its_cap_and_a_closed_connection_frees_its_place() {
        let counts = Counts::default();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let held: Vec<Slot> = (0..3).map(|_| counts.take(a, 3).unwrap()).collect();
        assert!(counts.take(a, 3).is_none());
        assert!(
            counts.take(b, 3).is_some(),
            "other clients are not affected"
        );
        drop(held);
        assert!(counts.take(a, 3).is_some());
        assert!(counts.0.lock().unwrap().is_empty(), "no entry kept");
        let unlimited: Vec<Slot> = (0..1000).map(|_| counts.take(a, 0).unwrap()).collect();
        assert_eq!(unlimited.len(), 1000);
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_one_its_ipv4_address() {
        let counts = Counts::default();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held = [
            counts.take(ip("2001:db8:1:2::1"), 2).unwrap(),
            counts.take(ip("2001:db8:1:2:ffff::7"), 2).unwrap(),
        ];
        assert!(
            counts.take(ip("2001:db8:1:2:abcd::9"), 2).is_none(),
            "the same /64"
        );
        assert!(
            counts.take(ip("2001:db8:1:3::1"), 2).is_some(),
            "another /64"
        );
        let v4 = [
            counts.take(ip("10.1.2.3"), 2).unwrap(),
            counts.take(ip("10.1.2.3"), 2).unwrap(),
        ];
        assert!(counts.take(ip("::ffff:10.1.2.3"), 2).is_none());
        drop((held, v4));
        assert!(counts.0.lock().unwrap().is_empty());
    }
}
