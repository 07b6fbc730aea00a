//! The bounce listener (`--bounce-listen`) under a client that holds many idle connections: the
//! client keeps at most its cap (the rest are answered `421 4.7.0` at once and closed), so
//! another sender is still greeted within a second though the one client opened more
//! connections than the listener serves; and a listener whose every place is taken answers
//! `421 4.3.2` at once instead of leaving a new sender waiting. Other clients are other loopback
//! addresses (Linux routes all of 127.0.0.0/8 to lo).

use std::net::SocketAddr;
use std::time::Duration;

use mailroom::feedback::listener::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

use crate::support::bounces::listener;
use crate::support::helpers::test_db;

/// A connection to `addr` from the loopback address `from`: the listener's client is `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// The listener's first line on `s` (its greeting or its refusal), read a byte at a time so that
/// nothing after it is taken; what came before a close or a reset, if that came first.
async fn first_line(s: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 512 {
        match s.read(&mut byte).await {
            Ok(1) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// A connection from `from` that the listener answers within a second, and its first line.
async fn answered_within_a_second(from: &str, addr: SocketAddr) -> (TcpStream, String) {
    timeout(Duration::from_secs(1), async {
        let mut s = connect_from(from, addr).await;
        let line = first_line(&mut s).await;
        (s, line)
    })
    .await
    .unwrap_or_else(|_| panic!("a connection from {from} got no answer within a second"))
}

/// Lines other than the expected ones, a few, for a failing assertion's message.
fn odd<'a>(lines: &'a [String], expected: &str) -> Vec<&'a String> {
    lines
        .iter()
        .filter(|l| !l.starts_with(expected))
        .take(5)
        .collect()
}

#[tokio::test]
async fn a_client_holding_many_idle_connections_cannot_keep_another_sender_from_its_greeting() {
    let cfg = Config::default();
    let (cap, max) = (cfg.per_client, cfg.max_connections);
    assert!(
        cap > 0 && cap * 4 <= max,
        "the per-client cap is well below the listener's: {cap} of {max}"
    );
    let addr = listener(&test_db().await, cfg).await;

    // One client opens more connections than the listener serves, and never says a word.
    let n = max + 44;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(connect_from("127.0.0.1", addr).await);
    }
    // Every one is answered at once: greeted up to the cap, refused beyond it (in the order
    // they were opened: the kernel hands connections to the listener in that order).
    let firsts = timeout(Duration::from_secs(30), async {
        let mut firsts = Vec::with_capacity(n);
        for s in held.iter_mut() {
            firsts.push(first_line(s).await);
        }
        firsts
    })
    .await
    .expect("every connection of the one client was answered");
    let (kept, over) = firsts.split_at(cap);
    assert!(
        kept.iter().all(|l| l.starts_with("220 ")),
        "{:?}",
        odd(kept, "220 ")
    );
    let refusal = "421 4.7.0 Too many connections from your address\r\n";
    assert!(
        over.iter().all(|l| l == refusal),
        "{:?}",
        odd(over, refusal)
    );

    // With the one client's connections still open and idle, another sender is greeted at once,
    // and served.
    let (mut other, greeting) = answered_within_a_second("127.0.0.2", addr).await;
    assert!(greeting.starts_with("220 "), "{greeting:?}");
    other.write_all(b"QUIT\r\n").await.unwrap();
    let bye = timeout(Duration::from_secs(10), first_line(&mut other))
        .await
        .expect("an answer to QUIT");
    assert!(bye.starts_with("221 "), "{bye:?}");

    // The one client is still refused while it holds its cap, and greeted again once it lets
    // go (when the listener has seen its connections close: it refuses until then).
    let mut again = connect_from("127.0.0.1", addr).await;
    let line = timeout(Duration::from_secs(10), first_line(&mut again))
        .await
        .expect("an answer");
    assert_eq!(line, refusal);
    drop((held, again));
    let mut greeted = false;
    for _ in 0..100 {
        let (_s, line) = answered_within_a_second("127.0.0.1", addr).await;
        if line.starts_with("220 ") {
            greeted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(greeted, "the client's places never came free");
}

#[tokio::test]
async fn a_full_listener_refuses_a_new_sender_at_once_instead_of_leaving_it_waiting() {
    let cfg = Config {
        max_connections: 4,
        per_client: 2,
        ..Config::default()
    };
    let addr = listener(&test_db().await, cfg).await;

    // Two clients take every place, each within its cap.
    let mut held = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3"] {
        for _ in 0..2 {
            let (s, line) = answered_within_a_second(from, addr).await;
            assert!(line.starts_with("220 "), "{from}: {line:?}");
            held.push(s);
        }
    }

    // A third is told to come back later, at once.
    let (_refused, line) = answered_within_a_second("127.0.0.4", addr).await;
    assert_eq!(line, "421 4.3.2 Too busy, try again later\r\n");

    // A place that comes free is taken again.
    let mut leaving = held.pop().unwrap();
    leaving.write_all(b"QUIT\r\n").await.unwrap();
    let bye = timeout(Duration::from_secs(10), first_line(&mut leaving))
        .await
        .expect("an answer to QUIT");
    assert!(bye.starts_with("221 "), "{bye:?}");
    drop(leaving);
    let mut greeted = false;
    for _ in 0..100 {
        let (_s, line) = answered_within_a_second("127.0.0.4", addr).await;
        if line.starts_with("220 ") {
            greeted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(greeted, "the freed place was never taken again");
}
