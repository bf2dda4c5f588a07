//! The file store's settings: where the file or directory is.

use std::path::PathBuf;

use super::FileSource;
use crate::{DynSource, Limits, SettingsError, StoreConfig};

/// The `file` selector's settings (`configuration.file` in skyconf's config file; the OAP has no
/// such selector).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FileSettings {
    /// `path`: an agent-configurations file, or a directory of one file per key; required.
    pub path: Option<PathBuf>,
}

impl StoreConfig for FileSettings {
    const SELECTOR: &'static str = "file";
    const ENV: &'static [(&'static str, &'static str)] = &[];
    const MUST_LOAD_AT_START: bool = true;

    fn open(self, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        let path = self.path.ok_or_else(|| Self::invalid("the file store needs a `path`"))?;
        Ok(Box::new(FileSource::open(path).with_limits(limits)))
    }
}
