//! The `global-configurations:` section: layered under every service's own settings and under
//! its targeting groups, served to services without an entry, digested as served, refused with
//! line and column, warned about, diffed, and written back by the per-service writer.

use skyconf_core::answer::{Answers, FetchOutcome, ReplyOptions, reply, reply_to};
use skyconf_core::diff::{ChangeKind, OTHER_SERVICES, diff};
use skyconf_core::table::Layer;
use skyconf_core::targeting::InstanceRef;
use skyconf_core::warnings::warnings;
use skyconf_core::{Digest, Position, read, read_with_warnings, writer};
use skyconf_proto::v3::ConfigurationSyncRequest;

const DOCUMENT: &str = r#"
global-configurations:
  agent.trace.ignore_path: /health/**
  agent.sample_n_per_3_secs: 5
configurations:
  checkout:
    agent.sample_n_per_3_secs: 10
    agent.ignore_suffix: .jpg
  cart:
    agent.trace.ignore_path: /cart/ping
targeting:
  checkout:
    - group: canary
      instances: [checkout-1]
      settings:
        agent.sample_n_per_3_secs: 100
        agent.trace.ignore_path: ~
  unlisted:
    - group: canary
      instances: [u-1]
      settings:
        agent.span_limit_per_segment: 50
"#;

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn digest_of(pairs: &[(&str, &str)]) -> Digest {
    Digest::of_entries(pairs.iter().copied())
}

#[test]
fn services_get_their_own_settings_over_the_global_ones_and_unlisted_services_the_global_ones() {
    let table = read(DOCUMENT).unwrap();
    let checkout = table.get("checkout").unwrap();
    let served = [
        ("agent.sample_n_per_3_secs", "10"),
        ("agent.ignore_suffix", ".jpg"),
        ("agent.trace.ignore_path", "/health/**"),
    ];
    assert_eq!(checkout.entries(), entries(&served));
    assert_eq!(checkout.digest(), &digest_of(&served), "the digest of exactly what is served");
    assert_eq!(checkout.own_entries(), entries(&served[..2]));
    assert_eq!(checkout.layer_of("agent.sample_n_per_3_secs"), Some(Layer::Service));
    assert_eq!(checkout.layer_of("agent.trace.ignore_path"), Some(Layer::Global));
    assert_eq!(checkout.layer_of("nothing"), None);
    let cart = [("agent.trace.ignore_path", "/cart/ping"), ("agent.sample_n_per_3_secs", "5")];
    assert_eq!(table.get("cart").unwrap().entries(), entries(&cart));

    let answers = Answers::new(&table);
    let global = [("agent.trace.ignore_path", "/health/**"), ("agent.sample_n_per_3_secs", "5")];
    assert_eq!(answers.answer("other").digest, digest_of(&global));
    assert_eq!(table.served("other").unwrap().layer_of("agent.sample_n_per_3_secs"), Some(Layer::Global));
    let ask = |service: &str, uuid: &str| {
        let request = ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() };
        reply(&answers, &request, ReplyOptions::default()).outcome()
    };
    assert_eq!(ask("other", ""), FetchOutcome::Changed);
    assert_eq!(ask("other", digest_of(&global).as_str()), FetchOutcome::Unchanged);
}

#[test]
fn groups_win_over_the_service_and_the_global_settings_and_may_remove_a_global_one() {
    let table = read(DOCUMENT).unwrap();
    let answers = Answers::new(&table);
    let ask = |service: &str, name: &str| {
        let instance = InstanceRef { name, properties: &[], agent_version: None };
        let request = ConfigurationSyncRequest { service: service.into(), uuid: String::new() };
        reply_to(&answers, &request, Some(&instance), ReplyOptions::default()).current().unwrap().digest.clone()
    };
    let canary = [("agent.sample_n_per_3_secs", "100"), ("agent.ignore_suffix", ".jpg")];
    assert_eq!(ask("checkout", "checkout-1"), digest_of(&canary));
    assert_eq!(ask("checkout", "checkout-2"), *table.get("checkout").unwrap().digest());
    let unlisted = [
        ("agent.trace.ignore_path", "/health/**"),
        ("agent.sample_n_per_3_secs", "5"),
        ("agent.span_limit_per_segment", "50"),
    ];
    assert_eq!(
        ask("unlisted", "u-1"),
        digest_of(&unlisted),
        "a group of an unlisted service patches the global settings"
    );
}

#[test]
fn without_a_global_section_digests_and_the_empty_answer_are_the_oaps() {
    let text = "configurations:\n  a: {'1': x, 1: y}\n";
    let plain = read(text).unwrap();
    assert!(plain.global().is_none());
    assert_eq!(
        plain.get("a").unwrap().digest(),
        &Digest::of_text("1:x1:y"),
        "every occurrence hashed, as the OAP does"
    );
    assert_eq!(Answers::new(&plain).answer("other").digest, Digest::empty());
    // A global section that adds nothing to a service keeps that service's OAP digest.
    let same = read(&format!("global-configurations:\n  1: z\n{text}")).unwrap();
    assert_eq!(same.get("a").unwrap().digest(), plain.get("a").unwrap().digest());
    // An empty or null section is no section.
    for empty in ["global-configurations: {}\n", "global-configurations:\n"] {
        let table = read(&format!("{empty}{text}")).unwrap();
        assert!(table.global().is_none(), "{empty}");
        assert_eq!(Answers::new(&table).answer("other").digest, Digest::empty());
    }
}

#[test]
fn a_bad_global_section_is_refused_at_its_place() {
    for (text, at, said) in [
        ("global-configurations: [a]\nconfigurations: {}\n", Position { line: 1, column: 24 }, "must be a mapping"),
        (
            "configurations: {}\nglobal-configurations:\n  k:\n",
            Position { line: 3, column: 4 },
            "`global-configurations`: setting `k` has no value",
        ),
        ("global-configurations:\n  UUID: x\nconfigurations: {}\n", Position { line: 2, column: 3 }, "reserved"),
    ] {
        let err = read(text).unwrap_err();
        assert_eq!(err.position(), Some(at), "{text}: {err}");
        assert!(err.to_string().contains(said), "{err}");
    }
    let value = "é".repeat(2_200_000);
    let err = read(&format!("configurations:\n  a: {{}}\nglobal-configurations:\n  k: \"{value}\"\n")).unwrap_err();
    assert_eq!(err.position(), Some(Position { line: 3, column: 1 }), "{err}");
    assert!(err.to_string().contains("4 MiB"), "{err}");
}

#[test]
fn global_keys_are_warned_about_once_at_their_place() {
    let text = "configurations:\n  a: {agent.sample_n_per_3_secs: 1}\n  b: {}\nglobal-configurations:\n  agent.sampel_n_per_3_secs: 1\n  agent.span_limit_per_segment: x\n";
    let reading = read_with_warnings(text).unwrap();
    let found = warnings(&reading, text);
    let placed: Vec<_> = found.iter().map(|w| (w.line, w.column, w.service.as_deref(), w.key.as_deref())).collect();
    assert_eq!(
        placed,
        [
            (Some(5), Some(3), None, Some("agent.sampel_n_per_3_secs")),
            (Some(6), Some(3), None, Some("agent.span_limit_per_segment")),
        ],
        "{found:?}"
    );
    assert!(found[0].message.starts_with("`global-configurations`: "), "{}", found[0].message);
    assert_eq!(found[0].suggestion.as_deref(), Some("agent.sample_n_per_3_secs"));
}

#[test]
fn a_global_change_names_every_service_whose_answer_changed() {
    let before = read("configurations:\n  a: {k: 1}\n  b: {g: 2}\n").unwrap();
    let after = read("global-configurations: {g: 1}\nconfigurations:\n  a: {k: 1}\n  b: {g: 2}\n").unwrap();
    let changes = diff(&before, &after);
    let named: Vec<_> = changes.iter().map(|c| (c.service.as_str(), c.change)).collect();
    assert_eq!(named, [("a", ChangeKind::Modified), (OTHER_SERVICES, ChangeKind::Added)], "b sets g itself");
    assert_eq!(changes[0].keys.len(), 1);
    assert_eq!(changes[0].keys[0].key, "g");
    assert_eq!(changes[1].digest_before, Digest::empty().to_string());
    // A service that loses its entry is compared with the global settings it now gets.
    let removed = read("global-configurations: {g: 1}\nconfigurations:\n  a: {k: 1}\n").unwrap();
    let changes = diff(&after, &removed);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!((changes[0].service.as_str(), changes[0].change), ("b", ChangeKind::Removed));
    assert_eq!(changes[0].digest_after, digest_of(&[("g", "1")]).to_string());
    assert_eq!(changes[0].keys[0].after.as_deref(), Some("1"));
    assert!(diff(&after, &after).is_empty());
    let gone = diff(&after, &before);
    assert_eq!(gone.last().map(|c| (c.service.as_str(), c.change)), Some((OTHER_SERVICES, ChangeKind::Removed)));
}

#[test]
fn updated_answers_follow_a_global_change() {
    let before = read("global-configurations: {g: 1}\nconfigurations:\n  a: {k: 1}\n").unwrap();
    let after = read("global-configurations: {g: 2}\nconfigurations:\n  a: {k: 1}\n").unwrap();
    let previous = Answers::new(&before);
    let updated = Answers::updated(&after, &before, &previous);
    for service in ["a", "other"] {
        assert_eq!(updated.answer(service).digest, Answers::new(&after).answer(service).digest, "{service}");
        assert_ne!(updated.answer(service).digest, previous.answer(service).digest, "{service}");
    }
}

#[test]
fn the_per_service_writer_keeps_the_global_section_and_writes_only_own_settings() {
    let table = read(DOCUMENT).unwrap();
    let text = writer::with_service(&table, "cart", Some(entries(&[("agent.span_limit_per_segment", "9")])));
    let again = read(&text).unwrap();
    assert_eq!(again.global().unwrap().entries(), table.global().unwrap().entries());
    assert_eq!(again.get("checkout"), table.get("checkout"));
    assert_eq!(
        again.get("cart").unwrap().entries(),
        entries(&[
            ("agent.span_limit_per_segment", "9"),
            ("agent.trace.ignore_path", "/health/**"),
            ("agent.sample_n_per_3_secs", "5")
        ])
    );
    assert_eq!(again.targeting(), table.targeting());
}

#[test]
fn the_incremental_reader_reads_a_document_with_a_global_section_whole() {
    let mut reader = skyconf_core::reader::IncrementalReader::new();
    for text in [DOCUMENT.trim_start(), "configurations:\n  a: {k: 1}\nglobal-configurations: {g: 1}\n"] {
        assert_eq!(reader.read(text).unwrap(), read(text).unwrap(), "{text}");
        assert!(reader.last().whole, "{text}");
    }
}
