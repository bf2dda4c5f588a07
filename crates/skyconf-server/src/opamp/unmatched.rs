//! Groups of the served `opamp:` section that no connected agent is in — on any replica, as of
//! their last summaries. Most often a `match` that names an attribute value no agent reports
//! (`service.name: chekout`): the group's files then reach nobody, and nothing else says so.
//!
//! `GET /api/v1/opamp/agents` lists them (`unmatched_groups`). A replica that serves OpAMP logs a
//! warning for a group once it has matched no agent for [`UNMATCHED_GRACE`] (agents reconnect,
//! replicas publish with a delay), and again only after an agent was in it in between.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use skyconf_core::opamp::OpampSection;

/// How long a group may match no agent before it is warned about.
pub(crate) const UNMATCHED_GRACE: Duration = Duration::from_secs(60);

/// The names of `section`'s groups that none of `groups` (the groups agents are in) names, in
/// the section's order.
pub(crate) fn unmatched<'a>(section: &OpampSection, groups: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let matched: BTreeSet<&str> = groups.into_iter().collect();
    section.groups().iter().filter(|g| !matched.contains(g.name.as_str())).map(|g| g.name.clone()).collect()
}

/// When each unmatched group was first seen so, and which were warned about.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    since: HashMap<String, (Instant, bool)>,
}

impl Warnings {
    /// Records that `unmatched` match no agent at `now`; the groups to warn about now.
    pub(crate) fn observe(&mut self, unmatched: &[String], now: Instant) -> Vec<String> {
        self.since.retain(|group, _| unmatched.contains(group));
        let mut due = Vec::new();
        for group in unmatched {
            let (since, warned) = self.since.entry(group.clone()).or_insert((now, false));
            if !*warned && now.duration_since(*since) >= UNMATCHED_GRACE {
                *warned = true;
                due.push(group.clone());
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyconf_core::opamp::OpampGroup;

    fn section(names: &[&str]) -> OpampSection {
        let group = |name: &&str| OpampGroup { name: (*name).to_owned(), conditions: Vec::new(), files: Vec::new() };
        OpampSection::new(names.iter().map(group).collect())
    }

    #[test]
    fn a_group_no_agent_is_in_is_listed_and_warned_once_after_the_grace() {
        let section = section(&["svc", "typo", "others"]);
        assert_eq!(unmatched(&section, ["svc", "svc", "others"]), ["typo"]);
        assert_eq!(unmatched(&section, []), ["svc", "typo", "others"]);

        let (mut warnings, start) = (Warnings::default(), Instant::now());
        let typo = vec!["typo".to_owned()];
        assert!(warnings.observe(&typo, start).is_empty(), "within the grace");
        assert_eq!(warnings.observe(&typo, start + UNMATCHED_GRACE), typo);
        assert!(warnings.observe(&typo, start + UNMATCHED_GRACE * 3).is_empty(), "once");
        // An agent joins it, then leaves: the grace starts again.
        assert!(warnings.observe(&[], start + UNMATCHED_GRACE * 4).is_empty());
        let later = start + UNMATCHED_GRACE * 5;
        assert!(warnings.observe(&typo, later).is_empty());
        assert_eq!(warnings.observe(&typo, later + UNMATCHED_GRACE), typo);
    }
}
