//! Command line. The Python launcher passes `--listen-fd` (a socket it bound) and
//! `--args-json`; run alone, `--host/--port` make the binary bind itself.
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "hybridllm-frontend",
    version,
    about = "OpenAI-compatible HTTP frontend of hybridllm"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// An already bound TCP socket inherited from the parent; we call listen() on it.
    #[arg(long)]
    pub listen_fd: Option<i32>,
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// unix:///path/to.sock, host:port or http://host:port; several (comma-separated or
    /// repeated) for data parallelism: one engine worker each, requests routed among them
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "unix:///tmp/hybridllm-engine.sock"
    )]
    pub engine_address: Vec<String>,
    /// How requests are spread over several engine workers
    #[arg(long, value_enum, default_value = "least-load")]
    pub routing: crate::engine_router::Routing,
    /// With several engine workers: one that dies leaves the rotation and the others serve
    /// on (/health stays 200 while one answers); without it /health is 503 once one is down
    #[arg(long)]
    pub keep_alive: bool,
    /// Serve options as JSON (see config.rs for the schema).
    #[arg(long, default_value = "{}")]
    pub args_json: String,
    /// Runtime threads [default: half the CPUs, at least 1: the engine worker beside us needs
    /// the others, and the frontend's work per request is small].
    #[arg(long)]
    pub worker_threads: Option<usize>,
}

impl ServeArgs {
    pub fn runtime_threads(&self) -> usize {
        self.worker_threads.filter(|&n| n > 0).unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cpus / 2).max(1)
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the route table the router is built from, one JSON object per line.
    #[command(hide = true)]
    Routes,
}
