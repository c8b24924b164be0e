use clap::Parser;
use std::process::ExitCode;

use haloscope::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match haloscope::app::main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(haloscope::app::exit_code(&e))
        }
    }
}
