//! Properties of the reader that hold for every input, not just the golden corpus: it never
//! panics and always says where it stopped; quoting a string never changes what it hashes to;
//! order does; and any pairs of strings written by the production writer (`skyconf_core::writer`)
//! read back exactly, whole tables included.

use proptest::prelude::*;
use skyconf_core::writer::{double_quoted, render};
use skyconf_core::{Digest, ServiceConfig, read};

/// Characters that make up YAML syntax, to reach deep into the parser more often than random
/// text would.
const YAML_ALPHABET: &str = "ab01:-?,[]{}#&*!|>'\"%@`~. \n\t\\<=_xyeE+^é😀\u{85}\u{2028}\u{feff}\r";

fn yamlish() -> impl Strategy<Value = String> {
    let chars: Vec<char> = YAML_ALPHABET.chars().collect();
    prop::collection::vec(prop::sample::select(chars), 0..160).prop_map(|v| v.into_iter().collect())
}

/// Documents shaped like agent configurations, with random bits where the values go.
fn configurations_like() -> impl Strategy<Value = String> {
    (yamlish(), yamlish(), yamlish())
        .prop_map(|(a, b, c)| format!("configurations:\n  s{a}:\n    k: {b}\n    j: {c}\n  t: {{x: {b}}}\n"))
}

fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A plain scalar that YAML 1.1 may or may not type as something other than a string.
fn plain_word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_./][a-zA-Z0-9_./ -]{0,24}[a-zA-Z0-9_./]|[a-zA-Z0-9_./]"
}

fn one_setting_digest(value: &str) -> Option<String> {
    let table = read(&format!("configurations:\n  svc:\n    k: {value}\n")).ok()?;
    Some(table.get("svc")?.digest().as_str().to_owned())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_and_refusals_have_a_position(text in prop_oneof![any::<String>(), yamlish(), configurations_like()]) {
        if let Err(e) = read(&text) {
            let at = e.position();
            prop_assert!(at.is_some_and(|p| p.line >= 1 && p.column >= 1), "{e:?}");
        }
    }

    #[test]
    fn quoting_a_string_value_keeps_its_digest(word in plain_word()) {
        let Ok(table) = read(&format!("configurations:\n  svc:\n    k: {word}\n")) else {
            return Ok(());
        };
        let service = table.get("svc").unwrap();
        // Only values that stay the same text (strings, not 010 or yes) hash the same quoted.
        prop_assume!(service.get("k") == Some(word.as_str()));
        let plain = service.digest().as_str().to_owned();
        prop_assert_eq!(one_setting_digest(&double_quoted(&word)), Some(plain.clone()));
        prop_assert_eq!(one_setting_digest(&single_quoted(&word)), Some(plain));
    }

    #[test]
    fn key_order_changes_the_digest(
        k1 in "[a-z][a-z0-9._]{0,12}", v1 in "[a-zA-Z0-9 ]{0,12}",
        k2 in "[a-z][a-z0-9._]{0,12}", v2 in "[a-zA-Z0-9 ]{0,12}",
    ) {
        prop_assume!(k1 != k2);
        let doc = |a: (&str, &str), b: (&str, &str)| {
            format!("configurations:\n  svc:\n    {}: {}\n    {}: {}\n", a.0, double_quoted(a.1), b.0, double_quoted(b.1))
        };
        let forward = read(&doc((&k1, &v1), (&k2, &v2))).unwrap();
        let backward = read(&doc((&k2, &v2), (&k1, &v1))).unwrap();
        let (forward, backward) = (forward.get("svc").unwrap(), backward.get("svc").unwrap());
        prop_assert_eq!(forward.entries().len(), 2);
        // Without `:` in keys or values, the two hash inputs are equal only if the pairs are.
        prop_assert_ne!(forward.digest(), backward.digest());
    }

    #[test]
    fn double_quoted_pairs_read_back_exactly(
        pairs in prop::collection::vec((any::<String>(), any::<String>()), 0..8),
    ) {
        let mut seen = std::collections::HashSet::new();
        let pairs: Vec<(String, String)> = pairs
            .into_iter()
            // Keys must differ and stay short enough for an implicit key; two are reserved.
            .filter(|(k, _)| k.chars().count() < 200 && k != "SerialNumber" && k != "UUID" && seen.insert(k.clone()))
            .collect();
        let mut doc = String::from(if pairs.is_empty() { "configurations:\n  \"svc\": {}\n" } else { "configurations:\n  \"svc\":\n" });
        for (k, v) in &pairs {
            doc.push_str(&format!("    {}: {}\n", double_quoted(k), double_quoted(v)));
        }
        let table = read(&doc).map_err(|e| TestCaseError::fail(format!("{e}\n{doc}")))?;
        let service = table.get("svc").unwrap();
        prop_assert_eq!(service.entries(), pairs.as_slice());
        let expected = Digest::of_entries(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert_eq!(service.digest(), &expected);
    }

    #[test]
    fn written_tables_read_back_with_the_same_digests(
        services in prop::collection::vec(
            (any::<String>(), prop::collection::vec((any::<String>(), any::<String>()), 0..4)),
            0..4,
        )
    ) {
        let mut seen = std::collections::HashSet::new();
        let services: Vec<ServiceConfig> = services
            .into_iter()
            .filter(|(name, _)| seen.insert(name.clone()))
            .map(|(name, entries)| {
                let mut keys = std::collections::HashSet::new();
                let entries = entries
                    .into_iter()
                    .filter(|(k, _)| keys.insert(k.clone()) && k != "SerialNumber" && k != "UUID")
                    .collect();
                ServiceConfig::new(name, entries)
            })
            .collect();
        let text = render(&services);
        let table = read(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let names: Vec<_> = table.services().map(|s| s.name().to_owned()).collect();
        prop_assert_eq!(names, services.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>());
        for service in &services {
            prop_assert_eq!(table.get(service.name()).map(|s| s.digest().clone()), Some(service.digest().clone()));
        }
    }
}
