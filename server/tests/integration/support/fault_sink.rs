//! A scripted SMTP server for fault injection, one behaviour per recipient local part:
//! `rcpt4xx@` 451 at RCPT, `data4xx@` 452 after the body, `perm@` 554 at RCPT, `nouser@`
//! 550 5.1.1 at RCPT, `dropearly@` connection closed at RCPT with no reply, `droplate@`
//! connection closed after the body with no reply, `hang@` body taken and never answered.
//! Everyone else is accepted. Every accepted body is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(Clone)]
pub struct FaultSink {
    pub addr: SocketAddr,
    pub accepted_log: Arc<Mutex<Vec<String>>>,
}

impl FaultSink {
    pub async fn start() -> FaultSink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let record = accepted.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(session(sock, record.clone()));
            }
        });
        FaultSink {
            addr,
            accepted_log: accepted,
        }
    }

    /// Recipients whose body was accepted, in order.
    pub fn accepted(&self) -> Vec<String> {
        self.accepted_log.lock().unwrap().clone()
    }
}

/// One SMTP session on any byte stream (plain TCP, or TLS in the TLS tests).
pub async fn session<S>(sock: S, accepted: Arc<Mutex<Vec<String>>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (r, mut w) = tokio::io::split(sock);
    let mut lines = BufReader::new(r).lines();
    if w.write_all(b"220 fault.test ESMTP\r\n").await.is_err() {
        return;
    }
    let mut rcpt = String::new();
    let mut in_body = false;
    while let Ok(Some(line)) = lines.next_line().await {
        let reply: &[u8] = if in_body {
            if line != "." {
                continue;
            }
            in_body = false;
            match local_part(&rcpt) {
                "data4xx" => b"452 4.3.1 insufficient system storage\r\n",
                "droplate" => return,
                "hang" => {
                    std::future::pending::<()>().await;
                    return;
                }
                _ => {
                    accepted.lock().unwrap().push(rcpt.clone());
                    b"250 2.0.0 queued\r\n"
                }
            }
        } else {
            let upper = line.to_ascii_uppercase();
            if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                b"250 fault.test\r\n"
            } else if upper.starts_with("RCPT") {
                rcpt = line
                    .split(['<', '>'])
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                match local_part(&rcpt) {
                    "rcpt4xx" => b"451 4.3.0 try again later\r\n",
                    "perm" => b"554 5.7.1 relay access denied\r\n",
                    "nouser" => b"550 5.1.1 <nouser@example.org>: Recipient address rejected\r\n",
                    "dropearly" => return,
                    _ => b"250 2.1.5 ok\r\n",
                }
            } else if upper.starts_with("DATA") {
                in_body = true;
                b"354 end with .\r\n"
            } else if upper.starts_with("QUIT") {
                let _ = w.write_all(b"221 bye\r\n").await;
                return;
            } else {
                b"250 2.0.0 ok\r\n"
            }
        };
        if w.write_all(reply).await.is_err() {
            return;
        }
    }
}

fn local_part(address: &str) -> &str {
    address.split('@').next().unwrap_or_default()
}
