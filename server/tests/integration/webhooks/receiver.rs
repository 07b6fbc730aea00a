//! A webhook receiver on a real socket whose every answer is scripted: an HTTP/1.1 server small
//! enough to misbehave on purpose (answer slowly, never, or hang up mid-request), recording
//! every request it read in full.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the receiver does with one request.
#[derive(Clone, Debug)]
pub enum Act {
    /// Answers this status (with these headers) after this delay.
    Answer(u16, Vec<(&'static str, String)>, Duration),
    /// Closes the connection without a word.
    HangUp,
    /// Says nothing for this long, then closes.
    Hang(Duration),
}

impl Act {
    pub fn ok() -> Act {
        Act::Answer(200, Vec::new(), Duration::ZERO)
    }
    pub fn status(s: u16) -> Act {
        Act::Answer(s, Vec::new(), Duration::ZERO)
    }
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Got {
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: String,
    /// What it was answered (`None`: hung up on, or left hanging).
    pub answered: Option<u16>,
    pub at: Instant,
    pub path: String,
}

impl Got {
    pub fn id(&self) -> &str {
        self.headers
            .get("webhook-id")
            .map(String::as_str)
            .unwrap_or("")
    }
}

type Script = Arc<dyn Fn(usize, &Got) -> Act + Send + Sync>;

pub struct Receiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    /// Listens on loopback; `script(n, request)` decides the `n`th request's fate (0-based,
    /// in arrival order).
    pub async fn start(script: impl Fn(usize, &Got) -> Act + Send + Sync + 'static) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(script);
        let (g, s) = (got.clone(), script.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, g.clone(), s.clone()));
            }
        });
        Receiver { addr, got }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, got: Arc<Mutex<Vec<Got>>>, script: Script) {
    let mut buf = Vec::new();
    loop {
        let Some((head_end, path, headers)) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
        buf.drain(..head_end + len);
        let mut request = Got {
            headers,
            body,
            answered: None,
            at: Instant::now(),
            path,
        };
        let n = {
            let mut all = got.lock().unwrap();
            all.push(request.clone());
            all.len() - 1
        };
        let act = script(n, &request);
        match act {
            Act::HangUp => return,
            Act::Hang(d) => {
                tokio::time::sleep(d).await;
                return;
            }
            Act::Answer(status, extra, delay) => {
                tokio::time::sleep(delay).await;
                let mut answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n"
                );
                for (k, v) in extra {
                    answer.push_str(&format!("{k}: {v}\r\n"));
                }
                answer.push_str("\r\nok");
                if stream.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                request.answered = Some(status);
                got.lock().unwrap()[n] = request;
            }
        }
    }
}

/// Reads up to the end of a request's head: (where the body starts, path, headers).
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(usize, String, BTreeMap<String, String>)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let path = lines.next()?.split(' ').nth(1)?.to_owned();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            return Some((end + 4, path, headers));
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The verdict of the reference `standardwebhooks` library (scripts/verify-webhooks) on each
/// request, in order: `Ok(id)` or `Err(why)`.
pub fn verify_independently(secret: &str, requests: &[Got]) -> Vec<Result<String, String>> {
    use std::io::Write;
    let python = std::env::var("MAILROOM_STANDARDWEBHOOKS_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/lib/standardwebhooks/bin/python",
            std::env::var("TOOLS_ROOT").unwrap_or_else(|_| "/usr/local".into())
        )
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/verify-webhooks");
    let input = serde_json::json!({
        "secret": secret,
        "requests": requests.iter().map(|r| serde_json::json!({
            "headers": r.headers, "body": r.body,
        })).collect::<Vec<_>>(),
    });
    let mut child = std::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python} (scripts/setup installs standardwebhooks): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the verifier failed: {out:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), requests.len(), "one verdict per request");
    lines
        .into_iter()
        .map(|v| {
            if v["ok"] == true {
                Ok(v["id"].as_str().unwrap_or_default().to_owned())
            } else {
                Err(v["error"].as_str().unwrap_or_default().to_owned())
            }
        })
        .collect()
}
