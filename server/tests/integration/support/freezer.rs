//! A TCP proxy that can freeze: while frozen it accepts, forwards nothing and closes nothing,
//! as a partition or a half-open connection looks to both ends. Thawed, it forwards what it
//! held and goes on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

pub struct Freezer {
    pub addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    /// Runs the proxy; dropped with it.
    _rt: tokio::runtime::Runtime,
}

impl Freezer {
    /// A proxy to `upstream` on a loopback port of its own.
    pub fn start(upstream: SocketAddr) -> Freezer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        rt.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let f = f.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, f.clone()));
                    tokio::spawn(pipe(sr, cw, f));
                });
            }
        });
        Freezer {
            addr,
            frozen,
            _rt: rt,
        }
    }

    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, holding everything while frozen (nothing read, so the sender's
/// buffers fill as on a dead path; what was read already waits to be written).
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let n = match tokio::time::timeout(Duration::from_millis(20), from.read(&mut buf)).await {
            Err(_) => continue,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
