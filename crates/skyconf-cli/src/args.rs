//! Flags and value parsers more than one subcommand takes: [`ClientArgs`], how `fetch` and
//! `agent` reach a server as an agent would, and [`parse_duration`], the one spelling of a
//! duration on the command line (`250ms`, `20s`, `10m`).

use std::time::Duration;

use skyconf_server::security::Secret;

/// Where and as whom a client subcommand calls `fetchConfigurations`: shared by `fetch` and
/// `agent`, so the two spell, default and hide these flags alike.
#[derive(Debug, clap::Args)]
pub(crate) struct ClientArgs {
    /// The server, `HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:11800", env = "SKYCONF_ADDR")]
    pub(crate) addr: String,
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

/// Parses `250ms`, `20s`, `2m` or a plain number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((text, "s"), |i| text.split_at(i));
    let value: f64 = number.parse().map_err(|_| format!("not a duration: {text}"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("unknown unit in {text} (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn durations_take_ms_s_m_or_bare_seconds() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("s").is_err());
    }

    /// clap's own checks of the whole command line (unique names, groups, defaults), which it
    /// otherwise runs only when a subcommand is used.
    #[test]
    fn the_command_line_is_well_formed() {
        crate::Cli::command().debug_assert();
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
