//! `skyconf-bench reload`: parses a document and builds its served table in process (digests and
//! pre-encoded answers included), as a reload does, and reports how long each half took.
//!
//! Three kinds of reload (`--mode`): `edit`, what the server does when the document changes (an
//! [`IncrementalReader`] that read the previous revision, a served table that serves it; each
//! revision changes one service, as `skyconf-bench propagation` does); `cold`, the first document
//! a server reads (a fresh incremental reader: every service read, on every core); `full`, the
//! whole document read the ordinary way (`skyconf_core::read`) and every answer encoded.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use skyconf_core::reader::IncrementalReader;

use super::{print_report, progress};

/// Arguments of `skyconf-bench reload`.
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
    /// Which reload to time: `edit`, `cold` or `full` (see the module's description).
    #[arg(long, value_enum, default_value_t = Mode::Edit)]
    mode: Mode,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Which reload `skyconf-bench reload` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Mode {
    /// One service edited, the rest read and encoded before.
    Edit,
    /// A first read: every service, on every core.
    Cold,
    /// The whole document read the ordinary way, every answer encoded.
    Full,
}

/// Times --repeat reloads and prints the report.
pub(super) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let revision = |n: u64| match &args.file {
        // A given file has no revisions: an edit appends a comment, which changes the text only.
        Some(path) => std::fs::read_to_string(path)
            .map(|text| if n == 0 { text } else { format!("{text}\n# revision {n}\n") })
            .with_context(|| format!("cannot read {}", path.display())),
        None => Ok(super::document::document("bench-svc-", args.services, args.keys, n)),
    };
    let text = revision(0)?;
    let mut served = skyconf_server::ServedTable::new(skyconf_core::AgentConfigurations::default());
    let mut reader = IncrementalReader::new();
    if args.mode == Mode::Edit {
        served.install(reader.read(&text).context("the document is refused")?);
    }
    let (mut parse, mut install, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut services = 0;
    let bar = progress(args.quiet, args.repeat.max(1) as u64, "reloads");
    for n in 1..=args.repeat.max(1) as u64 {
        let text = if args.mode == Mode::Edit { revision(n)? } else { text.clone() };
        if args.mode != Mode::Edit {
            // Nothing read or encoded before.
            served = skyconf_server::ServedTable::new(skyconf_core::AgentConfigurations::default());
            reader = IncrementalReader::new();
        }
        let t0 = Instant::now();
        let table = match args.mode {
            Mode::Full => skyconf_core::read(&text),
            Mode::Edit | Mode::Cold => reader.read(&text),
        }
        .context("the document is refused")?;
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
        "reload": format!("{:?}", args.mode).to_lowercase(),
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
