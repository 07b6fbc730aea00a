//! Domain types: each invariant of DESIGN.md that can live in a type lives here, parsed once at
//! the edge. Compiled for the server and the browser alike (no server-only dependencies).

pub mod audience;
mod backoff;
mod campaign;
mod delivery;
mod dkim;
mod email;
mod job_id;
pub mod login_throttle;
pub mod org;
pub mod progress;
mod role;
pub mod text;
mod week_key;

pub use audience::{CsvColumns, SubscriberStatus};
pub use backoff::Backoff;
pub use campaign::{BodyFormat, CampaignContent, CampaignStatus, Transition, TransitionError};
pub use delivery::{DeliveryCursor, DeliveryKind, DeliveryStatus};
pub use dkim::{DkimDomain, DkimNameError, DkimSelector};
pub use email::{sentence, EmailAddress, EmailError};
pub use job_id::{JobId, JobIdError};
pub use role::Role;
pub use week_key::{WeekKey, WeekKeyError};
