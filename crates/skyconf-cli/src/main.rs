//! `skyconf`: the one binary. Each subcommand lives in `commands/`; this file parses the command
//! line, sets up logging and dispatches.

mod args;
mod commands;
mod known_keys;
mod logging;
mod settings;
mod stores;

use std::process::ExitCode;

// mimalloc: the reader allocates and frees many small nodes per document, where glibc's malloc
// spent 40 % of a 10,000-service reload (see BENCHMARKS.md); it also returns freed memory to the OS.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// skyconf: dynamic configuration for SkyWalking agents.
#[derive(Debug, Parser)]
#[command(name = "skyconf", version, about, long_about = None, after_help = "\
Results go to stdout, errors and logs to stderr. Exit status: 0 success; 1 failure (the reason on
stderr); 2 a refused document (digest, validate) or a usage error; 3 an error status the server
answered (fetch). Each command's --help says which apply.")]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text", env = "SKYCONF_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve agent configurations to SkyWalking agents (configuration discovery over gRPC).
    Serve(commands::serve::Args),
    /// Call fetchConfigurations once, as an agent does, and print the answer as JSON.
    Fetch(commands::fetch::Args),
    /// Print, as JSON, what the server would serve each service of a document, digests included.
    Digest(commands::digest::Args),
    /// Check a document: exit status 0 when skyconf would serve it; warnings about keys no agent reads.
    Validate(commands::validate::Args),
    /// Follow a service's configuration as a Rust agent does; print one JSON line per change.
    Agent(commands::agent::Args),
    /// Load-test a configuration discovery endpoint (any server); also memory, scale and propagation probes.
    Bench(commands::bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logging = logging::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => commands::serve::run(args),
        Command::Fetch(args) => commands::fetch::run(args),
        Command::Digest(args) => commands::digest::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
        Command::Agent(args) => commands::agent::run(args),
        Command::Bench(args) => commands::bench::run(args),
    };
    match result {
        Ok(code) => {
            logging.finish(None);
            code
        }
        Err(error) => {
            // After the log lines, through the same writer: never a panic on a closed stderr, never
            // stuck on a full one.
            logging.finish(Some(format!("skyconf: {}", chain(&error))));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, `: `-separated, leaving out a cause whose message the text already ends
/// with. skyconf's own errors do not repeat their causes; this is for libraries' errors that do
/// (hyper-util's `tcp connect error` is in its own chain twice).
fn chain(error: &anyhow::Error) -> String {
    causes(error.chain().map(|cause| cause as &(dyn std::error::Error + 'static)))
}

/// Messages of a chain of errors, `: `-separated, each left out when the text already ends with
/// it (see [`chain`]).
pub(crate) fn causes<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut text = String::new();
    for cause in chain {
        let message = cause.to_string();
        if text.is_empty() {
            text = message;
        } else if !text.ends_with(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
    }
    text
}
