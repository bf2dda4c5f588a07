//! Builds a node tree from YAML parser events, keeping what the SnakeYAML-compatible resolver needs
//! and the YAML crates throw away: the raw text and style of every scalar, explicit tags, shared
//! (aliased) nodes, and the line and column of every node for error messages.
//!
//! The tree is untyped; `resolve` gives it Java types. Limits mirror SnakeYAML's defaults so a
//! document the OAP refuses as an alias bomb or as too deep is refused here too.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::{Position, ReadError};

/// SnakeYAML's default `maxAliasesForCollections`.
const MAX_COLLECTION_ALIASES: usize = 50;
/// Characters that start YAML syntax rather than a plain scalar.
const INDICATORS: [char; 19] =
    ['-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`'];
/// SnakeYAML's default `codePointLimit` (3 MiB): a longer document fails to load.
const MAX_CODE_POINTS: usize = 3 * 1024 * 1024;
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
    pub(crate) tag: Option<Tag>,
    pub(crate) at: Position,
}

/// The three YAML node kinds.
#[derive(Debug)]
pub(crate) enum NodeKind {
    Scalar {
        text: String,
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
    tag: Option<Tag>,
    at: Position,
    /// Inside a flow collection (this one or an outer one).
    flow: bool,
    /// Character index where the collection starts, properties included.
    start: usize,
}

fn position(span: &Span) -> Position {
    Position { line: span.start.line(), column: span.start.col() + 1 }
}

/// The YAML core schema's tag prefix, what `!!` stands for.
pub(crate) const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// Normalises the parser's tag: a verbatim tag (`!<tag:yaml.org,2002:str>`) and the non-specific
/// `!` both arrive with an empty handle and the whole tag as suffix; SnakeYAML treats them as the
/// same tags written `!!str` and `!`, so they are split the same way here.
fn tag_of(tag: Option<std::borrow::Cow<'_, saphyr_parser::Tag>>) -> Option<Tag> {
    tag.map(|t| {
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
    })
}

/// Parses `text` into the root node of its single document; `None` for an empty stream (no
/// document, or one holding only comments).
pub(crate) fn parse(text: &str) -> Result<Option<Rc<Node>>, ReadError> {
    // YAML 1.1 counts NEL (U+0085) as a line break, YAML 1.2 does not; SnakeYAML reads it as
    // `\n`, so it becomes one here (same character count, so positions stay right).
    // A CR alone is a line break in both versions, but the 1.2 parser misses it in places; as
    // `\n` it reads the same everywhere (line breaks in scalars become `\n` anyway).
    let text: Cow<'_, str> = if text.contains('\u{85}') || text.contains('\r') {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            out.push(match c {
                '\u{85}' => '\n',
                '\r' if chars.peek() != Some(&'\n') => '\n',
                c => c,
            });
        }
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    };
    let text = text.as_ref();
    check_stream(text)?;
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
            scalars.push(source.scalar_extent(&span, *style));
        }
        let event = match event {
            Event::Scalar(value, style @ (ScalarStyle::Literal | ScalarStyle::Folded), anchor, tag)
                if span.end.index() >= total_chars && !text.ends_with(['\n', '\r']) =>
            {
                let value = source.block_scalar_at_eof(&span, &value).map_or(value, Cow::Owned);
                Event::Scalar(value, style, anchor, tag)
            }
            event => event,
        };
        builder.on_event(event, &span, raw, &mut source)?;
    }
    if has_tabs {
        check_tabs(text, &scalars)?;
    }
    // A `...` with no document before it ends nothing: SnakeYAML fails, the 1.2 parser skips it.
    if builder.documents == 0
        && text.lines().any(|line| line.strip_prefix("...").is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t'])))
    {
        return Err(ReadError::syntax(
            Position { line: 1, column: 1 },
            "a document end marker `...` with no document before it",
        ));
    }
    Ok(builder.root)
}

/// The document text, read again where the parser (YAML 1.2) accepts what SnakeYAML (YAML 1.1)
/// refuses. The parser's spans count characters; the text is walked forward to find their bytes.
struct Source<'a> {
    text: &'a str,
    char_at: usize,
    byte_at: usize,
}

impl<'a> Source<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, char_at: 0, byte_at: 0 }
    }

    /// The text from character `index` on.
    fn from(&mut self, index: usize) -> &'a str {
        if index < self.char_at {
            let back: usize =
                self.text[..self.byte_at].chars().rev().take(self.char_at - index).map(char::len_utf8).sum();
            self.byte_at -= back;
            self.char_at = index;
        }
        let rest = &self.text[self.byte_at..];
        let skip: usize = rest.chars().take(index - self.char_at).map(char::len_utf8).sum();
        self.byte_at += skip;
        self.char_at = index;
        &self.text[self.byte_at..]
    }

    /// Refuses the two YAML 1.2 additions SnakeYAML does not read: anchor and alias names with
    /// `.`, `/`, `*` or `&` in them (SnakeYAML ends a name there and then fails), and the `\\/`
    /// escape in double-quoted scalars. Returns what the builder needs to know of the raw text.
    fn check_yaml11(&mut self, event: &Event<'_>, span: &Span) -> Result<Raw, ReadError> {
        let (has_anchor, double_quoted) = match event {
            Event::Scalar(_, style, anchor, _) => (*anchor != 0, matches!(style, ScalarStyle::DoubleQuoted)),
            Event::SequenceStart(anchor, tag) | Event::MappingStart(anchor, tag) => {
                // A flow collection's span ends past its `[` or `{` (and any blanks after it);
                // a block collection's ends before its first key or at its first `-`.
                let length = span.end.index().saturating_sub(span.start.index());
                let opener = self.from(span.start.index()).chars().take(length).collect::<String>();
                let flow = opener.trim_end_matches([' ', '\t', '\r', '\n']).ends_with(['[', '{']);
                let raw = Raw { flow, properties: false };
                if *anchor == 0 && tag.is_none() {
                    return Ok(raw);
                }
                return self.check_properties(span).map(|_| raw);
            }
            Event::Alias(_) => (true, false),
            _ => return Ok(Raw::default()),
        };
        if !has_anchor && !double_quoted && !matches!(event, Event::Scalar(_, _, _, Some(_))) {
            return Ok(Raw::default());
        }
        let (rest, properties) = self.check_properties(span)?;
        if double_quoted {
            let mut chars = rest.strip_prefix('"').unwrap_or(rest).chars();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' if chars.next() == Some('/') => {
                        return Err(ReadError::syntax(
                            position(span),
                            "`\\/` is not a YAML 1.1 escape (the OAP's loader refuses it); write `/`",
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(Raw { flow: false, properties })
    }

    /// The value of a block scalar that runs to the end of a text with no final line break. The
    /// 1.2 parser counts a line break there that is not in the text (`|` then `a` at the very
    /// end gives `a\n`); SnakeYAML counts only the breaks written, so rebuild the trailing ones.
    fn block_scalar_at_eof(&mut self, span: &Span, value: &str) -> Option<String> {
        // With an anchor or a tag the span starts there, at the header (`|+`, `>2-`, ...);
        // without, it starts at the content and the header ends the last non-blank line before.
        let (rest, properties) = self.check_properties(span).ok()?;
        let (line, body) = if properties {
            rest.split_once('\n')?
        } else {
            let body = self.from(span.start.index());
            let before = self.text[..self.byte_at].trim_end_matches([' ', '\t', '\r', '\n']);
            (&before[before.rfind('\n').map_or(0, |i| i + 1)..], body)
        };
        let header =
            line.char_indices().rev().filter(|&(_, c)| c == '|' || c == '>').map(|(i, _)| &line[i + 1..]).find(
                |after| {
                    let indicators = after.trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
                    let rest = indicators.trim_start_matches([' ', '\t']);
                    after.len() - indicators.len() <= 2 && (rest.is_empty() || rest.starts_with('#'))
                },
            )?;
        let indicators: String = header.chars().take_while(|c| c.is_ascii_digit() || matches!(c, '+' | '-')).collect();
        let (keep, strip) = (indicators.contains('+'), indicators.contains('-'));
        let content = value.trim_end_matches('\n');
        let breaks = match body.rfind(|c: char| !matches!(c, ' ' | '\t' | '\r' | '\n')) {
            Some(at) => body[at..].matches('\n').count(),
            None => body.matches('\n').count(),
        };
        let mut out = content.to_owned();
        if keep {
            out.push_str(&"\n".repeat(breaks));
        } else if !strip && !content.is_empty() && breaks > 0 {
            out.push('\n');
        }
        Some(out)
    }

    /// The extent of a scalar event: its content start (after any anchor and tag) and its end.
    fn scalar_extent(&mut self, span: &Span, style: ScalarStyle) -> Extent {
        let block = matches!(style, ScalarStyle::Literal | ScalarStyle::Folded);
        let (start, block_column) = match self.check_properties(span) {
            Ok((rest, true)) => {
                let offset = rest.as_ptr() as usize - self.text.as_ptr() as usize;
                // With properties the span starts on the header line; the indentation is that
                // of the first content line.
                let indentation = rest
                    .split('\n')
                    .skip(1)
                    .find(|line| !line.trim().is_empty())
                    .map(|line| line.len() - line.trim_start_matches(' ').len());
                (self.char_at + self.text[self.byte_at..offset].chars().count(), indentation)
            }
            _ => (span.start.index(), Some(span.start.col())),
        };
        // A block scalar's header line (`|`, `>-` and what follows) is not content.
        let start = if block {
            let from = self.from(start);
            match from.strip_prefix(['|', '>']).map(|h| h.find('\n')) {
                Some(Some(newline)) => start + from[..newline + 1].chars().count(),
                Some(None) => start + from.chars().count(),
                None => start,
            }
        } else {
            start
        };
        // A quoted scalar's span runs on past its closing quote; end it at the quote.
        let end = match style {
            ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
                let quote = if matches!(style, ScalarStyle::SingleQuoted) { '\'' } else { '"' };
                let mut chars = self.from(start).chars().enumerate().skip(1);
                let mut close = None;
                while let Some((n, c)) = chars.next() {
                    if c == '\\' && quote == '"' {
                        chars.next();
                    } else if c == quote {
                        if quote == '\'' && self.text[self.byte_at..].chars().nth(n + 1) == Some('\'') {
                            chars.next();
                        } else {
                            close = Some(n + 1);
                            break;
                        }
                    }
                }
                close.map_or(span.end.index(), |n| start + n)
            }
            _ => span.end.index(),
        };
        Extent {
            start,
            end,
            plain: matches!(style, ScalarStyle::Plain),
            block_column: if block { Some(block_column.unwrap_or(0)) } else { None },
        }
    }

    /// Whether the text just before character `index`, blanks skipped, is the explicit-key `?`.
    fn after_question_mark(&mut self, index: usize) -> bool {
        self.from(index);
        self.text[..self.byte_at].trim_end_matches([' ', '\t', '\r', '\n']).ends_with('?')
    }

    /// Skips a node's properties (anchor, tag; in any order, separated by blanks), checking the
    /// anchor or alias name; returns the text after them and whether there were any.
    fn check_properties(&mut self, span: &Span) -> Result<(&'a str, bool), ReadError> {
        let mut rest = self.from(span.start.index());
        let mut any = false;
        loop {
            rest = rest.trim_start_matches([' ', '\t', '\r', '\n']);
            if let Some(name) = rest.strip_prefix(['&', '*']) {
                let end = name.find([' ', '\t', '\r', '\n', ',', '[', ']', '{', '}']).unwrap_or(name.len());
                if name[..end].contains(['.', '/', '*', '&', ':']) || name[end..].starts_with(['[', '{']) {
                    return Err(ReadError::syntax(
                        position(span),
                        format!(
                            "the anchor or alias name `{}` is not valid YAML 1.1 (the OAP's loader allows no `.`, `/`, `*` or `&` in it, and ends it at `:`)",
                            &name[..end]
                        ),
                    ));
                }
                if rest.starts_with('*') {
                    return Ok((&name[end..], false));
                }
                rest = &name[end..];
                any = true;
            } else if rest.starts_with('!') {
                let end = rest.find([' ', '\t', '\r', '\n']).unwrap_or(rest.len());
                check_tag(&rest[..end], position(span))?;
                rest = &rest[end..];
                any = true;
            } else {
                break;
            }
        }
        Ok((rest, any))
    }
}

/// Where a scalar's text lies, in characters: from its content (properties skipped) to its end.
#[derive(Debug, Clone, Copy)]
struct Extent {
    start: usize,
    end: usize,
    /// Plain scalars own the blanks that follow them on their line.
    plain: bool,
    /// For block scalars, the column (0-based) where their span starts: a tab left of it is
    /// indentation, not content.
    block_column: Option<usize>,
}

/// SnakeYAML separates tokens with spaces only: a tab outside a scalar, a comment, or the blanks
/// that end a plain scalar fails with "found character '\t' that cannot start any token"
/// (`k:<TAB>v`, `[a,<TAB>b]`, `"q"<TAB>`), where the 1.2 parser takes it as white space.
fn check_tabs(text: &str, scalars: &[Extent]) -> Result<(), ReadError> {
    let mut next = 0; // the first scalar that does not end before the current character
    let mut index = 0;
    for (number, line) in text.split('\n').enumerate() {
        let mut comment = false;
        let mut after_plain = false;
        let mut previous = ' ';
        let mut text_before = false;
        for (column, c) in line.chars().enumerate() {
            let i = index + column;
            while next < scalars.len() && scalars[next].end <= i {
                next += 1;
            }
            let inside = scalars.get(next).filter(|x| x.start <= i);
            match c {
                _ if comment => {}
                '#' if inside.is_none() && matches!(previous, ' ' | '\t') => comment = true,
                '#' if inside.is_none() && column == 0 => comment = true,
                '\t' => {
                    let allowed = match inside {
                        Some(x) => x.block_column.is_none_or(|block| column >= block || text_before),
                        None => after_plain,
                    };
                    if !allowed {
                        return Err(ReadError::syntax(
                            Position { line: number + 1, column: column + 1 },
                            "a tab separates tokens here, which YAML 1.1 (the OAP's loader) does not allow; use spaces",
                        ));
                    }
                }
                ' ' => {}
                _ => after_plain = false,
            }
            if inside.is_none() && !matches!(c, ' ' | '\t') {
                after_plain = false;
            }
            if let Some(x) = inside
                && x.plain
                && x.end == i + 1
            {
                after_plain = true;
            }
            previous = c;
            text_before |= !matches!(c, ' ' | '\t');
        }
        index += line.chars().count() + 1;
    }
    Ok(())
}

/// SnakeYAML reads a tag as URI characters up to a blank: another character in it (`#`, `{`,
/// non-ASCII) fails, and `,` `[` `]` would be part of its tag where the 1.2 parser ends the tag
/// before them; both are refused.
fn check_tag(tag: &str, at: Position) -> Result<(), ReadError> {
    let uri = |c: char| c.is_ascii_alphanumeric() || "-;/?:@&=+$_.!~*'()%".contains(c);
    let valid = match tag.strip_prefix("!<") {
        Some(verbatim) => {
            verbatim.strip_suffix('>').is_some_and(|inner| inner.chars().all(|c| uri(c) || ",[]".contains(c)))
        }
        None => tag.chars().all(uri),
    };
    if valid {
        return Ok(());
    }
    Err(ReadError::syntax(
        at,
        format!("the tag `{tag}` is not valid YAML 1.1 (the OAP's loader reads a tag as URI characters up to a blank)"),
    ))
}

/// What the raw text says about a node event that the event itself does not.
#[derive(Debug, Default, Clone, Copy)]
struct Raw {
    /// A collection written `[...]` or `{...}`.
    flow: bool,
    /// An anchor or a tag precedes the node.
    properties: bool,
}

/// What SnakeYAML refuses in the raw stream before it parses anything: more than 3 MiB of
/// characters, a character outside YAML 1.1's printable set (even in a comment), and a `%YAML`
/// directive of another major version than 1.
fn check_stream(text: &str) -> Result<(), ReadError> {
    let printable = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    };
    if let Some((index, _)) = text.char_indices().nth(MAX_CODE_POINTS) {
        let before = &text[..index];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        return Err(ReadError::structure(
            Position { line, column },
            format!("the document is longer than {MAX_CODE_POINTS} characters (the OAP's loader stops there)"),
        ));
    }
    let mut prologue = true;
    for (number, line) in text.split('\n').enumerate() {
        let trimmed = line.trim_start_matches([' ', '\t', '\r']);
        prologue &= trimmed.is_empty() || trimmed.starts_with(['#', '%']) || line.starts_with("---");
        if prologue && let Some(directive) = line.strip_prefix('%') {
            // A directive's name is letters, digits, `-` and `_`, then a blank.
            let name_end = directive.find([' ', '\t', '\r']).unwrap_or(directive.len());
            if !directive[..name_end].chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(ReadError::syntax(
                    Position { line: number + 1, column: 1 },
                    format!("`%{}` is not a directive YAML 1.1 can read", &directive[..name_end]),
                ));
            }
        }
        if line.starts_with("---") {
            prologue = false;
        }
        if let Some((column, c)) = line.chars().enumerate().find(|&(_, c)| !printable(c)) {
            return Err(ReadError::syntax(
                Position { line: number + 1, column: column + 1 },
                format!(
                    "the character U+{:04X} is not allowed in YAML 1.1 (the OAP's loader refuses it)",
                    u32::from(c)
                ),
            ));
        }
        if let Some(version) = line.strip_prefix("%YAML").and_then(|v| v.split_whitespace().next())
            && !version.starts_with("1.")
        {
            return Err(ReadError::syntax(
                Position { line: number + 1, column: 1 },
                format!("YAML version {version}: the OAP's loader reads only 1.x"),
            ));
        }
    }
    Ok(())
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
                let plain = matches!(style, ScalarStyle::Plain);
                let mut node = Node { kind: NodeKind::Scalar { text: text.into_owned(), plain }, tag: tag_of(tag), at };
                if plain && self.in_flow() {
                    node = self.flow_plain(node, raw)?;
                } else if plain
                    && !raw.properties
                    && matches!(&node.kind, NodeKind::Scalar { text, .. } if text.is_empty())
                    && matches!(self.stack.last(), Some(Frame::Mapping { key: None, .. }))
                    && !source.after_question_mark(span.start.index())
                {
                    // `: value` with nothing before the colon: SnakeYAML has no empty implicit
                    // keys in block mappings.
                    return Err(ReadError::syntax(at, "a mapping entry has no key before its `:`"));
                }
                // A block scalar can only be an explicit key.
                if !matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
                    self.check_implicit_key(span.start.index(), span, at, source)?;
                }
                self.complete(Rc::new(node), anchor)?;
            }
            Event::SequenceStart(anchor, tag) => {
                self.open(at, anchor)?;
                self.stack.push(Frame::Sequence {
                    items: Vec::new(),
                    head: Head {
                        anchor,
                        tag: tag_of(tag),
                        at,
                        flow: raw.flow || self.in_flow(),
                        start: span.start.index(),
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
                        flow: raw.flow || self.in_flow(),
                        start: span.start.index(),
                    },
                });
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
                let node = Rc::new(Node { kind, tag: head.tag, at: head.at });
                self.complete(node, head.anchor)?;
            }
            Event::Alias(anchor) => {
                self.check_depth(at)?;
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
        let multi_line = end.end.line() != at.line;
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
        let key = Node { kind: NodeKind::Scalar { text: rest.to_owned(), plain: true }, tag: None, at: node.at };
        match self.stack.last() {
            // In a key's place the `?` just marks the key.
            Some(Frame::Mapping { key: None, .. }) => Ok(key),
            // A sequence entry becomes a one-pair mapping with a null value.
            Some(Frame::Sequence { .. }) => {
                let null = Node { kind: NodeKind::Scalar { text: String::new(), plain: true }, tag: None, at: node.at };
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

    fn open(&mut self, at: Position, anchor: usize) -> Result<(), ReadError> {
        self.check_depth(at)?;
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
        let NodeKind::Mapping(entries) = &node.kind else { panic!("not a mapping") };
        let entries = entries.borrow();
        let NodeKind::Scalar { text, plain } = &entries[0].1.kind else { panic!() };
        assert_eq!((text.as_str(), *plain), ("010", true));
        let NodeKind::Scalar { text, plain } = &entries[1].1.kind else { panic!() };
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
            NodeKind::Scalar { text, .. } => text.clone(),
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
        assert!(parse("? \n: 2\n").is_ok(), "an explicit empty key is fine");
        assert!(parse("a: {: 2}\n").is_ok(), "so is an empty key in a flow mapping");
    }

    #[test]
    fn refuses_more_than_3_mib_of_characters() {
        let doc = |n: usize| format!("a: {}\n", "é".repeat(n - 4));
        assert!(parse(&doc(MAX_CODE_POINTS)).is_ok(), "characters, not bytes, are counted");
        let err = parse(&doc(MAX_CODE_POINTS + 1)).unwrap_err();
        assert_eq!(err.position(), Some(Position { line: 1, column: MAX_CODE_POINTS + 1 }), "{err}");
    }

    #[test]
    fn a_lone_carriage_return_is_a_line_break() {
        assert_eq!(value_of("a: |\r  x\r  y\r"), "x\ny\n");
        assert!(parse("a: x\r: y\n").is_err(), "`: y` starts a new line without a key");
    }

    #[test]
    fn nel_is_a_line_break() {
        assert_eq!(value_of("a: 'x\u{85}  y'\n"), "x y");
    }
}
