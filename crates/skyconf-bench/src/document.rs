//! `skyconf-bench document`: synthetic agent-configurations documents, printed for
//! `scripts/bench.sh` and written by `propagation` and `reload`.

use std::fmt::Write as _;
use std::process::ExitCode;

use skyconf_agent::watchers::{
    IGNORE_SUFFIX, JDBC_TRACE_SQL_PARAMETERS, SAMPLE_N_PER_3_SECS, SAMPLE_RATE, SPAN_LIMIT_PER_SEGMENT,
    TRACE_IGNORE_PATH,
};

/// Arguments of `skyconf-bench document`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    /// Services, named `PREFIX0`, `PREFIX1`, ...
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Keys per service (at most 12).
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// Service name prefix.
    #[arg(long, default_value = "bench-svc-")]
    service_prefix: String,
    /// Changes one value of the first service, so each revision has a new digest.
    #[arg(long, default_value_t = 0)]
    revision: u64,
}

/// Prints the document.
pub(super) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    crate::out!("{}", document(&args.service_prefix, args.services, args.keys, args.revision));
    Ok(ExitCode::SUCCESS)
}

/// Settings the stock agents read, with values typed the way real documents write them.
/// The first six are the keys the Java and Go agents watch, named by skyconf-agent; the rest are
/// plugin settings no agent here watches, to make documents of realistic size.
const KEYS: [(&str, &str); 12] = [
    (SAMPLE_N_PER_3_SECS, "{n}"),
    (SPAN_LIMIT_PER_SEGMENT, "300"),
    (IGNORE_SUFFIX, "'.jpg,.css,.png,.ico'"),
    (TRACE_IGNORE_PATH, "'/eureka/**,/actuator/**,/health'"),
    (JDBC_TRACE_SQL_PARAMETERS, "true"),
    (SAMPLE_RATE, "'0.5'"),
    ("plugin.http.include_http_headers", "x-request-id"),
    ("plugin.mongodb.trace_param", "false"),
    ("plugin.elasticsearch.trace_dsl", "false"),
    ("plugin.springmvc.collect_http_params", "true"),
    ("plugin.kafka.bootstrap_servers", "kafka-0:9092"),
    ("agent.cause_exception_depth", "5"),
];

/// `configurations:` with `services` services of `keys` settings each.
pub(super) fn document(prefix: &str, services: usize, keys: usize, revision: u64) -> String {
    generate(prefix, services, keys, revision, false)
}

/// [`document`] with the revision in every service, so each revision changes every digest.
pub(super) fn document_every_service(prefix: &str, services: usize, keys: usize, revision: u64) -> String {
    generate(prefix, services, keys, revision, true)
}

fn generate(prefix: &str, services: usize, keys: usize, revision: u64, every_service: bool) -> String {
    let keys = keys.min(KEYS.len());
    let mut out = String::with_capacity(services * (keys * 48 + 32) + 32);
    out.push_str("configurations:\n");
    for i in 0..services {
        let _ = writeln!(out, "  {prefix}{i}:");
        for (key, value) in &KEYS[..keys] {
            // The first service (or every one) carries the revision, so every revision has its
            // own digest.
            let n = if i == 0 || every_service { 10 + revision } else { 10 + (i as u64 % 7) };
            let _ = writeln!(out, "    {key}: {}", value.replace("{n}", &n.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_documents_are_served_and_revisions_change_one_digest() {
        let a = skyconf_core::read(&document("s", 3, 12, 0)).unwrap();
        let b = skyconf_core::read(&document("s", 3, 12, 1)).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.get("s0").unwrap().entries().len(), 12);
        assert_ne!(a.get("s0").unwrap().digest(), b.get("s0").unwrap().digest());
        assert_eq!(a.get("s1").unwrap().digest(), b.get("s1").unwrap().digest());
        let c = skyconf_core::read(&document_every_service("s", 3, 12, 1)).unwrap();
        let d = skyconf_core::read(&document_every_service("s", 3, 12, 2)).unwrap();
        for s in ["s0", "s1", "s2"] {
            assert_ne!(c.get(s).unwrap().digest(), d.get(s).unwrap().digest(), "{s}");
        }
    }
}
