//! The weekly digest: the tick, forced resends, its pages, processes racing.

mod digest_processes;
mod digest_tick;
mod digests;
mod digests_page;
