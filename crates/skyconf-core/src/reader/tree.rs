//! Builds a node tree from YAML parser events, keeping what the SnakeYAML-compatible resolver needs
//! and the YAML crates throw away: the raw text and style of every scalar, explicit tags, shared
//! (aliased) nodes, and the line and column of every node for error messages.
//!
//! The tree is untyped; `resolve` gives it Java types. Limits mirror SnakeYAML's defaults so a
//! document the OAP refuses as an alias bomb or as too deep is refused here too. The parser reads
//! YAML 1.2; where the OAP's YAML 1.1 reads the same text otherwise, `yaml11` checks the raw text
//! and this builder applies the 1.1 reading (`?` in flow collections, keys, nesting).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::breaks;
use super::yaml11::{self, Extent, Raw, Source};
use super::{Position, ReadError};

/// SnakeYAML's default `maxAliasesForCollections`.
const MAX_COLLECTION_ALIASES: usize = 50;
/// The most characters of keys and values a document may hold once every alias is expanded.
///
/// SnakeYAML limits aliases to *collections* only; an alias to a scalar is free, and each one
/// becomes its own copy of the anchor's text in the table, the encoded answer, the release
/// diff and the release file (reliability finding F1: 113 KB of text became a 100 MB answer).
/// So the reader counts what the document expands to, while reading, from the tree of shared
/// nodes (nothing is copied yet): every scalar weighs its characters plus one (the separator
/// it gets in the answer, and so that empty values are not free), every collection one, and
/// an alias the whole weight of the node it names.
///
/// The limit is per document and a little under 4 MiB. A document without aliases weighs
/// about as many characters as it has, and the reader already stops at 3 Mi characters
/// (`yaml11::MAX_CODE_POINTS`, as the OAP's loader does), so an honest document fits: a
/// 10,000-service, 6-key fleet weighs about 1.5 M. Aliases may add about another million.
/// 4 MiB is also gRPC's default message limit, which every stock agent (Java, Go, Python)
/// keeps, so a document over it would be at risk of answers no agent can receive; the exact
/// per-answer bound is checked when each service is read (`answer::MAX_ANSWER_BYTES`).
pub(crate) const MAX_EXPANDED_CHARS: usize = 4_000_000;
// Every document the reader takes at all, if it has no aliases, is within the budget.
const _: () = assert!(MAX_EXPANDED_CHARS > yaml11::MAX_CODE_POINTS);
/// Characters that start YAML syntax rather than a plain scalar.
const INDICATORS: [char; 19] =
    ['-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`'];
/// SnakeYAML's default `nestingDepthLimit`: no node may sit inside more collections than this
/// (so an empty collection may be the 51st level, a value inside it may not).
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
            CORE_PREFIX => write!(f, "!!{}", self.suffix),
            "!" => write!(f, "!{}", self.suffix),
            "" => write!(f, "!<{}>", self.suffix),
            handle => write!(f, "{handle}{}", self.suffix),
        }
    }
}

/// One node of the document.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) kind: NodeKind,
    // Boxed: a tag is rare, and a 10,000-service document has ~130,000 nodes.
    pub(crate) tag: Option<Box<Tag>>,
    pub(crate) at: Position,
}

/// The three YAML node kinds.
#[derive(Debug)]
pub(crate) enum NodeKind {
    Scalar {
        text: Box<str>,
        plain: bool,
    },
    Sequence(Vec<Rc<Node>>),
    /// Entries as written. SnakeYAML rewrites a mapping node in place when it builds it or
    /// merges from it, and later aliases see the rewritten node; `resolve` does the same.
    Mapping(RefCell<Vec<(Rc<Node>, Rc<Node>)>>),
}

/// A collection under construction.
enum Frame {
    Sequence { items: Vec<Rc<Node>>, head: Head },
    Mapping { entries: Vec<(Rc<Node>, Rc<Node>)>, key: Option<Rc<Node>>, head: Head },
}

/// What a collection's start event said about it.
struct Head {
    anchor: usize,
    tag: Option<Box<Tag>>,
    at: Position,
    /// Inside a flow collection (this one or an outer one).
    flow: bool,
    /// Character index where the collection starts, properties included.
    start: usize,
    /// The expanded weight of what it holds so far (see [`MAX_EXPANDED_CHARS`]).
    weight: usize,
}

pub(super) fn position(span: &Span) -> Position {
    Position { line: span.start.line(), column: span.start.col() + 1 }
}

/// The YAML core schema's tag prefix, what `!!` stands for.
pub(crate) const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// Normalises the parser's tag: a verbatim tag (`!<tag:yaml.org,2002:str>`) and the non-specific
/// `!` both arrive with an empty handle and the whole tag as suffix; SnakeYAML treats them as the
/// same tags written `!!str` and `!`, so they are split the same way here.
fn tag_of(tag: Option<std::borrow::Cow<'_, saphyr_parser::Tag>>) -> Option<Box<Tag>> {
    tag.map(|t| Box::new(normalise_tag(&t)))
}

fn normalise_tag(t: &saphyr_parser::Tag) -> Tag {
    if !t.handle.is_empty() {
        return Tag { handle: t.handle.clone(), suffix: t.suffix.clone() };
    }
    if t.suffix == "!" {
        return Tag { handle: "!".to_owned(), suffix: String::new() };
    }
    match t.suffix.strip_prefix(CORE_PREFIX) {
        Some(name) => Tag { handle: CORE_PREFIX.to_owned(), suffix: name.to_owned() },
        None => match t.suffix.strip_prefix('!') {
            Some(local) => Tag { handle: "!".to_owned(), suffix: local.to_owned() },
            None => Tag { handle: String::new(), suffix: t.suffix.clone() },
        },
    }
}

/// What a parse measured of the document-wide limits, for the incremental reader: a document
/// assembled from separately parsed parts must stay within them as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeMeasure {
    /// The document defines an anchor (so its parts may share nodes).
    pub(crate) anchored: bool,
    /// Its expanded weight (see [`MAX_EXPANDED_CHARS`]).
    pub(crate) expanded: usize,
}

/// Parses `text` into the root node of its single document; `None` for an empty stream (no
/// document, or one holding only comments).
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Result<Option<Rc<Node>>, ReadError> {
    parse_measured(text).map(|(root, _)| root)
}

/// [`parse`], with what the document weighs against the document-wide limits.
pub(crate) fn parse_measured(text: &str) -> Result<(Option<Rc<Node>>, TreeMeasure), ReadError> {
    let text = yaml11::normalize_breaks(text);
    // LS and PS end lines for the parser too; a scalar that holds one is read again from `kept`.
    let kept = text.contains(yaml11::YAML11_BREAKS).then(|| breaks::Text::new(&text));
    let inline = if kept.is_some() { breaks::inline_scalars(&text) } else { Vec::new() };
    let text = yaml11::for_parser(&text, &inline);
    let text = text.as_ref();
    yaml11::check_stream(text)?;
    let mut builder = Builder::default();
    let mut source = Source::new(text);
    let total_chars = text.chars().count();
    let has_tabs = text.contains('\t');
    let mut scalars: Vec<Extent> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            let mark = e.marker();
            ReadError::syntax(Position { line: mark.line(), column: mark.col() + 1 }, e.info())
        })?;
        let raw = source.check_yaml11(&event, &span)?;
        if has_tabs && let Event::Scalar(_, style, ..) = &event {
            scalars.push(source.scalar_extent(&span, *style, raw.properties));
        }
        let event = match event {
            Event::Scalar(value, style @ (ScalarStyle::Literal | ScalarStyle::Folded), anchor, tag)
                if span.end.index() >= total_chars && !text.ends_with(['\n', '\r']) =>
            {
                let value = source.block_scalar_at_eof(&span, &value, raw.properties).map_or(value, Cow::Owned);
                Event::Scalar(value, style, anchor, tag)
            }
            event => event,
        };
        builder.spans_lines = false;
        let event = match (&kept, event) {
            (Some(kept), Event::Scalar(value, style, anchor, tag)) => {
                let extent = source.scalar_extent(&span, style, raw.properties);
                builder.spans_lines = kept.has_separator(extent.start, extent.end);
                let properties_at = raw.properties.then(|| span.start.index());
                match kept.reread(style, extent, properties_at, &value) {
                    Ok(None) => Event::Scalar(value, style, anchor, tag),
                    Ok(Some(reread)) => Event::Scalar(Cow::Owned(reread), style, anchor, tag),
                    Err(why) => return Err(ReadError::syntax(position(&span), why)),
                }
            }
            (_, event) => event,
        };
        builder.on_event(event, &span, raw, &mut source)?;
    }
    if has_tabs {
        yaml11::check_tabs(text, &scalars)?;
    }
    let measure = TreeMeasure { anchored: !builder.anchors.is_empty(), expanded: builder.expanded };
    Ok((builder.root, measure))
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    /// Each anchored node, with its expanded weight.
    anchors: HashMap<usize, (Rc<Node>, usize)>,
    /// Anchors whose collection is still open: an alias to one of them would make a cycle.
    open_anchors: Vec<usize>,
    collection_aliases: usize,
    /// The document's expanded weight so far (see [`MAX_EXPANDED_CHARS`]).
    expanded: usize,
    documents: usize,
    root: Option<Rc<Node>>,
    /// The scalar being added holds an LS or PS that the parser did not see as a line break.
    spans_lines: bool,
}

impl Builder {
    fn on_event(&mut self, event: Event<'_>, span: &Span, raw: Raw, source: &mut Source<'_>) -> Result<(), ReadError> {
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
                self.check_depth(at)?;
                let weight = text.chars().count().saturating_add(1);
                self.spend(at, weight)?;
                let plain = matches!(style, ScalarStyle::Plain);
                let mut node = Node {
                    kind: NodeKind::Scalar { text: text.into_owned().into_boxed_str(), plain },
                    tag: tag_of(tag),
                    at,
                };
                // `{?: v}`: the `?` written is an explicit key, empty or not.
                let explicit = plain
                    && self.in_flow()
                    && matches!(&node.kind, NodeKind::Scalar { text, .. } if text.starts_with('?'));
                if plain && self.in_flow() {
                    node = self.flow_plain(node, raw)?;
                }
                if plain
                    && !explicit
                    && !raw.properties
                    && matches!(&node.kind, NodeKind::Scalar { text, .. } if text.is_empty())
                    && matches!(self.stack.last(), Some(Frame::Mapping { key: None, .. }))
                    && !source.after_question_mark(span.start.index())
                {
                    // `: value` with nothing before the colon: SnakeYAML has no empty implicit
                    // keys, in block or flow mappings (`{: v}`, `[: v]`).
                    return Err(ReadError::syntax(at, "a mapping entry has no key before its `:`"));
                }
                // A block scalar can only be an explicit key.
                if !matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
                    self.check_implicit_key(span.start.index(), span, at, source)?;
                }
                self.complete(Rc::new(node), anchor, weight)?;
            }
            Event::SequenceStart(anchor, tag) => {
                let head = self.open(at, anchor, tag_of(tag), raw.flow, span)?;
                self.stack.push(Frame::Sequence { items: Vec::new(), head });
            }
            Event::MappingStart(anchor, tag) => {
                let head = self.open(at, anchor, tag_of(tag), raw.flow, span)?;
                self.stack.push(Frame::Mapping { entries: Vec::new(), key: None, head });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (kind, head) = match self.stack.pop() {
                    Some(Frame::Sequence { items, head }) => (NodeKind::Sequence(items), head),
                    Some(Frame::Mapping { entries, head, .. }) => (NodeKind::Mapping(RefCell::new(entries)), head),
                    None => return Err(ReadError::syntax(at, "unbalanced collection end")),
                };
                if head.anchor != 0 {
                    self.open_anchors.retain(|&a| a != head.anchor);
                }
                self.check_implicit_key(head.start, span, head.at, source)?;
                self.spend(head.at, 1)?;
                let node = Rc::new(Node { kind, tag: head.tag, at: head.at });
                self.complete(node, head.anchor, head.weight.saturating_add(1))?;
            }
            Event::Alias(anchor) => {
                self.check_depth(at)?;
                if self.open_anchors.contains(&anchor) {
                    return Err(ReadError::structure(
                        at,
                        "an alias refers to a collection that contains it; recursive structures are not supported",
                    ));
                }
                let (node, weight) = self
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
                // Checked before anything is expanded: the alias only shares the node here, but
                // building the table copies its text once per alias.
                self.spend(at, weight)?;
                self.attach(node, weight);
            }
        }
        Ok(())
    }

    /// SnakeYAML gives up on an implicit key (one without `?`) that spans lines or whose `:` is
    /// more than 1024 characters past its start; the 1.2 parser allows both inside `{...}`.
    fn check_implicit_key(
        &self,
        start: usize,
        end: &Span,
        at: Position,
        source: &mut Source<'_>,
    ) -> Result<(), ReadError> {
        const MAX_IMPLICIT_KEY: usize = 1024;
        if !matches!(self.stack.last(), Some(Frame::Mapping { key: None, .. })) {
            return Ok(());
        }
        let too_long = end.end.index().saturating_sub(start) > MAX_IMPLICIT_KEY;
        let multi_line = end.end.line() != at.line || self.spans_lines || source.colon_on_a_later_line(end.end.index());
        if (too_long || multi_line) && !source.after_question_mark(start) {
            return Err(ReadError::syntax(
                at,
                format!(
                    "a key that spans lines or is longer than {MAX_IMPLICIT_KEY} characters must be written as an explicit key (`? key`)"
                ),
            ));
        }
        Ok(())
    }

    fn in_flow(&self) -> bool {
        match self.stack.last() {
            Some(Frame::Sequence { head, .. } | Frame::Mapping { head, .. }) => head.flow,
            None => false,
        }
    }

    /// SnakeYAML's reading of a plain scalar inside `[...]` or `{...}`, where YAML 1.1 differs
    /// from 1.2: `?` is always the key indicator there (`{?x: 1}` has the key `x`, `[?x]` holds
    /// the mapping `{x: null}`, and a `?` later in the scalar, as in `{url: /p?q=1}`, is a
    /// syntax error), and so is a leading `:`.
    fn flow_plain(&self, node: Node, raw: Raw) -> Result<Node, ReadError> {
        let NodeKind::Scalar { text, .. } = &node.kind else {
            return Ok(node);
        };
        let refuse = |why: &str| {
            Err(ReadError::syntax(
                node.at,
                format!("`{text}`: {why} inside `[...]` or `{{...}}` (YAML 1.1, as the OAP reads it); quote the text"),
            ))
        };
        let Some(rest) = text.strip_prefix('?') else {
            if text.contains('?') {
                return refuse("a plain scalar ends at `?`");
            }
            if text.starts_with(':') {
                return refuse("a plain scalar cannot start with `:`");
            }
            if text.starts_with(['|', '>', '@', '`', '%', '!', '&', '*', '#', '\'', '"']) {
                return refuse("a plain scalar cannot start with an indicator");
            }
            return Ok(node);
        };
        if raw.properties || rest.contains('?') || rest.starts_with(INDICATORS) {
            return refuse("`?` is the key indicator");
        }
        let key = Node { kind: NodeKind::Scalar { text: rest.into(), plain: true }, tag: None, at: node.at };
        match self.stack.last() {
            // In a key's place the `?` just marks the key.
            Some(Frame::Mapping { key: None, .. }) => Ok(key),
            // A sequence entry becomes a one-pair mapping with a null value.
            Some(Frame::Sequence { .. }) => {
                let null =
                    Node { kind: NodeKind::Scalar { text: Box::default(), plain: true }, tag: None, at: node.at };
                Ok(Node {
                    kind: NodeKind::Mapping(RefCell::new(vec![(Rc::new(key), Rc::new(null))])),
                    tag: None,
                    at: node.at,
                })
            }
            _ => refuse("`?` is the key indicator, and a value cannot start with it"),
        }
    }

    fn check_depth(&self, at: Position) -> Result<(), ReadError> {
        if self.stack.len() > MAX_NESTING_DEPTH {
            return Err(ReadError::structure(at, format!("collections nested deeper than {MAX_NESTING_DEPTH} levels")));
        }
        Ok(())
    }

    /// Opens a collection: checks the nesting limit, notes its anchor as open (an alias to it
    /// inside would be a cycle) and returns its head.
    fn open(
        &mut self,
        at: Position,
        anchor: usize,
        tag: Option<Box<Tag>>,
        flow: bool,
        span: &Span,
    ) -> Result<Head, ReadError> {
        self.check_depth(at)?;
        if anchor != 0 {
            self.open_anchors.push(anchor);
        }
        Ok(Head { anchor, tag, at, flow: flow || self.in_flow(), start: span.start.index(), weight: 0 })
    }

    /// Adds `weight` to the document's expanded size; past [`MAX_EXPANDED_CHARS`] the document
    /// is refused at `at`, the node that crossed the limit.
    fn spend(&mut self, at: Position, weight: usize) -> Result<(), ReadError> {
        self.expanded = self.expanded.saturating_add(weight);
        if self.expanded > MAX_EXPANDED_CHARS {
            return Err(ReadError::structure(
                at,
                format!(
                    "with its aliases expanded the document holds more than {MAX_EXPANDED_CHARS} characters of keys and values; \
                     each alias repeats its anchor's whole text (a limit of skyconf's, not of the OAP's, that keeps the table and its answers bounded)"
                ),
            ));
        }
        Ok(())
    }

    fn complete(&mut self, node: Rc<Node>, anchor: usize, weight: usize) -> Result<(), ReadError> {
        if anchor != 0 {
            self.anchors.insert(anchor, (Rc::clone(&node), weight));
        }
        self.attach(node, weight);
        Ok(())
    }

    /// Puts `node` in its place; `weight` is its expanded weight, added to the open collection's.
    fn attach(&mut self, node: Rc<Node>, weight: usize) {
        if let Some(Frame::Sequence { head, .. } | Frame::Mapping { head, .. }) = self.stack.last_mut() {
            head.weight = head.weight.saturating_add(weight);
        }
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
        let NodeKind::Mapping(entries) = &node.kind else { panic!("not a mapping") };
        let entries = entries.borrow();
        let NodeKind::Scalar { text, plain } = &entries[0].1.kind else { panic!() };
        assert_eq!((&**text, *plain), ("010", true));
        let NodeKind::Scalar { text, plain } = &entries[1].1.kind else { panic!() };
        assert_eq!((&**text, *plain), ("010", false));
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
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        let entries = entries.borrow();
        assert!(Rc::ptr_eq(&entries[0].1, &entries[1].1));
    }

    #[test]
    fn refuses_alias_bombs_and_deep_nesting() {
        let mut bomb = String::from("a: &a [x]\n");
        for i in 0..=MAX_COLLECTION_ALIASES {
            bomb.push_str(&format!("k{i}: *a\n"));
        }
        assert!(parse(&bomb).unwrap_err().to_string().contains("aliases"));
        let nested = |n: usize, inner: &str| format!("{}{inner}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&nested(MAX_NESTING_DEPTH + 1, "")).is_ok(), "an empty innermost collection is not counted");
        assert!(parse(&nested(MAX_NESTING_DEPTH + 1, "x")).unwrap_err().to_string().contains("nested"));
        assert!(parse(&nested(MAX_NESTING_DEPTH + 2, "")).unwrap_err().to_string().contains("nested"));
        assert!(parse(&nested(MAX_NESTING_DEPTH, "x")).is_ok());
    }

    #[test]
    fn reports_syntax_errors_with_line_and_column() {
        let err = parse("configurations:\n  svc:\n    k: [unclosed\n").unwrap_err();
        assert!(matches!(err, ReadError::Syntax { .. }), "{err:?}");
        assert!(err.position().unwrap().line >= 3, "{err}");
    }

    fn scalar_text(node: &Node) -> String {
        match &node.kind {
            NodeKind::Scalar { text, .. } => text.to_string(),
            NodeKind::Mapping(entries) => {
                let entries = entries.borrow();
                format!("{{{}: {}}}", scalar_text(&entries[0].0), scalar_text(&entries[0].1))
            }
            NodeKind::Sequence(items) => {
                format!("[{}]", items.iter().map(|n| scalar_text(n)).collect::<Vec<_>>().join(", "))
            }
        }
    }

    fn value_of(text: &str) -> String {
        let node = root(text);
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        scalar_text(&entries.borrow()[0].1)
    }

    #[test]
    fn refuses_what_yaml_1_1_does_not_read() {
        for text in [
            "a: &x.y 1\n",
            "a: &x/y 1\n",
            "a: \"\\/\"\n",
            "a: {k: http://h/p?q=1}\n",
            "a: [a?b]\n",
            "a: {k: ?x}\n",
            "a: [:x]\n",
            "...\n",
            &format!("{{{}: 1}}\n", "k".repeat(1100)),
        ] {
            assert!(parse(text).is_err(), "{text:?} must be refused");
        }
        assert!(parse(&format!("? {}\n: 1\n", "k".repeat(1100))).is_ok(), "explicit keys have no limit");
        assert!(parse("a: &x-y_z 1\nb: *x-y_z\n").is_ok());
        assert!(parse("a: &x:y 1\n").is_err(), "SnakeYAML ends the name at the colon");
    }

    #[test]
    fn question_mark_leads_a_key_in_flow_collections() {
        assert_eq!(value_of("a: [?x]\n"), "[{x: }]");
        let node = root("a: {?x: 1}\n");
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        assert_eq!(value_of_node(&entries.borrow()[0].1), "x");
    }

    fn value_of_node(node: &Node) -> String {
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        scalar_text(&entries.borrow()[0].0)
    }

    #[test]
    fn block_scalars_at_the_very_end_count_only_written_breaks() {
        assert_eq!(value_of("a: |\n  x"), "x");
        assert_eq!(value_of("a: |+\n  x"), "x");
        assert_eq!(value_of("a: |\n  x\n  "), "x\n");
        assert_eq!(value_of("a: |+\n  x\n\n  "), "x\n\n");
        assert_eq!(value_of("a: >- # c|d\n  x\n  y"), "x y");
        assert_eq!(value_of("a: &x >+\n  x\n  y"), "x y");
        assert_eq!(value_of("a: |\n  !x &y\n  z"), "!x &y\nz", "content that looks like properties");
    }

    #[test]
    fn tabs_separate_nothing_in_yaml_1_1() {
        for text in ["a:\tv\n", "a: [x,\ty]\n", "a: \"q\"\t# c\n", "a: &x\tv\n", "a: v\n\t\n", "a:\n-\tx\n"] {
            assert!(parse(text).is_err(), "{text:?} must be refused");
        }
        for text in ["a: x\ty\n", "a\t: v\n", "a: v\t\n", "a: v # c\td\n", "a: '\t'\n", "a: |\n  x\n  \ty\n"] {
            assert!(parse(text).is_ok(), "{text:?} must be read");
        }
    }

    #[test]
    fn tags_are_uri_characters_up_to_a_blank() {
        for text in ["a: !!st#r v\n", "a: [!!str, b]\n", "a: !é v\n", "%YAML1.1\n---\na: 1\n"] {
            assert!(parse(text).is_err(), "{text:?} must be refused");
        }
        assert!(parse("a: !<tag:yaml.org,2002:str> v\n").is_ok());
        assert!(parse("a: { >x: 1}\n").is_err(), "`>` cannot start a plain scalar in a flow collection");
    }

    #[test]
    fn block_mappings_have_no_empty_implicit_keys() {
        assert!(parse("a: 1\n: 2\n").is_err());
        assert!(parse("a: {: 2}\n").is_err() && parse("a: [: 2]\n").is_err(), "nor flow mappings");
        assert!(parse("a: {?: 2}\n").is_ok(), "`?` makes it explicit");
        // DigestTool: ParserException. The `:` must be on the key's line, in flow mappings too.
        for text in ["a: {k\n  : v}\n", "a: {k\u{2028}: v}\n", "a: {[x]\n  : v}\n", "a: {\"k\"  # c\n  : v}\n"] {
            assert!(parse(text).is_err(), "{text:?} must be refused");
        }
        assert!(parse("a: {k\n  , j: v}\n").is_ok(), "a key without a value may end its line");
        assert!(parse("a: {k:\n    v}\n").is_ok());
        assert!(parse("? \n: 2\n").is_ok(), "an explicit empty key is fine");
    }

    #[test]
    fn refuses_more_than_3_mib_of_characters() {
        let doc = |n: usize| format!("a: {}\n", "é".repeat(n - 4));
        assert!(parse(&doc(yaml11::MAX_CODE_POINTS)).is_ok(), "characters, not bytes, are counted");
        let err = parse(&doc(yaml11::MAX_CODE_POINTS + 1)).unwrap_err();
        assert_eq!(err.position(), Some(Position { line: 1, column: yaml11::MAX_CODE_POINTS + 1 }), "{err}");
    }

    #[test]
    fn a_lone_carriage_return_is_a_line_break() {
        assert_eq!(value_of("a: |\r  x\r  y\r"), "x\ny\n");
        assert!(parse("a: x\r: y\n").is_err(), "`: y` starts a new line without a key");
    }

    #[test]
    fn nel_is_a_line_break() {
        assert_eq!(value_of("a: 'x\u{85}  y'\n"), "x y");
        assert_eq!(value_of("a: |\n  x\u{85}  y\n"), "x\ny\n");
        assert_eq!(value_of("a: x\u{85}b: y\n"), "x", "it ends a line");
    }

    // The expectations below are DigestTool's (the OAP's loader, SnakeYAML 2.0 and 1.33).

    #[test]
    fn line_and_paragraph_separators_end_lines() {
        let node = root("s:\u{2028}  k: v\u{2028}  j: w\u{2029}");
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        let NodeKind::Mapping(inner) = &entries.borrow()[0].1.kind else { panic!("s is a mapping") };
        assert_eq!(inner.borrow().len(), 2);
        assert!(parse("k: a\u{2028}b\n").is_err(), "`b` starts a line less indented than the value");
        assert!(parse("k: {\"a\u{2028}b\": v}\n").is_err(), "an implicit key cannot span lines");
        // Between tokens of a flow collection a break separates as a blank does.
        assert_eq!(value_of("k: {a: 1,\u{2028}  b: 2}\n"), "{a: 1}");
        assert_eq!(value_of("k: {a:\u{2029}  b}\n"), "{a: b}");
        assert_eq!(value_of("k: [\u{85}  x,\u{2028}  'y\u{2028}z']\n"), "[x, y\u{2028}z]");
    }

    #[test]
    fn line_and_paragraph_separators_stay_in_values() {
        let cases = [
            ("k: {a: x\u{2028}y}\n", "{a: x\u{2028}y}"),
            ("k: [x\u{2028} y, z]\n", "[x\u{2028}y, z]"),
            ("k: {a: x\u{2028}\n    y}\n", "{a: x\u{2028}\ny}"),
            ("k: {a: x\n    \u{2028}y}\n", "{a: x\u{2028}y}"),
            ("k: a\u{2028}    b\n", "a\u{2028}b"),
            ("k: a\n  b\u{2028}  c\n", "a b\u{2028}c"),
            ("k: 'a  \u{2028}   b'\n", "a\u{2028}b"),
            ("k: 'a\u{2029}\u{2028}b'\n", "a\u{2029}\u{2028}b"),
            ("k: 'it''s\u{2028}'\n", "it's\u{2028}"),
            ("k: \"a\\\u{2028}    b\"\n", "ab"),
            ("k: \"a\\L\\P\\Nb\"\n", "a\u{2028}\u{2029}\u{85}b"),
            ("k: \"\\t\u{2028}\\x41\\ \u{2028}\"\n", "\t\u{2028}A \u{2028}"),
            ("k: |\n  a\u{2028}  b\n", "a\u{2028}b\n"),
            ("k: |-\n  a\u{2028}  b\u{2028}\n", "a\u{2028}b"),
            ("k: |+\n  a\u{2028}\u{2028}\nj: x\n", "a\u{2028}\u{2028}\n"),
            ("k: |\n  a\u{2028}\n", "a\u{2028}"),
            ("k: >\n  a\u{2028}  b\n  c\n", "a\u{2028}b c\n"),
            ("k: >\n  a\n  b\u{2029}  c\n", "a b\u{2029}c\n"),
            ("k: &x |\n  a\u{2028}  b\n", "a\u{2028}b\n"),
            ("k: |\n  a\u{2028}  b", "a\u{2028}b"),
            ("k: |+\n\u{2028}\nj: x\n", "\u{2028}\n"),
        ];
        for (text, want) in cases {
            assert_eq!(value_of(text), want, "{text:?}");
        }
        let node = root("s:\n  k: |2\n      a\u{2028}    b\n  j: >1-\n     a\u{2028}    b\n");
        let NodeKind::Mapping(entries) = &node.kind else { panic!() };
        let NodeKind::Mapping(inner) = &entries.borrow()[0].1.kind else { panic!() };
        let values: Vec<_> = inner.borrow().iter().map(|(_, v)| scalar_text(v)).collect();
        assert_eq!(values, ["  a\u{2028}b\n", "  a\u{2028} b"], "indentation indicators");
        assert_eq!(value_of("k: ! >1+\r\n  x\r\u{2029}  y\r\n"), " x\n\u{2029} y\n", "CR LF and a tag");
    }
}
