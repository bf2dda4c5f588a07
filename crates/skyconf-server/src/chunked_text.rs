//! Document texts kept as chunks shared between versions, so that a history of near-identical
//! documents costs about one copy plus the edits.
//!
//! The release log keeps the text of every release it holds in memory (all of them without a
//! data directory). At 10,000 services a document is about 2.6 MB and consecutive releases
//! usually differ in one service, so 200 whole texts would be half a gigabyte of the same bytes.
//! Here a text is cut into chunks where its content says so (a rolling hash of the last 64
//! bytes, the "gear" hash of content-defined chunking), not at fixed offsets: an edit changes
//! only the chunks it touches, and the cut points after it fall where they fell before. Chunks
//! equal to one of another version's are that version's chunk, shared.

use std::collections::HashMap;
use std::sync::Arc;

/// No cut before a chunk holds this many bytes.
const MIN_CHUNK: usize = 1024;
/// A cut where the top bits of the rolling hash are zero: one position in 4,096 on average,
/// so chunks of about 5 KiB.
const CUT_MASK: u64 = 0xFFF0_0000_0000_0000;
/// A cut at the next character boundary once a chunk holds this many bytes, whatever the hash.
const MAX_CHUNK: usize = 64 * 1024;

/// A text as a sequence of shared chunks. Cloning it shares them all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChunkedText {
    chunks: Arc<[Arc<str>]>,
    len: usize,
}

impl ChunkedText {
    /// `text` in chunks, reusing every chunk of `like` (another version of it) that it contains.
    pub(crate) fn new(text: &str, like: Option<&Self>) -> Self {
        let known: HashMap<&str, &Arc<str>> =
            like.map(|like| like.chunks.iter().map(|chunk| (&**chunk, chunk)).collect()).unwrap_or_default();
        let chunks = cuts(text)
            .map(|piece| known.get(piece).map_or_else(|| Arc::from(piece), |&chunk| Arc::clone(chunk)))
            .collect();
        Self { chunks, len: text.len() }
    }

    /// `text` as one chunk (a text kept only briefly: not worth cutting).
    pub(crate) fn whole(text: &str) -> Self {
        Self { chunks: Arc::from([Arc::from(text)]), len: text.len() }
    }

    /// The whole text.
    pub(crate) fn text(&self) -> String {
        let mut text = String::with_capacity(self.len);
        self.chunks.iter().for_each(|chunk| text.push_str(chunk));
        text
    }

    /// Its chunks, in order.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> impl Iterator<Item = &Arc<str>> {
        self.chunks.iter()
    }

    /// The bytes of the chunks this text does not share with `other`.
    #[cfg(test)]
    fn own_bytes(&self, other: &Self) -> usize {
        self.chunks.iter().filter(|c| !other.chunks.iter().any(|o| Arc::ptr_eq(c, o))).map(|c| c.len()).sum()
    }
}

/// The pieces of `text`, cut where its content says, each ending on a character boundary.
fn cuts(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let mut hash = 0u64;
        let mut end = bytes.len();
        for (i, &byte) in bytes.iter().enumerate().skip(start) {
            hash = (hash << 1).wrapping_add(GEAR[usize::from(byte)]);
            let size = i + 1 - start;
            if size >= MIN_CHUNK && (hash & CUT_MASK == 0 || size >= MAX_CHUNK) && text.is_char_boundary(i + 1) {
                end = i + 1;
                break;
            }
        }
        let piece = &text[start..end];
        start = end;
        Some(piece)
    })
}

/// A random 64-bit number per byte value, fixed (splitmix64 from a constant seed), so that cut
/// points are the same in every process and every run.
const GEAR: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut state = 0x5EED_C0DE_u64;
    let mut i = 0;
    while i < 256 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        table[i] = z ^ (z >> 31);
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn document(services: usize, edited: Option<usize>) -> String {
        let mut text = String::from("configurations:\n");
        for i in 0..services {
            let rate = if edited == Some(i) { 999 } else { i % 7 };
            text.push_str(&format!(
                "  service-{i}:\n    agent.sample_n_per_3_secs: {rate}\n    agent.ignore_suffix: .jpg,.png\n"
            ));
        }
        text
    }

    #[test]
    fn the_text_comes_back_byte_for_byte() {
        for text in
            ["", "x", "configurations: {}\n", &document(3, None), &document(2_000, Some(5)), &"é日😀".repeat(40_000)]
        {
            assert_eq!(ChunkedText::new(text, None).text(), text);
        }
    }

    #[test]
    fn every_chunk_ends_on_a_character_boundary_and_respects_the_bounds() {
        let text: String = (0..50_000).map(|i| format!("é日😀 {i}\n")).collect();
        let pieces: Vec<&str> = cuts(&text).collect();
        assert!(pieces.len() > 100, "{} bytes in {} chunks", text.len(), pieces.len());
        assert_eq!(pieces.concat(), text);
        let (last, rest) = pieces.split_last().unwrap();
        assert!(rest.iter().all(|p| (MIN_CHUNK..MAX_CHUNK + 4).contains(&p.len())));
        assert!(!last.is_empty());
    }

    #[test]
    fn an_edit_costs_only_the_chunks_it_touches() {
        let before = document(10_000, None);
        let after = document(10_000, Some(4_321));
        let old = ChunkedText::new(&before, None);
        let new = ChunkedText::new(&after, Some(&old));
        assert_eq!(new.text(), after);
        let own = new.own_bytes(&old);
        assert!(own > 0, "the edited chunk is new");
        assert!(own <= 2 * MAX_CHUNK, "{own} bytes of {} are new for a one-line edit", after.len());
        // An insertion shifts everything after it, yet the cut points after it come back.
        let inserted = after.replacen("  service-10:\n", "  service-new:\n    a: b\n  service-10:\n", 1);
        let shifted = ChunkedText::new(&inserted, Some(&new));
        assert_eq!(shifted.text(), inserted);
        assert!(shifted.own_bytes(&new) <= 2 * MAX_CHUNK, "{} bytes new after an insertion", shifted.own_bytes(&new));
    }

    #[test]
    fn a_single_line_document_is_shared_too() {
        let flow: String = (0..20_000).map(|i| format!("s{i}: {{k: {}}}, ", i % 5)).collect();
        let before = format!("configurations: {{{flow}}}");
        let after = before.replacen("s777: {k: 2}", "s777: {k: 9}", 1);
        let old = ChunkedText::new(&before, None);
        let new = ChunkedText::new(&after, Some(&old));
        assert_eq!(new.text(), after);
        assert!(new.own_bytes(&old) <= 2 * MAX_CHUNK, "{} of {} bytes", new.own_bytes(&old), after.len());
    }
}
