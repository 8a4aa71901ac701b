//! The `cloak` binary: parses the command line and runs a subcommand.

mod backend;
mod cli;
mod commands;
mod config;
mod memory;
mod secret_file;
mod store;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command};
use config::ConfigFile;

fn main() -> std::process::ExitCode {
    memory::no_huge_pages();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = ConfigFile::load(cli.config.as_deref())?;
    let command = match cli.command {
        Command::Keygen(args) => return commands::keygen::run(args),
        Command::Certs(args) => return commands::certs::run(args),
        command => command,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match command {
            Command::Up(args) => commands::up::run(args, &config).await,
            Command::Server(args) => commands::server::run(args, &config).await,
            Command::Proxy(args) => commands::proxy::run(args, &config).await,
            Command::Bench(args) => commands::bench::run(args, &config).await,
            Command::Keygen(_) | Command::Certs(_) => unreachable!("handled above"),
            Command::Audit(args) => commands::audit::run(args, &config),
            Command::Cluster(args) => commands::cluster::run(args, &config).await,
        }
    })
}
