//! Events out: signed webhooks to the SaaS, their rows, retries, limits and address rules.

mod clicks;
pub(crate) mod events_out;
mod kill;
mod receiver;
