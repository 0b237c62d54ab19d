//! hybridllm-frontend: the OpenAI-compatible HTTP server in front of the engine worker.
mod cli;
mod text;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        Some(cli::Command::Text(cmd)) => match text::devtools::run(cmd) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::ExitCode::from(2)
            }
        },
        None => std::process::ExitCode::SUCCESS,
    }
}
