use std::process::ExitCode;

use clap::Parser;
use mailroom::{cli::Cli, commands, ops::telemetry};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // One line naming the problem (clap's first line), and where to read more.
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "mailroom: {} (see mailroom --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
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
