//! `skyconf`: the one binary. Each subcommand lives in `commands/`; this file parses the command
//! line, sets up logging and dispatches.

mod allocator;
mod args;
mod commands;
mod logging;
mod probe;
mod settings;
mod stores;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Subcommand};

/// skyconf: dynamic configuration for SkyWalking agents.
#[derive(Debug, clap::Parser)]
#[command(name = "skyconf", version, about, long_about = None, after_help = "\
Results go to stdout, errors and logs to stderr. Each command's --help says which statuses apply.

Exit status:
  0  success
  1  failure: a file cannot be read, a server cannot be reached (the reason on stderr)
  2  a refused document (digest, validate, preview) or a usage error
  3  the server answered with an error or refused the request (fetch, rollout)
  4  a watched rollout ended reverted or aborted (rollout status --watch)")]
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

// Parsed once at start: the size of `serve`'s flags costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
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
    /// Print, as JSON, what one agent would get from a document, each setting with its layer, and which paths it ignores.
    Preview(commands::preview::Args),
    /// Follow a service's configuration as a Rust agent does; print one JSON line per change.
    Agent(commands::agent::Args),
    /// Start, watch, promote or abort a staged rollout through a server's admin API (JSON out).
    Rollout(commands::rollout::Args),
}

/// The heading every command's `--help` puts its exit statuses under, one `  N  meaning` line each.
pub(crate) const EXIT_STATUS_HEADING: &str = "Exit status:";

/// The command line, with an exit-status section on every subcommand: one that documents none
/// itself (a tool under `bench`) gets its parent's, whose statuses its tools share.
pub(crate) fn command() -> clap::Command {
    fn inherit(command: clap::Command, parent: Option<&str>) -> clap::Command {
        let help = command.get_after_help().map(ToString::to_string).unwrap_or_default();
        let own = help.find(EXIT_STATUS_HEADING).map(|at| help[at..].to_owned());
        let mut command = match (&own, parent) {
            (None, Some(statuses)) if help.is_empty() => command.after_help(statuses.to_owned()),
            (None, Some(statuses)) => command.after_help(format!("{help}\n\n{statuses}")),
            _ => command,
        };
        let statuses = own.as_deref().or(parent).map(str::to_owned);
        let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_owned()).collect();
        for name in names {
            command = command.mut_subcommand(name, |sub| inherit(sub, statuses.as_deref()));
        }
        command
    }
    inherit(Cli::command(), None)
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|error| error.exit());
    let logging = logging::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => commands::serve::run(args),
        Command::Fetch(args) => commands::fetch::run(args),
        Command::Digest(args) => commands::digest::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
        Command::Preview(args) => commands::preview::run(&args),
        Command::Agent(args) => commands::agent::run(args),
        Command::Rollout(args) => commands::rollout::run(args),
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

/// `error` and its causes, each said once. skyconf's own errors name their cause in their message
/// and do not also return it as `source()`; some libraries' errors repeat theirs (hyper-util's `tcp
/// connect error` is in its own chain twice), so a cause whose text is already said is left out.
fn chain(error: &anyhow::Error) -> String {
    causes(error.chain().map(|cause| cause as &(dyn std::error::Error + 'static)))
}

/// Messages of a chain of errors, `: `-separated, each left out when the text already says it
/// (see [`chain`]).
pub(crate) fn causes<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut text = String::new();
    for cause in chain {
        let message = cause.to_string();
        if text.is_empty() {
            text = message;
        } else if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library error that says its cause and also returns it as its source.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read /srv/agent.yaml: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = anyhow::Error::new(Repeats(std::io::Error::from_raw_os_error(13))).context("cannot start");
        let text = chain(&error);
        assert_eq!(text.matches("(os error 13)").count(), 1, "{text}");
        assert!(text.starts_with("cannot start: cannot read /srv/agent.yaml: "), "{text}");
        // A cause not in the message is still said.
        let plain = anyhow::Error::new(std::io::Error::other("disk on fire")).context("cannot write");
        assert_eq!(chain(&plain), "cannot write: disk on fire");
    }
}
