//! Path patterns of `agent.trace.ignore_path`, matched against a trace's first operation name.
//!
//! - `?` matches one character other than `/`;
//! - `*` matches any run of characters other than `/` (within one segment), possibly empty;
//! - `**` (or any longer run of `*`) matches any run of characters, `/` included, possibly empty;
//! - any other character matches itself.
//!
//! One more rule reproduces the Java agent's matcher: a pattern that ends with a single `*` also
//! matches a path with one extra `/` at the end, so `/eureka/*` matches `/eureka/apps/`.
//! The tests hold the Java agent's truth table (behaviour reference §5.5, item 16).
//!
//! Matching simulates the pattern as a small automaton over the path's characters: linear in the
//! path for each pattern position, with no backtracking, whatever the pattern.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Char(char),
    One,
    Star,
    GlobStar,
}

/// A compiled path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    tokens: Vec<Token>,
}

impl PathPattern {
    /// Compiles `pattern`; every string is a valid pattern.
    pub fn new(pattern: &str) -> Self {
        let mut tokens = Vec::with_capacity(pattern.len());
        for c in pattern.chars() {
            let token = match c {
                '?' => Token::One,
                '*' => match tokens.last_mut() {
                    Some(last @ (Token::Star | Token::GlobStar)) => {
                        *last = Token::GlobStar;
                        continue;
                    }
                    _ => Token::Star,
                },
                c => Token::Char(c),
            };
            tokens.push(token);
        }
        Self { source: pattern.to_owned(), tokens }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `path` matches the whole pattern.
    pub fn matches(&self, path: &str) -> bool {
        let n = self.tokens.len();
        let mut current = vec![false; n + 1];
        let mut next = vec![false; n + 1];
        current[0] = true;
        self.close(&mut current);
        // The Java rule: a final single `*` also takes one trailing `/`.
        let trailing_slash_ok = self.tokens.last() == Some(&Token::Star) && path.ends_with('/');
        for (at, c) in path.char_indices() {
            if trailing_slash_ok && current[n] && at + 1 == path.len() {
                return true;
            }
            next.fill(false);
            let mut any = false;
            for (i, token) in self.tokens.iter().enumerate() {
                if !current[i] {
                    continue;
                }
                let to = match token {
                    Token::Char(t) if *t == c => i + 1,
                    Token::One if c != '/' => i + 1,
                    Token::Star if c != '/' => i,
                    Token::GlobStar => i,
                    _ => continue,
                };
                next[to] = true;
                any = true;
            }
            if !any {
                return false;
            }
            self.close(&mut next);
            std::mem::swap(&mut current, &mut next);
        }
        current[n]
    }

    /// Adds the positions reachable by letting stars match nothing.
    fn close(&self, states: &mut [bool]) {
        for (i, token) in self.tokens.iter().enumerate() {
            if states[i] && matches!(token, Token::Star | Token::GlobStar) {
                states[i + 1] = true;
            }
        }
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Java agent's truth table (behaviour reference §5.5 item 16), then edge cases.
    #[test]
    fn truth_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("/eureka/*", "/eureka/apps", true),
            ("/eureka/*", "/eureka/", true),
            ("/eureka/*", "/eureka/apps/", true),
            ("/eureka/**", "/eureka/apps/", true),
            ("/eureka/*/", "/eureka/apps/", true),
            ("/eureka/*/", "/eureka/", false),
            ("/eureka/*/", "/eureka/apps/list", false),
            ("/eureka/**", "/eureka/", true),
            ("/eureka/**", "/eureka/apps/test", true),
            ("/eureka/**", "/eureka/apps/test/", true),
            ("eureka/apps/?", "eureka/apps/list", false),
            ("eureka/apps/?", "eureka/apps/", false),
            ("eureka/apps/?", "eureka/apps/a", true),
            ("eureka/**/lists", "eureka/apps/lists", true),
            ("eureka/**/lists", "eureka/apps/test/lists", true),
            ("eureka/**/lists", "eureka/apps/test/", false),
            ("eureka/**/lists", "eureka/apps/test", false),
            ("eureka/**/test/**", "eureka/apps/test/list", true),
            ("eureka/**/test/**", "eureka/apps/foo/test/list/bar", true),
            ("eureka/**/test/**", "eureka/apps/foo/test/list/bar/", true),
            ("eureka/**/test/**", "eureka/test/list", false),
            ("/eureka/**/b/**/*.txt", "/eureka/a/aa/aaa/b/bb/bbb/xxxxxx.txt", true),
            ("/eureka/**/b/**/*.txt", "/eureka/a/aa/aaa/b/bb/bbb/xxxxxx", false),
            ("abc/*", "abc/foo/bar", false),
            // Edge cases.
            ("/eureka/*", "/eureka/apps/list/", false),
            ("/eureka/*", "/eureka", false),
            ("/eureka/*", "/eureka/apps//", false),
            ("/a/b", "/a/b/", false),
            ("/a/?", "/a/x/", false),
            ("", "", true),
            ("", "/", false),
            ("*", "", true),
            ("**", "/any/thing", true),
            ("***", "/any/thing", true),
            ("GET:/api/*", "GET:/api/users", true),
            ("/a/*/c", "/a/b/c", true),
            ("/a/*/c", "/a/b/x/c", false),
            ("/é/?", "/é/ü", true),
        ];
        for &(pattern, path, expected) in cases {
            assert_eq!(PathPattern::new(pattern).matches(path), expected, "{pattern} vs {path}");
        }
    }

    #[test]
    fn many_globstars_stay_fast() {
        let pattern = PathPattern::new(&"**a".repeat(30));
        let path = "a".repeat(29) + &"b".repeat(10_000);
        assert!(!pattern.matches(&path));
    }
}
