//! The REST API: its routes, errors, transactional mail, subscribers and its published schema.

mod rest_api;
mod rest_automations;
mod rest_errors;
mod rest_events;
mod rest_messages;
mod rest_segments;
mod rest_subscribers;
mod schema;
