//! The delivery queue and its worker: claims, leases, marks, the rate limit, the relay's breaker, SMTP.

mod deliveries;
mod deliveries_page;
mod delivery_worker;
mod leader;
mod rate_limit;
mod relay_breaker;
mod smtp_stages;
mod smtp_tls;
mod smtp_utf8;
