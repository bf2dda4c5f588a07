//! The dynamic settings stock agents read, with the parsing each agent applies, so `validate`
//! can warn about a key no agent reads or a value an agent would refuse. Source: the behaviour
//! reference, §4.1.6 (Java) and §4.2 (Go). The key names are skyconf-agent's constants, so the
//! agent library and `validate` cannot disagree about how a key is spelt.

use skyconf_agent::watchers::{
    IGNORE_SUFFIX, JDBC_TRACE_SQL_PARAMETERS, SAMPLE_N_PER_3_SECS, SAMPLE_RATE, SPAN_LIMIT_PER_SEGMENT,
    TRACE_IGNORE_PATH,
};

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
    /// The key, as documents spell it.
    pub(crate) key: &'static str,
    /// Which agent reads it (and through which plugin), for warnings.
    pub(crate) agent: &'static str,
    /// How that agent parses the value.
    pub(crate) kind: ValueKind,
}

/// Every dynamic key of the Java and Go agents.
pub(crate) const KNOWN_KEYS: &[KnownKey] = &[
    KnownKey { key: SAMPLE_N_PER_3_SECS, agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: SPAN_LIMIT_PER_SEGMENT, agent: "java", kind: ValueKind::JavaInt },
    KnownKey { key: IGNORE_SUFFIX, agent: "java", kind: ValueKind::Text },
    KnownKey { key: TRACE_IGNORE_PATH, agent: "java (trace-ignore plugin)", kind: ValueKind::Text },
    KnownKey { key: JDBC_TRACE_SQL_PARAMETERS, agent: "java (JDBC plugins)", kind: ValueKind::JavaBool },
    KnownKey { key: SAMPLE_RATE, agent: "go", kind: ValueKind::GoFloat },
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
    fn every_key_the_java_agent_watches_is_known_as_a_java_key() {
        for key in skyconf_agent::watchers::JAVA_KEYS {
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
    }
}
