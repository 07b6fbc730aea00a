//! Subscribers and lists: adding, importing, signing up, unsubscribing, erasing.

mod audience;
mod audience_import;
mod erasure;
mod signup;
mod unsubscribe;
