//! `skyconf-bench propagation`: rewrites a served file with synthetic documents and times each
//! edit until the server answers its new digest.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::ConfigurationSyncRequest;

use super::{Client, Stats, Target, connect, print_report, progress, runtime, service_name};
use crate::args::parse_duration;

/// Arguments of `skyconf-bench propagation`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    target: Target,
    /// The file the server serves; it is overwritten with synthetic documents.
    #[arg(long)]
    file: std::path::PathBuf,
    /// Keys per service of the synthetic document (its --services is the target's).
    #[arg(long, default_value_t = 6)]
    keys: usize,
    /// How many edits to time.
    #[arg(long, default_value_t = 30)]
    edits: usize,
    /// Pause between edits.
    #[arg(long, value_parser = parse_duration, default_value = "250ms")]
    pause: Duration,
    /// Rewrite the file in place instead of renaming a new file over it.
    #[arg(long)]
    in_place: bool,
}

/// Times --edits rewrites of the served file and prints the report.
pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.edits > 0, "--edits must be > 0");
    runtime(args.target.threads)?.block_on(async move {
        let target = &args.target;
        let mut client = connect(target, 0).await?;
        let service = service_name(target, 0);
        let write = |text: &str| -> anyhow::Result<()> {
            if args.in_place {
                std::fs::write(&args.file, text)?;
            } else {
                // How editors and ConfigMap mounts replace a file: a new inode renamed over it.
                let tmp = args.file.with_extension("bench-tmp");
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &args.file)?;
            }
            Ok(())
        };
        let fetch = |client: &mut Client| {
            let mut client = client.clone();
            let service = service.clone();
            async move {
                client
                    .fetch_configurations(ConfigurationSyncRequest { service, uuid: String::new() })
                    .await
                    .ok()
                    .and_then(|r| DiscoveryCommand::find(&r.into_inner()))
                    .and_then(|c| c.uuid)
            }
        };
        let stats = Stats::new();
        let bar = progress(target.quiet, args.edits as u64, "edits");
        let mut timed_out = 0u64;
        // Revisions start from the clock so a rerun never writes the digest already served.
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000 * 1000)
            .unwrap_or(0);
        for edit in 0..args.edits as u64 {
            let text = super::document::document(&target.service_prefix, target.services, args.keys, base + edit);
            let table = skyconf_core::read(&text).context("the synthetic document is refused")?;
            let want = table
                .get(&service)
                .map(|s| s.digest().as_str().to_owned())
                .context("the synthetic document lacks its first service")?;
            let t0 = Instant::now();
            write(&text).with_context(|| format!("cannot write {}", args.file.display()))?;
            loop {
                if fetch(&mut client).await.as_deref() == Some(want.as_str()) {
                    stats.record_latency(t0.elapsed());
                    stats.done.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                if t0.elapsed() > target.timeout {
                    timed_out += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            bar.inc(1);
            tokio::time::sleep(args.pause).await;
        }
        bar.finish_and_clear();
        let report = json!({
            "mode": "propagation",
            "addr": target.addr,
            "services": target.services,
            "keys": args.keys,
            "edits": args.edits,
            "seen": stats.done.load(Ordering::Relaxed),
            "timed_out": timed_out,
            "latency_us": stats.latency_json(),
        });
        print_report(&report, target.json);
        Ok(if timed_out == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}
