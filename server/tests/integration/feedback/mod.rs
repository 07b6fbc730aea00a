//! Bounce reports coming back: relay webhooks, the bounce listener, the mailbox, attribution.

mod bounce_imap;
mod bounce_intake;
mod bounce_listener_limits;
mod webhooks;
