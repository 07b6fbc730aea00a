//! Events out, the parts that are not SQL: an endpoint's secret, the Standard Webhooks signature
//! of a request (`webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`), and which
//! addresses a request may go to.

use std::net::IpAddr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and the base64 of 32 random bytes (the receiver's libraries
/// take it as it is).
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The `webhook-signature` header: one `v1,…` per secret (two during a rotation), separated by
/// spaces. A secret that does not decode signs nothing (the schema admits only ours).
pub fn signature(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .filter_map(|s| {
            let key = STANDARD.decode(s.strip_prefix(SECRET_PREFIX)?).ok()?;
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            Some(format!(
                "v1,{}",
                STANDARD.encode(mac.finalize().into_bytes())
            ))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An endpoint's URL as an owner types it: http or https, a host, no credentials, no fragment.
/// Which addresses the host may resolve to is decided at each request ([`is_public`]).
pub fn check_url(raw: &str) -> Result<url::Url, String> {
    let raw = raw.trim();
    if raw.len() > 2000 {
        return Err("URL: at most 2,000 characters.".into());
    }
    let url = url::Url::parse(raw).map_err(|e| format!("URL: not a URL ({e})."))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err("URL: use https:// (or http://).".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("URL: name a host.".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("URL: no user name or password in it; requests are signed instead.".into());
    }
    if url.fragment().is_some() {
        return Err("URL: no #fragment (it is never sent).".into());
    }
    Ok(url)
}

/// Whether an address is on the public internet: not loopback, private, link-local, shared
/// (CGNAT), multicast, documentation, benchmarking or reserved space, in IPv4 or IPv6 (an
/// IPv4-mapped or NAT64 address is judged by the IPv4 address inside it).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let o = v6.octets();
                return is_public(IpAddr::from([o[12], o[13], o[14], o[15]]));
            }
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || s[..6] == [0, 0, 0, 0, 0, 0])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let two = signature(&[secret, &new_secret()], "msg_x", 1, body);
        assert_eq!(two.split(' ').count(), 2);
        assert_eq!(signature(&["not-ours"], "msg_x", 1, body), "");
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "192.0.0.8",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn urls_name_what_is_wrong() {
        assert!(check_url("https://hooks.example.com/mailroom").is_ok());
        for (bad, says) in [
            ("ftp://example.com/", "https"),
            ("https://user:pw@example.com/", "password"),
            ("https://example.com/#x", "fragment"),
            ("example.com/hook", "not a URL"),
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
