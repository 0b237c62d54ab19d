//! hybridllm-frontend: the OpenAI-compatible HTTP server in front of the engine worker.
mod auth;
mod cli;
mod config;
mod cors;
mod engine;
mod engine_client;
mod engine_mux;
mod engine_router;
mod errors;
#[cfg(test)]
mod fake_engine;
mod heap;
mod http_server;
mod limits;
mod metrics;
mod openai;
mod routes;
mod server;
mod shutdown;
mod state;

use clap::Parser;

use std::process::ExitCode;

/// Started by `hybridllm serve`: the kernel sends SIGTERM (a graceful shutdown) when the
/// launcher dies, and if it already has, there is nobody to serve for.
fn exit_with_launcher() {
    let Some(launcher) = std::env::var("HYBRIDLLM_PARENT_PID")
        .ok()
        .and_then(|v| v.parse::<libc::pid_t>().ok())
    else {
        return;
    };
    // SAFETY: plain syscalls with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        if libc::getppid() != launcher {
            libc::_exit(1);
        }
    }
}

fn main() -> ExitCode {
    heap::GLOBAL.enable_from_env();
    exit_with_launcher();
    let cli = cli::Cli::parse();
    match cli.command {
        Some(cli::Command::Routes) => {
            routes::print();
            return ExitCode::SUCCESS;
        }
        None => {}
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HYBRIDLLM_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    hybridllm_api::request::log_unknown_fields_with(|schema, field| {
        tracing::warn!(
            schema,
            field,
            "{}",
            hybridllm_api::request::ignored_field_message(field)
        )
    });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.serve.runtime_threads())
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hybridllm-frontend: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(server::serve(cli.serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hybridllm-frontend: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
