//! Bounce reports as a remote mail system mails them: an RFC 3464 delivery status notification
//! and an RFC 5965 feedback report, and an SMTP client that mails them over one connection
//! (the way an MTA does: `MAIL FROM:<>`, pipelined with RCPT and DATA).

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A DSN from `reporting` (its Message-ID names it) to `to` (the envelope sender of the
/// message it is about) saying delivery to `recipient` failed with `status`. The returned
/// headers carry `message_id` when given.
pub fn dsn(
    report_id: &str,
    to: &str,
    recipient: &str,
    status: &str,
    message_id: Option<&str>,
) -> String {
    let returned = message_id.map_or(String::new(), |m| {
        format!(
            "--B\r\nContent-Type: text/rfc822-headers\r\n\r\nFrom: news@example.com\r\nTo: {recipient}\r\nMessage-ID: {m}\r\nSubject: Hello\r\n\r\n"
        )
    });
    format!(
        "Return-Path: <>\r\nFrom: Mail Delivery System <MAILER-DAEMON@mx.remote.test>\r\n\
         To: <{to}>\r\nSubject: Undelivered Mail Returned to Sender\r\nMessage-ID: <{report_id}@mx.remote.test>\r\n\
         Auto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\n<{recipient}>: host mx.remote.test said: 550 {status} no such user\r\n\r\n\
         --B\r\nContent-Type: message/delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.remote.test\r\n\r\n\
         Final-Recipient: rfc822; {recipient}\r\nAction: failed\r\nStatus: {status}\r\n\
         Diagnostic-Code: smtp; 550 {status} <{recipient}>: user unknown\r\n\r\n\
         {returned}--B--\r\n"
    )
}

/// A DSN mailed to `to` with one failed recipient group per address of `recipients` (a real
/// MTA writes several when one message to several recipients failed).
pub fn dsn_naming(report_id: &str, to: &str, recipients: &[&str], status: &str) -> String {
    let groups: String = recipients
        .iter()
        .map(|r| {
            format!(
                "Final-Recipient: rfc822; {r}\r\nAction: failed\r\nStatus: {status}\r\n\
                 Diagnostic-Code: smtp; 550 {status} <{r}>: user unknown\r\n\r\n"
            )
        })
        .collect();
    format!(
        "Return-Path: <>\r\nFrom: Mail Delivery System <MAILER-DAEMON@mx.remote.test>\r\n\
         To: <{to}>\r\nSubject: Undelivered Mail Returned to Sender\r\nMessage-ID: <{report_id}@mx.remote.test>\r\n\
         Auto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n\r\n\
         --B\r\nContent-Type: message/delivery-status\r\n\r\n\
         Reporting-MTA: dns; mx.remote.test\r\n\r\n{groups}--B--\r\n"
    )
}

/// An ARF abuse report about the message `recipient` got from `envelope_from`.
pub fn arf(report_id: &str, to: &str, envelope_from: &str, recipient: &str) -> String {
    format!(
        "From: <fbl@isp.test>\r\nTo: <{to}>\r\nSubject: FW: complaint\r\nMessage-ID: <{report_id}@isp.test>\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\r\n\r\n\
         --F\r\nContent-Type: text/plain\r\n\r\nThis is an abuse report.\r\n\r\n\
         --F\r\nContent-Type: message/feedback-report\r\n\r\n\
         Feedback-Type: abuse\r\nUser-Agent: isp-fbl/1.0\r\nVersion: 1\r\n\
         Original-Mail-From: <{envelope_from}>\r\nOriginal-Rcpt-To: <{recipient}>\r\n\r\n\
         --F\r\nContent-Type: message/rfc822\r\n\r\nFrom: news@example.com\r\nTo: {recipient}\r\nSubject: Hello\r\n\r\nHello.\r\n\
         --F--\r\n"
    )
}

/// One SMTP connection to a mail server, mailing reports from the null sender.
pub struct ReportClient {
    io: BufReader<TcpStream>,
}

impl ReportClient {
    pub async fn connect(addr: SocketAddr) -> std::io::Result<ReportClient> {
        let mut c = ReportClient {
            io: BufReader::new(TcpStream::connect(addr).await?),
        };
        c.reply().await?;
        c.io.get_mut().write_all(b"EHLO mx.remote.test\r\n").await?;
        c.reply().await?;
        Ok(c)
    }

    /// The code of the next (possibly multi-line) reply.
    async fn reply(&mut self) -> std::io::Result<u16> {
        loop {
            let mut line = String::new();
            if self.io.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if line.as_bytes().get(3) != Some(&b'-') {
                return Ok(line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0));
            }
        }
    }

    /// Mails `data` to `rcpt`: (the RCPT reply's code, the final reply's code; 0 when DATA
    /// was not reached).
    pub async fn send(&mut self, rcpt: &str, data: &str) -> std::io::Result<(u16, u16)> {
        let cmds = format!("MAIL FROM:<>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n");
        self.io.get_mut().write_all(cmds.as_bytes()).await?;
        self.reply().await?;
        let rcpt_code = self.reply().await?;
        let data_code = self.reply().await?;
        if data_code != 354 {
            self.io.get_mut().write_all(b"RSET\r\n").await?;
            self.reply().await?;
            return Ok((rcpt_code, 0));
        }
        let mut body = String::with_capacity(data.len() + 8);
        for line in data.split_inclusive('\n') {
            if line.starts_with('.') {
                body.push('.');
            }
            body.push_str(line);
        }
        if !body.ends_with("\r\n") {
            body.push_str("\r\n");
        }
        body.push_str(".\r\n");
        self.io.get_mut().write_all(body.as_bytes()).await?;
        Ok((rcpt_code, self.reply().await?))
    }

    pub async fn quit(mut self) -> std::io::Result<()> {
        self.io.get_mut().write_all(b"QUIT\r\n").await?;
        self.reply().await.map(drop)
    }
}
