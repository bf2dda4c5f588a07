//! The dynamic settings stock agents read, with the parsing each agent applies: the one list
//! behind [`crate::warnings`] (a key no agent reads, a value an agent refuses) and skyconf-agent's
//! watchers, which take their keys from here, so the agent library and the warnings cannot
//! disagree about how a key is spelt. Source: the behaviour reference, §4.1.6 (Java) and §4.2 (Go).

/// Java agent: segments sampled per 3 seconds; ≤ 0 samples everything.
pub const SAMPLE_N_PER_3_SECS: &str = "agent.sample_n_per_3_secs";
/// Java agent: the most spans a segment records.
pub const SPAN_LIMIT_PER_SEGMENT: &str = "agent.span_limit_per_segment";
/// Java agent: operation-name suffixes whose traces are ignored.
pub const IGNORE_SUFFIX: &str = "agent.ignore_suffix";
/// Java agent (trace-ignore plugin): path patterns whose traces are ignored.
pub const TRACE_IGNORE_PATH: &str = "agent.trace.ignore_path";
/// Java agent (JDBC plugins): whether SQL parameters are recorded.
pub const JDBC_TRACE_SQL_PARAMETERS: &str = "plugin.jdbc.trace_sql_parameters";
/// Go agent: the fraction of traces sampled.
pub const SAMPLE_RATE: &str = "agent.sample_rate";

/// Every key a Java agent watches.
pub const JAVA_KEYS: [&str; 5] =
    [SAMPLE_N_PER_3_SECS, SPAN_LIMIT_PER_SEGMENT, IGNORE_SUFFIX, TRACE_IGNORE_PATH, JDBC_TRACE_SQL_PARAMETERS];

/// How an agent parses a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Java `Integer.parseInt`.
    JavaInt,
    /// Java `Boolean.parseBoolean` (anything but "true", any case, is false).
    JavaBool,
    /// Go `strconv.ParseFloat`, a rate: ≤ 0 samples nothing, ≥ 1 everything.
    GoFloat,
    /// The Java agent's trace-ignore patterns, cut at commas ([`crate::ignore`]).
    JavaIgnorePaths,
    /// The Java agent's ignored suffixes, cut at commas: each compared with the text from the last
    /// `.` of an operation name ([`crate::ignore`]).
    JavaSuffixes,
    /// Any text (comma-separated lists).
    Text,
}

/// One known key.
#[derive(Debug, Clone, Copy)]
pub struct KnownKey {
    /// The key, as documents spell it.
    pub key: &'static str,
    /// Which agent reads it (and through which plugin), for warnings.
    pub agent: &'static str,
    /// How that agent parses the value.
    pub kind: ValueKind,
}

/// Every dynamic key of the Java and Go agents.
pub const KNOWN_KEYS: &[KnownKey] = &[
    KnownKey { key: SAMPLE_N_PER_3_SECS, agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: SPAN_LIMIT_PER_SEGMENT, agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: IGNORE_SUFFIX, agent: "java", kind: ValueKind::JavaSuffixes },
    KnownKey { key: TRACE_IGNORE_PATH, agent: "java (trace-ignore plugin)", kind: ValueKind::JavaIgnorePaths },
    KnownKey { key: JDBC_TRACE_SQL_PARAMETERS, agent: "java (JDBC plugins)", kind: ValueKind::JavaBool },
    KnownKey { key: SAMPLE_RATE, agent: "go", kind: ValueKind::GoFloat },
];

/// The known key named `key`.
pub fn find(key: &str) -> Option<&'static KnownKey> {
    KNOWN_KEYS.iter().find(|k| k.key == key)
}

/// Why an agent would not take `value` for a key of this kind, if it would not.
pub fn value_problem(kind: ValueKind, value: &str) -> Option<String> {
    match kind {
        ValueKind::JavaInt => {
            let digits = value.strip_prefix(['+', '-']).unwrap_or(value);
            let ok = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && value.parse::<i32>().is_ok();
            (!ok).then(|| {
                format!("`{value}` is not a 32-bit integer; the Java agent logs an error and keeps its current value")
            })
        }
        ValueKind::JavaBool => (!value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false"))
            .then(|| format!("`{value}` is neither true nor false; the Java agent reads it as false")),
        ValueKind::GoFloat => match value.parse::<f64>() {
            Err(_) => Some(format!("`{value}` is not a number; the Go agent ignores it")),
            Ok(rate) if rate < 0.0 => Some(format!("`{value}` is below 0; the Go agent samples nothing, as at 0")),
            Ok(rate) if rate > 1.0 => Some(format!("`{value}` is above 1; the Go agent samples everything, as at 1")),
            Ok(_) => None,
        },
        ValueKind::JavaIgnorePaths => {
            let problems = crate::ignore::list_problems(value);
            (!problems.is_empty()).then(|| problems.join("; "))
        }
        ValueKind::JavaSuffixes => {
            let problems: Vec<String> =
                crate::ignore::split_list(value).into_iter().filter_map(suffix_problem).collect();
            (!problems.is_empty()).then(|| problems.join("; "))
        }
        ValueKind::Text => None,
    }
}

/// Why one `agent.ignore_suffix` item never matches, if it does not: the agent compares it with
/// the text from the last `.` of an operation name, so it must start with its only `.`.
fn suffix_problem(suffix: &str) -> Option<String> {
    if let Some(problem) = crate::ignore::pattern_problem(suffix) {
        return Some(problem.replace("pattern", "suffix"));
    }
    if !suffix.starts_with('.') {
        Some(format!(
            "suffix `{suffix}` does not start with `.`, so it matches nothing (the Java agent compares the text from the last `.` of a name)"
        ))
    } else if suffix[1..].contains('.') {
        Some(format!(
            "suffix `{suffix}` has a second `.`, so it matches nothing (the Java agent compares the text from the last `.` of a name)"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_the_java_agent_watches_is_known_as_a_java_key() {
        for key in JAVA_KEYS {
            let known = find(key).unwrap_or_else(|| panic!("{key} is not a known key"));
            assert!(known.agent.starts_with("java"), "{key} is listed for {}", known.agent);
        }
    }

    #[test]
    fn value_checks_follow_the_agents_parsers() {
        assert!(value_problem(ValueKind::JavaInt, "10").is_none());
        assert!(value_problem(ValueKind::JavaInt, "-1").is_none());
        assert!(value_problem(ValueKind::JavaInt, "1.0").is_some());
        assert!(value_problem(ValueKind::JavaInt, "2147483648").is_some());
        assert!(value_problem(ValueKind::JavaBool, "TRUE").is_none());
        assert!(value_problem(ValueKind::JavaBool, "yes").is_some());
        assert!(value_problem(ValueKind::GoFloat, "0.5").is_none());
        assert!(value_problem(ValueKind::GoFloat, "half").is_some());
        assert!(value_problem(ValueKind::GoFloat, "1.5").unwrap().contains("everything"));
        assert!(value_problem(ValueKind::GoFloat, "-0.1").unwrap().contains("nothing"));
        assert!(value_problem(ValueKind::GoFloat, "0").is_none());
        assert!(value_problem(ValueKind::JavaIgnorePaths, "/eureka/**,/actuator/**").is_none());
        assert!(value_problem(ValueKind::JavaIgnorePaths, "/eureka/**, /actuator/**").unwrap().contains("space"));
        assert!(value_problem(ValueKind::JavaIgnorePaths, "/a,,/b").unwrap().contains("empty pattern"));
        assert!(value_problem(ValueKind::JavaIgnorePaths, ",/a").unwrap().contains("empty pattern"));
        // The agent drops a comma at the end (Java's `String.split`): nothing to warn about.
        assert_eq!(value_problem(ValueKind::JavaIgnorePaths, "/eureka/**,"), None);
        assert_eq!(value_problem(ValueKind::JavaSuffixes, ".jpg,.css,,"), None);
        assert!(value_problem(ValueKind::JavaSuffixes, ".jpg,.css").is_none());
        assert!(value_problem(ValueKind::JavaSuffixes, ".jpg,css").unwrap().contains("does not start with `.`"));
        assert!(value_problem(ValueKind::JavaSuffixes, ".tar.gz").unwrap().contains("second `.`"));
        assert!(value_problem(ValueKind::JavaSuffixes, ".jpg, .css").unwrap().contains("space"));
    }
}
