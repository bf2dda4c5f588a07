//! The service name a Java agent sends, so a Rust service can share a configuration entry with
//! its Java peers.
//!
//! The Java agent appends its namespace and cluster when either is set: `name|namespace|cluster`,
//! with an empty part still taking its place (`svc||eu`). The server matches the name exactly, so
//! the YAML key must be this whole string.

/// The separator between name, namespace and cluster.
pub const SEPARATOR: char = '|';

/// The service name as the Java agent composes it from `agent.service_name`, `agent.namespace`
/// and `agent.cluster`: `name` alone when both others are empty, else `name|namespace|cluster`.
///
/// ```
/// use skyconf_agent::service_name;
/// assert_eq!(service_name("svc", "", ""), "svc");
/// assert_eq!(service_name("svc", "prod", "eu"), "svc|prod|eu");
/// assert_eq!(service_name("svc", "", "eu"), "svc||eu");
/// assert_eq!(service_name("svc", "ns", ""), "svc|ns|");
/// ```
pub fn service_name(name: &str, namespace: &str, cluster: &str) -> String {
    if namespace.is_empty() && cluster.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{SEPARATOR}{namespace}{SEPARATOR}{cluster}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_not_empty() {
        // Java tests the parts for emptiness, not blankness.
        assert_eq!(service_name("svc", " ", ""), "svc| |");
    }
}
