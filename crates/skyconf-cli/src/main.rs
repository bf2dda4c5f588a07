//! `skyconf`: the one binary. Each subcommand lives in `commands/`; this file parses the command
//! line, sets up logging and dispatches.

mod args;
mod commands;
mod known_keys;
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
#[command(name = "skyconf", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text", env = "SKYCONF_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
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

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKYCONF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => commands::serve::run(args),
        Command::Fetch(args) => commands::fetch::run(args),
        Command::Digest(args) => commands::digest::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
        Command::Agent(args) => commands::agent::run(args),
        Command::Bench(args) => commands::bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("skyconf: {}", describe(&error));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, each said once. Most errors already name their cause in their message
/// (`cannot read x.yaml: Permission denied (os error 13)`) and also return it as their `source()`,
/// so anyhow's `{:#}` would repeat it; a cause whose text is already said is left out.
fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let denied = std::io::Error::from_raw_os_error(13);
        let error = skyconf_sources::SourceError::Io { path: "/srv/agent.yaml".into(), source: denied };
        let error = anyhow::Error::new(error).context("cannot start");
        let text = describe(&error);
        assert_eq!(text.matches("(os error 13)").count(), 1, "{text}");
        assert!(text.starts_with("cannot start: cannot read /srv/agent.yaml: "), "{text}");
        // A cause not in the message is still said.
        let plain = anyhow::Error::new(std::io::Error::other("disk on fire")).context("cannot write");
        assert_eq!(describe(&plain), "cannot write: disk on fire");
    }
}
