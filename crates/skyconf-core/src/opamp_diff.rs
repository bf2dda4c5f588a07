//! What changed in the `opamp:` section between two tables: per group for the release log and
//! the diffs ([`opamp_diff`]), and which groups a staged rollout must judge ([`changed_groups`]).
//!
//! Groups are matched first-come (an agent gets the first group whose conditions hold), so a
//! change of one group's conditions, or of the groups' order, can move agents between groups
//! that are otherwise unchanged: [`changed_groups`] names every group from the first such
//! change on, so every agent whose offered files change belongs to a named group (the one it
//! belongs to under `after`, else the one under `before`).

use std::collections::BTreeSet;

use crate::diff::ChangeKind;
use crate::opamp::{OpampGroup, OpampSection};
use crate::table::AgentConfigurations;

/// One `opamp:` group that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct GroupChange {
    /// The group.
    pub group: String,
    /// Added, removed or modified.
    pub change: ChangeKind,
    /// The files added, removed or changed (name, content type or body), by name.
    pub files: Vec<String>,
    /// Whether its `match:` conditions changed.
    pub matching: bool,
}

/// What changed from `before`'s `opamp:` section to `after`'s, per group: `after`'s groups in
/// its order, then the groups it no longer has. A reordering alone is not listed (it is seen in
/// [`changed_groups`]).
pub fn opamp_diff(before: &AgentConfigurations, after: &AgentConfigurations) -> Vec<GroupChange> {
    let (old, new) = (before.opamp(), after.opamp());
    let mut out = Vec::new();
    for group in new.groups() {
        match find(old, &group.name) {
            None => out.push(GroupChange {
                group: group.name.clone(),
                change: ChangeKind::Added,
                files: group.files.iter().map(|f| f.name.clone()).collect(),
                matching: true,
            }),
            Some(was) => {
                let files = changed_files(was, group);
                let matching = was.conditions != group.conditions;
                if matching || !files.is_empty() {
                    let change = ChangeKind::Modified;
                    out.push(GroupChange { group: group.name.clone(), change, files, matching });
                }
            }
        }
    }
    for group in old.groups().iter().filter(|g| find(new, &g.name).is_none()) {
        out.push(GroupChange {
            group: group.name.clone(),
            change: ChangeKind::Removed,
            files: group.files.iter().map(|f| f.name.clone()).collect(),
            matching: true,
        });
    }
    out
}

/// The groups whose agents may be offered other files under `after` than under `before`: those
/// whose files changed, those added or removed, and every group (of either) from the first
/// position where the two sections' names or conditions differ. In `after`'s order, then the
/// removed ones.
pub fn changed_groups(before: &AgentConfigurations, after: &AgentConfigurations) -> Vec<String> {
    let (old, new) = (before.opamp().groups(), after.opamp().groups());
    let same_matching = |a: &OpampGroup, b: &OpampGroup| a.name == b.name && a.conditions == b.conditions;
    let first_difference =
        old.iter().zip(new).position(|(a, b)| !same_matching(a, b)).unwrap_or(old.len().min(new.len()));
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut add = |name: &str| {
        if seen.insert(name.to_owned()) {
            out.push(name.to_owned());
        }
    };
    for (index, group) in new.iter().enumerate() {
        let moved = index >= first_difference;
        let files_changed = find(before.opamp(), &group.name).is_none_or(|was| was.files != group.files);
        if moved || files_changed {
            add(&group.name);
        }
    }
    for group in old.iter().skip(first_difference) {
        add(&group.name);
    }
    out
}

fn find<'a>(section: &'a OpampSection, name: &str) -> Option<&'a OpampGroup> {
    section.groups().iter().find(|g| g.name == name)
}

/// The names of the files added, removed or changed from `was` to `now`.
fn changed_files(was: &OpampGroup, now: &OpampGroup) -> Vec<String> {
    let mut out: Vec<String> =
        now.files.iter().filter(|f| !was.files.iter().any(|w| w == *f)).map(|f| f.name.clone()).collect();
    out.extend(was.files.iter().filter(|w| !now.files.iter().any(|f| f.name == w.name)).map(|w| w.name.clone()));
    out
}

#[cfg(all(test, feature = "reader"))]
mod tests {
    use super::*;

    fn table(groups: &str) -> AgentConfigurations {
        crate::read(&format!("configurations:\n  a: {{k: 1}}\nopamp:\n{groups}")).unwrap()
    }

    const WEB: &str = "  - group: web\n    match: {service.name: web}\n    files: {a.json: {body: '{}'}}\n";
    const API: &str = "  - group: api\n    match: {service.name: api}\n    files: {b.json: {body: '{}'}}\n";
    const API2: &str = "  - group: api\n    match: {service.name: api}\n    files: {b.json: {body: '{\"x\": 1}'}, c.json: {body: '{}'}}\n";
    const REST: &str = "  - group: rest\n    files: {r.json: {body: '{}'}}\n";

    #[test]
    fn a_file_change_names_its_group_and_files_only() {
        let (before, after) = (table(&format!("{WEB}{API}{REST}")), table(&format!("{WEB}{API2}{REST}")));
        let changes = opamp_diff(&before, &after);
        assert_eq!(
            changes,
            [GroupChange {
                group: "api".into(),
                change: ChangeKind::Modified,
                files: vec!["b.json".into(), "c.json".into()],
                matching: false
            }]
        );
        assert_eq!(changed_groups(&before, &after), ["api"]);
        assert!(opamp_diff(&before, &before).is_empty());
        assert!(changed_groups(&before, &before).is_empty());
    }

    #[test]
    fn added_removed_and_reordered_groups_name_every_group_agents_may_move_between() {
        let before = table(&format!("{WEB}{API}{REST}"));
        let after = table(&format!("{API}{WEB}"));
        let kinds: Vec<_> = opamp_diff(&before, &after).into_iter().map(|c| (c.group, c.change)).collect();
        assert_eq!(kinds, [("rest".to_owned(), ChangeKind::Removed)], "a reordering alone is no group change");
        assert_eq!(changed_groups(&before, &after), ["api", "web", "rest"]);
        let added = table(&format!("{WEB}{API}{REST}  - group: late\n    files: {{}}\n"));
        assert_eq!(changed_groups(&before, &added), ["late"], "a new group is named, the others are not");
    }
}
