//! Automations in the database: their versions and four-eyes approval (`store`), enrolments by
//! every trigger (`enrol`: list joins enrol by a trigger on `list_members`, in the joining
//! transaction; events, in the transaction that records them; the API), the step runner
//! (`run`), and what the dashboard and the API read (`read`). Every statement is scoped by the
//! org.

mod enrol;
mod read;
mod run;
mod store;

pub use enrol::{
    enrol, enrol_by_dates, enrol_by_segments, enrol_from_events, forget, remove, EnrolError,
    Enrolled, DATE_CATCH_UP_DAYS,
};
pub use read::{
    get, list, mail_contents, of_subscriber, people, step_counts, Detail, MailContent, Person,
    StepCount, Summary, WaitingEdit,
};
pub use run::run_due;
pub use store::{
    approve, create, foreign_reference, set_status, update, ApproveError, Approved, Control,
    StoreError,
};
