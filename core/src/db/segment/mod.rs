//! Segments in the database: their tree compiled to one parameterised predicate (`compile`,
//! the only place a tree becomes SQL), the saved, versioned segments themselves (`store`), and
//! the scans that report who entered or left them (`watch`).

mod compile;
mod store;
mod watch;

pub use compile::{
    clock, count, count_query, ids, members, push_predicate, push_property_test, roomy, Clock,
    Member, Place,
};
pub use store::{
    create, definition_at, delete, foreign_reference, get, list, update, DeleteError, Saved,
    StoreError,
};
pub use watch::watch;
