//! Cutting text to a byte bound without splitting a character.

/// The largest index of `text` that is at most `at` and falls on a character boundary (the
/// length of `text` when `at` is past it).
pub(crate) fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::floor_char_boundary;

    #[test]
    fn a_cut_never_splits_a_character() {
        let text = "aé€"; // 1, 2 and 3 bytes
        let cuts: Vec<usize> = (0..=7).map(|at| floor_char_boundary(text, at)).collect();
        assert_eq!(cuts, [0, 1, 1, 3, 3, 3, 6, 6]);
    }
}
