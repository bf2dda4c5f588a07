//! Ignore settings: the Java agent's `agent.ignore_suffix` (operation-name suffixes) and the
//! trace-ignore plugin's `agent.trace.ignore_path` (path patterns). Both decide, from a trace's
//! first operation name, that the trace is not recorded.
//!
//! Lists are split as the server's preview splits them (`skyconf_core::ignore::split_list`: on
//! `,` without trimming, trailing empty items dropped, as Java's `String.split(",")` does):
//! `/a/**, /b/**` holds the pattern ` /b/**`, leading space included.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use skyconf_core::ignore::{IgnorePaths, IgnoreSuffixes, PathPattern};

use super::{IGNORE_SUFFIX, TRACE_IGNORE_PATH, TypedWatcher};

/// The Java agent's default `agent.ignore_suffix`.
pub const DEFAULT_IGNORE_SUFFIX: &str = ".jpg,.jpeg,.js,.css,.png,.bmp,.gif,.ico,.mp3,.mp4,.html,.svg";

/// A comma-separated list of suffixes such as `.jpg,.css`. Read and matched as the server's
/// preview reads and matches it ([`IgnoreSuffixes`]), so the two cannot disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuffixList {
    source: String,
    suffixes: IgnoreSuffixes,
}

impl SuffixList {
    /// Whether the text from the last `.` of `operation_name` on is one of the suffixes.
    pub fn matches(&self, operation_name: &str) -> bool {
        self.suffixes.ignored_by(operation_name).is_some()
    }

    /// The suffixes (none for an empty list).
    pub fn suffixes(&self) -> &[String] {
        self.suffixes.suffixes()
    }
}

impl FromStr for SuffixList {
    type Err = Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self { source: s.to_owned(), suffixes: IgnoreSuffixes::parse(s) })
    }
}

impl fmt::Display for SuffixList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// `agent.ignore_suffix`: traces whose first operation name ends in one of these suffixes are
/// not recorded. Java default [`DEFAULT_IGNORE_SUFFIX`].
#[derive(Debug)]
pub struct IgnoreSuffix {
    list: TypedWatcher<SuffixList>,
}

impl Default for IgnoreSuffix {
    /// The Java agent's default list.
    fn default() -> Self {
        Self::new(DEFAULT_IGNORE_SUFFIX)
    }
}

impl IgnoreSuffix {
    /// A watcher with the local default `suffixes` (comma-separated).
    pub fn new(default: &str) -> Self {
        let Ok(list) = default.parse();
        Self { list: TypedWatcher::new(IGNORE_SUFFIX, list) }
    }

    /// Whether a trace starting with `operation_name` is ignored (lock-free).
    pub fn is_ignored(&self, operation_name: &str) -> bool {
        self.list.with(|l| l.matches(operation_name))
    }
}

watch_through!(IgnoreSuffix => list);

/// A comma-separated list of [`PathPattern`]s; blank means none. Read as the server's preview
/// reads it ([`IgnorePaths`]), so the two cannot disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPatterns {
    source: String,
    patterns: IgnorePaths,
}

impl PathPatterns {
    /// Whether any pattern matches `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.patterns.ignored_by(path).is_some()
    }

    /// The patterns.
    pub fn patterns(&self) -> &[PathPattern] {
        self.patterns.patterns()
    }
}

impl FromStr for PathPatterns {
    type Err = Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self { source: s.to_owned(), patterns: IgnorePaths::parse(s) })
    }
}

impl fmt::Display for PathPatterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// `agent.trace.ignore_path` (the Java trace-ignore plugin): traces whose first operation name
/// matches one of these patterns are not recorded. Default: none.
#[derive(Debug)]
pub struct IgnorePath {
    patterns: TypedWatcher<PathPatterns>,
}

impl Default for IgnorePath {
    /// No patterns, the plugin's default.
    fn default() -> Self {
        Self::new("")
    }
}

impl IgnorePath {
    /// A watcher with the local default `patterns` (comma-separated).
    pub fn new(default: &str) -> Self {
        let Ok(patterns) = default.parse();
        Self { patterns: TypedWatcher::new(TRACE_IGNORE_PATH, patterns) }
    }

    /// Whether a trace starting with `operation_name` is ignored (lock-free).
    pub fn is_ignored(&self, operation_name: &str) -> bool {
        self.patterns.with(|p| p.matches(operation_name))
    }
}

watch_through!(IgnorePath => patterns);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Watcher;
    use crate::watchers::tests::{delete, modify};

    #[test]
    fn suffixes_follow_the_server() {
        let w = IgnoreSuffix::default();
        assert!(w.is_ignored("/static/logo.png"));
        assert!(!w.is_ignored("/api/users"));
        assert!(!w.is_ignored("/file.txt"));
        w.notify(&modify(IGNORE_SUFFIX, ".txt,.log")).unwrap();
        assert_eq!(w.value().as_deref(), Some(".txt,.log"));
        assert!(w.is_ignored("/file.txt"));
        assert!(!w.is_ignored("/static/logo.png"));
        // Only the text from the last dot counts.
        assert!(!w.is_ignored("/a.txt/b"));
        w.notify(&delete(IGNORE_SUFFIX)).unwrap();
        assert_eq!(w.value().as_deref(), Some(DEFAULT_IGNORE_SUFFIX));
    }

    #[test]
    fn paths_follow_the_server() {
        let w = IgnorePath::default();
        assert!(!w.is_ignored("/eureka/apps"));
        w.notify(&modify(TRACE_IGNORE_PATH, "/eureka/**")).unwrap();
        assert!(w.is_ignored("/eureka/apps"));
        assert!(!w.is_ignored("/consul/apps"));
        w.notify(&modify(TRACE_IGNORE_PATH, "/eureka/apps/**,/health")).unwrap();
        assert!(w.is_ignored("/health") && w.is_ignored("/eureka/apps/x"));
        w.notify(&delete(TRACE_IGNORE_PATH)).unwrap();
        assert!(!w.is_ignored("/health"));
        assert_eq!(w.value().as_deref(), Some(""));
    }
}
