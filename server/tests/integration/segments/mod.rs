//! Segments: the compiler against an independent evaluator, injection, the API, and
//! campaigns sent to segments.

mod campaigns;
mod differential;
mod injection;
mod plans;
