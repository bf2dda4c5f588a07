//! Flags and value parsers more than one subcommand takes: [`ClientArgs`], how `fetch` and
//! `agent` reach a server as an agent would; and, from `skyconf-args` (which `skyconf-bench`
//! shares), [`ServerAddr`], the one spelling of a server's address (`HOST:PORT`,
//! `http://HOST:PORT`, `https://HOST:PORT`), and [`parse_duration`], the one spelling of a
//! duration on the command line (`250ms`, `20s`, `10m`).

use std::time::Duration;

pub(crate) use skyconf_args::{ServerAddr, parse_duration};
use skyconf_server::security::Secret;

/// Where and as whom a client subcommand calls `fetchConfigurations`: shared by `fetch` and
/// `agent`, so the two spell, default and hide these flags alike.
#[derive(Debug, clap::Args)]
pub(crate) struct ClientArgs {
    /// The server: `HOST:PORT`, `http://HOST:PORT`, or `https://HOST:PORT` (TLS, the system's
    /// roots).
    #[arg(long, default_value = "127.0.0.1:11800", env = "SKYCONF_ADDR", value_parser = ServerAddr::parse)]
    pub(crate) addr: ServerAddr,
    /// The service name, exactly as the agent sends it.
    #[arg(long)]
    pub(crate) service: String,
    /// Deadline of each call.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Token sent as `authentication` metadata, as an agent with `agent.authentication` sends it.
    /// Its value from the environment never appears in `--help`.
    #[arg(long, env = "SKYCONF_AUTHENTICATION", hide_env_values = true)]
    pub(crate) authentication: Option<Secret>,
}

/// What to do when the server refuses the agent token (`PERMISSION_DENIED`, `UNAUTHENTICATED`):
/// which flag or variable sets it, for a client that `sent` one or none.
pub(crate) fn token_hint(sent: bool) -> &'static str {
    if sent {
        "the server does not take this agent token: check --authentication or SKYCONF_AUTHENTICATION"
    } else {
        "the server wants an agent token: pass it with --authentication or SKYCONF_AUTHENTICATION"
    }
}

/// Whether `code` is the server refusing the agent token.
pub(crate) fn is_token_refusal(code: tonic::Code) -> bool {
    matches!(code, tonic::Code::PermissionDenied | tonic::Code::Unauthenticated)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// clap's own checks of the whole command line (unique names, groups, defaults), which it
    /// otherwise runs only when a subcommand is used.
    #[test]
    fn the_command_line_is_well_formed() {
        crate::command().debug_assert();
    }

    /// Every subcommand that calls a server hides the token it may read from the environment.
    #[test]
    fn client_subcommands_hide_the_token_from_help() {
        let cli = crate::Cli::command();
        for name in ["fetch", "agent"] {
            let sub = cli.find_subcommand(name).unwrap_or_else(|| panic!("no `{name}` subcommand"));
            let token = sub
                .get_arguments()
                .find(|a| a.get_id() == "authentication")
                .unwrap_or_else(|| panic!("`{name}` has no --authentication"));
            assert!(token.is_hide_env_values_set(), "`{name} --help` would show SKYCONF_AUTHENTICATION");
            assert_eq!(token.get_env(), Some(std::ffi::OsStr::new("SKYCONF_AUTHENTICATION")));
        }
    }
}
