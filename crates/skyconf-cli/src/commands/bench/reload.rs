//! `skyconf bench reload`: parses a document and builds its served table in process (digests and
//! pre-encoded answers included), as a reload does, and reports how long each half took.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use super::{print_report, progress};

/// Arguments of `skyconf bench reload`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    /// The document; without it a synthetic one of --services × --keys is used.
    #[arg(long)]
    file: Option<std::path::PathBuf>,
    /// Services of the synthetic document.
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Keys per service of the synthetic document.
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// How many reloads to time.
    #[arg(long, default_value_t = 10)]
    repeat: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Times --repeat reloads and prints the report.
pub(super) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let text = match &args.file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => super::document::document("bench-svc-", args.services, args.keys, 0),
    };
    let served = skyconf_server::ServedTable::new(skyconf_core::AgentConfigurations::default());
    let (mut parse, mut install, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut services = 0;
    let bar = progress(args.quiet, args.repeat.max(1) as u64, "reloads");
    for _ in 0..args.repeat.max(1) {
        let t0 = Instant::now();
        let table = skyconf_core::read(&text).context("the document is refused")?;
        let t1 = Instant::now();
        services = table.len();
        served.install(table);
        let t2 = Instant::now();
        parse.push(t1 - t0);
        install.push(t2 - t1);
        total.push(t2 - t0);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let summary = |v: &mut Vec<Duration>| {
        v.sort();
        let ms = |d: Duration| (d.as_secs_f64() * 1e5).round() / 100.0;
        json!({"min": ms(v[0]), "p50": ms(v[v.len() / 2]), "max": ms(v[v.len() - 1])})
    };
    let report = json!({
        "mode": "reload",
        "services": services,
        "bytes": text.len(),
        "repeat": args.repeat.max(1),
        "parse_ms": summary(&mut parse),
        "install_ms": summary(&mut install),
        "total_ms": summary(&mut total),
    });
    print_report(&report, args.json);
    Ok(ExitCode::SUCCESS)
}
