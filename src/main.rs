//! The `switchboard` binary: parse the command line and run it.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = switchboard::cli::Cli::parse();
    match switchboard::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("switchboard: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
