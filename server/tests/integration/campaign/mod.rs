//! Campaigns from draft to sent: the workflow, its pages, test sends, starting and progress.

mod campaign_page;
pub(crate) mod campaign_processes;
mod campaign_test_send;
mod campaign_workflow;
mod campaigns;
mod progress_stream;
