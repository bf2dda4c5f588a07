//! Tests of the rollout rule: whole rollouts driven through [`super::Rollout::step`] without a clock.

use super::*;
use crate::rollout::prometheus::PrometheusGate;

#[test]
fn an_id_is_the_start_in_utc_a_person_reads() {
    assert_eq!(rollout_id(1_796_613_877_116), "r-20261207-032437-116");
    assert_eq!(rollout_id(951_782_400_000 + 86_399_999), "r-20000229-235959-999");
    assert_eq!(rollout_id(0), "r-19700101-000000-000");
    assert!(rollout_id(1_796_613_877_116) < rollout_id(1_796_613_877_117), "ids sort as rollouts started");
}

#[test]
fn the_changes_shown_are_key_by_key_and_bounded() {
    let before = skyconf_core::read("configurations:\n  a: {k: 1, gone: x}\n").unwrap();
    let long = "v".repeat(MAX_VALUE_SHOWN * 2);
    let after = skyconf_core::read(&format!("configurations:\n  a: {{k: 2, new: {long}}}\n")).unwrap();
    let changes = changes_shown(&before, &after);
    assert_eq!(changes.len(), 1);
    let keys: Vec<_> =
        changes[0].keys.iter().map(|k| (k.key.as_str(), k.before.as_deref(), k.after.as_deref())).collect();
    assert_eq!(keys[0], ("k", Some("1"), Some("2")));
    assert!(keys.contains(&("gone", Some("x"), None)), "{keys:?}");
    let new = keys.iter().find(|k| k.0 == "new").unwrap().2.unwrap();
    assert!(new.len() <= MAX_VALUE_SHOWN && new.ends_with('…'), "{new}");
    let many = (0..MAX_CHANGES_SHOWN + 5).map(|i| format!("  s{i}: {{k: {i}}}\n")).collect::<String>();
    let after = skyconf_core::read(&format!("configurations:\n{many}")).unwrap();
    assert_eq!(changes_shown(&before, &after).len(), MAX_CHANGES_SHOWN);
}

fn rollout(waves: &[WaveSpec], advance: Advance) -> Rollout {
    let mut r = Rollout {
        id: "r1".into(),
        document: String::new(),
        base_release: 7,
        services: vec!["svc".into()],
        opamp_groups: Vec::new(),
        changes: Vec::new(),
        waves: waves.to_vec(),
        gates: Gates { apply_within_s: 10, bake_s: 5, lost_after_s: 3, prometheus: None },
        advance,
        ungated: false,
        author: None,
        message: None,
        created_ms: 0,
        phase: Phase::Running,
        wave_index: 0,
        wave_started_ms: 0,
        applied_ms: None,
        named: BTreeMap::new(),
        watched: BTreeMap::new(),
        release: None,
        events: Vec::new(),
        driver: "a".into(),
        driver_seen_ms: 0,
    };
    let known: Vec<(String, String)> = (0..20).map(|i| ("svc".to_owned(), format!("pod-{i}"))).collect();
    r.start_wave(0, 0, &known);
    r
}

fn share(text: &str) -> WaveSpec {
    WaveSpec { share: Some(text.into()), instances: None }
}

fn count(n: usize) -> WaveSpec {
    WaveSpec { share: None, instances: Some(n) }
}

/// 20 agents seen at `now`, each applied when reached (`applied`), or never.
fn fleet(r: &Rollout, now: u64, applied: bool) -> Vec<Observed> {
    let members = r.members();
    (0..20)
        .map(|i| {
            let instance = format!("pod-{i}");
            let reached = members.holds("svc", &instance);
            Observed {
                service: "svc".into(),
                instance,
                reached,
                applied: !reached || applied,
                failed: None,
                last_seen_ms: now,
                held: false,
            }
        })
        .collect()
}

/// The driver's memory when `r`'s wave starts at 0: every agent listed, last seen then.
fn started(r: &Rollout) -> Sightings {
    let mut seen = Sightings::default();
    seen.baseline(&r.id, r.wave_index, &fleet(r, 0, true), 0);
    seen
}

/// Steps `r` at `now` with a fresh fleet and a driver's memory `seen`.
fn step(r: &mut Rollout, seen: &mut Sightings, now: u64, applied: bool) -> Step {
    let agents = fleet(r, now, applied);
    r.step(now, &agents, seen, &Reading::Unread)
}

#[test]
fn a_count_wave_picks_the_lowest_hashes_of_each_service_and_later_shares_keep_them() {
    let mut r = rollout(&[count(1), share("50%"), share("100%")], Advance::Auto);
    let picked: Vec<&String> = r.named["svc"].iter().collect();
    assert_eq!(picked.len(), 1);
    let lowest = (0..20).map(|i| format!("pod-{i}")).min_by_key(|n| share_bucket("svc", n)).unwrap();
    assert_eq!(picked[0], &lowest);
    let reached = fleet(&r, 0, true).iter().filter(|a| a.reached).count();
    assert_eq!(reached, 1);
    assert!(r.events[0].message.contains("it reaches 1 of 20 live identified instance(s) of svc"), "{:?}", r.events);

    // Two services: one instance of each.
    r.services = vec!["a".into(), "b".into()];
    r.named.clear();
    let live: Vec<(String, String)> =
        ["a", "b"].iter().flat_map(|s| (0..5).map(move |i| (s.to_string(), format!("{s}-{i}")))).collect();
    r.start_wave(0, 0, &live);
    assert_eq!((r.named["a"].len(), r.named["b"].len()), (1, 1));
}

#[test]
fn waves_advance_after_apply_and_bake_and_the_last_completes() {
    let mut r = rollout(&[count(1), share("50%"), share("100%")], Advance::Auto);
    let seen = &mut started(&r);
    assert_eq!(step(&mut r, seen, 1000, true), Step::Changed, "applied");
    assert_eq!(r.applied_ms, Some(1000));
    assert_eq!(r.reached(), 1);
    assert_eq!(step(&mut r, seen, 5999, true), Step::Same, "baking");
    assert_eq!(step(&mut r, seen, 6000, true), Step::Changed);
    assert_eq!((r.wave_index, r.phase), (1, Phase::Running));
    let reached = fleet(&r, 6000, true).iter().filter(|a| a.reached).count();
    assert!((5..=15).contains(&reached), "about half of 20: {reached}");
    step(&mut r, seen, 7000, true);
    assert_eq!(r.reached(), reached);
    step(&mut r, seen, 12_000, true);
    assert_eq!(r.wave_index, 2);
    assert!(fleet(&r, 12_000, true).iter().all(|a| a.reached));
    step(&mut r, seen, 13_000, true);
    assert_eq!(step(&mut r, seen, 18_000, true), Step::Complete);
    assert_eq!(r.phase, Phase::Completing);
    assert!(r.members().holds("svc", "pod-3"), "served until the document is written");
    assert!(r.events.iter().all(|e| e.message.starts_with(char::is_uppercase)), "{:?}", r.events);
}

#[test]
fn an_agent_that_does_not_apply_in_time_reverts_the_wave() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    let seen = &mut started(&r);
    assert_eq!(step(&mut r, seen, 1, false), Step::Changed, "reached");
    assert_eq!(step(&mut r, seen, 10_000, false), Step::Same);
    assert_eq!(r.phase, Phase::Running);
    assert_eq!(step(&mut r, seen, 10_001, false), Step::Changed);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert!(said.contains("20 of 20 reached agent(s) did not apply within 10 s"), "{said}");
    assert!(said.ends_with("and 10 more"), "ten named, the rest counted: {said}");
    assert!(r.members().named.is_empty() && r.members().share.is_none(), "nobody is served the candidate");
}

#[test]
fn a_reached_agent_that_stops_polling_reverts_even_after_its_wave() {
    let mut r = rollout(&[count(1), share("100%")], Advance::Auto);
    let seen = &mut started(&r);
    step(&mut r, seen, 1000, true);
    step(&mut r, seen, 6000, true);
    assert_eq!(r.wave_index, 1);
    let first = r.named["svc"].iter().next().unwrap().clone();
    // The first wave's agent stops polling during the second wave: its row stays as it was.
    let mut agents = fleet(&r, 7000, true);
    agents.iter_mut().filter(|a| a.instance == first).for_each(|a| a.last_seen_ms = 6000);
    assert_eq!(r.step(7000, &agents, seen, &Reading::Unread), Step::Changed, "seen 1 s ago: not lost yet");
    assert_eq!(r.phase, Phase::Running);
    // Last seen live at 6 s by this driver: disappeared 3 s later, however old its row says.
    let mut agents = fleet(&r, 9000, true);
    agents.retain(|a| a.instance != first);
    assert_eq!(r.step(9000, &agents, seen, &Reading::Unread), Step::Same);
    let mut agents = fleet(&r, 9001, true);
    agents.retain(|a| a.instance != first);
    r.step(9001, &agents, seen, &Reading::Unread);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert!(said.contains("1 reached agent(s) disappeared") && said.contains(&first), "{said}");
}

/// A reached agent whose held poll is answered the candidate and that crashes before the
/// driver's next look saw its row move was live at the look that saw it held: it disappeared,
/// `lost_after_s` after that look. One never seen held (a row that stays as it was) is not.
#[test]
fn a_reached_agent_seen_held_then_gone_before_its_row_moved_has_disappeared() {
    let mut r = rollout(&[count(2), share("100%")], Advance::Auto);
    r.gates.bake_s = 600;
    let picked: Vec<String> = r.named["svc"].iter().cloned().collect();
    let held = |r: &Rollout, now| {
        let mut agents = fleet(r, now, true);
        agents.iter_mut().for_each(|a| a.held = a.instance != picked[1]);
        agents
    };
    let seen = &mut Sightings::default();
    seen.baseline(&r.id, 0, &held(&r, 0), 0);
    // Both picked agents leave before the driver's first step; only one was seen held.
    let gone = |r: &Rollout, now| {
        let mut agents = held(r, now);
        agents.retain(|a| !picked.contains(&a.instance));
        agents
    };
    assert_eq!(r.step(3000, &gone(&r, 0), seen, &Reading::Unread), Step::Changed, "watched, not lost yet");
    assert_eq!(r.watched["svc"].iter().collect::<Vec<_>>(), vec![&picked[0]]);
    assert_eq!(r.phase, Phase::Running);
    r.step(3001, &gone(&r, 0), seen, &Reading::Unread);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert!(said.contains("1 reached agent(s) disappeared") && said.contains(&picked[0]), "{said}");
}

/// Finding N2: an instance whose last sighting is before the wave started is never reached,
/// whatever the listing still shows of it; one that vanishes from the listing after it was
/// reached has disappeared `lost_after_s` after its last sighting.
#[test]
fn an_instance_last_seen_before_the_wave_started_is_never_reached() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    r.gates.bake_s = 600;
    r.wave_started_ms = 100_000;
    // pod-0 left 45 s before the wave started, pod-1 a millisecond before; pod-5 is listed
    // unless `gone`.
    let agents = |r: &Rollout, now: u64, gone: bool| {
        let mut agents = fleet(r, now, true);
        agents[0].last_seen_ms = 100_000 - 45_000;
        agents[1].last_seen_ms = 100_000 - 1;
        agents.retain(|a| !(gone && a.instance == "pod-5"));
        agents
    };
    let seen = &mut Sightings::default();
    seen.baseline(&r.id, 0, &agents(&r, 100_000, false), 100_000);
    for now in [100_000, 102_000, 104_000, 110_000] {
        r.step(now, &agents(&r, now, false), seen, &Reading::Unread);
        assert_eq!(r.phase, Phase::Running, "{:?}", r.events.last());
        assert_eq!(r.reached(), if now == 100_000 { 0 } else { 18 }, "at {now}");
        // pod-1, live until 3 s after its last sighting, is waited for until then.
        assert_eq!(r.applied_ms, (now > 102_999).then_some(104_000), "at {now}");
    }
    assert!(!r.watched["svc"].contains("pod-0") && !r.watched["svc"].contains("pod-1"));
    // pod-5 vanishes from the listing (its connection closed) after 110 s.
    assert_eq!(r.step(113_000, &agents(&r, 113_000, true), seen, &Reading::Unread), Step::Same, "3 s: not yet");
    assert_eq!(r.step(113_001, &agents(&r, 113_001, true), seen, &Reading::Unread), Step::Changed);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert!(said.contains("1 reached agent(s) disappeared") && said.contains("pod-5 (svc)"), "{said}");
}

/// A sighting is a row that moves on, not a time compared with the driver's clock: with the
/// fleet's clock an hour behind (a step of the system clock), live agents are reached and
/// stay; an hour ahead, one that left before the wave started is still never reached.
#[test]
fn sightings_do_not_depend_on_the_fleets_clock() {
    const START: u64 = 10_000_000;
    for skew in [-3_600_000i64, 3_600_000] {
        let mut r = rollout(&[share("100%")], Advance::Auto);
        r.wave_started_ms = START;
        r.gates.bake_s = 600;
        // pod-0 left 10 s before the start, by the fleet's clock.
        let listed = |r: &Rollout, now: u64| {
            let mut agents = fleet(r, now.saturating_add_signed(skew), true);
            agents[0].last_seen_ms = (START - 10_000).saturating_add_signed(skew);
            agents
        };
        let seen = &mut Sightings::default();
        seen.baseline(&r.id, 0, &listed(&r, START), START);
        for now in [START + 1000, START + 2000, START + 4000] {
            r.step(now, &listed(&r, now), seen, &Reading::Unread);
            assert_eq!((r.phase, r.reached()), (Phase::Running, 19), "skew {skew} at {now}: {:?}", r.events);
        }
        // Only waiting for listed instances not seen yet reads the fleet's clock: ahead of the
        // driver's, it takes pod-0 for live until `apply_within_s` has passed.
        r.step(START + 10_000, &listed(&r, START + 10_000), seen, &Reading::Unread);
        let applied = if skew < 0 { START + 1000 } else { START + 10_000 };
        assert_eq!(r.applied_ms, Some(applied), "skew {skew}");
        assert_eq!(r.phase, Phase::Running);
    }
}

/// A driver that takes over (or restarts) has no sightings: it gives every reached instance
/// `lost_after_s` from then, and one its listing shows older is judged by that row.
#[test]
fn a_driver_that_takes_over_judges_from_its_own_first_look() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    r.gates.bake_s = 600;
    let first = &mut started(&r);
    step(&mut r, first, 1000, true);
    assert_eq!(r.reached(), 20);
    let other = &mut Sightings::default();
    let without =
        |r: &Rollout, now| fleet(r, now, true).into_iter().filter(|a| a.instance != "pod-1").collect::<Vec<_>>();
    r.step(50_000, &without(&r, 50_000), other, &Reading::Unread);
    assert_eq!(r.phase, Phase::Running, "{:?}", r.events.last());
    assert_eq!(other.last_live_ms("r1", "svc", "pod-1"), Some(50_000));
    assert_eq!(r.step(53_000, &without(&r, 53_000), other, &Reading::Unread), Step::Same);
    r.step(53_001, &without(&r, 53_001), other, &Reading::Unread);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert!(said.contains("1 reached agent(s) disappeared") && said.ends_with("pod-1 (svc)"), "{said}");
}

/// A late arrival in a share (or an agent that restarts and re-syncs) has `apply_within_s` of
/// its own, from when it is first seen without its digest; the wave waits for it.
#[test]
fn a_late_arrival_must_apply_within_its_own_window() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    let seen = &mut Sightings::default();
    seen.baseline(&r.id, 0, &fleet(&r, 0, true)[..19], 0);
    let mut agents = fleet(&r, 1000, true);
    agents.truncate(19);
    r.step(1000, &agents, seen, &Reading::Unread);
    assert_eq!(r.applied_ms, Some(1000));
    // pod-19 arrives during the bake and does not apply: reached once seen again.
    let arrived = |r: &Rollout, now| {
        let mut agents = fleet(r, now, true);
        agents[19].applied = false;
        agents
    };
    r.step(5500, &arrived(&r, 5500), seen, &Reading::Unread);
    assert_eq!(r.reached(), 19);
    assert_eq!(r.step(6000, &arrived(&r, 6000), seen, &Reading::Unread), Step::Changed, "reached");
    assert_eq!(r.reached(), 20);
    assert_eq!(r.step(6500, &arrived(&r, 6500), seen, &Reading::Unread), Step::Same, "baked; pod-19 not applied");
    assert_eq!(r.step(15_999, &arrived(&r, 15_999), seen, &Reading::Unread), Step::Same);
    r.step(16_000, &arrived(&r, 16_000), seen, &Reading::Unread);
    assert_eq!(r.phase, Phase::Reverted);
    assert!(r.events.last().unwrap().message.contains("1 of 20 reached agent(s) did not apply"));
}

/// Finding N3: a wave that reaches no instance of a changed service waits `apply_within_s` for
/// one, then says that no gate judged the rollout there; an ungated one says so at once.
#[test]
fn a_wave_that_reaches_nobody_of_a_service_says_so() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    r.services.push("quiet".into());
    let seen = &mut started(&r);
    assert_eq!(step(&mut r, seen, 1000, true), Step::Changed);
    assert_eq!(r.applied_ms, None, "waits for an instance of `quiet`");
    assert_eq!(step(&mut r, seen, 9_999, true), Step::Same);
    assert_eq!(step(&mut r, seen, 10_000, true), Step::Changed);
    assert_eq!(r.applied_ms, Some(10_000));
    let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["wave", "applied", "unjudged"]);
    let said = &r.events[2].message;
    assert!(said.starts_with("Wave 1 reached no instance of quiet (no identified instance of it is live)"), "{said}");

    let mut r = rollout(&[share("50%"), share("100%")], Advance::Auto);
    r.services = vec!["nobody".into()];
    r.ungated = true;
    assert_eq!(r.step(0, &[], seen, &Reading::Unread), Step::Changed);
    assert_eq!(r.applied_ms, Some(0), "ungated: no wait");
    assert_eq!(r.events.last().unwrap().kind, "unjudged");
    assert!(r.events.last().unwrap().message.ends_with("; the rollout is ungated"));
    r.step(5000, &[], seen, &Reading::Unread);
    assert_eq!(r.wave_index, 1, "a write in steps: the bake still passes");
    r.step(5000, &[], seen, &Reading::Unread);
    assert_eq!(r.step(10_000, &[], seen, &Reading::Unread), Step::Complete);
    let unjudged = r.events.iter().filter(|e| e.kind == "unjudged").count();
    assert_eq!(unjudged, 2, "each wave says so: {:?}", r.events);
}

#[test]
fn the_prometheus_gate_holds_a_wave_until_read_and_reverts_when_over() {
    let mut r = rollout(&[share("10%"), share("100%")], Advance::Manual);
    r.gates.prometheus = Some(PrometheusGate { url: "http://p".into(), query: "q".into(), max: 0.1 });
    let seen = &mut started(&r);
    r.step(1, &fleet(&r, 1, true), seen, &Reading::Unread);
    assert_eq!(r.applied_ms, Some(1));
    assert_eq!(r.step(5001, &fleet(&r, 5001, true), seen, &Reading::Error("refused".into())), Step::Changed);
    assert_eq!(r.events.last().unwrap().kind, "gate");
    let again = r.step(5500, &fleet(&r, 5500, true), seen, &Reading::Error("refused".into()));
    assert_eq!(again, Step::Same, "said once");
    assert_eq!(r.phase, Phase::Running, "an unread gate neither passes nor fails");
    r.step(6000, &fleet(&r, 6000, true), seen, &Reading::Pass);
    assert_eq!(r.phase, Phase::Waiting, "manual: waits for a promote");
    assert!(r.promote(6500, Some("ops"), &[]).is_ok());
    assert_eq!((r.wave_index, r.phase), (1, Phase::Running));
    r.step(7000, &fleet(&r, 7000, true), seen, &Reading::Fail("0.2 > 0.1".into()));
    assert_eq!(r.phase, Phase::Reverted);
    assert!(r.promote(8000, None, &[]).unwrap_err().contains("reverted"));
}

/// Finding N7: a record's events are bounded in number and size, whatever their authors write.
#[test]
fn events_are_bounded_in_number_and_size() {
    let mut r = rollout(&[share("100%")], Advance::Auto);
    assert!(check_attribution(Some(&"a".repeat(MAX_AUTHOR_BYTES)), Some(&"m".repeat(MAX_MESSAGE_BYTES))).is_ok());
    assert!(check_attribution(Some(&"a".repeat(MAX_AUTHOR_BYTES + 1)), None).unwrap_err().contains("author"));
    assert!(check_attribution(None, Some(&"m".repeat(MAX_MESSAGE_BYTES + 1))).unwrap_err().contains("message"));
    assert!(check_attribution(Some("a\u{0}b"), None).is_err());
    for i in 0..1000 {
        r.event(i, "promoted", format!("Wave {i} promoted by {}", "é".repeat(100_000)));
    }
    assert_eq!(r.events.len(), MAX_EVENTS);
    assert!(r.events.iter().all(|e| e.message.len() <= MAX_EVENT_BYTES && e.message.ends_with('…')));
    let bytes = serde_json::to_vec(&r).unwrap().len();
    assert!(bytes < MAX_EVENTS * (MAX_EVENT_BYTES + 64) + 4096, "{bytes} bytes");
}

/// A mixed rollout judges an OpAMP group's agents beside the services' instances: a reached
/// agent's APPLIED lets the wave pass, its FAILED reverts the wave at once, with its error
/// message.
#[test]
fn a_reached_opamp_agent_gates_the_wave_by_the_status_it_reports() {
    let unit = crate::opamp::rollout::unit("collectors");
    let with_agent = |r: &Rollout, now, applied: bool, failed: Option<&str>| {
        let mut agents = fleet(r, now, true);
        agents.push(Observed {
            service: unit.clone(),
            instance: "otel-1".into(),
            reached: r.members().holds(&unit, "otel-1"),
            applied,
            failed: failed.map(str::to_owned),
            last_seen_ms: now,
            held: true,
        });
        agents
    };
    let mixed = || {
        let mut r = rollout(&[share("100%")], Advance::Auto);
        r.opamp_groups = vec!["collectors".into()];
        assert_eq!(r.units(), ["svc".to_owned(), unit.clone()]);
        r
    };
    let mut r = mixed();
    let seen = &mut Sightings::default();
    seen.baseline(&r.id, 0, &with_agent(&r, 0, false, None), 0);
    assert_eq!(r.step(1000, &with_agent(&r, 1000, false, None), seen, &Reading::Unread), Step::Changed);
    assert!(r.watched[&unit].contains("otel-1"), "reached: live at this look");
    assert_eq!(r.applied_ms, None, "waits for the agent's APPLIED");
    r.step(1500, &with_agent(&r, 1500, false, Some("bad ratio")), seen, &Reading::Unread);
    assert_eq!(r.phase, Phase::Reverted);
    let said = &r.events.last().unwrap().message;
    assert_eq!(said, "Wave 1: 1 reached agent(s) reported FAILED: otel-1 (opamp:collectors): bad ratio");

    let mut r = mixed();
    let seen = &mut Sightings::default();
    seen.baseline(&r.id, 0, &with_agent(&r, 0, false, None), 0);
    r.step(1000, &with_agent(&r, 1000, true, None), seen, &Reading::Unread);
    assert_eq!(r.applied_ms, Some(1000));
    assert_eq!(r.events.last().unwrap().message, "Wave 1: all 21 reached agent(s) applied");
    assert_eq!(r.step(6000, &with_agent(&r, 6000, true, None), seen, &Reading::Unread), Step::Complete);
}

#[test]
fn a_record_written_with_a_0_based_wave_reads_as_wave_index() {
    let r = rollout(&[share("100%")], Advance::Auto);
    let mut json = serde_json::to_value(&r).unwrap();
    let index = json.as_object_mut().unwrap().remove("wave_index").unwrap();
    json["wave"] = index;
    let read: Rollout = serde_json::from_value(json).unwrap();
    assert_eq!(read, r);
}
