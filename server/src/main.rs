use std::process::ExitCode;

use clap::Parser;
use mailroom::{cli::Cli, commands, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mailroom: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line that names the problem and, where we know it, the fix.
            eprintln!("mailroom: {e:#}");
            ExitCode::FAILURE
        }
    }
}
