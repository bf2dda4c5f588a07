//! The `targeting:` section: read with the same typing as `configurations:`, refused with line and
//! column, written back by the per-service writer, and answered per instance.

use skyconf_core::answer::{Answers, ReplyOptions, reply_to};
use skyconf_core::targeting::{InstanceRef, Share};
use skyconf_core::{Digest, Position, read, read_with_warnings, writer};
use skyconf_proto::v3::ConfigurationSyncRequest;

const DOCUMENT: &str = r#"
configurations:
  checkout:
    agent.sample_n_per_3_secs: 10
    agent.ignore_suffix: ".jpg,.css"
  cart:
    k: v
targeting:
  checkout:
    - group: canary
      instances: [checkout-1, "checkout-7*"]
      settings:
        agent.sample_n_per_3_secs: 100
        agent.ignore_suffix: ~
        plugin.new: yes
    - group: eu
      properties: {zone: [eu-west-1a, eu-west-1b], ipv4: "10.0.*"}
      agent_versions: "9.*"
      share: 12.5%
      settings:
        agent.sample_n_per_3_secs: 20
"#;

fn props(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
    pairs.iter().map(|(k, v)| (Box::from(*k), Box::from(*v))).collect()
}

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn groups_are_read_in_order_with_java_typing() {
    let table = read(DOCUMENT).unwrap();
    let groups = table.targeting().groups("checkout");
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].name, "canary");
    assert_eq!(groups[0].selector.instances.len(), 2);
    let settings: Vec<_> = groups[0].settings.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
    // `100` and `yes` print as Java prints them; `~` removes the setting.
    assert_eq!(
        settings,
        vec![("agent.sample_n_per_3_secs", Some("100")), ("agent.ignore_suffix", None), ("plugin.new", Some("true"))]
    );
    assert_eq!(groups[1].selector.share, Some(Share::from_basis_points(1250)));
    assert_eq!(groups[1].selector.properties[0].1.len(), 2);
    assert!(table.targeting().groups("cart").is_empty());
    // The OAP reads only `configurations`: the services' own answers do not change.
    let plain = read(&DOCUMENT[..DOCUMENT.find("targeting:").unwrap()]).unwrap();
    assert_eq!(table.get("checkout").unwrap().digest(), plain.get("checkout").unwrap().digest());
}

#[test]
fn each_group_is_served_its_patched_settings_under_their_own_digest() {
    let table = read(DOCUMENT).unwrap();
    let answers = Answers::new(&table);
    assert!(answers.is_targeted("checkout") && !answers.is_targeted("cart"));
    let none = props(&[]);
    let canary = InstanceRef { name: "checkout-7abc", properties: &none, agent_version: None };
    let chosen = answers.choose("checkout", Some(&canary));
    assert_eq!(chosen.group.unwrap().name, "canary");
    let expected = entries(&[("agent.sample_n_per_3_secs", "100"), ("plugin.new", "true")]);
    assert_eq!(chosen.answer.digest, Digest::of_entries(expected.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
    // Another instance, or one not identified, gets the service's own answer.
    let other = InstanceRef { name: "checkout-2", properties: &none, agent_version: None };
    let own = table.get("checkout").unwrap().digest();
    assert_eq!(&answers.choose("checkout", Some(&other)).answer.digest, own);
    assert_eq!(&answers.choose("checkout", None).answer.digest, own);
    // The reply rule judges the echoed digest against the instance's own answer.
    let request = |uuid: &str| ConfigurationSyncRequest { service: "checkout".into(), uuid: uuid.into() };
    let options = ReplyOptions::default();
    let sent = reply_to(&answers, &request(own.as_str()), Some(&canary), options);
    assert_eq!(
        sent.current().unwrap().digest,
        chosen.answer.digest,
        "the canary holding the service's is sent its own"
    );
    assert!(reply_to(&answers, &request(chosen.answer.digest.as_str()), Some(&canary), options).encode().is_empty());
}

#[test]
fn the_share_group_needs_every_condition() {
    let table = read(DOCUMENT).unwrap();
    let answers = Answers::new(&table);
    let eu = props(&[("zone", "eu-west-1b"), ("ipv4", "10.0.3.4")]);
    let share = Share::from_basis_points(1250);
    let inside = (0..1000).map(|i| format!("pod-{i}")).find(|n| share.holds("checkout", n)).unwrap();
    let outside = (0..1000).map(|i| format!("pod-{i}")).find(|n| !share.holds("checkout", n)).unwrap();
    let member = InstanceRef { name: &inside, properties: &eu, agent_version: Some("9.4.0") };
    assert_eq!(answers.choose("checkout", Some(&member)).group.unwrap().name, "eu");
    let old_agent = InstanceRef { agent_version: Some("8.16.0"), ..member };
    assert!(answers.choose("checkout", Some(&old_agent)).group.is_none());
    let not_in_share = InstanceRef { name: &outside, ..member };
    assert!(answers.choose("checkout", Some(&not_in_share)).group.is_none());
}

fn refused(text: &str) -> (Position, String) {
    let err = read(text).unwrap_err();
    (err.position().unwrap(), err.to_string())
}

#[test]
fn mistakes_are_refused_with_line_and_column() {
    let head = "configurations:\n  svc: {k: v}\ntargeting:\n  svc:\n";
    let cases = [
        ("    - group: a\n      settings: {k: w}\n", 5, "says no condition"),
        ("    - instances: [x]\n", 5, "needs a name"),
        ("    - group: a\n      instances: [x]\n    - group: a\n      share: 5%\n", 7, "two groups named `a`"),
        ("    - group: a\n      share: 120%\n", 6, "not a percentage"),
        ("    - group: a\n      instance: [x]\n", 6, "has no `instance`"),
        ("    - group: a\n      instances: []\n", 6, "empty list"),
        ("    - group: a\n      instances: [x]\n      settings: {UUID: z}\n", 7, "reserved"),
        ("    group: a\n", 5, "must be a list of groups"),
        ("    - group: a\n      instances: [[x]]\n", 6, "single value"),
    ];
    for (body, line, message) in cases {
        let (at, error) = refused(&format!("{head}{body}"));
        assert_eq!(at.line, line, "{body}: {error}");
        assert!(error.contains(message), "{body}: {error}");
    }
    assert!(refused("configurations: {}\ntargeting: [a]\n").1.contains("must map service names"));
}

#[test]
fn groups_of_a_service_without_configuration_are_read_with_a_warning() {
    let reading =
        read_with_warnings("configurations: {}\ntargeting:\n  ghost:\n    - group: a\n      share: 1%\n").unwrap();
    assert_eq!(reading.warnings.len(), 1, "{:?}", reading.warnings);
    assert!(reading.warnings[0].message.contains("`ghost`"));
}

#[test]
fn a_per_service_write_keeps_the_targeting_section() {
    let table = read(DOCUMENT).unwrap();
    let written = writer::with_service(&table, "cart", Some(entries(&[("k", "w")])));
    let again = read(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(again.targeting(), table.targeting(), "{written}");
    assert_eq!(again.get("cart").unwrap().get("k"), Some("w"));
    // And it writes back the same once more.
    assert_eq!(writer::with_service(&again, "cart", Some(entries(&[("k", "w")]))), written);
}
