//! The dynamic settings stock agents read, with the parsing each agent applies, so `validate`
//! can warn about a key no agent reads or a value an agent would refuse. Source: the behaviour
//! reference, §4.1.6 (Java) and §4.2 (Go).

/// How an agent parses a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// Java `Integer.parseInt`.
    JavaInt,
    /// Java `Boolean.parseBoolean` (anything but "true", any case, is false).
    JavaBool,
    /// Go `strconv.ParseFloat`.
    GoFloat,
    /// Any text (comma-separated lists).
    Text,
}

/// One known key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KnownKey {
    pub(crate) key: &'static str,
    pub(crate) agent: &'static str,
    pub(crate) kind: ValueKind,
}

/// Every dynamic key of the Java and Go agents.
pub(crate) const KNOWN_KEYS: &[KnownKey] = &[
    KnownKey { key: "agent.sample_n_per_3_secs", agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: "agent.span_limit_per_segment", agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: "agent.ignore_suffix", agent: "java", kind: ValueKind::Text },
    KnownKey { key: "agent.trace.ignore_path", agent: "java (trace-ignore plugin)", kind: ValueKind::Text },
    KnownKey { key: "plugin.jdbc.trace_sql_parameters", agent: "java (JDBC plugins)", kind: ValueKind::JavaBool },
    KnownKey { key: "agent.sample_rate", agent: "go", kind: ValueKind::GoFloat },
];

/// The known key named `key`.
pub(crate) fn find(key: &str) -> Option<&'static KnownKey> {
    KNOWN_KEYS.iter().find(|k| k.key == key)
}

/// Why an agent would not take `value` for a key of this kind, if it would not.
pub(crate) fn value_problem(kind: ValueKind, value: &str) -> Option<String> {
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
        ValueKind::GoFloat => {
            value.parse::<f64>().is_err().then(|| format!("`{value}` is not a number; the Go agent ignores it"))
        }
        ValueKind::Text => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
