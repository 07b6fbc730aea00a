//! Operating the binary: the embedded cluster, backups, migrations, the CLI, metrics, logs.

mod backup_restore;
mod cli_errors;
mod disk_full;
mod embedded_cluster;
mod failover;
mod jit;
mod metrics;
mod migrations;
mod pooler;
mod secrets_in_logs;
mod user_commands;
mod version;
