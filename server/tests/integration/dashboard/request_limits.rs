//! Request size limits and timeouts over real sockets: a body over the limit is refused on server
//! functions and on the public unsubscribe routes; a request that stalls is answered 408 when its
//! time is up; the CSV import takes more than the general limit and more than the general time;
//! the live progress stream stays open past it.

use std::time::Duration;

use app::domain::Role;
use mailroom::http::{Edge, MAX_REQUEST_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::helpers::{draft, test_db};
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app_with, TestApp};

async fn app_timing_out_after_one_second(pool: sqlx::PgPool) -> TestApp {
    let api = app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    };
    let edge = Edge {
        request_timeout: Duration::from_secs(1),
        ..Edge::default()
    };
    spawn_app_with(pool, api, edge).await
}

/// Sends `head` then `first` of the body, waits `pause`, sends `rest`; returns the status line.
async fn raw(app: &TestApp, head: &str, first: &[u8], pause: Duration, rest: &[u8]) -> String {
    let mut s = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(first).await.unwrap();
    tokio::time::sleep(pause).await;
    // The server may have answered and closed already.
    let _ = s.write_all(rest).await;
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("no answer")
        .unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_on_server_functions_and_public_routes() {
    let app = app_timing_out_after_one_second(test_db().await).await;
    let big = "x".repeat(MAX_REQUEST_BYTES + 1);
    // A declared length over the limit is refused from the head alone; the body is not sent (a
    // client still writing it when the server closes would only see a broken pipe).
    for url in ["/api/login", "/u/not-a-token"] {
        let host = app.base.trim_start_matches("http://");
        let length = "email=a%40b.example&password=".len() + big.len();
        let head = format!(
            "POST {url} HTTP/1.1\r\nHost: {host}\r\nOrigin: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n",
            app.base
        );
        let status = raw(&app, &head, b"", Duration::ZERO, b"").await;
        assert!(status.starts_with("HTTP/1.1 413"), "{url}: {status}");
    }
    // The same body sent chunked (no length declared up front) to a server function, which
    // finds out while reading it, is refused the same way (not as an internal error).
    for url in ["/api/login"] {
        let host = app.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).await.unwrap();
        let head = format!(
            "POST {url} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let body = format!("email=a%40b.example&password={big}");
        // The server may answer and close before all of it is sent.
        for chunk in body.as_bytes().chunks(64 * 1024) {
            if s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await
                .is_err()
                || s.write_all(chunk).await.is_err()
                || s.write_all(b"\r\n").await.is_err()
            {
                break;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n").await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{url}: {answer}");
    }
    // Under the limit, the same request is read (and answered on its merits).
    let c = client(&app);
    let r = c
        .post(format!("{}/api/login", app.base))
        .form(&[("email", "a@b.example"), ("password", "x")])
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), 413);
}

#[tokio::test]
async fn a_stalled_request_times_out_but_an_import_upload_and_the_progress_stream_do_not() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let (email, password) = (&acme.owner().email, &acme.owner().password);
    let mut conn = pool.acquire().await.unwrap();
    let campaign = draft(&mut conn, org, acme.owner().id.0, "Hello").await;
    let list: i64 =
        sqlx::query_scalar("insert into lists (org_id, name) values ($1, 'News') returning id")
            .bind(org)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    drop(conn);
    let app = app_timing_out_after_one_second(pool).await;
    let host = app.base.trim_start_matches("http://").to_owned();

    // A server function whose body never finishes arriving.
    let head = format!(
        "POST /api/login HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
    );
    let status = raw(&app, &head, b"email=a", Duration::from_secs(3), b"").await;
    assert!(status.starts_with("HTTP/1.1 408"), "{status}");

    // An import upload slower than that is still taken.
    let c = client(&app);
    let r = app.login(&c, email, password).await;
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let body = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.csv\"\r\nContent-Type: text/csv\r\n\r\nemail,name\r\na@example.org,A\r\n--b--\r\n";
    let head = format!(
        "POST /api/lists/{list}/import HTTP/1.1\r\nHost: {host}\r\nOrigin: {}\r\nCookie: {cookie}\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: {}\r\n\r\n",
        app.base,
        body.len()
    );
    let (first, rest) = body.as_bytes().split_at(20);
    let status = raw(&app, &head, first, Duration::from_millis(1500), rest).await;
    assert!(status.starts_with("HTTP/1.1 303"), "{status}");

    // The progress stream is still open after the timeout.
    let mut stream = c
        .get(format!("{}/api/campaigns/{campaign}/progress", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let open_past_timeout = tokio::time::timeout(Duration::from_millis(2500), async {
        while let Some(_chunk) = stream.chunk().await.unwrap() {}
    })
    .await
    .is_err();
    assert!(open_past_timeout, "the progress stream ended");
}

/// Connections from 127.0.0.2 that start a request head and never finish it. Returns each with
/// whether the server closed it within `within`.
async fn closed_within(conns: &mut [TcpStream], within: Duration) -> Vec<bool> {
    let mut out = Vec::new();
    for s in conns.iter_mut() {
        let mut buf = [0u8; 256];
        // EOF, a reset or a 408 all mean the server let go of it.
        let closed = matches!(
            tokio::time::timeout(within, s.read(&mut buf)).await,
            Ok(Ok(_)) | Ok(Err(_))
        );
        out.push(closed);
    }
    out
}

async fn from_other_client(app: &TestApp, send: &[u8]) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut s = socket
        .connect(app.base.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    s.write_all(send).await.unwrap();
    s
}

fn app_config() -> app::api::ApiConfig {
    app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    }
}

/// One client address holds at most its cap of connections: the rest are closed at once (long
/// before the head timeout), the kept ones stay open, and other clients are served all along.
#[tokio::test]
async fn a_client_holding_many_connections_cannot_starve_the_others() {
    use mailroom::http::listen::Limits;
    let edge = Edge {
        listen: Limits {
            header_read_timeout: Duration::from_secs(600),
            per_client: 20,
        },
        ..Edge::default()
    };
    let app = spawn_app_with(test_db().await, app_config(), edge).await;
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(from_other_client(&app, b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await);
    }
    let c = client(&app);
    for _ in 0..5 {
        let r = c.get(format!("{}/healthz", app.base)).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let (kept, over) = held.split_at_mut(20);
    let over_closed = closed_within(over, Duration::from_secs(10)).await;
    assert!(over_closed.iter().all(|c| *c), "{over_closed:?}");
    let kept_closed = closed_within(&mut kept[..3], Duration::from_millis(300)).await;
    assert_eq!(kept_closed, [false; 3], "the first 20 are kept");
    // A freed place is taken again, once the server has seen the held connections close (it
    // refuses the new one until then).
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = from_other_client(
            &app,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        let mut answer = String::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut answer))
            .await
            .unwrap();
        if read.is_ok() && answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no place came free: {read:?} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A connection that never finishes its request head, or never sends a byte, is closed once the
/// header-read timeout passes; left open, such connections would pile up and run the server
/// out of file descriptors.
#[tokio::test]
async fn unfinished_request_heads_are_closed_after_the_header_read_timeout() {
    use mailroom::http::listen::Limits;
    let edge = Edge {
        listen: Limits {
            header_read_timeout: Duration::from_secs(1),
            per_client: 0,
        },
        ..Edge::default()
    };
    let app = spawn_app_with(test_db().await, app_config(), edge).await;
    let mut held = Vec::new();
    for i in 0..20 {
        let part: &[u8] = if i % 2 == 0 {
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        } else {
            b""
        };
        held.push(from_other_client(&app, part).await);
    }
    let closed = closed_within(&mut held, Duration::from_secs(30)).await;
    assert!(closed.iter().all(|c| *c), "{closed:?}");
    // A request that arrives whole is answered as ever.
    let r = client(&app)
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
