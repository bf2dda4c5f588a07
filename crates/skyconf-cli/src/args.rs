//! Flags and value parsers more than one subcommand takes: [`ClientArgs`], how `fetch` and
//! `agent` reach a server as an agent would, [`ServerAddr`], the one spelling of a server's
//! address (`HOST:PORT`, `http://HOST:PORT`, `https://HOST:PORT`), and [`parse_duration`], the
//! one spelling of a duration on the command line (`250ms`, `20s`, `10m`).

use std::fmt;
use std::time::Duration;

use skyconf_server::security::Secret;
use tonic::transport::{ClientTlsConfig, Endpoint};

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

/// A server's address as the command line gave it: `HOST:PORT` (plain HTTP/2, as agents dial
/// their collector), `http://HOST:PORT`, or `https://HOST:PORT` (TLS with the system's roots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerAddr {
    /// As given, for messages and reports.
    text: String,
    /// `http://...` or `https://...`.
    uri: String,
}

impl ServerAddr {
    /// Parses an address; the error says which spellings are accepted.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        const SPELLINGS: &str = "use HOST:PORT, http://HOST:PORT or https://HOST:PORT";
        let (scheme, rest) = match text.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
            Some((scheme, _)) => return Err(format!("unsupported scheme `{scheme}://`; {SPELLINGS}")),
            None => ("http", text),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains('/') {
            return Err(format!("`{text}` is not a server address (no path is taken); {SPELLINGS}"));
        }
        let has_port = rest.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']'))
        });
        if !has_port && scheme == "http" && !text.contains("://") {
            return Err(format!("`{text}` has no port; {SPELLINGS} (agents use 11800)"));
        }
        let uri = format!("{scheme}://{rest}");
        Endpoint::from_shared(uri.clone())
            .map_err(|e| format!("`{text}` is not a server address: {e}; {SPELLINGS}"))?;
        Ok(Self { text: text.to_owned(), uri })
    }

    /// `HOST:PORT`, without the scheme.
    pub(crate) fn authority(&self) -> &str {
        self.uri.split_once("://").map_or(self.uri.as_str(), |(_, rest)| rest)
    }

    /// Whether calls go over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        self.uri.starts_with("https://")
    }

    /// An endpoint for the address, TLS configured for `https://`.
    pub(crate) fn endpoint(&self) -> anyhow::Result<Endpoint> {
        let endpoint = Endpoint::from_shared(self.uri.clone())?;
        Ok(if self.is_tls() { endpoint.tls_config(ClientTlsConfig::new().with_native_roots())? } else { endpoint })
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for ServerAddr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
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

    #[test]
    fn addresses_take_host_port_or_an_http_or_https_uri() {
        let plain = ServerAddr::parse("127.0.0.1:11800").unwrap();
        assert_eq!((plain.uri.as_str(), plain.is_tls()), ("http://127.0.0.1:11800", false));
        assert_eq!(plain.authority(), "127.0.0.1:11800");
        assert_eq!(ServerAddr::parse("http://127.0.0.1:11800").unwrap().uri, "http://127.0.0.1:11800");
        assert_eq!(ServerAddr::parse("http://oap.local:11800/").unwrap().uri, "http://oap.local:11800");
        assert!(ServerAddr::parse("https://oap.example:443").unwrap().is_tls());
        assert_eq!(ServerAddr::parse("[::1]:11800").unwrap().uri, "http://[::1]:11800");
        assert_eq!(ServerAddr::parse("http://127.0.0.1:11800").unwrap().to_string(), "http://127.0.0.1:11800");
        for bad in ["grpc://h:1", "h:1/path", "oap.local", "", "h:notaport"] {
            let error = ServerAddr::parse(bad).unwrap_err();
            assert!(error.contains("HOST:PORT, http://HOST:PORT or https://HOST:PORT"), "{bad}: {error}");
        }
    }

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
