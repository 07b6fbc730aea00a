//! TLS on our own TCP_NODELAY socket: implicit TLS (SMTPS) wraps the socket before the greeting;
//! STARTTLS hands lettre the parameters to upgrade it. Both trust the system's roots plus the
//! operator's extra CA, if given.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use lettre::transport::smtp::client::{AsyncTokioStream, Certificate, TlsParameters};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::target::Target;

/// STARTTLS parameters for lettre.
pub fn starttls_parameters(target: &Target) -> Result<TlsParameters, String> {
    let mut builder = TlsParameters::builder(target.host.clone());
    if let Some(pem) = &target.ca_pem {
        let ca = Certificate::from_pem(pem)
            .map_err(|e| format!("the SMTP CA file is not a PEM certificate: {e}"))?;
        builder = builder.add_root_certificate(ca);
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up TLS: {e}"))
}

/// A TLS stream lettre can drive like its own socket.
#[derive(Debug)]
pub struct TlsSocket(tokio_native_tls::TlsStream<TcpStream>);

/// Implicit TLS: the handshake happens before lettre reads the greeting.
pub async fn connect(stream: TcpStream, target: &Target) -> Result<TlsSocket, String> {
    let mut builder = native_tls::TlsConnector::builder();
    if let Some(pem) = &target.ca_pem {
        let ca = native_tls::Certificate::from_pem(pem)
            .map_err(|e| format!("the SMTP CA file is not a PEM certificate: {e}"))?;
        builder.add_root_certificate(ca);
    }
    let connector = builder
        .build()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    tokio_native_tls::TlsConnector::from(connector)
        .connect(&target.host, stream)
        .await
        .map(TlsSocket)
        .map_err(|e| format!("TLS handshake with {} failed: {e}", target.host))
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for TlsSocket {
    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.get_ref().get_ref().get_ref().peer_addr()
    }
}
