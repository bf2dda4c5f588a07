//! What a Java agent ignores: the matching rules of its trace-ignore plugin
//! (`agent.trace.ignore_path`) and of its core's `agent.ignore_suffix`, so a preview can say which
//! of a list of paths (operation names) an agent would not trace under a value.
//!
//! `agent.trace.ignore_path` is a list of patterns separated by commas (a blank value is no
//! pattern at all); the list is cut as Java's `String.split(",")` cuts it ([`split_list`]: at every
//! comma, a comma at the end dropped) and the pieces are taken as they are, so a space after a
//! comma is read as part of the next pattern ([`pattern_problem`] says so). Each
//! pattern is matched against the whole operation name of a trace's first span (which may carry a
//! method, as in `GET:/path`), character by character, where:
//! - `?` stands for exactly one character other than `/`;
//! - `*` stands for any run of characters (none included) that holds no `/`, so it stays within one
//!   path segment;
//! - `**` (or any longer run of `*`) stands for any run of characters (none included), `/`
//!   included, so it spans segments;
//! - every other character stands for itself (case matters);
//! - and one rule of the Java agent's matcher: a pattern that ends with a single `*` also matches
//!   a name with one more `/` at its end.
//!
//! A name is ignored when any pattern matches it. So `/eureka/**` ignores `/eureka/apps` and
//! `/eureka/apps/x` (and `/eureka/`), but not `/eureka`; `/api/*` ignores `/api/users` and
//! `/api/users/`, but not `/api/users/7`. The agent (`skyconf-agent`) matches with this same type.
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
    /// `**` (or any longer run of `*`): any run.
    Any,
}

/// One `agent.trace.ignore_path` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    text: String,
    tokens: Vec<Token>,
}

impl PathPattern {
    /// The pattern written as `text`; every text is a valid pattern.
    pub fn new(text: &str) -> Self {
        let mut tokens = Vec::with_capacity(text.len());
        for c in text.chars() {
            let token = match c {
                '?' => Token::One,
                '*' => match tokens.last_mut() {
                    Some(last @ (Token::Segment | Token::Any)) => {
                        *last = Token::Any;
                        continue;
                    }
                    _ => Token::Segment,
                },
                c => Token::Char(c),
            };
            tokens.push(token);
        }
        Self { text: text.to_owned(), tokens }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` (a path, an operation name) matches the whole pattern. The pattern runs as
    /// a small automaton over the name's characters, carrying the set of pattern positions
    /// reached: time proportional to the pattern's length times the name's, with no backtracking.
    pub fn matches(&self, name: &str) -> bool {
        let n = self.tokens.len();
        let mut current = vec![false; n + 1];
        let mut next = vec![false; n + 1];
        current[0] = true;
        self.close(&mut current);
        // The Java rule: a final single `*` also takes one trailing `/`.
        let trailing_slash_ok = self.tokens.last() == Some(&Token::Segment) && name.ends_with('/');
        for (at, c) in name.char_indices() {
            if trailing_slash_ok && current[n] && at + 1 == name.len() {
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
                    Token::Segment if c != '/' => i,
                    Token::Any => i,
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
            if states[i] && matches!(token, Token::Segment | Token::Any) {
                states[i + 1] = true;
            }
        }
    }
}

impl std::fmt::Display for PathPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The items of a comma-separated list as the Java agent reads it (`String.split(",")`): no
/// trimming; empty items at the end are dropped, an empty item anywhere else stays (so `/a/**,`
/// holds one pattern, `/a/**,,/b/**` three, the middle one empty).
pub fn split_list(text: &str) -> Vec<&str> {
    let mut items: Vec<&str> = text.split(',').collect();
    while items.len() > 1 && items.last() == Some(&"") {
        items.pop();
    }
    if items == [""] && text.contains(',') {
        items.clear();
    }
    items
}

/// An `agent.trace.ignore_path` value: its patterns, as [`split_list`] cuts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnorePaths(Vec<PathPattern>);

impl IgnorePaths {
    /// The patterns of `value` (a blank value has none: nothing is ignored).
    pub fn parse(value: &str) -> Self {
        if value.trim().is_empty() {
            return Self(Vec::new());
        }
        Self(split_list(value).into_iter().map(PathPattern::new).collect())
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
    /// The suffixes of `value`, as [`split_list`] cuts them.
    pub fn parse(value: &str) -> Self {
        if value.is_empty() {
            return Self(Vec::new());
        }
        Self(split_list(value).into_iter().map(str::to_owned).collect())
    }

    /// The suffixes, as written.
    pub fn suffixes(&self) -> &[String] {
        &self.0
    }

    /// The suffix that makes the agent ignore `name`, if any.
    pub fn ignored_by(&self, name: &str) -> Option<&str> {
        let suffix = &name[name.rfind('.')?..];
        self.0.iter().find(|s| *s == suffix).map(String::as_str)
    }
}

/// What is wrong with each pattern of an `agent.trace.ignore_path` value that probably does not
/// mean what it says ([`pattern_problem`]), its items cut as the agent cuts them.
pub fn list_problems(value: &str) -> Vec<String> {
    split_list(value).into_iter().filter_map(pattern_problem).collect()
}

/// A pattern that probably does not mean what it says: space around it (the agent does not trim),
/// or nothing at all between two commas or before the first (a comma at the end is dropped).
pub fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        Some("an empty pattern (two commas in a row, or a comma at the start) matches only an empty name".to_owned())
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
    fn splits_like_java() {
        assert_eq!(split_list(".a,.b"), [".a", ".b"]);
        assert_eq!(split_list(".a,,.b,,"), [".a", "", ".b"]);
        assert_eq!(split_list(""), [""]);
        assert!(split_list(",,").is_empty());
        assert_eq!(split_list(" .a, .b"), [" .a", " .b"]);
        assert_eq!(IgnorePaths::parse("/eureka/**,").patterns().len(), 1, "a comma at the end is dropped");
        let empty = "an empty pattern (two commas in a row, or a comma at the start) matches only an empty name";
        assert_eq!(list_problems(",/a,,/b,"), [empty; 2]);
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
