//! Writes a table back as an agent-configurations document that reads back to the same digests,
//! for the per-service writes of the admin API (`PUT`/`DELETE /api/v1/services/{name}`).
//!
//! Every service name, key and value is written as a double-quoted YAML string, so the reader
//! takes each one verbatim: a value that was `10` or `yes` in the original document is stored as
//! the text agents received (`"10"`, `"true"`), which gives the same digest. Document order is
//! kept. Comments and the original layout are not: to keep them, write the whole document with
//! `PUT /api/v1/configurations`.
//!
//! YAML (and the OAP's SnakeYAML) refuses an implicit key whose `:` is more than 1024 characters
//! past its start, so a name or key whose quoted form is longer than [`MAX_IMPLICIT_KEY_BYTES`]
//! is written as an explicit key (`? "key"` on one line, `: value` on the next).

use std::fmt::Write as _;

use crate::table::{AgentConfigurations, ServiceConfig};
use crate::targeting::{Pattern, Targeting};

/// `text` as a YAML double-quoted scalar that reads back as exactly `text`.
pub fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    quoted(text, &mut out);
    out
}

/// Appends `text` as a YAML double-quoted scalar.
fn quoted(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The longest quoted key, in bytes, written as an implicit key (`"key": value`). Bytes are never
/// fewer than characters, so this stays under YAML's 1024-character limit with room for the `:`.
pub const MAX_IMPLICIT_KEY_BYTES: usize = 1000;

/// Appends a block-mapping key at `indent` (after its line break and indentation are written) up
/// to and including its `:`; an explicit `? key` when the quoted key is too long to be implicit.
fn mapping_key(key: &str, indent: &str, out: &mut String) {
    let quoted_key = double_quoted(key);
    if quoted_key.len() > MAX_IMPLICIT_KEY_BYTES {
        out.push_str("? ");
        out.push_str(&quoted_key);
        out.push('\n');
        out.push_str(indent);
        out.push(':');
    } else {
        out.push_str(&quoted_key);
        out.push(':');
    }
}

/// The document for `services` (their own entries), in their order.
pub fn render<'a>(services: impl IntoIterator<Item = &'a ServiceConfig>) -> String {
    let mut out = String::from("configurations:");
    let mut any = false;
    for service in services {
        any = true;
        out.push_str("\n  ");
        mapping_key(service.name(), "  ", &mut out);
        render_settings(service.own_entries(), "    ", &mut out);
    }
    if !any {
        out.push_str(" {}");
    }
    out.push('\n');
    out
}

/// `table` with `service` set to `entries` (added at the end when new), rendered; `None` removes it.
pub fn with_service(table: &AgentConfigurations, service: &str, entries: Option<Vec<(String, String)>>) -> String {
    let mut replaced = false;
    let mut services: Vec<ServiceConfig> = Vec::with_capacity(table.len() + 1);
    for s in table.services() {
        if s.name() == service {
            replaced = true;
            if let Some(entries) = &entries {
                services.push(ServiceConfig::new(service.to_owned(), entries.clone()));
            }
        } else {
            services.push(s.clone());
        }
    }
    if let (false, Some(entries)) = (replaced, entries) {
        services.push(ServiceConfig::new(service.to_owned(), entries));
    }
    let mut text = render(&services);
    render_global(table.global(), &mut text);
    render_targeting(table.targeting(), &mut text);
    render_opamp(table.opamp(), &mut text);
    text
}

/// Appends `settings` as a block mapping's entries at `indent` (` {}` when there are none).
fn render_settings(settings: &[(String, String)], indent: &str, out: &mut String) {
    if settings.is_empty() {
        out.push_str(" {}");
    }
    for (key, value) in settings {
        out.push('\n');
        out.push_str(indent);
        mapping_key(key, indent, out);
        out.push(' ');
        quoted(value, out);
    }
}

/// Appends `global` as a `global-configurations:` section (nothing when there is none).
pub fn render_global(global: Option<&ServiceConfig>, out: &mut String) {
    let Some(global) = global else { return };
    out.push_str(crate::table::GLOBAL_KEY);
    out.push(':');
    render_settings(global.own_entries(), "  ", out);
    out.push('\n');
}

/// Appends `targeting` as a `targeting:` section that reads back to the same groups (nothing
/// when it is empty).
pub fn render_targeting(targeting: &Targeting, out: &mut String) {
    if targeting.is_empty() {
        return;
    }
    out.push_str("targeting:");
    for (service, groups) in targeting.services() {
        out.push_str("\n  ");
        mapping_key(service, "  ", out);
        if groups.is_empty() {
            out.push_str(" []");
        }
        for group in groups {
            out.push_str("\n    - group: ");
            quoted(&group.name, out);
            let selector = &group.selector;
            let list = |name: &str, patterns: &[Pattern], out: &mut String| {
                if !patterns.is_empty() {
                    out.push_str("\n      ");
                    out.push_str(name);
                    out.push(':');
                    flow_list(patterns, out);
                }
            };
            list("instances", &selector.instances, out);
            pattern_mapping("properties", "      ", &selector.properties, out);
            list("agent_versions", &selector.agent_versions, out);
            if let Some(share) = selector.share {
                let _ = write!(out, "\n      share: \"{share}\"");
            }
            out.push_str("\n      settings:");
            if group.settings.is_empty() {
                out.push_str(" {}");
            }
            for (key, value) in &group.settings {
                out.push_str("\n        ");
                mapping_key(key, "        ", out);
                match value {
                    Some(value) => {
                        out.push(' ');
                        quoted(value, out);
                    }
                    None => out.push_str(" ~"),
                }
            }
        }
    }
    out.push('\n');
}

/// Appends `opamp` as an `opamp:` section that reads back to the same groups (nothing when it
/// is empty).
pub fn render_opamp(opamp: &crate::opamp::OpampSection, out: &mut String) {
    if opamp.is_empty() {
        return;
    }
    out.push_str("opamp:");
    for group in opamp.groups() {
        out.push_str("\n  - group: ");
        quoted(&group.name, out);
        pattern_mapping("match", "    ", &group.conditions, out);
        out.push_str("\n    files:");
        if group.files.is_empty() {
            out.push_str(" {}");
        }
        for file in &group.files {
            out.push_str("\n      ");
            mapping_key(&file.name, "      ", out);
            out.push_str("\n        content_type: ");
            quoted(&file.content_type, out);
            out.push_str("\n        body: ");
            quoted(&file.body, out);
        }
    }
    out.push('\n');
}

/// Appends ` [p1, p2]`, each pattern double-quoted.
/// Appends `name:` at `indent` and under it, one level deeper, each entry's key with its patterns
/// as a flow list; nothing when there are no entries.
fn pattern_mapping(name: &str, indent: &str, entries: &[(String, Vec<Pattern>)], out: &mut String) {
    if entries.is_empty() {
        return;
    }
    let _ = write!(out, "\n{indent}{name}:");
    let inner = format!("{indent}  ");
    for (key, patterns) in entries {
        out.push('\n');
        out.push_str(&inner);
        mapping_key(key, &inner, out);
        flow_list(patterns, out);
    }
}

fn flow_list(patterns: &[Pattern], out: &mut String) {
    out.push_str(" [");
    for (i, pattern) in patterns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        quoted(pattern.as_str(), out);
    }
    out.push(']');
}

/// `entries` with `patch` applied as a JSON merge patch (RFC 7396) applies to a flat object: a
/// value sets its key (in place when present, so the digest's order is kept; at the end when new),
/// `None` removes it, and keys the patch does not name are kept.
pub fn merge_entries(entries: &[(String, String)], patch: &[(String, Option<String>)]) -> Vec<(String, String)> {
    let mut merged: Vec<(String, String)> = entries
        .iter()
        .filter_map(|(key, value)| match patch.iter().rev().find(|(k, _)| k == key) {
            Some((_, Some(new))) => Some((key.clone(), new.clone())),
            Some((_, None)) => None,
            None => Some((key.clone(), value.clone())),
        })
        .collect();
    for (key, value) in patch {
        if let Some(value) = value
            && !entries.iter().any(|(k, _)| k == key)
        {
            match merged.iter_mut().find(|(k, _)| k == key) {
                Some(existing) => existing.1 = value.clone(),
                None => merged.push((key.clone(), value.clone())),
            }
        }
    }
    merged
}

#[cfg(all(test, feature = "reader"))]
mod tests {
    use super::*;

    #[test]
    fn a_per_service_write_keeps_the_targeting_properties_and_the_opamp_match() {
        let text = "configurations:\n  a: {k: v}\ntargeting:\n  a:\n    - group: eu\n      instances: [a-1]\n      properties: {zone: [eu-west-1a, 'eu-*'], ipv4: '10.0.*'}\n      settings: {k: x}\nopamp:\n  - group: collectors\n    match:\n      service.name: [otel, 'otel-*']\n      host.name: h1\n    files:\n      sampling.json:\n        content_type: application/json\n        body: '{}'\n";
        let table = crate::read(text).unwrap();
        let written = with_service(&table, "a", Some(vec![("k".into(), "w".into())]));
        let again = crate::read(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert_eq!(again.targeting(), table.targeting(), "{written}");
        assert_eq!(again.opamp(), table.opamp(), "{written}");
        assert_eq!(again.get("a").unwrap().get("k"), Some("w"));
    }

    #[test]
    fn a_merge_patch_sets_in_place_appends_new_keys_and_removes_nulls() {
        let entries = vec![("a".to_owned(), "1".to_owned()), ("b".into(), "2".into()), ("c".into(), "3".into())];
        let patch = vec![("b".to_owned(), Some("20".to_owned())), ("d".into(), Some("4".into())), ("a".into(), None)];
        let merged = merge_entries(&entries, &patch);
        let expected = [("b", "20"), ("c", "3"), ("d", "4")];
        assert_eq!(merged, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));
        // Removing a key that is not there changes nothing; an empty patch neither.
        assert_eq!(merge_entries(&entries, &[("x".into(), None)]), entries);
        assert_eq!(merge_entries(&entries, &[]), entries);
    }

    fn round_trip(text: &str) {
        let table = crate::read(text).unwrap();
        let rendered = render(table.services());
        let again = crate::read(&rendered).unwrap_or_else(|e| panic!("{e}\n{rendered}"));
        assert_eq!(again, table, "{rendered}");
    }

    #[test]
    fn rendering_keeps_every_value_and_digest() {
        round_trip("configurations:\n  a:\n    n: 010\n    b: yes\n    f: 0.50\n    s: '*x'\n");
        round_trip("configurations:\n  'svc|ns|':\n    k: \"q\\\"uo\\\\te\\n\\ttab\\x01\\u2028é😀\"\n    e: ''\n");
        round_trip("configurations:\n  a: {}\n");
        round_trip("configurations:\n");
        round_trip("configurations:\n  b: {k: 1}\n  a: {k: 2}\n  '8': {k: 3}\n");
        round_trip("configurations:\n  x: {\"k: v\": \"# not a comment\", '- l': '[a, b]', '?': '&anchor'}\n");
    }

    #[test]
    fn keys_too_long_for_an_implicit_key_are_written_as_explicit_keys() {
        let long = "k".repeat(1100);
        let wide = "é".repeat(600); // 600 characters, 1200 bytes
        let escaped = "\n".repeat(600); // 600 characters, written as 1200
        for key in [&long, &wide, &escaped] {
            round_trip(&format!("configurations:\n  svc:\n    ? {}\n    : v\n    short: w\n", double_quoted(key)));
            round_trip(&format!("configurations:\n  ? {}\n  :\n    k: v\n  b: {{k: 1}}\n", double_quoted(key)));
            round_trip(&format!("configurations:\n  ? {}\n  : {{}}\n", double_quoted(key)));
        }
        // At the boundary: the longest implicit key and the shortest explicit one.
        for n in [MAX_IMPLICIT_KEY_BYTES - 3, MAX_IMPLICIT_KEY_BYTES - 2, MAX_IMPLICIT_KEY_BYTES - 1] {
            let key = "x".repeat(n);
            round_trip(&format!("configurations:\n  ? {0}\n  :\n    ? {0}\n    : v\n", double_quoted(&key)));
        }
        // A per-service write next to a long key, and one whose own key is long.
        let table =
            crate::read(&format!("configurations:\n  a:\n    ? {}\n    : v\n  b: {{k: 1}}\n", double_quoted(&long)))
                .unwrap();
        let set = crate::read(&with_service(&table, "b", Some(vec![(long.clone(), "2".into())]))).unwrap();
        assert_eq!(set.get("a"), table.get("a"));
        assert_eq!(set.get("b").unwrap().get(&long), Some("2"));
        let removed = crate::read(&with_service(&table, "b", None)).unwrap();
        assert_eq!(removed.get("a"), table.get("a"));
        assert!(removed.get("b").is_none());
    }

    #[test]
    fn a_service_is_replaced_in_place_added_at_the_end_or_removed() {
        let table = crate::read("configurations:\n  a: {k: 1}\n  b: {k: 2}\n").unwrap();
        let set = crate::read(&with_service(&table, "a", Some(vec![("k".into(), "9".into())]))).unwrap();
        assert_eq!(set.services().map(|s| s.name()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(set.get("a").unwrap().get("k"), Some("9"));
        let added = crate::read(&with_service(&table, "c", Some(vec![]))).unwrap();
        assert_eq!(added.services().map(|s| s.name()).collect::<Vec<_>>(), ["a", "b", "c"]);
        let removed = crate::read(&with_service(&table, "a", None)).unwrap();
        assert_eq!(removed.services().map(|s| s.name()).collect::<Vec<_>>(), ["b"]);
    }
}
