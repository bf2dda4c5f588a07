//! One module per subcommand.

pub(crate) mod agent;
pub(crate) mod digest;
pub(crate) mod fetch;
pub(crate) mod preview;
pub(crate) mod rollout;
pub(crate) mod serve;
pub(crate) mod validate;

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use skyconf_core::store::AGENT_CONFIGURATIONS_KEY;

/// Writes to standard output. A reader that went away (`skyconf digest doc.yaml | head`) ends the
/// command quietly with status 0, as ripgrep does, instead of the panic `print!` raises; any
/// other failure to write is status 1.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_fmt(args).and_then(|()| out.flush()) {
        std::process::exit(i32::from(error.kind() != std::io::ErrorKind::BrokenPipe));
    }
}

/// `println!` through [`write_out`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::commands::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use outln;

/// Exit status of `digest` and `validate` for a document skyconf would refuse.
pub(crate) const EXIT_REFUSED: u8 = 2;

/// A document to read: a file, standard input (`-`), or a directory in the file store's directory
/// form (a mounted ConfigMap: one file per key), whose document is the file named
/// `configuration-discovery.default.agentConfigurations`.
pub(crate) struct Document {
    /// The name messages give it: the file's path (inside the directory for the directory form),
    /// or `<stdin>`.
    pub(crate) name: String,
    /// Its text; `None` for a directory without the document's file (the file store then serves
    /// no configurations).
    pub(crate) text: Option<String>,
}

impl Document {
    /// Reads `path` (`-`: standard input).
    pub(crate) fn read(path: &Path) -> anyhow::Result<Self> {
        if path.as_os_str() == "-" {
            let text = std::io::read_to_string(std::io::stdin()).context("cannot read standard input")?;
            return Ok(Self { name: "<stdin>".to_owned(), text: Some(text) });
        }
        let file: PathBuf = if path.is_dir() { path.join(AGENT_CONFIGURATIONS_KEY) } else { path.to_path_buf() };
        let name = file.display().to_string();
        if path.is_dir() && !file.exists() {
            return Ok(Self { name, text: None });
        }
        let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {name}"))?;
        Ok(Self { name, text: Some(text) })
    }

    /// Parses the document (an absent one is empty, as the file store serves it), with what the
    /// reader noticed on the way.
    pub(crate) fn parse(&self) -> Result<skyconf_core::Reading, skyconf_core::ReadError> {
        self.text.as_deref().map_or_else(|| Ok(skyconf_core::Reading::default()), skyconf_core::read_with_warnings)
    }

    /// `NAME:LINE:COLUMN: message`, the form editors and terminals jump to.
    pub(crate) fn located(&self, error: &skyconf_core::ReadError) -> String {
        // The error reads `LINE:COLUMN: message`.
        format!("{}:{error}", self.name)
    }
}

/// An error's position and its message without the `line L, column C: ` the message starts with.
pub(crate) fn split_position(error: &skyconf_core::ReadError) -> (Option<skyconf_core::Position>, String) {
    let text = error.to_string();
    let at = error.position();
    let message = at.and_then(|at| text.strip_prefix(&format!("{at}: ")).map(str::to_owned)).unwrap_or(text);
    (at, message)
}

/// Builds the async runtime for commands that do I/O.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::allocator::collect_when_idle)
        .build()
        .context("cannot start the async runtime")
}
