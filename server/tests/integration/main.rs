//! Integration tests against real parts: one throwaway PostgreSQL cluster per test run, a fresh
//! database per test copied from a migrated template, the real HTTP router on a real socket, and
//! the real `mailroom` binary for process-level behaviour (signals, embedded cluster, bad input).

/// What the tests share: the database, the router, the binary, SMTP servers, fixtures.
mod support;

mod audience;
mod audience_import;
mod backup_restore;
mod bounce_imap;
mod bounce_intake;
mod bounce_listener_limits;
mod campaign_page;
mod campaign_processes;
mod campaign_test_send;
mod campaign_workflow;
mod campaigns;
mod cli_errors;
mod deliveries;
mod deliveries_page;
mod delivery_worker;
mod digest_processes;
mod digest_tick;
mod digests;
mod digests_page;
mod embedded_cluster;
mod erasure;
mod first_run;
mod http_auth;
mod leader;
mod login_throttle;
mod metrics;
mod migrations;
mod odd_input;
mod progress_stream;
mod rate_limit;
mod relay_breaker;
mod relay_webhooks;
mod request_limits;
mod rest_api;
mod rest_errors;
mod rest_messages;
mod rest_subscribers;
mod routers;
mod schema;
mod secrets_in_logs;
mod security_headers;
mod sender_auth;
mod settings;
mod signup;
mod smtp_stages;
mod smtp_tls;
mod smtp_utf8;
mod tenancy;
mod unsubscribe;
mod user_commands;
mod version;
