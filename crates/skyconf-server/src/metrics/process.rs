//! The process's own metrics, named as every Prometheus client library names them
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_max_fds`, `process_virtual_memory_bytes`, `process_start_time_seconds`), read from
//! `/proc/self` at scrape time; and `skyconf_build_info{version, commit}`.
//!
//! prometheus-client has no process collector, so [`ProcessCollector`] reads the few files
//! itself. Where `/proc` cannot be read (another OS, a sandbox without it), a series is left
//! out rather than reported as zero, and the scrape goes on.

use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Clock ticks per second in `/proc/<pid>/stat` and `/proc/stat`: the kernel reports CPU times in
/// `USER_HZ`, which is 100 on every architecture Linux runs skyconf on.
const USER_HZ: f64 = 100.0;

/// The commit the binary was built from, when the build said (`SKYCONF_COMMIT=$(git rev-parse
/// --short HEAD) cargo build`; `scripts/image.sh` does).
const COMMIT: Option<&str> = option_env!("SKYCONF_COMMIT");

/// Registers `skyconf_build_info` and the `process_*` collector.
pub(super) fn register(registry: &mut Registry) {
    let mut labels = vec![("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned())];
    if let Some(commit) = COMMIT.filter(|c| !c.is_empty()) {
        labels.push(("commit".to_owned(), commit.to_owned()));
    }
    registry.register(
        "skyconf_build",
        "The skyconf build: its version and, when known, the commit it was built from",
        Info::new(labels),
    );
    registry.register_collector(Box::new(ProcessCollector::new("/proc")));
}

/// What one scrape read about the process; each field is `None` when its file could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    /// `VmRSS`, in bytes.
    pub(crate) resident_bytes: Option<u64>,
    /// `VmSize`, in bytes.
    pub(crate) virtual_bytes: Option<u64>,
    /// User and system CPU time, in seconds.
    pub(crate) cpu_seconds: Option<f64>,
    /// Entries of `fd/`.
    pub(crate) open_fds: Option<u64>,
    /// The soft limit of "Max open files".
    pub(crate) max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub(crate) start_time_seconds: Option<f64>,
}

/// Reads [`ProcessStats`] of the calling process under a `/proc` root (another root in tests).
#[derive(Debug)]
pub(crate) struct ProcessCollector {
    proc_root: std::path::PathBuf,
}

impl ProcessCollector {
    pub(crate) fn new(proc_root: impl AsRef<Path>) -> Self {
        Self { proc_root: proc_root.as_ref().to_path_buf() }
    }

    /// Reads everything once.
    pub(crate) fn read(&self) -> ProcessStats {
        let own = self.proc_root.join("self");
        let read = |name: &str| std::fs::read_to_string(own.join(name)).ok();
        let status = read("status");
        let stat = read("stat").and_then(|text| StatFields::parse(&text));
        let boot_time = std::fs::read_to_string(self.proc_root.join("stat")).ok().and_then(|text| boot_time(&text));
        ProcessStats {
            resident_bytes: status.as_deref().and_then(|s| status_kib(s, "VmRSS:")).map(|kib| kib * 1024),
            virtual_bytes: status.as_deref().and_then(|s| status_kib(s, "VmSize:")).map(|kib| kib * 1024),
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            open_fds: std::fs::read_dir(own.join("fd")).ok().map(|dir| dir.count() as u64),
            max_fds: read("limits").and_then(|text| max_open_files(&text)),
            start_time_seconds: stat.zip(boot_time).map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = self.read();
        let mut gauge = |name: &str, help: &str, value: Option<f64>| match value {
            Some(value) => super::encode_gauge(&mut encoder, name, help, &value),
            None => Ok(()),
        };
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            stats.resident_bytes.map(|b| b as f64),
        )?;
        gauge("process_virtual_memory_bytes", "Virtual memory size in bytes", stats.virtual_bytes.map(|b| b as f64))?;
        gauge("process_open_fds", "Number of open file descriptors", stats.open_fds.map(|n| n as f64))?;
        gauge(
            "process_max_fds",
            "Maximum number of open file descriptors (the soft limit)",
            stats.max_fds.map(|n| n as f64),
        )?;
        gauge(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
            stats.start_time_seconds,
        )?;
        if let Some(seconds) = stats.cpu_seconds {
            encoder
                .encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent, in seconds",
                    None,
                    MetricType::Counter,
                )?
                .encode_counter::<NoLabelSet, _, u64>(&seconds, None)?;
        }
        Ok(())
    }
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug, Clone, Copy)]
struct StatFields {
    utime: u64,
    stime: u64,
    start_ticks: u64,
}

impl StatFields {
    /// Parses the line: the command name (field 2) is in parentheses and may hold spaces and
    /// parentheses itself, so fields are counted from the last `)`.
    fn parse(text: &str) -> Option<Self> {
        let after_name = &text[text.rfind(')')? + 1..];
        // Fields from 3 (state) on; utime is field 14, stime 15, starttime 22.
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Self { utime: field(14)?, stime: field(15)?, start_ticks: field(22)? })
    }
}

/// A `Name:   123 kB` line of `/proc/<pid>/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits` (`None` for "unlimited").
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the Unix epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix("btime ")).and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_proc_tree() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("self");
        std::fs::create_dir_all(own.join("fd")).unwrap();
        for fd in ["0", "1", "2", "7"] {
            std::fs::write(own.join("fd").join(fd), "").unwrap();
        }
        // A command name with a space and a parenthesis, as `prctl` may set it.
        std::fs::write(
            own.join("stat"),
            "4242 (sky conf) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 9 0 5000 123456 789 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
        )
        .unwrap();
        std::fs::write(own.join("status"), "Name:\tskyconf\nVmSize:\t  200000 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n")
            .unwrap();
        std::fs::write(
            own.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max cpu time              unlimited            unlimited            seconds   \n\
             Max open files            20000                20000                files     \n",
        )
        .unwrap();
        std::fs::write(root.path().join("stat"), "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap();

        let stats = ProcessCollector::new(root.path()).read();
        assert_eq!(stats.resident_bytes, Some(12345 * 1024));
        assert_eq!(stats.virtual_bytes, Some(200000 * 1024));
        assert_eq!(stats.cpu_seconds, Some(3.8), "(250 + 130) ticks at 100 per second");
        assert_eq!(stats.open_fds, Some(4));
        assert_eq!(stats.max_fds, Some(20000));
        assert_eq!(stats.start_time_seconds, Some(1_700_000_050.0), "boot + 5000 ticks");
    }

    #[test]
    fn a_missing_proc_leaves_the_series_out() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(ProcessCollector::new(root.path().join("nothing")).read(), ProcessStats::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector::new(root.path().join("nothing"))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert_eq!(text, "# EOF\n");
    }

    #[test]
    fn the_server_exposes_build_info_and_process_metrics() {
        let text = crate::metrics::Metrics::default().encode();
        let build = match COMMIT.filter(|c| !c.is_empty()) {
            Some(commit) => {
                format!("skyconf_build_info{{version=\"{}\",commit=\"{commit}\"}} 1\n", env!("CARGO_PKG_VERSION"))
            }
            None => format!("skyconf_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION")),
        };
        assert!(text.contains(&build), "{build} in\n{text}");
        if cfg!(target_os = "linux") {
            for series in ["process_resident_memory_bytes ", "process_cpu_seconds_total ", "process_max_fds "] {
                assert!(text.contains(series), "{series} in\n{text}");
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_from_the_real_proc() {
        let stats = ProcessCollector::new("/proc").read();
        assert!(stats.resident_bytes.unwrap() > 0);
        assert!(stats.open_fds.unwrap() >= 3, "{stats:?}");
        assert!(stats.max_fds.unwrap() >= stats.open_fds.unwrap(), "{stats:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let started = stats.start_time_seconds.unwrap();
        // Boot time is whole seconds and ticks are hundredths: allow that much either way.
        assert!(started <= now + 2.0 && started > now - 24.0 * 3600.0, "{started} vs {now}");
    }
}
