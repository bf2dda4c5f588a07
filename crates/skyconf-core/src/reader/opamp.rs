//! Reads a document's `opamp:` section (see [`crate::opamp`] for what it means): every problem
//! is refused with its line and column, as in the rest of the document.

use super::ReadError;
use super::java::JavaValue;
use super::resolve::{Constructor, Entry, MapEntries, is_map};
use super::targeting::{is_null, patterns, scalar};
use super::tree::{Node, NodeKind};
use crate::opamp::{OpampFile, OpampGroup, OpampSection, content_type_of};

/// The keys a group may have.
const GROUP_KEYS: &str = "`group`, `match`, `files`";

/// The keys a file may have.
const FILE_KEYS: &str = "`content_type`, `body`";

/// The value of `opamp`: a list of groups.
pub(super) fn read_opamp(constructor: &mut Constructor, node: &Node) -> Result<OpampSection, ReadError> {
    if is_null(constructor, node)? {
        return Ok(OpampSection::default());
    }
    let NodeKind::Sequence(items) = &node.kind else {
        return Err(ReadError::structure(
            node.at,
            "`opamp` must be a list of groups (`- group: name`, `match` and `files`)",
        ));
    };
    let mut groups: Vec<OpampGroup> = Vec::with_capacity(items.len());
    for item in items {
        let group = read_group(constructor, item)?;
        if groups.iter().any(|g| g.name == group.name) {
            return Err(ReadError::structure(
                item.at,
                format!("`opamp` has two groups named `{}`; each needs its own name", group.name),
            ));
        }
        groups.push(group);
    }
    Ok(OpampSection::new(groups))
}

fn read_group(constructor: &mut Constructor, node: &Node) -> Result<OpampGroup, ReadError> {
    if !is_map(node) {
        return Err(ReadError::structure(node.at, format!("an `opamp` group must be a mapping with {GROUP_KEYS}")));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let (mut name, mut conditions, mut files) = (None, Vec::new(), None);
    for Entry { key, key_node, value } in entries {
        match key.to_java_string().as_str() {
            "group" => name = Some(scalar(constructor, &value, "an `opamp` group name")?),
            "match" => conditions = read_match(constructor, &value)?,
            "files" => files = Some(read_files(constructor, &value)?),
            other => {
                return Err(ReadError::structure(
                    key_node.at,
                    format!("an `opamp` group has no `{other}`; it may have {GROUP_KEYS}"),
                ));
            }
        }
    }
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Err(ReadError::structure(node.at, "an `opamp` group needs a name: `- group: collectors`"));
    };
    let Some(files) = files else {
        return Err(ReadError::structure(
            node.at,
            format!("`opamp` group `{name}` has no `files` (`files: {{}}` offers none, withdrawing what was offered)"),
        ));
    };
    Ok(OpampGroup { name, conditions, files })
}

/// `match`: attribute name to a pattern or a list of them.
fn read_match(
    constructor: &mut Constructor,
    node: &Node,
) -> Result<Vec<(String, Vec<crate::targeting::Pattern>)>, ReadError> {
    if is_null(constructor, node)? {
        return Ok(Vec::new());
    }
    if !is_map(node) {
        return Err(ReadError::structure(
            node.at,
            "`match` must map attribute names (`service.name`, `host.name`, …) to a value or a list of values",
        ));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut out = Vec::with_capacity(entries.len());
    for Entry { key, key_node, value } in entries {
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(key_node.at, "an attribute name under `match` is empty (null)"));
        }
        let key = key.to_java_string();
        let values = patterns(constructor, &value, &format!("attribute `{key}`"))?;
        out.push((key, values));
    }
    Ok(out)
}

/// `files`: file name to `{content_type, body}`.
fn read_files(constructor: &mut Constructor, node: &Node) -> Result<Vec<OpampFile>, ReadError> {
    if is_null(constructor, node)? {
        return Ok(Vec::new());
    }
    if !is_map(node) {
        return Err(ReadError::structure(node.at, "`files` must map file names to `{content_type, body}`"));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let mut files: Vec<OpampFile> = Vec::with_capacity(entries.len());
    for Entry { key, key_node, value } in entries {
        if matches!(key, JavaValue::Null) {
            return Err(ReadError::structure(key_node.at, "a file name under `files` is empty (null)"));
        }
        let name = key.to_java_string();
        if files.iter().any(|f| f.name == name) {
            return Err(ReadError::structure(key_node.at, format!("the file `{name}` is written twice")));
        }
        files.push(read_file(constructor, name, &value)?);
    }
    Ok(files)
}

fn read_file(constructor: &mut Constructor, name: String, node: &Node) -> Result<OpampFile, ReadError> {
    if !is_map(node) {
        return Err(ReadError::structure(node.at, format!("the file `{name}` must be a mapping with {FILE_KEYS}")));
    }
    let MapEntries { entries, .. } = constructor.map_entries(node)?;
    let (mut content_type, mut body) = (None, None);
    for Entry { key, key_node, value } in entries {
        match key.to_java_string().as_str() {
            "content_type" => content_type = Some(scalar(constructor, &value, "`content_type`")?),
            "body" => {
                if !matches!(value.kind, NodeKind::Scalar { .. }) {
                    return Err(ReadError::structure(
                        value.at,
                        format!("the `body` of `{name}` must be text (write it as a block: `body: |`)"),
                    ));
                }
                body = Some(match constructor.construct(&value)? {
                    JavaValue::Null => String::new(),
                    text => text.to_java_string(),
                });
            }
            other => {
                return Err(ReadError::structure(
                    key_node.at,
                    format!("the file `{name}` has no `{other}`; it may have {FILE_KEYS}"),
                ));
            }
        }
    }
    let Some(body) = body else {
        return Err(ReadError::structure(node.at, format!("the file `{name}` has no `body`")));
    };
    let content_type = content_type.unwrap_or_else(|| content_type_of(&name).to_owned());
    Ok(OpampFile { name, content_type, body })
}

#[cfg(test)]
mod tests {
    use crate::reader::{ReadError, read};

    const DOC: &str = "configurations:\n  checkout:\n    agent.sample_n_per_3_secs: 10\nopamp:\n  - group: checkout\n    match:\n      service.name: [checkout, cart]\n    files:\n      sampling.json:\n        body: '{\"ratio\": 0.5}'\n      collector.yaml:\n        content_type: application/yaml\n        body: |\n          receivers: {}\n  - group: rest\n    files: {}\n";

    #[test]
    fn groups_and_files_are_read_beside_the_configurations() {
        let table = read(DOC).unwrap();
        assert!(table.get("checkout").is_some());
        let groups = table.opamp().groups();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].name, "checkout");
        assert_eq!(groups[0].conditions[0].0, "service.name");
        assert_eq!(groups[0].conditions[0].1.len(), 2);
        let files: Vec<_> =
            groups[0].files.iter().map(|f| (f.name.as_str(), f.content_type.as_str(), f.body.as_str())).collect();
        assert_eq!(
            files,
            [
                ("sampling.json", "application/json", "{\"ratio\": 0.5}"),
                ("collector.yaml", "application/yaml", "receivers: {}\n")
            ]
        );
        assert!(groups[1].conditions.is_empty() && groups[1].files.is_empty());
        assert!(read("configurations: {}\n").unwrap().opamp().is_empty());
    }

    #[test]
    fn a_per_service_write_keeps_the_section() {
        let table = read(DOC).unwrap();
        let tricky = "opamp:\n  - group: \"a: b\"\n    match:\n      \"k.x\": [\"v*\", '#1']\n    files:\n      \"x: y.txt\":\n        content_type: \"\"\n        body: \"line\\n  \\\"q\\\"\\ttab\\n\"\n";
        let tricky = read(&format!("configurations: {{}}\n{tricky}")).unwrap();
        for table in [table, tricky] {
            let written = crate::writer::with_service(&table, "added", Some(vec![("k".into(), "v".into())]));
            let again = read(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
            assert_eq!(again.opamp(), table.opamp(), "{written}");
            assert!(again.get("added").is_some());
        }
    }

    #[test]
    fn a_bad_section_is_refused_at_its_line_and_column() {
        let cases = [
            ("configurations: {}\nopamp:\n  group: x\n", 3, 3, "must be a list of groups"),
            ("configurations: {}\nopamp:\n  - files: {}\n", 3, 5, "needs a name"),
            (
                "configurations: {}\nopamp:\n  - group: a\n    files: {}\n  - group: a\n    files: {}\n",
                5,
                5,
                "two groups named `a`",
            ),
            ("configurations: {}\nopamp:\n  - group: a\n", 3, 5, "has no `files`"),
            ("configurations: {}\nopamp:\n  - group: a\n    matches: {}\n    files: {}\n", 4, 5, "has no `matches`"),
            (
                "configurations: {}\nopamp:\n  - group: a\n    files:\n      f.yaml:\n        body: {x: 1}\n",
                6,
                15,
                "must be text",
            ),
            (
                "configurations: {}\nopamp:\n  - group: a\n    files:\n      f.yaml:\n        content_type: text/yaml\n",
                6,
                9,
                "has no `body`",
            ),
            (
                "configurations: {}\nopamp:\n  - group: a\n    match:\n      service.name: []\n    files: {}\n",
                5,
                21,
                "empty list",
            ),
        ];
        for (doc, line, column, message) in cases {
            let error = read(doc).unwrap_err();
            let ReadError::Structure { at, message: said } = &error else { panic!("{doc}: {error}") };
            assert_eq!((at.line, at.column), (line, column), "{doc}: {error}");
            assert!(said.contains(message), "{doc}: {error}");
        }
    }
}
