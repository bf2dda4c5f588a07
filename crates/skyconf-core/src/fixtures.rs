//! Synthetic agent-configurations documents of a given size, for the core's own tests and
//! benchmarks and, through `skyconf-testkit`, every other crate's (feature `fixtures`; in the
//! core's unit tests always). They live here, not in the testkit, so that the core's tests need no
//! crate that depends on the core.

use std::fmt::Write as _;

/// The settings the stock agents read, as `skyconf-bench document` writes them.
pub const ENTRIES: [(&str, &str); 6] = [
    ("agent.sample_n_per_3_secs", "10"),
    ("agent.span_limit_per_segment", "300"),
    ("agent.ignore_suffix", ".jpg,.css,.png,.ico"),
    ("agent.trace.ignore_path", "/eureka/**,/actuator/**,/health"),
    ("plugin.jdbc.trace_sql_parameters", "true"),
    ("agent.sample_rate", "0.5"),
];

/// A document of `services` services named `bench-svc-{i}`, each with the first `keys` of
/// [`ENTRIES`] (all of them when `keys` is larger), values single-quoted.
pub fn document(services: usize, keys: usize) -> String {
    let keys = keys.min(ENTRIES.len());
    let mut out = String::from("configurations:\n");
    for i in 0..services {
        let _ = writeln!(out, "  bench-svc-{i}:");
        for (key, value) in &ENTRIES[..keys] {
            let _ = writeln!(out, "    {key}: '{value}'");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_have_the_asked_size() {
        let text = document(2, 3);
        assert_eq!(text.lines().count(), 1 + 2 * (1 + 3));
        assert!(text.contains("  bench-svc-1:\n    agent.sample_n_per_3_secs: '10'\n"));
        assert_eq!(document(1, 100).lines().count(), 2 + ENTRIES.len());
    }
}
