//! Gives YAML nodes the Java types SnakeYAML's `SafeConstructor` gives them under YAML 1.1 rules,
//! so that values stringify — and hash — exactly as they do in the OAP.
//!
//! Plain scalars are typed by their text (bool, int, float, null, timestamp; anything else stays a
//! string); quoted and block scalars are strings; explicit core tags (`!!str`, `!!int`, ...) win
//! over both. Mappings drop duplicate keys (the last one stays, in its place) and expand `<<`
//! merge keys. The rules were written from the YAML 1.1 type definitions and pinned against the
//! OAP's loader with the golden corpus in `tests/data/`.

use std::collections::HashMap;
use std::rc::Rc;

use super::bigint::BigUint;
use super::java::{GREGORIAN_CUTOVER_DAYS, Identity, JavaValue, days_from_civil, days_from_julian};
use super::tree::{CORE_PREFIX, Node, NodeKind, Tag};
use super::{Position, ReadError};

/// How many values one document may expand to through aliases before it is refused.
pub(crate) const MAX_VALUES: usize = 1_000_000;

/// One mapping entry after flattening: the constructed key, where it was written, and the value
/// node (constructed on demand, so callers can point at it in errors).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: JavaValue,
    pub(crate) key_node: Rc<Node>,
    pub(crate) value: Rc<Node>,
}

/// Turns nodes into Java values, counting what aliases expand to.
#[derive(Debug, Default)]
pub(crate) struct Constructor {
    values: usize,
}

impl Constructor {
    /// How many values were built so far (against `MAX_VALUES`, a document-wide limit).
    pub(crate) fn values(&self) -> usize {
        self.values
    }

    /// The Java value of `node`.
    pub(crate) fn construct(&mut self, node: &Node) -> Result<JavaValue, ReadError> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(ReadError::structure(
                node.at,
                format!("the document expands to more than {MAX_VALUES} values through aliases"),
            ));
        }
        match &node.kind {
            NodeKind::Scalar { text, plain } => scalar(text, *plain, node.tag.as_deref(), node.at),
            NodeKind::Sequence(_) if is_omap(node) => {
                let mut constructed = Vec::new();
                for Entry { key, value, .. } in self.map_entries(node)?.entries {
                    constructed.push((key, self.construct(&value)?));
                }
                Ok(JavaValue::Map(constructed))
            }
            NodeKind::Sequence(items) => {
                expect_tag(node, &["seq"])?;
                items.iter().map(|item| self.construct(item)).collect::<Result<_, _>>().map(JavaValue::List)
            }
            NodeKind::Mapping(_) => {
                expect_tag(node, &["map", "set"])?;
                let entries = self.mapping_entries(node)?;
                let is_set = node.tag.as_ref().is_some_and(|t| is_core(t, "set"));
                if is_set {
                    return Ok(JavaValue::Set(entries.into_iter().map(|e| e.key).collect()));
                }
                let mut constructed = Vec::with_capacity(entries.len());
                for Entry { key, value, .. } in entries {
                    constructed.push((key, self.construct(&value)?));
                }
                Ok(JavaValue::Map(constructed))
            }
        }
    }

    /// The entries of a mapping node, keys constructed, after SnakeYAML's flattening: among the
    /// mapping's own keys the last of equal keys stays, at its own position; merged (`<<`)
    /// entries come in at the merge key's place and never override a key already present, while
    /// the mapping's own keys override merged ones in place.
    ///
    /// Like SnakeYAML, this rewrites the node with the flattened entries, so an alias to it
    /// later sees them (and merges from it the same way again).
    pub(crate) fn mapping_entries(&mut self, node: &Node) -> Result<Vec<Entry>, ReadError> {
        self.flatten(node, &mut Vec::new())
    }

    /// The entries of a node SnakeYAML builds as a `LinkedHashMap` ([`is_map`]): a mapping, as
    /// [`Self::mapping_entries`] gives them, or an `!!omap`. Also the entries that an equal key
    /// replaced, so the caller can say what was dropped.
    pub(crate) fn map_entries(&mut self, node: &Node) -> Result<MapEntries, ReadError> {
        let mut replaced = Vec::new();
        let entries =
            if is_omap(node) { self.omap_entries(node, &mut replaced)? } else { self.flatten(node, &mut replaced)? };
        Ok(MapEntries { entries, replaced })
    }

    /// An `!!omap`: a sequence of one-entry mappings, put one by one into a `LinkedHashMap`, so
    /// of equal keys the first keeps its place and the last gives the value. Merge keys are not
    /// read there (the OAP's loader fails on them), nor are items of any other shape.
    fn omap_entries(&mut self, node: &Node, replaced: &mut Vec<(Rc<Node>, Rc<Node>)>) -> Result<Vec<Entry>, ReadError> {
        let NodeKind::Sequence(items) = &node.kind else {
            return Err(ReadError::value(node.at, "an `!!omap` must be a sequence of one-entry mappings"));
        };
        let mut entries: Vec<Entry> = Vec::with_capacity(items.len());
        let mut index: HashMap<Identity, usize> = HashMap::with_capacity(items.len());
        for item in items {
            let pair = match &item.kind {
                NodeKind::Mapping(cell) => match cell.borrow().as_slice() {
                    [(key, value)] if !is_merge_key(key) => Some((Rc::clone(key), Rc::clone(value))),
                    _ => None,
                },
                _ => None,
            };
            let Some((key_node, value)) = pair else {
                return Err(ReadError::value(
                    item.at,
                    "each item of an `!!omap` must be a mapping with exactly one key",
                ));
            };
            let key = self.construct(&key_node)?;
            match index.get(&key.identity()) {
                Some(&at) => {
                    let earlier = std::mem::replace(&mut entries[at].value, value);
                    replaced.push((key_node, earlier));
                }
                None => {
                    index.insert(key.identity(), entries.len());
                    entries.push(Entry { key, key_node, value });
                }
            }
        }
        Ok(entries)
    }

    fn flatten(&mut self, node: &Node, replaced: &mut Vec<(Rc<Node>, Rc<Node>)>) -> Result<Vec<Entry>, ReadError> {
        let NodeKind::Mapping(cell) = &node.kind else {
            return Err(ReadError::structure(node.at, "expected a mapping"));
        };
        let raw = cell.borrow().clone();
        // Own keys first: drop the earlier of equal keys.
        let mut own: Vec<Option<Own>> = Vec::with_capacity(raw.len());
        let mut seen: HashMap<_, usize> = HashMap::with_capacity(raw.len());
        for (key_node, value_node) in raw {
            if is_merge_key(&key_node) {
                own.push(Some(Own::Merge(value_node)));
                continue;
            }
            let key = self.construct(&key_node)?;
            if let Some(earlier) = seen.insert(key.identity(), own.len())
                && let Some(Own::Entry(entry)) = own[earlier].take()
            {
                replaced.push((entry.key_node, entry.value));
            }
            own.push(Some(Own::Entry(Entry { key, key_node, value: value_node })));
        }
        let mut merged = Merged::default();
        for item in own.into_iter().flatten() {
            match item {
                Own::Entry(entry) => merged.put(entry, true),
                Own::Merge(source) => self.merge_from(&source, &mut merged)?,
            }
        }
        *cell.borrow_mut() = merged.entries.iter().map(|e| (Rc::clone(&e.key_node), Rc::clone(&e.value))).collect();
        Ok(merged.entries)
    }

    /// Adds what a `<<` value brings: one mapping, or a sequence of mappings, in order.
    fn merge_from(&mut self, source: &Node, merged: &mut Merged) -> Result<(), ReadError> {
        match &source.kind {
            NodeKind::Mapping(_) => self.merge_mapping(source, merged),
            NodeKind::Sequence(items) => {
                for item in items {
                    if !matches!(item.kind, NodeKind::Mapping(_)) {
                        return Err(ReadError::structure(item.at, "a `<<` merge list may hold only mappings"));
                    }
                    self.merge_mapping(item, merged)?;
                }
                Ok(())
            }
            NodeKind::Scalar { .. } => {
                Err(ReadError::structure(source.at, "a `<<` merge key needs a mapping or a list of mappings"))
            }
        }
    }

    /// Merges one mapping as SnakeYAML does: its entries as written (not flattened first, so
    /// of two equal keys the first wins), its own `<<` merged in place, and those `<<` entries
    /// dropped from the node for good.
    fn merge_mapping(&mut self, node: &Node, merged: &mut Merged) -> Result<(), ReadError> {
        let NodeKind::Mapping(cell) = &node.kind else {
            return Ok(());
        };
        let raw = cell.borrow().clone();
        let mut kept = Vec::with_capacity(raw.len());
        for (key_node, value_node) in raw {
            if is_merge_key(&key_node) {
                self.merge_from(&value_node, merged)?;
                continue;
            }
            kept.push((Rc::clone(&key_node), Rc::clone(&value_node)));
            let key = self.construct(&key_node)?;
            merged.put(Entry { key, key_node, value: value_node }, false);
        }
        *cell.borrow_mut() = kept;
        Ok(())
    }
}

/// A map's entries, and the key and value nodes of the entries an equal key replaced.
#[derive(Debug)]
pub(crate) struct MapEntries {
    pub(crate) entries: Vec<Entry>,
    pub(crate) replaced: Vec<(Rc<Node>, Rc<Node>)>,
}

/// One of a mapping's own items, before merging.
enum Own {
    Entry(Entry),
    Merge(Rc<Node>),
}

/// Entries merged so far, with the index of every key.
#[derive(Default)]
struct Merged {
    entries: Vec<Entry>,
    index: HashMap<Identity, usize>,
}

impl Merged {
    /// Adds `entry`; a key already present is replaced in place when `replace`, else kept.
    fn put(&mut self, entry: Entry, replace: bool) {
        match self.index.get(&entry.key.identity()) {
            Some(&at) if replace => self.entries[at] = entry,
            Some(_) => {}
            None => {
                self.index.insert(entry.key.identity(), self.entries.len());
                self.entries.push(entry);
            }
        }
    }
}

fn is_core(tag: &Tag, name: &str) -> bool {
    tag.handle == CORE_PREFIX && tag.suffix == name
}

fn is_merge_key(node: &Node) -> bool {
    match (&node.kind, &node.tag) {
        (NodeKind::Scalar { text, plain: true }, None) => &**text == "<<",
        (NodeKind::Scalar { text, .. }, Some(tag)) => {
            is_core(tag, "merge") || (is_non_specific(tag) && &**text == "<<")
        }
        _ => false,
    }
}

/// A node that SnakeYAML builds as a `LinkedHashMap`, which the OAP can read as a table or a
/// service: a mapping untagged, `!` or `!!map` (a `!!set` is a mapping too, but the OAP's cast
/// to `Map` fails on it), or an `!!omap` sequence.
pub(crate) fn is_map(node: &Node) -> bool {
    match node.kind {
        NodeKind::Mapping(_) => node.tag.as_ref().is_none_or(|tag| is_non_specific(tag) || is_core(tag, "map")),
        NodeKind::Sequence(_) => is_omap(node),
        NodeKind::Scalar { .. } => false,
    }
}

/// `!!omap`: SnakeYAML's safe loader builds it as a `LinkedHashMap`, which prints stably
/// (`{a=1, b=2}`); `!!pairs` builds arrays, which print as identity hashes, so it stays refused.
fn is_omap(node: &Node) -> bool {
    matches!(node.kind, NodeKind::Sequence(_)) && node.tag.as_ref().is_some_and(|tag| is_core(tag, "omap"))
}

/// `!` alone: the node keeps the type its kind gives it (a string, a list, a map).
fn is_non_specific(tag: &Tag) -> bool {
    tag.handle == "!" && tag.suffix.is_empty()
}

fn expect_tag(node: &Node, allowed: &[&str]) -> Result<(), ReadError> {
    match &node.tag {
        None => Ok(()),
        Some(tag) if is_non_specific(tag) => Ok(()),
        Some(tag) if allowed.iter().any(|name| is_core(tag, name)) => Ok(()),
        Some(tag) => Err(unsupported_tag(tag, node.at)),
    }
}

fn unsupported_tag(tag: &Tag, at: Position) -> ReadError {
    ReadError::value(at, format!("the tag `{tag}` is not supported here"))
}

/// The Java value of one scalar.
fn scalar(text: &str, plain: bool, tag: Option<&Tag>, at: Position) -> Result<JavaValue, ReadError> {
    let invalid = |kind: &str| ReadError::value(at, format!("`{text}` is not a valid {kind}"));
    let Some(tag) = tag else {
        return if plain { Ok(resolve_plain(text).map_err(&invalid)?) } else { Ok(JavaValue::Str(text.to_owned())) };
    };
    // `! value`, the non-specific tag: SnakeYAML types the text as if it were plain, whatever
    // its style (`! "010"` is 8).
    if is_non_specific(tag) {
        return resolve_plain(text).map_err(&invalid);
    }
    if tag.handle != CORE_PREFIX {
        return Err(unsupported_tag(tag, at));
    }
    match tag.suffix.as_str() {
        "str" => Ok(JavaValue::Str(text.to_owned())),
        "int" => construct_int(text).ok_or_else(|| invalid("integer")),
        "float" => construct_float(text).ok_or_else(|| invalid("float")),
        // SnakeYAML looks the text up in its table and gets null for anything else.
        "bool" => Ok(match text.to_lowercase().as_str() {
            "yes" | "true" | "on" => JavaValue::Bool(true),
            "no" | "false" | "off" => JavaValue::Bool(false),
            _ => JavaValue::Null,
        }),
        "null" => Ok(JavaValue::Null),
        "timestamp" => construct_timestamp(text).ok_or_else(|| invalid("timestamp")),
        _ => Err(unsupported_tag(tag, at)),
    }
}

/// YAML 1.1 implicit typing of a plain scalar. `Err` names the type whose pattern matched but
/// whose value Java could not build (the OAP's loader fails the document then).
fn resolve_plain(text: &str) -> Result<JavaValue, &'static str> {
    let first = text.chars().next();
    match first {
        None => return Ok(JavaValue::Null),
        Some('y' | 'Y' | 'n' | 'N' | 't' | 'T' | 'f' | 'F' | 'o' | 'O') => {
            if let Some(b) = yaml11_bool(text) {
                return Ok(JavaValue::Bool(b));
            }
        }
        _ => {}
    }
    if is_int(text) {
        return construct_int(text).ok_or("integer");
    }
    if is_float(text) {
        return construct_float(text).ok_or("float");
    }
    if text == "<<" {
        return Err("value (`<<` is the merge key; quote it to use it as text)");
    }
    if matches!(text, "~" | "null" | "Null" | "NULL") {
        return Ok(JavaValue::Null);
    }
    if is_timestamp(text) {
        return construct_timestamp(text).ok_or("timestamp");
    }
    Ok(JavaValue::Str(text.to_owned()))
}

fn yaml11_bool(text: &str) -> Option<bool> {
    match text {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

// === pattern helpers ===

fn strip_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

/// `_*` then one digit of `radix`, then digits and underscores.
fn is_underscored_digits(s: &str, radix: u32) -> bool {
    let rest = s.trim_start_matches('_');
    let mut chars = rest.chars();
    matches!(chars.next(), Some(c) if c.is_digit(radix)) && chars.all(|c| c == '_' || c.is_digit(radix))
}

/// A non-empty run of decimal digits and underscores starting with a digit.
fn is_decimal_run(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(|c| c == '_' || c.is_ascii_digit())
}

/// `(:[0-5]?[0-9])+`
fn is_sexagesimal_tail(s: &str) -> bool {
    !s.is_empty()
        && s.split(':').skip(1).all(|part| {
            let b = part.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        })
        && s.starts_with(':')
}

/// YAML 1.1 int: binary, octal (leading 0), decimal, hex, or base 60.
fn is_int(text: &str) -> bool {
    let (_, body) = strip_sign(text);
    if let Some(bin) = body.strip_prefix("0b") {
        return is_underscored_digits(bin, 2);
    }
    if let Some(hex) = body.strip_prefix("0x") {
        return is_underscored_digits(hex, 16);
    }
    if body == "0" {
        return true;
    }
    if let Some(oct) = body.strip_prefix('0') {
        return is_underscored_digits(oct, 8);
    }
    if !body.starts_with(|c: char| ('1'..='9').contains(&c)) {
        return false;
    }
    match body.find(':') {
        None => is_decimal_run(body),
        Some(colon) => is_decimal_run(&body[..colon]) && is_sexagesimal_tail(&body[colon..]),
    }
}

/// YAML 1.1 float as SnakeYAML reads it (an exponent without a dot is accepted), base 60 with a
/// fraction, and the infinities and NaN.
fn is_float(text: &str) -> bool {
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (_, body) = strip_sign(text);
    if matches!(body, ".inf" | ".Inf" | ".INF") {
        return true;
    }
    // Base 60: [0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*
    if let Some(colon) = body.find(':') {
        let Some(dot) = body.rfind('.') else {
            return false;
        };
        return dot > colon
            && is_decimal_run(&body[..colon])
            && is_sexagesimal_tail(&body[colon..dot])
            && body[dot + 1..].chars().all(|c| c == '_' || c.is_ascii_digit());
    }
    // (\.[0-9_]+ | [0-9][0-9_]*(\.[0-9_]*)?) ([eE][-+]?[0-9]+)?, with a dot or an exponent.
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(e) => (&body[..e], Some(&body[e + 1..])),
        None => (body, None),
    };
    if let Some(exp) = exponent {
        let digits = exp.strip_prefix(['-', '+']).unwrap_or(exp);
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }

    match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && frac.chars().all(|c| c == '_' || c.is_ascii_digit()),
        Some((int, frac)) => is_decimal_run(int) && frac.chars().all(|c| c == '_' || c.is_ascii_digit()),
        None => is_decimal_run(mantissa) && exponent.is_some(),
    }
}

// === constructors ===

/// `Integer`/`Long`/`BigInteger` from an int scalar (implicit or `!!int`), as decimal digits,
/// built the way SnakeYAML's int constructor builds it: underscores dropped, one sign stripped,
/// then the radix chosen by prefix (`0b`, `0x`, a leading `0` for octal) or base 60 when there is
/// a colon. The digits go to Java's `Integer.valueOf(s, radix)` (and `Long`, `BigInteger` when
/// it overflows), which takes one more sign of its own: `!!int 0x-1` is -1.
fn construct_int(text: &str) -> Option<JavaValue> {
    let value: String = text.chars().filter(|&c| c != '_').collect();
    if value.is_empty() {
        return None;
    }
    let (negative, body) = strip_sign(&value);
    let digits = if body == "0" {
        "0".to_owned()
    } else if let Some(bin) = body.strip_prefix("0b") {
        java_integer(negative, bin, 2)?
    } else if let Some(hex) = body.strip_prefix("0x") {
        java_integer(negative, hex, 16)?
    } else if let Some(oct) = body.strip_prefix('0') {
        java_integer(negative, oct, 8)?
    } else if body.contains(':') {
        // Base 60 in Java `int` arithmetic: both the running value and the place value wrap
        // silently (`1000000:00:00` is -694967296), each part goes through `Long.parseLong`.
        let mut value: i32 = 0;
        let mut place: i32 = 1;
        for part in java_split_colons(body).iter().rev() {
            let part = java_integer(false, part, 10)?;
            let part: i64 = part.parse().ok()?;
            value = i64::from(value).wrapping_add(part.wrapping_mul(i64::from(place))) as i32;
            place = place.wrapping_mul(60);
        }
        java_integer(negative, &value.to_string(), 10)?
    } else {
        java_integer(negative, body, 10)?
    };
    Some(JavaValue::Integer(digits))
}

/// `String.split(":")`: trailing empty parts are dropped.
fn java_split_colons(s: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(':').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// Java's integer parsing of `"-"` (when `negative`) followed by `digits`: at most one sign in
/// all, then at least one digit of `radix`. The value as canonical decimal text.
fn java_integer(negative: bool, digits: &str, radix: u32) -> Option<String> {
    let (inner_negative, digits) = match digits.as_bytes().first() {
        Some(b'-' | b'+') if negative => return None,
        Some(b'-') => (true, &digits[1..]),
        Some(b'+') => (false, &digits[1..]),
        _ => (negative, digits),
    };
    let magnitude = BigUint::parse_radix(digits, radix)?.to_decimal();
    Some(if inner_negative && magnitude != "0" { format!("-{magnitude}") } else { magnitude })
}

/// `Double` from a float scalar (implicit or `!!float`), as SnakeYAML's float constructor builds
/// it: underscores dropped, one sign stripped, `.inf`/`.nan` in any case, base 60 summed from the
/// right, and everything else through Java's lenient `Double.valueOf` (`!!float 1.5f` is 1.5).
fn construct_float(text: &str) -> Option<JavaValue> {
    let value: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, body) = strip_sign(&value);
    let sign = if negative { -1.0 } else { 1.0 };
    let magnitude = match body.to_lowercase().as_str() {
        ".inf" => f64::INFINITY,
        ".nan" => f64::NAN,
        _ if body.contains(':') => {
            let mut total = 0.0;
            let mut place: i32 = 1;
            for part in java_split_colons(body).iter().rev() {
                total += java_double_value_of(part)? * f64::from(place);
                place = place.wrapping_mul(60);
            }
            total
        }
        _ => java_double_value_of(body)?,
    };
    Some(JavaValue::Double(sign * magnitude))
}

/// Java's `Double.valueOf(String)` for its decimal forms: blanks and control characters trimmed,
/// one sign, `NaN`, `Infinity`, or digits with an optional dot and exponent and an optional
/// `f`/`d` suffix. Rust's parser rounds correctly, as Java's does. Java's hexadecimal form
/// (`0x1.8p3`) is not read: `None`, so such a `!!float` is refused.
fn java_double_value_of(s: &str) -> Option<f64> {
    let s = s.trim_matches(|c: char| c <= ' ');
    let (negative, body) = strip_sign(s);
    let sign = if negative { -1.0 } else { 1.0 };
    match body {
        "NaN" => return Some(f64::NAN),
        "Infinity" => return Some(sign * f64::INFINITY),
        _ => {}
    }
    let body = body.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(body);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(e) => (&body[..e], Some(&body[e + 1..])),
        None => (body, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let valid_mantissa = all_digits(int) && all_digits(frac) && !(int.is_empty() && frac.is_empty());
    let valid_exponent = exponent.is_none_or(|e| {
        let digits = e.strip_prefix(['-', '+']).unwrap_or(e);
        !digits.is_empty() && all_digits(digits)
    });
    if !(valid_mantissa && valid_exponent) {
        return None;
    }
    // Rust wants a digit before an exponent and reads huge exponents itself.
    let text = format!("{}{}", if int.is_empty() { "0" } else { "" }, body);
    text.parse::<f64>().ok().map(|v| sign * v)
}

/// A YAML 1.1 timestamp: `YYYY-MM-DD`, or date, `T`/`t`/blanks, `H:MM:SS`, optional fraction and
/// optional zone (`Z`, `±H`, `±HH:MM`).
fn is_timestamp(text: &str) -> bool {
    parse_timestamp_fields(text, false).is_some()
}

struct TimestampFields {
    year: i64,
    month: i64,
    day: i64,
    time: Option<(i64, i64, i64, i64, i64)>,
}

fn take_digits(s: &str, min: usize, max: usize) -> Option<(i64, &str)> {
    let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
    if n < min {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

/// `date_only_short`: also take a date alone with one-digit month or day, as the timestamp
/// constructor does (the implicit-typing pattern wants two digits there).
fn parse_timestamp_fields(text: &str, date_only_short: bool) -> Option<TimestampFields> {
    let (year, rest) = take_digits(text, 4, 4)?;
    let rest = rest.strip_prefix('-')?;
    if date_only_short && !rest.contains(['T', 't', ' ', '\t']) {
        let (month, rest) = take_digits(rest, 1, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('-')?, 1, 2)?;
        return rest.is_empty().then_some(TimestampFields { year, month, day, time: None });
    }
    if rest.len() == 5 && text.len() == 10 {
        // The date-only form needs two-digit month and day.
        let (month, rest) = take_digits(rest, 2, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        return rest.is_empty().then_some(TimestampFields { year, month, day, time: None });
    }
    let (month, rest) = take_digits(rest, 1, 2)?;
    let (day, rest) = take_digits(rest.strip_prefix('-')?, 1, 2)?;
    let rest = if let Some(r) = rest.strip_prefix(['T', 't']) {
        r
    } else {
        let trimmed = rest.trim_start_matches([' ', '\t']);
        if trimmed.len() == rest.len() {
            return None;
        }
        trimmed
    };
    let (hour, rest) = take_digits(rest, 1, 2)?;
    let (minute, rest) = take_digits(rest.strip_prefix(':')?, 2, 2)?;
    let (second, mut rest) = take_digits(rest.strip_prefix(':')?, 2, 2)?;
    let mut millis = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        // SnakeYAML parses "SS.fff…" as a double and rounds the part past the second to whole
        // milliseconds, so `.9996` carries into the next second.
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        let seconds: f64 = format!("{second}.{}", &frac[..n]).parse().ok()?;
        millis = ((seconds - seconds.floor()) * 1000.0).round() as i64;
        rest = &frac[n..];
    }
    let zone = rest.trim_start_matches([' ', '\t']);
    let offset_minutes = if rest.is_empty() || zone == "Z" {
        0
    } else {
        let negative = zone.starts_with('-');
        let body = zone.strip_prefix(['-', '+'])?;
        let (hours, rest) = take_digits(body, 1, 2)?;
        let minutes = if rest.is_empty() {
            0
        } else if date_only_short && rest == ":" {
            // The constructor's pattern makes the minutes after the colon optional.
            0
        } else {
            let (m, rest) = take_digits(rest.strip_prefix(':')?, 2, 2)?;
            if !rest.is_empty() {
                return None;
            }
            m
        };
        let total = hours * 60 + minutes;
        if negative { -total } else { total }
    };
    Some(TimestampFields { year, month, day, time: Some((hour, minute, second, millis, offset_minutes)) })
}

/// `java.util.Date` from a timestamp, with the lenient calendar arithmetic Java uses (month 13 is
/// January of the next year). `Ok(None)` when the text is not a timestamp at all.
fn construct_timestamp(text: &str) -> Option<JavaValue> {
    let fields = parse_timestamp_fields(text, true)?;
    let months = fields.year * 12 + fields.month - 1;
    let (year, month) = (months.div_euclid(12), months.rem_euclid(12) + 1);
    // Java's calendar is Julian before 1582-10-15 (a date inside the ten skipped days lands after).
    let gregorian = days_from_civil(year, month, 1) + fields.day - 1;
    let days = if year > 1582 || gregorian >= GREGORIAN_CUTOVER_DAYS {
        gregorian
    } else {
        days_from_julian(year, month, 1) + fields.day - 1
    };
    let (hour, minute, second, millis, offset) = fields.time.unwrap_or((0, 0, 0, 0, 0));
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    Some(JavaValue::Date(seconds * 1000 + millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> String {
        resolve_plain(text).map(|v| v.to_java_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn types_the_documented_scalar_forms() {
        // §2.4.2 of the behaviour reference.
        let cases = [
            ("1000", "1000"),
            ("+5", "5"),
            ("1_000", "1000"),
            ("-1", "-1"),
            ("0x1F", "31"),
            ("010", "8"),
            ("007", "7"),
            ("0b101", "5"),
            ("1:30", "90"),
            ("08", "08"),
            ("2147483648", "2147483648"),
            ("99999999999", "99999999999"),
            ("999999999999999999999", "999999999999999999999"),
            ("1.0", "1.0"),
            ("0.5", "0.5"),
            ("0.50", "0.5"),
            (".5", "0.5"),
            ("1_000.5", "1000.5"),
            ("1e3", "1000.0"),
            ("1.5e3", "1500.0"),
            ("1.0e+3", "1000.0"),
            ("10000000.0", "1.0E7"),
            ("12345678.9", "1.23456789E7"),
            ("0.0001", "1.0E-4"),
            ("-0.0", "-0.0"),
            (".inf", "Infinity"),
            ("-.inf", "-Infinity"),
            (".NaN", "NaN"),
            ("1e400", "Infinity"),
            ("true", "true"),
            ("True", "true"),
            ("yes", "true"),
            ("Yes", "true"),
            ("ON", "true"),
            ("on", "true"),
            ("false", "false"),
            ("no", "false"),
            ("off", "false"),
            ("OFF", "false"),
            ("y", "y"),
            ("n", "n"),
            ("2001-12-14", "Fri Dec 14 00:00:00 UTC 2001"),
            ("2001-12-14t21:59:43.10-05:00", "Sat Dec 15 02:59:43 UTC 2001"),
        ];
        for (input, want) in cases {
            assert_eq!(plain(input), want, "{input}");
        }
    }

    #[test]
    fn nulls_and_near_misses() {
        for null in ["", "~", "null", "Null", "NULL"] {
            assert!(matches!(resolve_plain(null), Ok(JavaValue::Null)), "{null}");
        }
        for text in ["nUll", "0_", "0x", "0b", "0o7", "1:60", ".e3", "1.5e", "+.", "tRue", "2001-12-14T21:59"] {
            assert_eq!(plain(text), text, "{text} stays a string");
        }
        assert!(plain("._").starts_with("ERR"), "matches the float pattern but Java cannot parse it");
        assert!(plain("<<").starts_with("ERR"));
    }

    #[test]
    fn big_integers_in_every_radix() {
        assert_eq!(plain("0x1ffffffffffffffff"), "36893488147419103231");
        assert_eq!(plain("0777777777777777777777777"), "4722366482869645213695");
        assert_eq!(plain("-0x80000000"), "-2147483648");
        assert_eq!(plain("1_0:30"), "630");
        assert_eq!(plain("1:05:30"), "3930");
        assert_eq!(plain("-0"), "0");
    }

    #[test]
    fn lenient_calendar_and_julian_dates() {
        assert_eq!(plain("2001-13-40"), "Sat Feb 09 00:00:00 UTC 2002");
        assert_eq!(plain("2001-12-14 21:59:43 -5"), "Sat Dec 15 02:59:43 UTC 2001");
        assert_eq!(plain("1500-02-29"), "Sat Feb 29 00:00:00 UTC 1500");
        assert_eq!(plain("1582-10-10"), "Wed Oct 20 00:00:00 UTC 1582");
        assert_eq!(plain("1582-10-04"), "Thu Oct 04 00:00:00 UTC 1582");
        assert_eq!(plain("0000-01-01"), "Thu Jan 01 00:00:00 UTC 1");
    }

    fn tagged(tag: &str, text: &str) -> String {
        let tag = Tag { handle: CORE_PREFIX.to_owned(), suffix: tag.to_owned() };
        scalar(text, false, Some(&tag), Position { line: 1, column: 1 })
            .map(|v| v.to_java_string())
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn explicit_tags_build_as_snakeyaml_builds_them() {
        // Pinned against the OAP's loader (SnakeYAML 1.33, JDK 17).
        assert_eq!(tagged("int", "0x-1"), "-1", "Integer.valueOf takes a sign of its own");
        assert!(tagged("int", "-0x-1").starts_with("ERR"));
        assert!(tagged("int", "08").starts_with("ERR"), "a leading 0 means octal");
        assert_eq!(tagged("int", "1:-1"), "59");
        assert_eq!(tagged("int", "1000000:00:00"), "-694967296", "base 60 in int arithmetic");
        assert_eq!(tagged("float", "1.5f"), "1.5");
        assert_eq!(tagged("float", " -1"), "-1.0");
        assert_eq!(tagged("float", "+NaN"), "NaN");
        assert_eq!(tagged("float", "-Infinity"), "-Infinity");
        assert!(tagged("float", "0x1.8p3").starts_with("ERR"), "hex floats are refused");
        assert_eq!(tagged("bool", "y"), "null", "an unknown boolean is null, not an error");
        assert_eq!(tagged("timestamp", "2001-1-1"), "Mon Jan 01 00:00:00 UTC 2001");
        assert_eq!(tagged("timestamp", "2001-12-14T21:59:43+05:"), "Fri Dec 14 16:59:43 UTC 2001");
        assert_eq!(tagged("timestamp", "2001-12-14T21:59:59.9996"), "Fri Dec 14 22:00:00 UTC 2001");
    }

    #[test]
    fn non_specific_tag_types_any_style_as_plain() {
        let tag = Tag { handle: "!".to_owned(), suffix: String::new() };
        let at = Position { line: 1, column: 1 };
        let quoted = scalar("010", false, Some(&tag), at).unwrap();
        assert_eq!(quoted.to_java_string(), "8");
        assert!(matches!(scalar("~", false, Some(&tag), at), Ok(JavaValue::Null)));
    }

    #[test]
    fn sexagesimal_ints_overflow_like_java() {
        assert_eq!(plain("35791394:07"), "2147483647");
        assert_eq!(plain("35791394:08"), "-2147483648");
        assert!(plain("-35791394:08").starts_with("ERR"), "\"--2147483648\" does not parse");
        assert!(plain("99999999999999999999:00").starts_with("ERR"), "Long.parseLong overflows");
    }
}
