//! "Did you mean": the known name a misspelt one was probably meant to be. The one rule for
//! every suggestion skyconf makes (unknown agent settings in warnings, unknown keys of
//! skyconf's own settings).

/// The candidate closest to `word` (ignoring case), when it is close enough to be a misspelling
/// of it: at most a third of `word`'s characters (and at least 2) differ.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_lowercase();
    let allowed = (word.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(&word, &candidate.to_lowercase()), candidate))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance in characters: how many insertions, deletions and substitutions turn
/// `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_names_only_a_close_candidate() {
        let keys = ["agent.sample_n_per_3_secs", "agent.span_limit_per_segment", "agent.ignore_suffix"];
        assert_eq!(did_you_mean("agent.sampel_n_per_3_secs", keys), Some("agent.sample_n_per_3_secs"));
        assert_eq!(did_you_mean("Agent.Ignore_Suffix", keys), Some("agent.ignore_suffix"));
        assert_eq!(did_you_mean("agent.typo", keys), None);
        assert_eq!(did_you_mean("kye", ["key", "cert"]), Some("key"));
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("agentTokn", "agentToken"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
