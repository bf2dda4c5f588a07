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

use super::java::{GREGORIAN_CUTOVER_DAYS, JavaValue, days_from_civil, days_from_julian};
use super::tree::{Node, NodeKind, Tag};
use super::{Position, ReadError};

/// How many values one document may expand to through aliases before it is refused.
const MAX_VALUES: usize = 1_000_000;

/// One mapping entry after flattening: the constructed key, where it was written, and the value
/// node (constructed on demand, so callers can point at it in errors).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) key: JavaValue,
    pub(crate) key_at: Position,
    pub(crate) value: Rc<Node>,
}

/// Turns nodes into Java values, counting what aliases expand to.
#[derive(Debug, Default)]
pub(crate) struct Constructor {
    values: usize,
}

impl Constructor {
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
            NodeKind::Scalar { text, plain } => scalar(text, *plain, node.tag.as_ref(), node.at),
            NodeKind::Sequence(items) => {
                expect_tag(node, &["seq"])?;
                items
                    .iter()
                    .map(|item| self.construct(item))
                    .collect::<Result<_, _>>()
                    .map(JavaValue::List)
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
    pub(crate) fn mapping_entries(&mut self, node: &Node) -> Result<Vec<Entry>, ReadError> {
        let NodeKind::Mapping(raw) = &node.kind else {
            return Err(ReadError::structure(node.at, "expected a mapping"));
        };
        // Own keys first: drop the earlier of equal keys.
        let mut own: Vec<Option<Entry>> = Vec::with_capacity(raw.len());
        let mut merges: Vec<(usize, &Rc<Node>)> = Vec::new();
        let mut seen: HashMap<_, usize> = HashMap::with_capacity(raw.len());
        for (key_node, value_node) in raw {
            if is_merge_key(key_node) {
                merges.push((own.len(), value_node));
                own.push(None);
                continue;
            }
            let key = self.construct(key_node)?;
            if let Some(earlier) = seen.insert(key.identity(), own.len()) {
                own[earlier] = None;
            }
            own.push(Some(Entry {
                key,
                key_at: key_node.at,
                value: Rc::clone(value_node),
            }));
        }
        if merges.is_empty() {
            return Ok(own.into_iter().flatten().collect());
        }
        // Then merge, in order, keeping first positions.
        let mut out: Vec<Entry> = Vec::new();
        let mut index: HashMap<_, usize> = HashMap::new();
        let mut merges = merges.into_iter().peekable();
        for (slot, entry) in own.into_iter().enumerate() {
            match entry {
                Some(entry) => match index.get(&entry.key.identity()) {
                    Some(&at) => out[at] = entry,
                    None => {
                        index.insert(entry.key.identity(), out.len());
                        out.push(entry);
                    }
                },
                None => {
                    let Some((_, source)) = merges.next_if(|(at, _)| *at == slot) else {
                        continue;
                    };
                    for merged in self.merge_sources(source)? {
                        if let std::collections::hash_map::Entry::Vacant(e) = index.entry(merged.key.identity()) {
                            e.insert(out.len());
                            out.push(merged);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The entries a `<<` value brings: one mapping, or a sequence of mappings.
    fn merge_sources(&mut self, source: &Node) -> Result<Vec<Entry>, ReadError> {
        match &source.kind {
            NodeKind::Mapping(_) => self.mapping_entries(source),
            NodeKind::Sequence(items) => {
                let mut all = Vec::new();
                for item in items {
                    if !matches!(item.kind, NodeKind::Mapping(_)) {
                        return Err(ReadError::structure(
                            item.at,
                            "a `<<` merge list may hold only mappings",
                        ));
                    }
                    all.extend(self.mapping_entries(item)?);
                }
                Ok(all)
            }
            NodeKind::Scalar { .. } => Err(ReadError::structure(
                source.at,
                "a `<<` merge key needs a mapping or a list of mappings",
            )),
        }
    }
}

fn is_core(tag: &Tag, name: &str) -> bool {
    tag.handle == "tag:yaml.org,2002:" && tag.suffix == name
}

fn is_merge_key(node: &Node) -> bool {
    match (&node.kind, &node.tag) {
        (NodeKind::Scalar { text, plain: true }, None) => text == "<<",
        (NodeKind::Scalar { .. }, Some(tag)) => is_core(tag, "merge"),
        _ => false,
    }
}

fn expect_tag(node: &Node, allowed: &[&str]) -> Result<(), ReadError> {
    match &node.tag {
        None => Ok(()),
        Some(tag) if allowed.iter().any(|name| is_core(tag, name)) => Ok(()),
        Some(tag) => Err(unsupported_tag(tag, node.at)),
    }
}

fn unsupported_tag(tag: &Tag, at: Position) -> ReadError {
    ReadError::value(at, format!("the tag `{tag}` is not supported here"))
}

/// The Java value of one scalar.
fn scalar(
    text: &str,
    plain: bool,
    tag: Option<&Tag>,
    at: Position,
) -> Result<JavaValue, ReadError> {
    let invalid = |kind: &str| ReadError::value(at, format!("`{text}` is not a valid {kind}"));
    let Some(tag) = tag else {
        return if plain {
            Ok(resolve_plain(text).map_err(&invalid)?)
        } else {
            Ok(JavaValue::Str(text.to_owned()))
        };
    };
    // `! value` is the non-specific tag: a string.
    if tag.handle == "!" && tag.suffix.is_empty() {
        return Ok(JavaValue::Str(text.to_owned()));
    }
    if tag.handle != "tag:yaml.org,2002:" {
        return Err(unsupported_tag(tag, at));
    }
    match tag.suffix.as_str() {
        "str" => Ok(JavaValue::Str(text.to_owned())),
        "int" => construct_int(text).ok_or_else(|| invalid("integer")),
        "float" => construct_float(text).ok_or_else(|| invalid("float")),
        "bool" => match text.to_ascii_lowercase().as_str() {
            "yes" | "true" | "on" => Ok(JavaValue::Bool(true)),
            "no" | "false" | "off" => Ok(JavaValue::Bool(false)),
            _ => Err(invalid("boolean")),
        },
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
    matches!(chars.next(), Some(c) if c.is_digit(radix))
        && chars.all(|c| c == '_' || c.is_digit(radix))
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
            && body[dot + 1..]
                .chars()
                .all(|c| c == '_' || c.is_ascii_digit());
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
        Some(("", frac)) => {
            !frac.is_empty() && frac.chars().all(|c| c == '_' || c.is_ascii_digit())
        }
        Some((int, frac)) => {
            is_decimal_run(int) && frac.chars().all(|c| c == '_' || c.is_ascii_digit())
        }
        None => is_decimal_run(mantissa) && exponent.is_some(),
    }
}

// === constructors ===

/// `Integer`/`Long`/`BigInteger` from an int scalar, as decimal digits.
fn construct_int(text: &str) -> Option<JavaValue> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, body) = strip_sign(&cleaned);
    let magnitude: Vec<u32> = if body == "0" {
        vec![]
    } else if let Some(bin) = body.strip_prefix("0b") {
        parse_radix(bin, 2)?
    } else if let Some(hex) = body.strip_prefix("0x") {
        parse_radix(hex, 16)?
    } else if body.contains(':') {
        // Base 60, each part decimal: the last part is units, the one before 60s, and so on.
        let mut total = vec![];
        for part in body.split(':') {
            total = mul_add(&total, 60, 0);
            total = add(&total, &parse_radix(part, 10)?);
        }
        total
    } else if let Some(oct) = body.strip_prefix('0') {
        parse_radix(oct, 8)?
    } else {
        parse_radix(body, 10)?
    };
    let digits = to_decimal(&magnitude);
    Some(JavaValue::Integer(if negative && digits != "0" {
        format!("-{digits}")
    } else {
        digits
    }))
}

/// `Double` from a float scalar.
fn construct_float(text: &str) -> Option<JavaValue> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, body) = strip_sign(&cleaned);
    let sign = if negative { -1.0 } else { 1.0 };
    let value = match body.to_ascii_lowercase().as_str() {
        ".inf" => f64::INFINITY,
        ".nan" => f64::NAN,
        _ if body.contains(':') => {
            let mut total = 0.0;
            for part in body.split(':') {
                total = total * 60.0 + java_parse_double(part)?;
            }
            total
        }
        _ => java_parse_double(body)?,
    };
    Some(JavaValue::Double(sign * value))
}

/// `Double.parseDouble` for the decimal forms YAML produces: digits, an optional dot, an
/// optional exponent. Rust's parser rounds correctly, as Java's does.
fn java_parse_double(s: &str) -> Option<f64> {
    let valid = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && s.chars().any(|c| c.is_ascii_digit());
    if !valid {
        return None;
    }
    s.parse().ok()
}

/// A YAML 1.1 timestamp: `YYYY-MM-DD`, or date, `T`/`t`/blanks, `H:MM:SS`, optional fraction and
/// optional zone (`Z`, `±H`, `±HH:MM`).
fn is_timestamp(text: &str) -> bool {
    parse_timestamp_fields(text).is_some()
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

fn parse_timestamp_fields(text: &str) -> Option<TimestampFields> {
    let (year, rest) = take_digits(text, 4, 4)?;
    let rest = rest.strip_prefix('-')?;
    if rest.len() == 5 && text.len() == 10 {
        // The date-only form needs two-digit month and day.
        let (month, rest) = take_digits(rest, 2, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        return rest.is_empty().then_some(TimestampFields {
            year,
            month,
            day,
            time: None,
        });
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
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        let ms_digits = &frac[..n.min(3)];
        millis = format!("{ms_digits:0<3}").parse().ok()?;
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
    Some(TimestampFields {
        year,
        month,
        day,
        time: Some((hour, minute, second, millis, offset_minutes)),
    })
}

/// `java.util.Date` from a timestamp, with the lenient calendar arithmetic Java uses (month 13 is
/// January of the next year). `Ok(None)` when the text is not a timestamp at all.
fn construct_timestamp(text: &str) -> Option<JavaValue> {
    let fields = parse_timestamp_fields(text)?;
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

// === a very small unsigned big integer (little-endian base 2^32), enough for BigInteger text ===

fn mul_add(n: &[u32], mul: u32, add: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(n.len() + 1);
    let mut carry = u64::from(add);
    for &limb in n {
        let v = u64::from(limb) * u64::from(mul) + carry;
        out.push(v as u32);
        carry = v >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

fn add(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for i in 0..a.len().max(b.len()) {
        let v = u64::from(*a.get(i).unwrap_or(&0)) + u64::from(*b.get(i).unwrap_or(&0)) + carry;
        out.push(v as u32);
        carry = v >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

fn parse_radix(digits: &str, radix: u32) -> Option<Vec<u32>> {
    if digits.is_empty() {
        return None;
    }
    let mut n = vec![];
    for c in digits.chars() {
        n = mul_add(&n, radix, c.to_digit(radix)?);
    }
    Some(n)
}

fn to_decimal(n: &[u32]) -> String {
    let mut limbs: Vec<u32> = n.to_vec();
    while limbs.last() == Some(&0) {
        limbs.pop();
    }
    if limbs.is_empty() {
        return "0".to_owned();
    }
    let mut chunks = Vec::new();
    while !limbs.is_empty() {
        let mut rem = 0u64;
        for limb in limbs.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / 1_000_000_000) as u32;
            rem = v % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
    }
    let mut out = chunks.pop().map(|c| c.to_string()).unwrap_or_default();
    for chunk in chunks.iter().rev() {
        out.push_str(&format!("{chunk:09}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str) -> String {
        resolve_plain(text)
            .map(|v| v.to_java_string())
            .unwrap_or_else(|e| format!("ERR {e}"))
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
            (
                "2001-12-14t21:59:43.10-05:00",
                "Sat Dec 15 02:59:43 UTC 2001",
            ),
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
        for text in [
            "nUll",
            "0_",
            "0x",
            "0b",
            "0o7",
            "1:60",
            ".e3",
            "1.5e",
            "+.",
            "tRue",
            "2001-12-14T21:59",
        ] {
            assert_eq!(plain(text), text, "{text} stays a string");
        }
        assert!(
            plain("._").starts_with("ERR"),
            "matches the float pattern but Java cannot parse it"
        );
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
        assert_eq!(
            plain("2001-12-14 21:59:43 -5"),
            "Sat Dec 15 02:59:43 UTC 2001"
        );
        assert_eq!(plain("1500-02-29"), "Sat Feb 29 00:00:00 UTC 1500");
        assert_eq!(plain("1582-10-10"), "Wed Oct 20 00:00:00 UTC 1582");
        assert_eq!(plain("1582-10-04"), "Thu Oct 04 00:00:00 UTC 1582");
        assert_eq!(plain("0000-01-01"), "Thu Jan 01 00:00:00 UTC 1");
    }
}
