//! What a Java agent ignores: the matching rules of its trace-ignore plugin
//! (`agent.trace.ignore_path`) and of its core's `agent.ignore_suffix`, so a preview can say which
//! of a list of paths (operation names) an agent would not trace under a value.
//!
//! `agent.trace.ignore_path` is a list of patterns separated by commas (a blank value is no
//! pattern at all); the list is cut at every comma and the pieces are taken as they are, so a
//! space after a comma is read as part of the next pattern ([`pattern_problem`] says so). Each
//! pattern is matched against the whole operation name of a trace's first span (which may carry a
//! method, as in `GET:/path`), character by character, where:
//! - `?` stands for exactly one character other than `/`;
//! - `*` stands for any run of characters (none included) that holds no `/`, so it stays within one
//!   path segment;
//! - `**` stands for any run of characters (none included), `/` included, so it spans segments;
//! - every other character stands for itself (case matters).
//!
//! A name is ignored when any pattern matches it. So `/eureka/**` ignores `/eureka/apps` and
//! `/eureka/apps/x` (and `/eureka/`), but not `/eureka`; `/api/*` ignores `/api/users` but not
//! `/api/users/7`.
//!
//! `agent.ignore_suffix` is a comma-separated list of suffixes: an operation name is ignored when
//! the text from its last `.` to its end is exactly one of them (`/a/b.js` ends in `.js`; a name
//! without a `.` is never ignored this way).

/// One piece of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// This character.
    Char(char),
    /// `?`: any one character but `/`.
    One,
    /// `*`: any run without `/`.
    Segment,
    /// `**`: any run.
    Any,
}

/// One `agent.trace.ignore_path` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    text: String,
    tokens: Vec<Token>,
}

impl PathPattern {
    /// The pattern written as `text`.
    pub fn new(text: &str) -> Self {
        let mut tokens = Vec::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                '?' => Token::One,
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    Token::Any
                }
                '*' => Token::Segment,
                c => Token::Char(c),
            });
        }
        Self { text: text.to_owned(), tokens }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` (a path, an operation name) matches the whole pattern. Runs in time
    /// proportional to the pattern's length times the name's: the set of places in `name` the
    /// pattern read so far can end at is carried token by token.
    pub fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        let mut at = vec![false; chars.len() + 1];
        at[0] = true;
        for token in &self.tokens {
            let mut next = vec![false; chars.len() + 1];
            match token {
                Token::Char(c) => {
                    for i in 0..chars.len() {
                        next[i + 1] = at[i] && chars[i] == *c;
                    }
                }
                Token::One => {
                    for i in 0..chars.len() {
                        next[i + 1] = at[i] && chars[i] != '/';
                    }
                }
                Token::Segment => {
                    for i in 0..=chars.len() {
                        next[i] = at[i] || (i > 0 && next[i - 1] && chars[i - 1] != '/');
                    }
                }
                Token::Any => {
                    let first = at.iter().position(|&reached| reached);
                    if let Some(first) = first {
                        next[first..].iter_mut().for_each(|n| *n = true);
                    }
                }
            }
            if !next.contains(&true) {
                return false;
            }
            at = next;
        }
        at[chars.len()]
    }
}

/// An `agent.trace.ignore_path` value: its patterns, cut at every comma.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnorePaths(Vec<PathPattern>);

impl IgnorePaths {
    /// The patterns of `value` (a blank value has none: nothing is ignored).
    pub fn parse(value: &str) -> Self {
        if value.trim().is_empty() {
            return Self(Vec::new());
        }
        Self(value.split(',').map(PathPattern::new).collect())
    }

    /// The patterns, as written.
    pub fn patterns(&self) -> &[PathPattern] {
        &self.0
    }

    /// The first pattern that matches `name`, if any: the agent does not trace it.
    pub fn ignored_by(&self, name: &str) -> Option<&PathPattern> {
        self.0.iter().find(|p| p.matches(name))
    }
}

/// An `agent.ignore_suffix` value: suffixes, each starting with its `.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoreSuffixes(Vec<String>);

impl IgnoreSuffixes {
    /// The suffixes of `value`, cut at every comma.
    pub fn parse(value: &str) -> Self {
        if value.is_empty() {
            return Self(Vec::new());
        }
        Self(value.split(',').map(str::to_owned).collect())
    }

    /// The suffix that makes the agent ignore `name`, if any.
    pub fn ignored_by(&self, name: &str) -> Option<&str> {
        let suffix = &name[name.rfind('.')?..];
        self.0.iter().find(|s| *s == suffix).map(String::as_str)
    }
}

/// A pattern that probably does not mean what it says: space around it (the agent does not trim),
/// or nothing at all between two commas.
pub fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        Some("an empty pattern (two commas in a row, or a comma at an end) matches only an empty name".to_owned())
    } else if pattern.trim() != pattern {
        Some(format!(
            "`{pattern}` has space around it; the agent does not trim patterns, so it only matches names with that space"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paths and patterns in the forms the agent's documentation gives (`/path/?`, `/path/*`,
    /// `/path/**`, comma-separated lists such as `/eureka/**,/actuator/**`), with what each rule
    /// says the agent does.
    const TABLE: &[(&str, &str, bool)] = &[
        ("/path/?", "/path/a", true),
        ("/path/?", "/path/", false),
        ("/path/?", "/path/ab", false),
        ("/path/*", "/path/abc", true),
        ("/path/*", "/path/", true),
        ("/path/*", "/path/a/b", false),
        ("/path/**", "/path/a/b/c", true),
        ("/path/**", "/path/", true),
        ("/path/**", "/path", false),
        ("/eureka/**", "/eureka/apps/delta", true),
        ("/actuator/**", "/actuator/health", true),
        ("/actuator/**", "/actuators/health", false),
        ("/api/seller/seller/*", "/api/seller/seller/list", true),
        ("/api/seller/seller/*", "/api/seller/seller/1/detail", false),
        ("/your/path/1/**", "/your/path/1/x/y", true),
        ("/your/path/1/**", "/your/path/2/x", false),
        ("/a/*/c", "/a/b/c", true),
        ("/a/*/c", "/a/b/x/c", false),
        ("/a/**/c", "/a/b/x/c", true),
        ("/a/**/c", "/a/c", false),
        ("/a/**c", "/a/c", true),
        ("*.html", "index.html", true),
        ("*.html", "/static/index.html", false),
        ("**.html", "/static/index.html", true),
        ("/health", "/health", true),
        ("/health", "/Health", false),
        ("/health", "/health/", false),
        ("GET:/users/?", "GET:/users/7", true),
        ("/??/x", "/ab/x", true),
        ("/??/x", "/a/x", false),
        ("/a?b", "/a/b", false),
    ];

    #[test]
    fn patterns_match_as_the_documented_rules_say() {
        for (pattern, path, ignored) in TABLE {
            assert_eq!(PathPattern::new(pattern).matches(path), *ignored, "{pattern} vs {path}");
        }
    }

    #[test]
    fn a_list_is_cut_at_commas_without_trimming() {
        let paths = IgnorePaths::parse("/eureka/**,/actuator/**");
        assert_eq!(paths.ignored_by("/actuator/info").map(PathPattern::as_str), Some("/actuator/**"));
        assert!(paths.ignored_by("/orders").is_none());
        let spaced = IgnorePaths::parse("/eureka/**, /actuator/**");
        assert!(spaced.ignored_by("/actuator/info").is_none(), "the second pattern starts with a space");
        assert!(pattern_problem(spaced.patterns()[1].as_str()).is_some());
        assert!(IgnorePaths::parse("").patterns().is_empty());
    }

    #[test]
    fn suffixes_compare_the_text_from_the_last_dot() {
        let suffixes = IgnoreSuffixes::parse(".jpg,.css");
        assert_eq!(suffixes.ignored_by("/img/a.b.jpg"), Some(".jpg"));
        assert_eq!(suffixes.ignored_by("/a.css.map"), None);
        assert_eq!(suffixes.ignored_by("/noext"), None);
    }

    #[test]
    fn long_names_and_many_stars_cost_a_pass_per_token() {
        let name = "/a".repeat(5_000);
        let pattern = PathPattern::new(&"*/".repeat(200));
        let started = std::time::Instant::now();
        assert!(!pattern.matches(&name));
        assert!(PathPattern::new("/**/a").matches(&name));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
