//! The dashboard's HTTP edge: sign-in, first run, settings, limits, headers, tenancy, odd input.

mod first_run;
mod http_auth;
mod login_throttle;
mod odd_input;
mod request_limits;
mod routers;
mod security_headers;
mod sender_auth;
mod settings;
mod tenancy;
