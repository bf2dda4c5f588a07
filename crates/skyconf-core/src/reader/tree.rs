//! Builds a node tree from YAML parser events, keeping what the SnakeYAML-compatible resolver needs
//! and the YAML crates throw away: the raw text and style of every scalar, explicit tags, shared
//! (aliased) nodes, and the line and column of every node for error messages.
//!
//! The tree is untyped; `resolve` gives it Java types. Limits mirror SnakeYAML's defaults so a
//! document the OAP refuses as an alias bomb or as too deep is refused here too.

use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::{Position, ReadError};

/// SnakeYAML's default `maxAliasesForCollections`.
const MAX_COLLECTION_ALIASES: usize = 50;
/// SnakeYAML's default `nestingDepthLimit`.
const MAX_NESTING_DEPTH: usize = 50;

/// An explicit tag, as written (`!!int` arrives as handle `tag:yaml.org,2002:` and suffix `int`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tag {
    pub(crate) handle: String,
    pub(crate) suffix: String,
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.handle.as_str() {
            "tag:yaml.org,2002:" => write!(f, "!!{}", self.suffix),
            "!" => write!(f, "!{}", self.suffix),
            handle => write!(f, "{handle}{}", self.suffix),
        }
    }
}

/// One node of the document.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) kind: NodeKind,
    pub(crate) tag: Option<Tag>,
    pub(crate) at: Position,
}

/// The three YAML node kinds.
#[derive(Debug)]
pub(crate) enum NodeKind {
    Scalar { text: String, plain: bool },
    Sequence(Vec<Rc<Node>>),
    Mapping(Vec<(Rc<Node>, Rc<Node>)>),
}

/// A collection under construction.
enum Frame {
    Sequence {
        items: Vec<Rc<Node>>,
        head: Head,
    },
    Mapping {
        entries: Vec<(Rc<Node>, Rc<Node>)>,
        key: Option<Rc<Node>>,
        head: Head,
    },
}

/// What a collection's start event said about it.
struct Head {
    anchor: usize,
    tag: Option<Tag>,
    at: Position,
}

fn position(span: &Span) -> Position {
    Position {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

fn tag_of(tag: Option<std::borrow::Cow<'_, saphyr_parser::Tag>>) -> Option<Tag> {
    tag.map(|t| Tag {
        handle: t.handle.clone(),
        suffix: t.suffix.clone(),
    })
}

/// Parses `text` into the root node of its single document; `None` for an empty stream (no
/// document, or one holding only comments).
pub(crate) fn parse(text: &str) -> Result<Option<Rc<Node>>, ReadError> {
    let mut builder = Builder::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            let mark = e.marker();
            ReadError::syntax(
                Position {
                    line: mark.line(),
                    column: mark.col() + 1,
                },
                e.info(),
            )
        })?;
        builder.on_event(event, &span)?;
    }
    Ok(builder.root)
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Rc<Node>>,
    /// Anchors whose collection is still open: an alias to one of them would make a cycle.
    open_anchors: Vec<usize>,
    collection_aliases: usize,
    documents: usize,
    root: Option<Rc<Node>>,
}

impl Builder {
    fn on_event(&mut self, event: Event<'_>, span: &Span) -> Result<(), ReadError> {
        let at = position(span);
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(ReadError::structure(
                        at,
                        "the file holds more than one YAML document; put every service under one `configurations:` mapping",
                    ));
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let plain = matches!(style, ScalarStyle::Plain);
                let node = Rc::new(Node {
                    kind: NodeKind::Scalar {
                        text: text.into_owned(),
                        plain,
                    },
                    tag: tag_of(tag),
                    at,
                });
                self.complete(node, anchor)?;
            }
            Event::SequenceStart(anchor, tag) => {
                self.open(at, anchor)?;
                self.stack.push(Frame::Sequence {
                    items: Vec::new(),
                    head: Head {
                        anchor,
                        tag: tag_of(tag),
                        at,
                    },
                });
            }
            Event::MappingStart(anchor, tag) => {
                self.open(at, anchor)?;
                self.stack.push(Frame::Mapping {
                    entries: Vec::new(),
                    key: None,
                    head: Head {
                        anchor,
                        tag: tag_of(tag),
                        at,
                    },
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (kind, head) = match self.stack.pop() {
                    Some(Frame::Sequence { items, head }) => (NodeKind::Sequence(items), head),
                    Some(Frame::Mapping { entries, head, .. }) => {
                        (NodeKind::Mapping(entries), head)
                    }
                    None => return Err(ReadError::syntax(at, "unbalanced collection end")),
                };
                if head.anchor != 0 {
                    self.open_anchors.retain(|&a| a != head.anchor);
                }
                let node = Rc::new(Node {
                    kind,
                    tag: head.tag,
                    at: head.at,
                });
                self.complete(node, head.anchor)?;
            }
            Event::Alias(anchor) => {
                if self.open_anchors.contains(&anchor) {
                    return Err(ReadError::structure(
                        at,
                        "an alias refers to a collection that contains it; recursive structures are not supported",
                    ));
                }
                let node = self
                    .anchors
                    .get(&anchor)
                    .cloned()
                    .ok_or_else(|| ReadError::syntax(at, "alias to an unknown anchor"))?;
                if !matches!(node.kind, NodeKind::Scalar { .. }) {
                    self.collection_aliases += 1;
                    if self.collection_aliases > MAX_COLLECTION_ALIASES {
                        return Err(ReadError::structure(
                            at,
                            format!(
                                "more than {MAX_COLLECTION_ALIASES} aliases to collections (the OAP's YAML loader refuses this too)"
                            ),
                        ));
                    }
                }
                self.attach(node);
            }
        }
        Ok(())
    }

    fn open(&mut self, at: Position, anchor: usize) -> Result<(), ReadError> {
        if self.stack.len() >= MAX_NESTING_DEPTH {
            return Err(ReadError::structure(
                at,
                format!("collections nested deeper than {MAX_NESTING_DEPTH} levels"),
            ));
        }
        if anchor != 0 {
            self.open_anchors.push(anchor);
        }
        Ok(())
    }

    fn complete(&mut self, node: Rc<Node>, anchor: usize) -> Result<(), ReadError> {
        if anchor != 0 {
            self.anchors.insert(anchor, Rc::clone(&node));
        }
        self.attach(node);
        Ok(())
    }

    fn attach(&mut self, node: Rc<Node>) {
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Sequence { items, .. }) => items.push(node),
            Some(Frame::Mapping { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Rc<Node> {
        parse(text).unwrap().unwrap()
    }

    #[test]
    fn keeps_raw_scalar_text_style_and_position() {
        let node = root("a: 010\nb: '010'\n");
        let NodeKind::Mapping(entries) = &node.kind else {
            panic!("not a mapping")
        };
        let NodeKind::Scalar { text, plain } = &entries[0].1.kind else {
            panic!()
        };
        assert_eq!((text.as_str(), *plain), ("010", true));
        let NodeKind::Scalar { text, plain } = &entries[1].1.kind else {
            panic!()
        };
        assert_eq!((text.as_str(), *plain), ("010", false));
        assert_eq!(entries[1].1.at, Position { line: 2, column: 4 });
    }

    #[test]
    fn empty_and_comment_only_streams_have_no_root() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
    }

    #[test]
    fn refuses_a_second_document() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.position(), Some(Position { line: 2, column: 1 }));
    }

    #[test]
    fn aliases_share_the_anchored_node() {
        let node = root("x: &v [1, 2]\ny: *v\n");
        let NodeKind::Mapping(entries) = &node.kind else {
            panic!()
        };
        assert!(Rc::ptr_eq(&entries[0].1, &entries[1].1));
    }

    #[test]
    fn refuses_alias_bombs_and_deep_nesting() {
        let mut bomb = String::from("a: &a [x]\n");
        for i in 0..=MAX_COLLECTION_ALIASES {
            bomb.push_str(&format!("k{i}: *a\n"));
        }
        assert!(parse(&bomb).unwrap_err().to_string().contains("aliases"));
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_NESTING_DEPTH + 1),
            "]".repeat(MAX_NESTING_DEPTH + 1)
        );
        assert!(parse(&deep).unwrap_err().to_string().contains("nested"));
    }

    #[test]
    fn reports_syntax_errors_with_line_and_column() {
        let err = parse("configurations:\n  svc:\n    k: [unclosed\n").unwrap_err();
        assert!(matches!(err, ReadError::Syntax { .. }), "{err:?}");
        assert!(err.position().unwrap().line >= 3, "{err}");
    }
}
