//! `skyconf rollout --text`: a rollout answer for a person. A heading (id, services, release,
//! state, wave), where the wave stands (reached and applied counts, each reached instance), the
//! gates, the events with their times (UTC, `HH:MM:SSZ`) and the ended rollouts; and, for
//! `status --watch --text`, only what changed since the last look.

use serde_json::Value;

use crate::commands::outln;

/// Prints the whole answer.
pub(super) fn rollout(answer: &Value) {
    let r = &answer["rollout"];
    if r.is_null() {
        outln!("No rollout yet.");
    } else {
        outln!("{}", heading(r));
        let mut about = vec![format!("advance {}", text(&r["advance"]))];
        if r["ungated"] == true {
            about.push("ungated".to_owned());
        }
        about.push(gates(&r["gates"]));
        if let Some(author) = r["author"].as_str() {
            about.push(format!("by {author}"));
        }
        if let Some(message) = r["message"].as_str() {
            about.push(format!("\"{message}\""));
        }
        outln!("  {}", about.join("; "));
        if is_active(r) {
            for agent in r["progress"]["agents"].as_array().into_iter().flatten() {
                let applied = if agent["applied"] == true { "applied" } else { "not applied" };
                let seen =
                    agent["last_seen_ms"].as_u64().map_or("no row now".to_owned(), |ms| format!("seen {}", clock(ms)));
                outln!("    {} ({}): {applied}, {seen}", text(&agent["instance"]), text(&agent["service"]));
            }
        }
        outln!("Events (UTC):");
        for event in r["events"].as_array().into_iter().flatten() {
            outln!("{}", event_line(event));
        }
    }
    let history = answer["history"].as_array().cloned().unwrap_or_default();
    if !history.is_empty() {
        outln!("Ended rollouts, newest first:");
        for h in &history {
            let waves = h["waves"].as_array().map_or(0, Vec::len);
            outln!(
                "  {}  {}  {}  wave {} of {waves}  {}",
                text(&h["id"]),
                text(&h["state"]),
                services(h),
                h["wave"],
                text(&h["outcome"])
            );
        }
    }
}

/// Prints what changed since `last` (the previous look's [`super::visible`]): where the rollout
/// stands when its state, wave or counts changed, and each new event.
pub(super) fn changes(answer: &Value, last: Option<&Value>) {
    let r = &answer["rollout"];
    let Some(last) = last.filter(|last| last[0] == r["id"]) else {
        return rollout(answer);
    };
    let now = super::visible(answer);
    if now.as_array().map(|v| &v[1..5]) != last.as_array().map(|v| &v[1..5]) {
        let at = r["events"].as_array().and_then(|e| e.last()).and_then(|e| e["at_ms"].as_u64()).unwrap_or(0);
        outln!("{}  {}", clock(at), standing(r));
    }
    let events = r["events"].as_array().cloned().unwrap_or_default();
    let seen = events.iter().rposition(|e| *e == last[5]).map_or(0, |i| i + 1);
    for event in &events[seen..] {
        outln!("{}", event_line(event));
    }
}

/// `Rollout r1 of svc on release 3: running, wave 1 of 2 (1 more instance(s) of each service)`.
fn heading(r: &Value) -> String {
    format!("Rollout {} of {} on release {}: {}", text(&r["id"]), services(r), r["base_release"], standing(r))
}

/// `running, wave 1 of 2 (10% of the instances): 3 reached, 2 applied`.
fn standing(r: &Value) -> String {
    let wave = r["waves"].get(r["wave_index"].as_u64().unwrap_or(0) as usize).map(target).unwrap_or_default();
    let mut out =
        format!("{}, wave {} of {} ({wave})", text(&r["state"]), r["progress"]["wave"], r["progress"]["waves"]);
    if is_active(r) {
        out.push_str(": ");
        out.push_str(&reach(r));
    }
    out
}

fn reach(r: &Value) -> String {
    format!("{} reached, {} applied", r["progress"]["reached"], r["progress"]["applied"])
}

fn target(wave: &Value) -> String {
    match (wave["share"].as_str(), wave["instances"].as_u64()) {
        (Some(share), _) => format!("{share} of the instances"),
        (None, Some(count)) => format!("{count} more instance(s) of each service"),
        _ => String::new(),
    }
}

fn gates(g: &Value) -> String {
    let mut out = format!(
        "gates: apply within {} s, bake {} s, lost after {} s",
        g["apply_within_s"], g["bake_s"], g["lost_after_s"]
    );
    if let Some(max) = g["prometheus"]["max"].as_f64() {
        out.push_str(&format!(", Prometheus <= {max}"));
    }
    out
}

fn event_line(event: &Value) -> String {
    format!(
        "  {}  {:<9} {}",
        clock(event["at_ms"].as_u64().unwrap_or(0)),
        text(&event["kind"]),
        text(&event["message"])
    )
}

/// The changed services, then the changed `opamp:` groups as the rollout names them
/// (`opamp:<group>`).
fn services(r: &Value) -> String {
    let list = |key: &str| r[key].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned);
    let groups = list("opamp_groups").map(|g| format!("opamp:{g}"));
    list("services").chain(groups).collect::<Vec<_>>().join(", ")
}

fn is_active(r: &Value) -> bool {
    matches!(r["phase"].as_str(), Some("running" | "waiting" | "completing"))
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// Unix milliseconds as the time of day in UTC: `12:03:04Z`.
fn clock(ms: u64) -> String {
    let seconds = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}Z", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_rollout_reads_as_a_heading_its_reach_and_its_events() {
        let r = json!({
            "id": "r1", "services": ["a", "b"], "base_release": 3, "state": "running", "phase": "running",
            "wave_index": 0, "waves": [{"instances": 1}, {"share": "100%"}],
            "progress": {"wave": 1, "waves": 2, "reached": 2, "applied": 1},
        });
        assert_eq!(
            heading(&r),
            "Rollout r1 of a, b on release 3: running, wave 1 of 2 (1 more instance(s) of each service): 2 reached, 1 applied"
        );
        let event = json!({"at_ms": 45_296_000u64, "kind": "wave", "message": "Wave 1 of 2 started"});
        assert_eq!(event_line(&event), "  12:34:56Z  wave      Wave 1 of 2 started");
        assert_eq!(clock(86_400_000 + 1000), "00:00:01Z");
        let mixed = json!({"services": ["a"], "opamp_groups": ["collectors"]});
        assert_eq!(services(&mixed), "a, opamp:collectors");
    }
}
