//! The fleet tracker's unit tests: rows, holds, expiry, identities and connection lifetimes.

use super::*;

fn peer(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

fn fleet() -> Fleet {
    Fleet::new(FleetOptions::default())
}

fn state(fleet: &Fleet, service: &str, port: u16, current: &Digest) -> AgentState {
    fleet.agents_of(service, current).into_iter().find(|a| a.peer == peer(port).to_string()).unwrap().state
}

#[test]
fn an_agent_that_follows_is_behind_for_one_poll_then_applied() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    let v2 = Digest::of_text("v2");
    fleet.observe("svc", "", peer(1), &v1, true);
    assert_eq!(state(&fleet, "svc", 1, &v1), AgentState::New, "first contact");
    fleet.observe("svc", v1.as_str(), peer(1), &v1, true);
    assert_eq!(state(&fleet, "svc", 1, &v1), AgentState::Applied);
    assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind, "a change it has not polled since");
    fleet.observe("svc", v1.as_str(), peer(1), &v2, true);
    assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind);
    fleet.observe("svc", v2.as_str(), peer(1), &v2, true);
    assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Applied);
    let agent = &fleet.agents_of("svc", &v2)[0];
    assert_eq!((agent.polls, agent.digest.as_str(), agent.polls_behind), (4, v2.as_str(), 0));
}

/// A rollout reverted and started again serves the same candidate: an agent that echoed it
/// before the revert holds the old configuration now, and is applied only once it echoes the
/// candidate again.
#[test]
fn an_agent_sent_something_else_since_its_echo_is_not_applied_by_that_echo() {
    let fleet = fleet();
    let (old, candidate) = (Digest::of_text("old"), Digest::of_text("candidate"));
    fleet.observe("svc", "", peer(1), &candidate, true);
    fleet.observe("svc", candidate.as_str(), peer(1), &candidate, true);
    assert_eq!(state(&fleet, "svc", 1, &candidate), AgentState::Applied);
    // Its held poll is answered with the revert.
    fleet.sent("svc", peer(1), &old);
    assert_eq!(state(&fleet, "svc", 1, &candidate), AgentState::Behind, "it holds the old one now");
    assert_eq!(state(&fleet, "svc", 1, &old), AgentState::Behind, "until it echoes it");
    fleet.observe("svc", old.as_str(), peer(1), &candidate, true);
    assert_eq!(state(&fleet, "svc", 1, &candidate), AgentState::Behind, "sent the candidate again");
    fleet.observe("svc", candidate.as_str(), peer(1), &candidate, true);
    assert_eq!(state(&fleet, "svc", 1, &candidate), AgentState::Applied);
    // The same through a poll answered at once: it echoed `old` and was sent the candidate.
    fleet.observe("svc", old.as_str(), peer(2), &old, true);
    fleet.observe("svc", old.as_str(), peer(2), &candidate, true);
    assert_eq!(state(&fleet, "svc", 2, &old), AgentState::Behind, "sent the candidate since its echo");
}

#[test]
fn a_held_agent_is_applied_seen_now_and_never_forgotten_while_it_waits() {
    let fleet = Fleet::new(FleetOptions { expire_after: Duration::from_secs(600), ..FleetOptions::default() });
    let v1 = Digest::of_text("v1");
    fleet.observe("svc", "", peer(1), &v1, true);
    fleet.observe("svc", v1.as_str(), peer(1), &v1, true);
    let held = fleet.hold(peer(1), "svc");
    fleet.advance(Duration::from_secs(700));
    assert_eq!(fleet.sweep(), 0, "a held agent is connected and waiting");
    let agent = &fleet.agents_of("svc", &v1)[0];
    assert_eq!(agent.state, AgentState::Applied);
    let now = fleet.unix_ms(fleet.now());
    assert_eq!(agent.last_seen_ms, now, "seen now while held");
    drop(held);
    assert_eq!(fleet.agents_of("svc", &v1)[0].last_seen_ms, now, "the hold's end counts as seen");
    fleet.advance(Duration::from_secs(700));
    assert_eq!(fleet.sweep(), 1, "once answered, it expires as any agent does");
    // Holding an agent that is not tracked changes nothing.
    let _untracked = fleet.hold(peer(2), "svc");
    assert!(fleet.agents_of("svc", &v1).is_empty());
}

fn connection(port: u16) -> (Arc<crate::socket::ConnectionState>, Caller) {
    let state = Arc::new(crate::socket::ConnectionState::new(Some(peer(port))).with(Link::new(Some(peer(port)))));
    (Arc::clone(&state), Caller::Connection(state))
}

/// N1 and the contract's lifetimes: a connection's rows and identity end with it, at once,
/// and a later connection from the same ip:port is never removed by an earlier one's close.
#[test]
fn a_connections_rows_and_identity_end_with_it_and_never_a_later_ones_from_the_same_address() {
    let fleet = Arc::new(fleet());
    let v1 = Digest::of_text("v1");
    let (first, by_first) = connection(1);
    fleet.identify(&by_first, &report("svc", "pod-1", &[("hostname", "a")], Some("9.4.0")));
    fleet.record(&by_first, "svc", "", &v1, true);
    fleet.record(&by_first, "other", "", &v1, true);
    assert_eq!((fleet.tracked(), fleet.identified()), (2, 1));
    let bytes = fleet.identity_bytes();
    assert_eq!(bytes, "svc".len() + "pod-1".len() + "hostname".len() + "a".len() + "9.4.0".len());
    // The same process restarts from the same ip:port before the old close is seen.
    let (second, by_second) = connection(1);
    fleet.identify(&by_second, &report("svc", "pod-1", &[("hostname", "a")], Some("9.4.0")));
    fleet.record(&by_second, "svc", "", &v1, true);
    let listed = fleet.instances(&v1).instances;
    assert_eq!(listed.len(), 2, "both live connections are listed");
    assert!(listed.iter().all(|i| i.duplicate_name && i.peer == "10.0.0.1:1"), "and flagged: {listed:?}");
    first.close();
    assert_eq!((fleet.tracked(), fleet.identified(), fleet.identity_bytes()), (1, 1, bytes));
    let listed = fleet.instances(&v1).instances;
    assert_eq!((listed.len(), listed[0].duplicate_name), (1, false));
    assert_eq!(fleet.agents_of("svc", &v1).len(), 1, "the later connection's row stays");
    // Nothing is recorded on a closed connection: a call still unwinding cannot bring it back.
    fleet.record(&by_first, "svc", "", &v1, true);
    fleet.identify(&by_first, &report("svc", "pod-1", &[], None));
    assert_eq!((fleet.tracked(), fleet.identified()), (1, 1));
    // The last holder of the second connection's state lets go: it closes too.
    drop((second, by_second));
    assert_eq!((fleet.tracked(), fleet.identified(), fleet.identity_bytes()), (0, 0, 0));
    assert!(fleet.instances(&v1).instances.is_empty());
}

/// `--agent-expiry` still removes the row of an open connection that stopped polling a
/// service (a proxy's pooled connection no longer carrying that agent); the connection's
/// identity stays as long as the connection.
#[test]
fn a_row_of_an_open_connection_that_stopped_polling_expires_and_its_identity_stays() {
    let fleet = Arc::new(fleet());
    let v1 = Digest::of_text("v1");
    let (_state, caller) = connection(1);
    fleet.identify(&caller, &report("svc", "pod-1", &[], None));
    fleet.record(&caller, "old", "", &v1, true);
    fleet.advance(Duration::from_secs(300));
    fleet.record(&caller, "svc", "", &v1, true);
    fleet.advance(Duration::from_secs(301));
    assert_eq!(fleet.sweep(), 1, "`old` was not polled for 601 s");
    let listed = fleet.instances(&v1).instances;
    let services: Vec<_> = listed[0].services.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(services, ["svc"]);
    fleet.advance(Duration::from_secs(3600));
    assert_eq!(fleet.sweep(), 1);
    assert_eq!((fleet.tracked(), fleet.identified()), (0, 1), "the identity lives with its connection");
}

#[test]
fn an_identity_keeps_at_most_its_byte_bound_of_properties() {
    let fleet = fleet();
    let big = "v".repeat(MAX_KEPT_TEXT_BYTES - 3);
    let many: Vec<(String, String)> = (0..MAX_PROPERTIES).map(|i| (format!("k{i:02}"), big.clone())).collect();
    let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    fleet.observe_identity(peer(1), &report("svc", "i", &pairs, None));
    let instance = &fleet.instances(&Digest::empty()).instances[0];
    let kept: usize = instance.properties.iter().map(|p| p.key.len() + p.value.len()).sum();
    assert!(kept <= MAX_IDENTITY_BYTES, "{kept}");
    assert_eq!(instance.properties.len(), MAX_PROPERTIES, "64 × 256 bytes fit exactly");
    let over: Vec<(String, String)> = (0..MAX_PROPERTIES).map(|i| (format!("key{i:02}"), big.clone())).collect();
    let pairs: Vec<(&str, &str)> = over.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    fleet.observe_identity(peer(1), &report("svc", "i", &pairs, None));
    let instance = &fleet.instances(&Digest::empty()).instances[0];
    assert_eq!(instance.properties.len(), MAX_PROPERTIES - 1, "the last one no longer fits");
    assert_eq!(instance.properties_cut, 1);
    assert!(fleet.identity_bytes() <= MAX_IDENTITY_BYTES + 64);
}

#[test]
fn a_one_off_poll_is_new_not_a_member_and_forgotten_within_a_minute() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    // A `skyconf fetch`: one poll, then gone. An agent: it polls again.
    fleet.observe("svc", "", peer(1), &v1, true);
    fleet.observe("svc", "", peer(2), &v1, true);
    fleet.observe("svc", v1.as_str(), peer(2), &v1, true);
    // An agent that said who it is (keepAlive) is a member from its first poll.
    fleet.observe_instance("svc", "pod-3", peer(3));
    fleet.observe("svc", "", peer(3), &v1, true);
    let counts = fleet.counts(&v1);
    assert_eq!(counts["svc"], StateCounts { agents: 2, applied: 1, behind: 1, stuck: 0, new: 1, anonymous: 0 });
    assert_eq!(state(&fleet, "svc", 1, &v1), AgentState::New);

    fleet.advance(ONE_OFF_EXPIRY + Duration::from_secs(1));
    assert_eq!(fleet.sweep(), 1, "only the one-off poll is forgotten");
    assert_eq!(fleet.agents_of("svc", &v1).len(), 2);
}

#[test]
fn an_agent_echoing_the_old_digest_n_polls_after_a_change_is_stuck() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    let v2 = Digest::of_text("v2");
    fleet.observe("svc", v1.as_str(), peer(1), &v1, true);
    fleet.observe("svc", v1.as_str(), peer(1), &v2, true);
    fleet.observe("svc", v1.as_str(), peer(1), &v2, true);
    assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind);
    fleet.observe("svc", v1.as_str(), peer(1), &v2, true);
    assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Stuck);
    let v3 = Digest::of_text("v3");
    assert_eq!(state(&fleet, "svc", 1, &v3), AgentState::Behind, "a newer change restarts the count");
    fleet.observe("svc", v3.as_str(), peer(1), &v3, true);
    assert_eq!(state(&fleet, "svc", 1, &v3), AgentState::Applied, "and it recovers");
}

#[test]
fn counts_services_and_peers_separately_and_the_table_is_bounded() {
    let fleet = Fleet::new(FleetOptions { max_agents: 3, ..FleetOptions::default() });
    let v1 = Digest::of_text("v1");
    // Each agent polls twice: a member of the fleet, not a one-off poll.
    for _ in 0..2 {
        fleet.observe("a", v1.as_str(), peer(1), &v1, true);
        fleet.observe("a", "", peer(2), &v1, true);
        fleet.observe("b", "", peer(1), &v1, true);
    }
    fleet.observe("c", "", peer(3), &v1, true);
    assert_eq!(fleet.tracked(), 3);
    assert_eq!(fleet.untracked_polls(), 1);
    let counts = fleet.counts(&v1);
    assert_eq!(counts["a"], StateCounts { agents: 2, applied: 1, behind: 1, stuck: 0, new: 0, anonymous: 0 });
    assert_eq!(counts["b"].agents, 1);
    assert!(!counts.contains_key("c"));
    assert_eq!(fleet.per_digest()[&("a".to_owned(), v1.to_string())], 1);
    assert_eq!(fleet.per_digest()[&("a".to_owned(), String::new())], 1);
    let long = "x".repeat(MAX_TRACKED_NAME_BYTES + 1);
    fleet.observe(&long, "", peer(9), &v1, true);
    assert_eq!(fleet.untracked_polls(), 2);
}

#[test]
fn sweeping_forgets_agents_not_seen_lately() {
    let expiring = Fleet::new(FleetOptions { expire_after: Duration::ZERO, ..FleetOptions::default() });
    let v1 = Digest::of_text("v1");
    expiring.observe("a", "", peer(1), &v1, true);
    expiring.observe_instance("a", "inst-1", peer(1));
    assert_eq!(expiring.sweep(), 1);
    assert_eq!(expiring.tracked(), 0);
    assert!(expiring.agents_of("a", &v1).is_empty());
    let kept = fleet();
    kept.observe("a", "", peer(1), &v1, true);
    assert_eq!(kept.sweep(), 0);
}

#[test]
fn instance_names_attach_to_the_peer_and_service() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    fleet.observe_instance("a", "pod-7@10.0.0.1", peer(1));
    fleet.observe("a", "", peer(1), &v1, true);
    fleet.observe("b", "", peer(1), &v1, true);
    assert_eq!(fleet.agents_of("a", &v1)[0].instance.as_deref(), Some("pod-7@10.0.0.1"));
    assert_eq!(fleet.agents_of("b", &v1)[0].instance, None);
}

#[test]
fn odd_input_is_cut_not_refused() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    let uuid = "é".repeat(300);
    fleet.observe("a", &uuid, peer(1), &v1, true);
    fleet.observe("a", &uuid, peer(1), &v1, true);
    let agent = &fleet.agents_of("a", &v1)[0];
    assert!(agent.digest.len() <= MAX_KEPT_TEXT_BYTES);
    assert_eq!(agent.polls_behind, 2);
    let v6 = SocketAddr::from(([0xfe80, 0, 0, 0, 0, 0, 0, 1], 5));
    fleet.observe("a", "", v6, &v1, true);
    assert_eq!(fleet.agents_of("a", &v1).len(), 2);
}

fn report(service: &str, instance: &str, properties: &[(&str, &str)], version: Option<&str>) -> InstanceIdentity {
    InstanceIdentity {
        service: service.into(),
        instance: instance.into(),
        properties: properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        agent_version: version.map(str::to_owned),
        reported_properties: true,
    }
}

fn keep_alive(service: &str, instance: &str) -> InstanceIdentity {
    InstanceIdentity { service: service.into(), instance: instance.into(), ..InstanceIdentity::default() }
}

fn pairs(properties: &[Property]) -> Vec<(&str, &str)> {
    properties.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect()
}

#[test]
fn a_keep_alive_keeps_the_reported_properties_and_a_new_report_replaces_them() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    let java = [("hostname", "pod-7"), ("ipv4", "10.0.0.7"), ("ipv4", "172.17.0.1"), ("language", "java")];
    fleet.observe_identity(peer(1), &report("svc", "pod-7@10.0.0.7", &java, Some("9.4.0")));
    fleet.observe("svc", "", peer(1), &v1, true);
    fleet.advance(Duration::from_secs(30));
    fleet.observe_identity(peer(1), &keep_alive("svc", "pod-7@10.0.0.7"));
    let listed = fleet.instances(&v1);
    let instance = &listed.instances[0];
    assert_eq!(pairs(&instance.properties), java, "in order, the repeated key kept");
    assert_eq!(instance.agent_version.as_deref(), Some("9.4.0"), "a keepAlive without metadata keeps it");
    assert!(instance.last_seen_ms >= instance.reported_ms.unwrap() + 30_000, "the keepAlive refreshed it");
    let agent = &fleet.agents_of("svc", &v1)[0];
    assert_eq!((pairs(&agent.properties), agent.agent_version.as_deref()), (java.to_vec(), Some("9.4.0")));

    fleet.observe_identity(peer(1), &report("svc", "pod-7@10.0.0.7", &[("hostname", "pod-7b")], Some("9.5.0")));
    let instance = &fleet.instances(&v1).instances[0];
    assert_eq!(pairs(&instance.properties), [("hostname", "pod-7b")]);
    assert_eq!(instance.agent_version.as_deref(), Some("9.5.0"));
    assert_eq!(fleet.identified(), 1);
}

#[test]
fn another_instance_on_the_same_connection_does_not_inherit_the_properties() {
    let fleet = fleet();
    fleet.observe_identity(peer(1), &report("svc", "old", &[("hostname", "a")], Some("9.4.0")));
    fleet.observe_identity(peer(1), &keep_alive("svc", "new"));
    let instance = &fleet.instances(&Digest::empty()).instances[0];
    assert_eq!((instance.instance.as_str(), instance.properties.len()), ("new", 0));
    assert_eq!((instance.agent_version.as_deref(), instance.reported_ms), (None, None));
    assert_eq!(fleet.identified(), 1);
}

#[test]
fn properties_are_capped_and_cut_and_what_was_cut_is_counted() {
    let fleet = fleet();
    let long = "é".repeat(200); // 400 bytes
    let mut many: Vec<(String, String)> = (0..MAX_PROPERTIES + 6).map(|i| (format!("k{i}"), "v".into())).collect();
    many[0].1 = long.clone();
    many[1].0 = long.clone();
    let identity = InstanceIdentity {
        service: "svc".into(),
        instance: "i".into(),
        properties: many,
        agent_version: Some("x".repeat(1000)),
        reported_properties: true,
    };
    fleet.observe_identity(peer(1), &identity);
    let instance = &fleet.instances(&Digest::empty()).instances[0];
    assert_eq!(instance.properties.len(), MAX_PROPERTIES);
    assert_eq!(instance.properties_cut, 6 + 2, "six dropped, two shortened");
    assert_eq!(fleet.properties_cut(), 8);
    assert!(
        instance.properties[0].value.len() <= MAX_KEPT_TEXT_BYTES && long.starts_with(&instance.properties[0].value)
    );
    assert!(instance.properties[1].key.len() <= MAX_KEPT_TEXT_BYTES);
    assert_eq!(
        instance.properties[MAX_PROPERTIES - 1].key,
        format!("k{}", MAX_PROPERTIES - 1),
        "the first ones are kept"
    );
    assert_eq!(instance.agent_version.as_ref().map(String::len), Some(MAX_KEPT_TEXT_BYTES));
}

#[test]
fn identities_are_bounded_by_max_agents() {
    let fleet = Fleet::new(FleetOptions { max_agents: 2, ..FleetOptions::default() });
    for port in 1..=3 {
        fleet.observe_identity(peer(port), &report("svc", &format!("i{port}"), &[("hostname", "h")], None));
    }
    assert_eq!((fleet.identified(), fleet.unkept_identities()), (2, 1));
    fleet.observe_identity(peer(1), &keep_alive("svc", "i1"));
    assert_eq!(fleet.identified(), 2, "a known identity is refreshed, not counted again");
    assert_eq!(fleet.instances(&Digest::empty()).instances.len(), 2);
}

#[test]
fn with_identities_expected_a_connection_that_never_sent_one_is_anonymous_not_a_member() {
    let v1 = Digest::of_text("v1");
    let feed = |fleet: &Fleet| {
        fleet.observe_identity(peer(1), &report("svc", "pod-1", &[("hostname", "pod-1")], Some("9.4.0")));
        for _ in 0..2 {
            fleet.observe("svc", v1.as_str(), peer(1), &v1, true);
            fleet.observe("svc", v1.as_str(), peer(2), &v1, true);
        }
        fleet.observe("svc", "", peer(3), &v1, true);
    };
    let gateway = Fleet::new(FleetOptions { expect_identity: true, ..FleetOptions::default() });
    feed(&gateway);
    let counts = gateway.counts(&v1);
    assert_eq!(counts["svc"], StateCounts { agents: 1, applied: 1, behind: 0, stuck: 0, new: 0, anonymous: 2 });
    assert_eq!(state(&gateway, "svc", 2, &v1), AgentState::Anonymous);
    assert_eq!(state(&gateway, "svc", 3, &v1), AgentState::Anonymous, "a one-off poll is anonymous too");
    let listed = gateway.instances(&v1);
    assert_eq!(listed.instances.len(), 1);
    assert_eq!(listed.instances[0].services[0].state, AgentState::Applied);
    let anonymous: Vec<_> = listed.anonymous.iter().map(|a| (a.peer.as_str(), a.state)).collect();
    assert_eq!(anonymous, [("10.0.0.1:2", AgentState::Anonymous), ("10.0.0.1:3", AgentState::Anonymous)]);
    // It says who it is: a member from then on.
    gateway.observe_identity(peer(2), &keep_alive("svc", "pod-2"));
    assert_eq!(state(&gateway, "svc", 2, &v1), AgentState::Applied);

    // Without the expectation (behind a proxy): pollers without identity are not anonymous.
    let plain = fleet();
    feed(&plain);
    let counts = plain.counts(&v1);
    assert_eq!(counts["svc"], StateCounts { agents: 2, applied: 2, behind: 0, stuck: 0, new: 1, anonymous: 0 });
    let listed = plain.instances(&v1);
    let states: Vec<_> = listed.anonymous.iter().map(|a| a.state).collect();
    assert_eq!(states, [AgentState::Applied, AgentState::New], "unidentified, in their usual states");
}

#[test]
fn sweeping_forgets_identities_not_refreshed() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    fleet.observe_identity(peer(1), &report("svc", "gone", &[("hostname", "a")], None));
    fleet.observe_identity(peer(2), &report("svc", "alive", &[("hostname", "b")], None));
    fleet.observe("svc", "", peer(2), &v1, true);
    fleet.advance(Duration::from_secs(599));
    fleet.observe_identity(peer(2), &keep_alive("svc", "alive"));
    fleet.observe("svc", "", peer(2), &v1, true);
    fleet.advance(Duration::from_secs(2));
    fleet.sweep();
    let listed = fleet.instances(&v1);
    assert_eq!(listed.instances.iter().map(|i| i.instance.as_str()).collect::<Vec<_>>(), ["alive"]);
    assert_eq!(pairs(&listed.instances[0].properties), [("hostname", "b")], "kept through the keepAlive");
    assert_eq!(fleet.identified(), 1);
    fleet.advance(Duration::from_secs(601));
    assert_eq!(fleet.sweep(), 1);
    assert_eq!((fleet.identified(), fleet.instances(&v1).instances.len()), (0, 0));
}

#[test]
fn instances_are_listed_in_a_stable_order_with_their_services() {
    let fleet = fleet();
    let v1 = Digest::of_text("v1");
    fleet.observe_identity(peer(3), &keep_alive("b-svc", "x"));
    fleet.observe_identity(peer(2), &keep_alive("a-svc", "y"));
    fleet.observe_identity(peer(1), &keep_alive("a-svc", "x"));
    fleet.observe("z", "", peer(1), &v1, true);
    fleet.observe("a-svc", "", peer(1), &v1, true);
    let listed = fleet.instances(&v1);
    let order: Vec<_> = listed.instances.iter().map(|i| (i.service.as_str(), i.instance.as_str())).collect();
    assert_eq!(order, [("a-svc", "x"), ("a-svc", "y"), ("b-svc", "x")]);
    let services: Vec<_> = listed.instances[0].services.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(services, ["a-svc", "z"]);
    assert!(listed.instances[1].services.is_empty(), "identified but not polling");
    assert_eq!(fleet.agents_of("z", &v1)[0].instance, None, "named only for its own service");
}

fn limited(max_agents: usize, max_unconfigured: usize) -> Fleet {
    Fleet::new(FleetOptions { max_agents, max_unconfigured, ..FleetOptions::default() })
}

#[test]
fn a_flood_of_unconfigured_names_stays_within_its_quota_and_real_agents_are_tracked() {
    let fleet = limited(100, 10);
    let (v1, empty) = (Digest::of_text("v1"), Digest::empty());
    fleet.observe("svc-a", "", peer(1), &v1, true);
    for i in 0..1000 {
        fleet.observe(&format!("fake-{i}"), "", peer(2), &empty, false);
    }
    assert_eq!(fleet.tracked_unconfigured(), 10);
    assert_eq!(fleet.tracked(), 11);
    assert_eq!(fleet.evictions(), 990);
    assert_eq!(fleet.untracked_polls(), 0);
    let kept: Vec<_> = (990..1000).map(|i| format!("fake-{i}")).collect();
    let counts = fleet.counts(&empty);
    assert!(kept.iter().all(|name| counts.contains_key(name.as_str())), "the newest fakes are kept");
    // A real agent arriving after the flood, on another peer, is tracked; the first one stays.
    fleet.observe("svc-a", "", peer(3), &v1, true);
    assert_eq!(fleet.agents_of("svc-a", &v1).len(), 2);
}

#[test]
fn configured_pairs_take_the_place_of_unconfigured_ones_when_the_table_is_full() {
    let fleet = limited(4, 4);
    let (v1, empty) = (Digest::of_text("v1"), Digest::empty());
    for i in 0..4 {
        fleet.observe(&format!("fake-{i}"), "", peer(2), &empty, false);
    }
    assert_eq!(fleet.tracked(), 4);
    // On another peer (another shard, most likely): the eviction finds the fakes there.
    for port in 10..14 {
        fleet.observe("svc-a", "", peer(port), &v1, true);
    }
    assert_eq!(fleet.agents_of("svc-a", &v1).len(), 4);
    assert_eq!((fleet.tracked(), fleet.tracked_unconfigured(), fleet.evictions()), (4, 0, 4));
    // Full of configured pairs: nothing is evicted for a new one, it is answered untracked.
    fleet.observe("svc-a", "", peer(20), &v1, true);
    fleet.observe("fake-9", "", peer(20), &empty, false);
    assert_eq!((fleet.tracked(), fleet.untracked_polls()), (4, 2));
}

#[test]
fn an_unconfigured_agent_that_polls_again_outlives_names_seen_once() {
    let fleet = limited(100, 2);
    let empty = Digest::empty();
    fleet.observe("typo-svc", "", peer(1), &empty, false);
    fleet.observe("fake-0", "", peer(1), &empty, false);
    // The clock counts milliseconds: the second poll must be seen later than the first.
    std::thread::sleep(Duration::from_millis(2));
    fleet.observe("typo-svc", "", peer(1), &empty, false);
    fleet.observe("fake-1", "", peer(1), &empty, false);
    let counts = fleet.counts(&empty);
    assert!(counts.contains_key("typo-svc"), "{counts:?}");
    assert!(!counts.contains_key("fake-0"), "the least recently seen is evicted: {counts:?}");
}

#[test]
fn a_service_that_gains_or_loses_its_configuration_changes_kind() {
    let fleet = limited(100, 1);
    let (v1, empty) = (Digest::of_text("v1"), Digest::empty());
    fleet.observe("new-svc", "", peer(1), &empty, false);
    assert_eq!(fleet.tracked_unconfigured(), 1);
    fleet.observe("new-svc", "", peer(1), &v1, true);
    assert_eq!(fleet.tracked_unconfigured(), 0, "configured now: not in the quota");
    fleet.observe("fake-0", "", peer(1), &empty, false);
    fleet.observe("fake-1", "", peer(1), &empty, false);
    assert_eq!(fleet.agents_of("new-svc", &v1).len(), 1, "never evicted once configured");
    fleet.observe("new-svc", "", peer(1), &empty, false);
    assert_eq!(fleet.tracked_unconfigured(), 2, "its configuration was removed");
    // Over the quota until evictions catch up: each new unconfigured pair evicts one.
    fleet.observe("fake-2", "", peer(1), &empty, false);
    assert_eq!(fleet.tracked_unconfigured(), 2);
    assert_eq!(fleet.tracked(), 2);
    let expiring = Fleet::new(FleetOptions { expire_after: Duration::ZERO, ..FleetOptions::default() });
    expiring.observe("fake", "", peer(1), &empty, false);
    assert_eq!(expiring.sweep(), 1);
    assert_eq!(expiring.tracked_unconfigured(), 0, "a sweep counts what it forgets");
}
