//! U+2028 and U+2029 (LS, PS): line breaks in YAML 1.1, ordinary characters in YAML 1.2.
//!
//! The parser reads a copy of the text with them as `\n` (`yaml11::for_parser`), so lines end
//! where SnakeYAML ends them. But SnakeYAML keeps an LS or PS in a scalar's value where it folds
//! a `\n` away, so a scalar whose text holds one is read again here, from the text that still has
//! them. The rule, in every style: a run of line breaks (with only blanks between them) that
//! starts with `\n` becomes a space when it is alone and otherwise the breaks after the first; a
//! run that starts with LS or PS keeps every break. Each break is kept as itself, except that
//! LF, CR LF, CR and NEL are all `\n`. Pinned against the OAP's loader (DigestTool on SnakeYAML
//! 2.0 and 1.33) by the tests below and the golden documents.

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::yaml11::{Extent, LS, NEL, PS, Source, YAML11_BREAKS};

/// The character ranges of the scalars whose line breaks SnakeYAML reads without indentation:
/// quoted scalars, and plain scalars inside `[...]` or `{...}`. There the parser must not see a
/// NEL, LS or PS as a line break: it would want the next line indented, and SnakeYAML does not.
/// They are found by reading the text with those breaks as spaces, which separate tokens as a
/// break does but ask for no indentation (a break does not move a quote, and in a flow
/// collection it separates what a space separates). Empty when that reading fails; the parser
/// then sees every break.
pub(super) fn inline_scalars(text: &str) -> Vec<(usize, usize)> {
    // An escaped break (`\` then the break) stays one, as `\n`.
    let mut previous = '\0';
    let text: String = text
        .chars()
        .map(|c| {
            let out = match c {
                c if !YAML11_BREAKS.contains(&c) => c,
                _ if previous == '\\' => '\n',
                _ => ' ',
            };
            previous = c;
            out
        })
        .collect();
    let text = text.as_str();
    let mut source = Source::new(text);
    let mut flow: Vec<bool> = Vec::new();
    let mut inline = Vec::new();
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { return Vec::new() };
        let Ok(raw) = source.check_yaml11(&event, &span) else { return Vec::new() };
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                let outer = flow.last().copied().unwrap_or(false);
                flow.push(raw.flow || outer);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                flow.pop();
            }
            Event::Scalar(_, style, ..) => {
                let quoted = matches!(style, ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted);
                let in_flow = flow.last().copied().unwrap_or(false);
                if quoted || (matches!(style, ScalarStyle::Plain) && in_flow) {
                    let extent = source.scalar_extent(&span, style, raw.properties);
                    inline.push((extent.start, extent.end));
                }
            }
            _ => {}
        }
    }
    inline
}

/// The document text as characters, with lone CRs already `\n` and NEL, LS and PS kept.
pub(super) struct Text {
    chars: Vec<char>,
}

impl Text {
    pub(super) fn new(text: &str) -> Self {
        Self { chars: text.chars().collect() }
    }

    fn at(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    fn is_break(&self, i: usize) -> bool {
        match self.at(i) {
            Some('\n' | NEL | LS | PS) => true,
            Some('\r') => self.at(i + 1) == Some('\n'),
            _ => false,
        }
    }

    /// The line break at `i`, as SnakeYAML reads it, and the index after it.
    fn take_break(&self, i: usize) -> Option<(char, usize)> {
        match self.at(i)? {
            '\r' if self.at(i + 1) == Some('\n') => Some(('\n', i + 2)),
            '\n' | NEL => Some(('\n', i + 1)),
            c @ (LS | PS) => Some((c, i + 1)),
            _ => None,
        }
    }

    /// Whether the characters from `from` to `to` hold a NEL, LS or PS.
    pub(super) fn has_separator(&self, from: usize, to: usize) -> bool {
        self.chars.get(from..to.min(self.chars.len())).is_some_and(|s| s.iter().any(|c| YAML11_BREAKS.contains(c)))
    }

    /// SnakeYAML's value for a scalar the parser read as `parsed`, or `None` when no LS or PS
    /// is involved (the parser's value is right). `Err` says why the value cannot be read.
    /// `properties_at`: where the scalar's anchor or tag starts, if it has one (on the header
    /// line of a block scalar).
    pub(super) fn reread(
        &self,
        style: ScalarStyle,
        extent: Extent,
        properties_at: Option<usize>,
        parsed: &str,
    ) -> Result<Option<String>, String> {
        match style {
            ScalarStyle::Plain | ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
                if !self.has_separator(extent.start, extent.end) {
                    return Ok(None);
                }
                let (from, to) = if matches!(style, ScalarStyle::Plain) {
                    (extent.start, extent.end)
                } else {
                    (extent.start + 1, extent.end.saturating_sub(1))
                };
                self.flow(from, to, style).map(Some)
            }
            ScalarStyle::Literal | ScalarStyle::Folded => {
                let (region, header) = self.block_header(extent.start, properties_at)?;
                // The scalar's breaks run on past its span: look as far as the blanks go.
                let mut end = extent.end.max(region);
                while self.at(end).is_some_and(|c| matches!(c, ' ' | '\t' | '\r' | '\n' | NEL | LS | PS)) {
                    end += 1;
                }
                if !self.has_separator(region, end) {
                    return Ok(None);
                }
                self.block(region, header, matches!(style, ScalarStyle::Folded), parsed).map(Some)
            }
        }
    }

    /// Plain and quoted scalars: the text between `from` and `to` (quotes excluded).
    fn flow(&self, from: usize, to: usize, style: ScalarStyle) -> Result<String, String> {
        let double = matches!(style, ScalarStyle::DoubleQuoted);
        let mut out = String::new();
        // Blanks are kept only when no line break follows them.
        let mut blanks = String::new();
        let mut i = from;
        while i < to {
            let c = self.chars[i];
            if matches!(c, ' ' | '\t') {
                blanks.push(c);
                i += 1;
                continue;
            }
            if self.is_break(i) {
                blanks.clear();
                let (run, next) = self.run_of_breaks(i, to);
                let mut run = run.chars();
                match run.next() {
                    Some('\n') => match run.as_str() {
                        "" => out.push(' '),
                        rest => out.push_str(rest),
                    },
                    Some(first) => {
                        out.push(first);
                        out.push_str(run.as_str());
                    }
                    None => {}
                }
                i = next;
                continue;
            }
            out.push_str(&blanks);
            blanks.clear();
            match c {
                '\\' if double => {
                    if self.is_break(i + 1) {
                        // An escaped line break is dropped; the breaks after it are kept.
                        let (run, next) = self.run_of_breaks(i + 1, to);
                        out.extend(run.chars().skip(1));
                        i = next;
                    } else {
                        let (decoded, next) = self.escape(i + 1)?;
                        out.push(decoded);
                        i = next;
                    }
                }
                '\'' if matches!(style, ScalarStyle::SingleQuoted) && self.at(i + 1) == Some('\'') => {
                    out.push('\'');
                    i += 2;
                }
                c => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        if !matches!(style, ScalarStyle::Plain) {
            out.push_str(&blanks);
        }
        Ok(out)
    }

    /// The line breaks from `i` on, with the blanks that start each next line skipped.
    fn run_of_breaks(&self, mut i: usize, to: usize) -> (String, usize) {
        let mut run = String::new();
        while i < to {
            let Some((brk, next)) = self.take_break(i) else { break };
            run.push(brk);
            i = next;
            while i < to && matches!(self.chars[i], ' ' | '\t') {
                i += 1;
            }
        }
        (run, i)
    }

    /// A double-quoted escape, `i` just past the backslash: the character and the index after it.
    fn escape(&self, i: usize) -> Result<(char, usize), String> {
        let simple = match self.at(i) {
            Some('0') => '\0',
            Some('a') => '\u{7}',
            Some('b') => '\u{8}',
            Some('t' | '\t') => '\t',
            Some('n') => '\n',
            Some('v') => '\u{b}',
            Some('f') => '\u{c}',
            Some('r') => '\r',
            Some('e') => '\u{1b}',
            Some(' ') => ' ',
            Some('"') => '"',
            Some('\\') => '\\',
            Some('N') => '\u{85}',
            Some('_') => '\u{a0}',
            Some('L') => LS,
            Some('P') => PS,
            Some(kind @ ('x' | 'u' | 'U')) => {
                let digits = match kind {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = self.chars.get(i + 1..i + 1 + digits).unwrap_or_default().iter().collect();
                let code = (hex.len() == digits && hex.chars().all(|c| c.is_ascii_hexdigit()))
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("`\\{kind}{hex}` is not a valid escape"))?;
                return Ok((code, i + 1 + digits));
            }
            other => return Err(format!("`\\{}` is not a valid escape", other.unwrap_or(' '))),
        };
        Ok((simple, i + 1))
    }

    /// Finds a block scalar's header from where its content starts: the region after the header
    /// line, and the header's chomping and indentation indicators.
    fn block_header(&self, content: usize, properties_at: Option<usize>) -> Result<(usize, Header), String> {
        let line_start = |mut i: usize| {
            while i > 0 && !matches!(self.chars[i - 1], '\n' | NEL | LS | PS) {
                i -= 1;
            }
            i
        };
        if let Some(at) = properties_at {
            let (start, end) = (line_start(at), self.line_end(at));
            return Header::parse(&self.chars[start..end])
                .map(|h| (end + 1, h))
                .ok_or_else(|| "no block scalar header".to_owned());
        }
        // The content starts on a line after the header, or at the end of the text.
        let mut region = line_start(content.min(self.chars.len()));
        while region > 0 {
            let previous = line_start(region - 1);
            let line = &self.chars[previous..region - 1];
            if line.iter().all(|c| matches!(c, ' ' | '\t' | '\r')) {
                region = previous;
                continue;
            }
            return Header::parse(line).map(|h| (region, h)).ok_or_else(|| "no block scalar header".to_owned());
        }
        Err("no block scalar header".to_owned())
    }

    fn line_end(&self, mut i: usize) -> usize {
        while i < self.chars.len() && !matches!(self.chars[i], '\n' | NEL | LS | PS) {
            i += 1;
        }
        i
    }

    /// Skips indentation up to `indent` and collects the empty lines' breaks from `i`.
    fn breaks_to(&self, i: &mut usize, column: &mut usize, indent: usize) -> String {
        let mut breaks = String::new();
        loop {
            while *column < indent && self.at(*i) == Some(' ') {
                *i += 1;
                *column += 1;
            }
            let Some((brk, next)) = self.take_break(*i) else { return breaks };
            breaks.push(brk);
            *i = next;
            *column = 0;
        }
    }

    /// A literal or folded scalar whose header line ends just before `region`.
    fn block(&self, region: usize, header: Header, folded: bool, parsed: &str) -> Result<String, String> {
        let len = self.chars.len();
        let mut i = region;
        let mut column = 0;
        let mut breaks = String::new();
        let indent = match header.indent {
            None => {
                // The deepest indentation of the empty lines and the first line with text.
                let mut deepest = 0;
                loop {
                    match self.at(i) {
                        Some(' ') => {
                            i += 1;
                            column += 1;
                            deepest = deepest.max(column);
                        }
                        _ => match self.take_break(i) {
                            Some((brk, next)) => {
                                breaks.push(brk);
                                i = next;
                                column = 0;
                            }
                            None => break,
                        },
                    }
                }
                deepest
            }
            Some(_) => {
                let indent = self.explicit_indent(region, parsed)?;
                breaks = self.breaks_to(&mut i, &mut column, indent);
                indent
            }
        };
        if parsed.chars().all(|c| c == '\n') {
            // No line of text: the value is only (some of) the breaks, as written.
            let mut written = Vec::new();
            let mut j = region;
            while j < len {
                match self.take_break(j) {
                    Some((brk, next)) => {
                        written.push(brk);
                        j = next;
                    }
                    None => j += 1,
                }
            }
            return Ok(written.into_iter().take(parsed.len()).collect());
        }
        let mut out = String::new();
        let mut line_break = String::new();
        while column == indent && i < len {
            out.push_str(&breaks);
            let leading_non_space = !matches!(self.chars[i], ' ' | '\t');
            while i < len && !self.is_break(i) {
                out.push(self.chars[i]);
                i += 1;
            }
            line_break.clear();
            if let Some((brk, next)) = self.take_break(i) {
                line_break.push(brk);
                i = next;
            }
            column = 0;
            breaks = self.breaks_to(&mut i, &mut column, indent);
            if !(column == indent && i < len) {
                break;
            }
            if folded && line_break == "\n" && leading_non_space && !matches!(self.chars[i], ' ' | '\t') {
                if breaks.is_empty() {
                    out.push(' ');
                }
            } else {
                out.push_str(&line_break);
            }
        }
        if !header.strip {
            out.push_str(&line_break);
        }
        if header.keep {
            out.push_str(&breaks);
        }
        Ok(out)
    }

    /// The indentation of a block scalar with an indentation indicator, which counts from its
    /// parent's: the parser's value starts with the first line of text less that indentation.
    fn explicit_indent(&self, region: usize, parsed: &str) -> Result<usize, String> {
        let rest = parsed.trim_start_matches('\n');
        let mut i = region;
        while i < self.chars.len() {
            let end = self.line_end(i);
            let line = &self.chars[i..end];
            let line = line.strip_suffix(&['\r']).unwrap_or(line);
            if line.iter().any(|c| !matches!(c, ' ' | '\t')) {
                let spaces = line.iter().take_while(|&&c| c == ' ').count();
                return (0..=spaces)
                    .find(|&n| rest.starts_with(&line[n..].iter().collect::<String>()))
                    .ok_or_else(|| "cannot find the block scalar's indentation".to_owned());
            }
            i = end + 1;
        }
        Err("cannot find the block scalar's indentation".to_owned())
    }
}

/// A block scalar's header: `|` or `>`, then chomping and indentation indicators.
#[derive(Debug, Clone, Copy)]
struct Header {
    keep: bool,
    strip: bool,
    indent: Option<u32>,
}

impl Header {
    /// The header in a line: the last `|` or `>` followed by at most two indicators, then blanks
    /// or a comment.
    fn parse(line: &[char]) -> Option<Self> {
        let line: String = line.iter().collect();
        line.char_indices().rev().filter(|&(_, c)| c == '|' || c == '>').find_map(|(at, _)| {
            let after = &line[at + 1..];
            let indicators = after.trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
            let rest = indicators.trim_start_matches([' ', '\t', '\r']);
            let written = &after[..after.len() - indicators.len()];
            (written.len() <= 2 && (rest.is_empty() || rest.starts_with('#'))).then(|| Self {
                keep: written.contains('+'),
                strip: written.contains('-'),
                indent: written.chars().find_map(|c| c.to_digit(10)),
            })
        })
    }
}
