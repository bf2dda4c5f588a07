//! Re-reads only the services whose text changed: the reload path for large documents.
//!
//! A document of the common shape — `configurations:` on the first line, then one block mapping
//! whose keys sit at exactly two spaces — is cut at its service keys into *parts*, one per
//! service, each with the comment and blank lines that follow it. Each part is read as the
//! document `configurations:\n<part>`, in the same context (indentation, nesting depth) as in the
//! whole, so it types exactly as it does there; a part read before, byte for byte, is not read
//! again. The parts' services are then put together with [`read`](super::read)'s own rule (of
//! names that print alike, the last wins, at its own place).
//!
//! This is only exact when the parts cannot influence one another, so the whole document is read
//! the ordinary way ([`super::read`]) whenever any doubt remains:
//!
//! - the text is not of the shape above: anything at column 0 or 1 after the first line (another
//!   top-level key, a directive, `---`, `...`), a line at two spaces that starts with an
//!   indicator (`-`, `?`, `:`, `<<`, flow brackets, `&`, `*`, `!`, ...), a tab, a carriage
//!   return, YAML 1.1's NEL/LS/PS breaks, a byte-order mark, or more bytes than the reader's
//!   character limit;
//! - any part fails to read, or reads as anything but exactly one service (the whole document
//!   is then read, and its error, with the document's own line and column, is the answer);
//! - any part defines an anchor (aliases could then join parts);
//! - the parts together weigh more than a document may (expanded characters, values built):
//!   the whole is read and refused at its own place.
//!
//! A cut at a two-space line that is not really a service key (inside a quoted scalar or a flow
//! collection) leaves a part that does not read on its own; plain and block scalars end at such
//! a line in the whole document as in the part. The tests compare both paths on many edited
//! documents, and the reader's fuzz target compares them on every input.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use indexmap::IndexMap;

use super::{ReadError, read, read_measured, resolve, tree, yaml11};
use crate::table::{AgentConfigurations, ServiceConfig};

/// The document's first line, as the parts are read.
const HEADER: &str = "configurations:\n";
/// Fewer parts to read than this are read on the calling thread.
const PARALLEL_MIN: usize = 256;

/// One part read: its service and what it weighed.
#[derive(Debug, Clone)]
struct Part {
    service: ServiceConfig,
    expanded: usize,
    values: usize,
    /// The read that last found this part in its document.
    generation: u64,
}

/// How the last [`IncrementalReader::read`] went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Services taken from the previous read, their text unchanged.
    pub reused: usize,
    /// Services read anew.
    pub parsed: usize,
    /// The whole document was read the ordinary way (not of the shape above, or a part refused).
    pub whole: bool,
}

/// A reader that remembers the services of the last document it read and reads only the parts
/// of the next one whose text changed; its tables are those of [`super::read`], always.
#[derive(Debug, Default)]
pub struct IncrementalReader {
    /// The parts of the last document read, by their text.
    parts: HashMap<Box<str>, Part, BuildHasherDefault<TextHasher>>,
    /// Counts the reads that kept parts.
    generation: u64,
    last: Reuse,
}

impl IncrementalReader {
    /// A reader that remembers nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How the last read went.
    pub fn last(&self) -> Reuse {
        self.last
    }

    /// Reads `text` as [`super::read`] does, re-reading only the services whose text changed
    /// since the last document read. A refused document leaves what is remembered as it was.
    pub fn read(&mut self, text: &str) -> Result<AgentConfigurations, ReadError> {
        let Some(cuts) = split(text) else {
            return self.whole(text);
        };
        let generation = self.generation.wrapping_add(1);
        // Each remembered part this document has is marked; the others are to be read (each
        // text once, on every core when there are many).
        let mut missing: Vec<&str> = Vec::new();
        let mut wanted: HashSet<&str> = HashSet::new();
        for &cut in &cuts {
            match self.parts.get_mut(cut) {
                Some(part) => part.generation = generation,
                None => {
                    if wanted.insert(cut) {
                        missing.push(cut);
                    }
                }
            }
        }
        let Some(read_now) = read_parts(&missing, generation) else {
            return self.whole(text);
        };
        let reuse = Reuse { reused: cuts.len() - missing.len(), parsed: missing.len(), whole: false };
        let fresh: HashMap<&str, Part> = missing.iter().copied().zip(read_now).collect();
        let mut services: IndexMap<String, ServiceConfig> = IndexMap::with_capacity(cuts.len());
        let (mut expanded, mut values) = (0usize, 0usize);
        for &cut in &cuts {
            let part = fresh.get(cut).or_else(|| self.parts.get(cut)).expect("every part is remembered or read");
            // Each part's weight counts the header again: the sum bounds the whole's from above.
            expanded = expanded.saturating_add(part.expanded);
            values = values.saturating_add(part.values);
            let name = part.service.name().to_owned();
            // The last of services that print alike wins, at its own place (as `read_services`).
            services.shift_remove(&name);
            services.insert(name, part.service.clone());
        }
        if expanded > tree::MAX_EXPANDED_CHARS || values > resolve::MAX_VALUES {
            return self.whole(text);
        }
        // Remember this document's parts only.
        self.parts.retain(|_, part| part.generation == generation);
        self.parts.extend(fresh.into_iter().map(|(text, part)| (Box::from(text), part)));
        self.generation = generation;
        self.last = reuse;
        Ok(AgentConfigurations::from_services(services))
    }

    /// Shares with `table` the settings of every remembered service that `table` serves alike,
    /// so a reader primed with the document a table was read from holds no second copy of them.
    pub fn share_with(&mut self, table: &AgentConfigurations) {
        for part in self.parts.values_mut() {
            if let Some(served) = table.get(part.service.name()).filter(|served| **served == part.service) {
                part.service = served.clone();
            }
        }
    }

    /// Reads the whole document the ordinary way; forgets the parts once a document is read.
    fn whole(&mut self, text: &str) -> Result<AgentConfigurations, ReadError> {
        let table = read(text)?;
        self.parts.clear();
        self.last = Reuse { reused: 0, parsed: table.len(), whole: true };
        Ok(table)
    }
}

/// Cuts the document at its service keys; `None` unless it is of the shape the module describes.
fn split(text: &str) -> Option<Vec<&str>> {
    let body = text.strip_prefix(HEADER)?;
    // Counted without an early exit, so that it runs over whole vectors.
    let tabs_or_returns = body.as_bytes().iter().fold(0usize, |n, &b| n + usize::from(b == b'\t' || b == b'\r'));
    if text.len() > yaml11::MAX_CODE_POINTS
        || tabs_or_returns > 0
        || (!body.is_ascii() && body.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{feff}']))
    {
        return None;
    }
    let mut cuts = Vec::new();
    // Where the current part starts, and whether it has its service key yet.
    let (mut start, mut keyed) = (0, false);
    let mut at = 0;
    for line in body.split_inclusive('\n') {
        let content = line.trim_end_matches('\n');
        let indent = content.len() - content.trim_start_matches(' ').len();
        let rest = &content[indent..];
        if rest.is_empty() || rest.starts_with('#') || indent >= 3 {
            // Blank, a comment, or inside the current service.
        } else if indent == 2 && !rest.starts_with(SERVICE_START_REFUSED) && !rest.starts_with("<<") {
            if keyed {
                cuts.push(&body[start..at]);
                start = at;
            }
            keyed = true;
        } else {
            return None;
        }
        at += line.len();
    }
    if !keyed {
        return None;
    }
    cuts.push(&body[start..]);
    Some(cuts)
}

/// A fast hash of the parts' texts (eight bytes a step), for the table that remembers them:
/// every reload hashes the whole document once. The table still compares the texts, so a
/// collision costs a comparison, never a wrong part; and the texts are the operator's own.
#[derive(Debug, Default)]
struct TextHasher(u64);

impl Hasher for TextHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
        }
        for &byte in words.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
    }

    fn finish(&self) -> u64 {
        // The high bits mix every input bit; hashbrown takes its control byte from the top.
        self.0 ^ (self.0 >> 29)
    }
}

/// First characters of a two-space line that the split does not take for a service key.
const SERVICE_START_REFUSED: [char; 17] =
    ['-', '?', ':', ',', '[', ']', '{', '}', '&', '*', '!', '|', '>', '%', '@', '`', '<'];

/// Reads each part; `None` if any is refused or is not exactly one anchor-free service.
fn read_parts(parts: &[&str], generation: u64) -> Option<Vec<Part>> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(parts.len() / PARALLEL_MIN).max(1);
    if threads == 1 {
        let failed = AtomicBool::new(false);
        return parts.iter().map(|part| read_part(part, generation, &failed)).collect();
    }
    let failed = AtomicBool::new(false);
    let chunk = parts.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .chunks(chunk)
            .map(|slice| {
                let failed = &failed;
                scope.spawn(move || {
                    slice.iter().map(|part| read_part(part, generation, failed)).collect::<Option<Vec<_>>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(parts.len());
        for handle in handles {
            all.extend(handle.join().ok()??);
        }
        Some(all)
    })
}

/// Reads one part as `configurations:\n<part>`; `None` (and `failed` set, so that other threads
/// stop early) unless it is exactly one service and defines no anchor.
fn read_part(part: &str, generation: u64, failed: &AtomicBool) -> Option<Part> {
    if failed.load(Ordering::Relaxed) {
        return None;
    }
    let mut document = String::with_capacity(HEADER.len() + part.len());
    document.push_str(HEADER);
    document.push_str(part);
    let read = match read_measured(&document) {
        Ok((reading, measure)) if !measure.tree.anchored && reading.table.len() == 1 => {
            reading.table.services().next().map(|service| Part {
                service: service.clone(),
                expanded: measure.tree.expanded,
                values: measure.values,
                generation,
            })
        }
        _ => None,
    };
    if read.is_none() {
        failed.store(true, Ordering::Relaxed);
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Services in order, compared field by field (a table's own `==` ignores the order).
    fn listed(result: &Result<AgentConfigurations, ReadError>) -> Result<Vec<ServiceConfig>, ReadError> {
        result.as_ref().map(|table| table.services().cloned().collect()).map_err(Clone::clone)
    }

    fn assert_same(reader: &mut IncrementalReader, text: &str) -> Reuse {
        let full = read(text);
        let incremental = reader.read(text);
        assert_eq!(listed(&incremental), listed(&full), "{text:?}");
        reader.last()
    }

    /// Service texts of every kind the split must get right or refuse: block, literal and folded
    /// scalars, quoted and flow values that run onto two-space lines, merges, anchors, tags,
    /// names that print alike, duplicates, comments, and parts that do not read at all.
    const SNIPPETS: &[&str] = &[
        "  svc-a:\n    k: v\n    n: 010\n",
        "  svc-a:\n    k: v2\n",
        "  svc-b: {k: v, j: [1, 2]}\n",
        "  \"1\":\n    k: x\n",
        "  1:\n    k: y\n",
        "  svc-c:\n    k: |\n      line1\n\n      line2\n",
        "  svc-d:\n    k: |+\n      kept\n\n",
        "  svc-e:\n    k: \"a\n  b\"\n",
        "  svc-f:\n    k: [a,\n  b]\n",
        "  svc-g:\n    k: plain\n     continued\n",
        "  svc-h:\n    <<: {a: 1}\n    b: 2\n",
        "  svc-i:\n    k: &x v\n    j: *x\n",
        "  svc-j:\n",
        "  svc-k:\n    k:\n",
        "  svc-l: !!omap [a: 1, b: 2]\n",
        "  # a comment\n",
        "\n",
        "  svc-m:\n    k: '/eureka/**'\n    t: 2001-01-01\n",
        "  svc-n:\n    k: v # trailing\n# a comment at column 0\n",
        "other: 1\n",
        "  svc-o:\n    k: v\n    k: w\n",
        "  svc-p:\n    k: >\n      folded\n      text\n",
        "  svc-q:\n   k: three spaces\n",
        "  - item\n",
        "  svc-r:\n    k: [a, b\n",
        "  svc-s:\n    s: \"\\u00e9é\"\n    y: yes\n    n: 0x1F\n",
        "  <<: {svc-t: {k: v}}\n",
        "  svc-u:\n    k: \"multi\n      line\"\n",
        "  ? svc-v\n  : {k: v}\n",
        "  svc-w:\n    k: \"x\"   \n",
        "  svc-x:\n    k: v\n\tj: w\n",
        "  svc-y:\n    k: *x\n",
        "  svc-z: {}\n",
        " svc-one-space: {k: v}\n",
        "  svc-a:\n    k: v\n    n: 010\n",
        "  'svc-b': {k: 1.0e+3, j: .inf}\n",
        "  svc-long:\n    k: \"line\n  two: x\"\n",
        "  svc-block-key:\n    k: |\n  not: inside\n",
        "  svc-version: {SERIAL_NUMBER: 1}\n",
        "  ...\n",
        "---\n",
    ];

    /// A small deterministic generator (xorshift), so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    fn document(parts: &[usize], strip_last_newline: bool) -> String {
        let mut text = String::from(HEADER);
        for &i in parts {
            text.push_str(SNIPPETS[i]);
        }
        if strip_last_newline && text.ends_with('\n') {
            text.pop();
        }
        text
    }

    #[test]
    fn edited_documents_read_as_a_full_read_reads_them() {
        let mut rng = Rng(0x5eed_cafe_f00d);
        let (mut incremental_reads, mut wholes) = (0, 0);
        for _ in 0..300 {
            let mut reader = IncrementalReader::new();
            let mut parts: Vec<usize> = (0..1 + rng.below(6)).map(|_| rng.below(SNIPPETS.len())).collect();
            for _ in 0..12 {
                let text = document(&parts, rng.below(5) == 0);
                let reuse = assert_same(&mut reader, &text);
                if reuse.whole {
                    wholes += 1;
                } else {
                    incremental_reads += 1;
                }
                // Edit: replace, move, duplicate, delete or insert a service.
                let len = parts.len();
                match rng.below(5) {
                    0 if len > 0 => parts[rng.below(len)] = rng.below(SNIPPETS.len()),
                    1 if len > 1 => parts.swap(rng.below(len), rng.below(len)),
                    2 if len > 0 => {
                        let i = rng.below(len);
                        parts.insert(rng.below(len + 1), parts[i]);
                    }
                    3 if len > 1 => {
                        parts.remove(rng.below(len));
                    }
                    _ => parts.insert(rng.below(len + 1), rng.below(SNIPPETS.len())),
                }
            }
        }
        // Both paths were exercised.
        assert!(incremental_reads > 300 && wholes > 300, "{incremental_reads} incremental, {wholes} whole");
    }

    #[test]
    fn every_snippet_next_to_every_other_reads_as_a_full_read_reads_it() {
        for a in SNIPPETS {
            for b in SNIPPETS {
                let mut reader = IncrementalReader::new();
                // Warm with a neutral document, then read the pair both ways round.
                assert_same(&mut reader, &format!("{HEADER}  svc-a:\n    k: v\n    n: 010\n{b}"));
                assert_same(&mut reader, &format!("{HEADER}{a}{b}"));
                assert_same(&mut reader, &format!("{HEADER}{b}{a}"));
                assert_same(&mut reader, format!("{HEADER}{a}{b}").trim_end_matches('\n'));
            }
        }
    }

    #[test]
    fn only_the_edited_service_is_read_again() {
        let text = crate::fixtures::document(2_000, 6);
        let mut reader = IncrementalReader::new();
        assert_same(&mut reader, &text);
        assert_eq!(reader.last(), Reuse { reused: 0, parsed: 2_000, whole: false });
        let edited = text.replacen("bench-svc-7:\n", "bench-svc-7:\n    extra.key: 'x'\n", 1);
        assert_eq!(assert_same(&mut reader, &edited), Reuse { reused: 1_999, parsed: 1, whole: false });
        // Renamed, moved to the end, and written twice: still nothing else read again.
        let moved = format!(
            "{}  bench-svc-7b:\n    k: v\n  bench-svc-3:\n    k: w\n",
            edited.replacen("bench-svc-9:", "bench-svc-9x:", 1)
        );
        assert_eq!(assert_same(&mut reader, &moved), Reuse { reused: 1_999, parsed: 3, whole: false });
        // A refused edit keeps the parts: the next good document reuses them.
        let broken = moved.replacen("bench-svc-11:\n", "bench-svc-11:\n    k: [\n", 1);
        let err = reader.read(&broken).unwrap_err();
        assert_eq!(Err(err), listed(&read(&broken)));
        assert_eq!(assert_same(&mut reader, &moved), Reuse { reused: 2_002, parsed: 0, whole: false });
    }

    #[test]
    fn a_reader_sharing_a_tables_settings_reads_as_before() {
        let text = crate::fixtures::document(50, 3);
        let table = read(&text).unwrap();
        let mut reader = IncrementalReader::new();
        reader.read(&text).unwrap();
        let same_memory = |part: &Part| {
            table.get(part.service.name()).is_some_and(|t| std::ptr::eq(t.entries(), part.service.entries()))
        };
        assert_eq!(reader.parts.values().filter(|p| same_memory(p)).count(), 0, "two reads, two copies");
        reader.share_with(&table);
        let shared = reader.parts.values().filter(|p| same_memory(p)).count();
        assert_eq!(shared, 50);
        let edited = text.replacen("bench-svc-4:\n", "bench-svc-4:\n    extra: 1\n", 1);
        assert_eq!(assert_same(&mut reader, &edited), Reuse { reused: 49, parsed: 1, whole: false });
    }

    #[test]
    fn documents_of_another_shape_are_read_whole() {
        let mut reader = IncrementalReader::new();
        for text in [
            "",
            "configurations:\n",
            "configurations: {}\n",
            "# header\nconfigurations:\n  a: {k: v}\n",
            "configurations:\n  a: {k: v}\nother: 1\n",
            "configurations:\n  a: &x {k: v}\n  b: *x\n",
            "configurations:\r\n  a: {k: v}\r\n",
            "configurations:\n  a: {k: \"\u{2028}\"}\n",
        ] {
            assert!(assert_same(&mut reader, text).whole, "{text:?}");
        }
    }

    #[test]
    fn document_wide_limits_hold_for_the_parts_together() {
        // Six services of 180,000 values each: every part is within the limit of 1,000,000
        // values built, the whole is not, and is refused where the full read refuses it.
        let list = vec!["a"; 180_000].join(",");
        let mut text = String::from(HEADER);
        for i in 0..6 {
            text.push_str(&format!("  s{i}:\n    k: [{list}]\n"));
        }
        let mut reader = IncrementalReader::new();
        let full = read(&text);
        assert!(full.is_err(), "the whole is over the limit");
        assert_eq!(listed(&reader.read(&text)), listed(&full));
    }
}
