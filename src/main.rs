use clap::Parser;
use std::process::ExitCode;

use haloscope::cli::Cli;

/// mimalloc serves the small blocks the recording checker makes and frees for each of
/// millions of calls faster than glibc's malloc, freed on another thread included
/// (BENCHMARKS.md: `bench --checker`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    haloscope::dispatch::default_cuda_queues(&cli);
    let json = cli.wants_json();
    match haloscope::dispatch::main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = haloscope::dispatch::exit_code(&e);
            if haloscope::dispatch::is_quiet(&e) {
                return ExitCode::from(code);
            }
            eprintln!("error: {e:#}");
            if json && !haloscope::out::wrote() {
                // Every `--json` run prints one JSON document, a failure's included.
                let doc = serde_json::json!({ "error": format!("{e:#}"), "exit_code": code });
                if haloscope::out::line(doc).is_err() {
                    return ExitCode::from(haloscope::out::CLOSED_STATUS);
                }
            }
            ExitCode::from(code)
        }
    }
}
