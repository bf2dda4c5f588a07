//! The YAML 1.1 that SnakeYAML reads and the YAML 1.2 parser does not (or reads otherwise),
//! found by diffing generated documents against the OAP's loader. The parser's events say
//! nothing of these, so they are checked on the raw text: the stream before parsing (size,
//! characters, directives, line breaks), node properties (anchor names, tags), escapes, tabs
//! between tokens, block scalars that end the text. `tree` calls in here for every event.

use std::borrow::Cow;

use saphyr_parser::{Event, ScalarStyle, Span};

use super::tree::position;
use super::{Position, ReadError};

/// SnakeYAML's default `codePointLimit` (3 MiB): a longer document fails to load.
pub(super) const MAX_CODE_POINTS: usize = 3 * 1024 * 1024;

/// A CR alone is a line break in YAML 1.1 and 1.2, but the 1.2 parser misses it in places: it
/// becomes `\n` (one character for one, so positions stay right). YAML 1.1's other breaks, NEL,
/// LS and PS, stay: [`for_parser`] turns them into `\n` for the parser (see `breaks`).
pub(super) fn normalize_breaks(text: &str) -> Cow<'_, str> {
    if !text.contains('\r') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '\r' if chars.peek() != Some(&'\n') => '\n',
            c => c,
        });
    }
    Cow::Owned(out)
}

/// The text the 1.2 parser reads: [`normalize_breaks`]'s, with NEL, LS and PS as `\n`, so that
/// lines end where SnakeYAML ends them (and positions count them as it does); except inside
/// `inline` (character ranges), where they stay characters: there SnakeYAML wants no
/// indentation after a break and the 1.2 parser does (see `breaks::inline_scalars`).
pub(super) fn for_parser<'t>(text: &'t str, inline: &[(usize, usize)]) -> Cow<'t, str> {
    if !text.contains(YAML11_BREAKS) {
        return Cow::Borrowed(text);
    }
    let mut ranges = inline.iter().peekable();
    let mut previous = '\0';
    let out = text
        .chars()
        .enumerate()
        .map(|(i, c)| {
            while ranges.peek().is_some_and(|&&(_, end)| end <= i) {
                ranges.next();
            }
            let inside = ranges.peek().is_some_and(|&&(start, _)| start <= i);
            // `\` then a break is an escaped break, which the parser must see as one.
            let out = if YAML11_BREAKS.contains(&c) && (!inside || previous == '\\') { '\n' } else { c };
            previous = c;
            out
        })
        .collect();
    Cow::Owned(out)
}

/// U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR: line breaks in YAML 1.1.
pub(super) const LS: char = '\u{2028}';
/// See [`LS`].
pub(super) const PS: char = '\u{2029}';
/// U+0085 NEXT LINE, a line break in YAML 1.1 that SnakeYAML reads as `\n`.
pub(super) const NEL: char = '\u{85}';
/// The line breaks of YAML 1.1 that YAML 1.2 reads as characters.
pub(super) const YAML11_BREAKS: [char; 3] = [NEL, LS, PS];

/// The document text, read again where the parser (YAML 1.2) accepts what SnakeYAML (YAML 1.1)
/// refuses. The parser's spans count characters; the text is walked forward to find their bytes.
pub(super) struct Source<'a> {
    text: &'a str,
    /// The tag the parser read for the event being checked, as its suffix.
    tag_suffix: Option<String>,
    char_at: usize,
    byte_at: usize,
}

impl<'a> Source<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self { text, tag_suffix: None, char_at: 0, byte_at: 0 }
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
    pub(super) fn check_yaml11(&mut self, event: &Event<'_>, span: &Span) -> Result<Raw, ReadError> {
        self.tag_suffix = match event {
            Event::Scalar(_, _, _, Some(tag))
            | Event::SequenceStart(_, Some(tag))
            | Event::MappingStart(_, Some(tag)) => Some(tag.suffix.clone()),
            _ => None,
        };
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
    pub(super) fn block_scalar_at_eof(&mut self, span: &Span, value: &str, properties: bool) -> Option<String> {
        // With an anchor or a tag the span starts there, at the header (`|+`, `>2-`, ...);
        // without, it starts at the content (which may well start with `!` or `&`) and the
        // header ends the last non-blank line before.
        let (line, body) = if properties {
            let (rest, _) = self.check_properties(span).ok()?;
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
    pub(super) fn scalar_extent(&mut self, span: &Span, style: ScalarStyle, properties: bool) -> Extent {
        let block = matches!(style, ScalarStyle::Literal | ScalarStyle::Folded);
        let parsed = if properties { self.check_properties(span).ok() } else { None };
        let (start, block_column) = match parsed {
            Some((rest, true)) => {
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

    /// Whether a line break (or a comment) comes between character `index`, the end of a key,
    /// and the `:` after it: SnakeYAML wants an implicit key's `:` on the key's line, in flow
    /// collections too (`{a⏎: b}`), where the 1.2 parser takes it on a later one.
    pub(super) fn colon_on_a_later_line(&mut self, index: usize) -> bool {
        let mut broke = false;
        let mut chars = self.from(index).chars();
        while let Some(c) = chars.next() {
            match c {
                ' ' | '\t' | '\r' => {}
                '\n' => broke = true,
                '#' => {
                    chars.by_ref().find(|&c| c == '\n');
                    broke = true;
                }
                ':' => return broke,
                _ => return false,
            }
        }
        false
    }

    /// Whether the text just before character `index`, blanks skipped, is the explicit-key `?`.
    pub(super) fn after_question_mark(&mut self, index: usize) -> bool {
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
                check_tag(&rest[..end], self.tag_suffix.as_deref(), position(span))?;
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
pub(super) struct Extent {
    pub(super) start: usize,
    pub(super) end: usize,
    /// Plain scalars own the blanks that follow them on their line.
    plain: bool,
    /// For block scalars, the column (0-based) where their span starts: a tab left of it is
    /// indentation, not content.
    block_column: Option<usize>,
}

/// SnakeYAML separates tokens with spaces only: a tab outside a scalar, a comment, or the blanks
/// that end a plain scalar fails with "found character '\t' that cannot start any token"
/// (`k:<TAB>v`, `[a,<TAB>b]`, `"q"<TAB>`), where the 1.2 parser takes it as white space.
pub(super) fn check_tabs(text: &str, scalars: &[Extent]) -> Result<(), ReadError> {
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
fn check_tag(tag: &str, parsed_suffix: Option<&str>, at: Position) -> Result<(), ReadError> {
    let uri = |c: char| c.is_ascii_alphanumeric() || "-;/?:@&=+$_.!~*'()%".contains(c);
    let valid = match tag.strip_prefix("!<") {
        Some(verbatim) => {
            verbatim.strip_suffix('>').is_some_and(|inner| inner.chars().all(|c| uri(c) || ",[]".contains(c)))
        }
        // `,` `[` `]` are URI characters too, but inside `[...]` or `{...}` the 1.2 parser ends
        // the tag there: then it read another tag than SnakeYAML does.
        None => {
            tag.chars().all(|c| uri(c) || ",[]".contains(c))
                && (!tag.contains([',', '[', ']'])
                    || parsed_suffix.is_some_and(|suffix| tag.rsplit('!').next() == Some(suffix)))
        }
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
pub(super) struct Raw {
    /// A collection written `[...]` or `{...}`.
    pub(super) flow: bool,
    /// An anchor or a tag precedes the node.
    pub(super) properties: bool,
}

/// What SnakeYAML refuses in the raw stream before it parses anything: more than 3 MiB of
/// characters, a character outside YAML 1.1's printable set (even in a comment), and a `%YAML`
/// directive of another major version than 1.
pub(super) fn check_stream(text: &str) -> Result<(), ReadError> {
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
    // Only blank lines, comments and directives so far.
    let mut nothing_yet = true;
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
        // `...` before any document ends nothing: SnakeYAML fails, the 1.2 parser skips it.
        if line.strip_prefix("...").is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t', '\r'])) && nothing_yet {
            return Err(ReadError::syntax(
                Position { line: number + 1, column: 1 },
                "a document end marker `...` with no document before it",
            ));
        }
        nothing_yet &= trimmed.is_empty() || trimmed.starts_with(['#', '%']);
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
