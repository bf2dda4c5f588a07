//! The Java side of the OAP's reader: the objects SnakeYAML constructs and the strings Java's
//! `String.valueOf` makes of them. The digest hashes these strings, so every byte here counts.
//!
//! Time zone: `java.util.Date.toString()` prints in the JVM's default zone. skyconf prints UTC, the
//! default zone of the OAP's container image; see the README ("Where skyconf differs").

use std::fmt::Write as _;

use super::bigint::BigUint;

/// A value as SnakeYAML's `SafeConstructor` builds it, reduced to what `toString` and `equals` need.
#[derive(Debug, Clone)]
pub(crate) enum JavaValue {
    Null,
    Bool(bool),
    /// `Integer`, `Long` or `BigInteger`: all print as plain decimal, so the digits are enough.
    Integer(String),
    Double(f64),
    Str(String),
    /// `java.util.Date`, as milliseconds since the epoch.
    Date(i64),
    List(Vec<Self>),
    /// `LinkedHashMap`, in insertion order.
    Map(Vec<(Self, Self)>),
    /// `LinkedHashSet` (`!!set`), in insertion order.
    Set(Vec<Self>),
}

impl JavaValue {
    /// `String.valueOf(value)`.
    pub(crate) fn to_java_string(&self) -> String {
        let mut out = String::new();
        self.write_java(&mut out);
        out
    }

    fn write_java(&self, out: &mut String) {
        match self {
            Self::Null => out.push_str("null"),
            Self::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Self::Integer(digits) => out.push_str(digits),
            Self::Double(d) => out.push_str(&double_to_string(*d)),
            Self::Str(s) => out.push_str(s),
            Self::Date(millis) => out.push_str(&date_to_string(*millis)),
            // AbstractCollection.toString: "[a, b]".
            Self::List(items) | Self::Set(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_java(out);
                }
                out.push(']');
            }
            // AbstractMap.toString: "{k=v, k2=v2}".
            Self::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_java(out);
                    out.push('=');
                    v.write_java(out);
                }
                out.push('}');
            }
        }
    }

    /// A key with Java `equals` semantics, for finding duplicate mapping keys.
    pub(crate) fn identity(&self) -> Identity {
        match self {
            Self::Null => Identity::Null,
            Self::Bool(b) => Identity::Bool(*b),
            Self::Integer(d) => Identity::Integer(d.clone()),
            // Double.equals compares doubleToLongBits, which folds every NaN into one.
            Self::Double(d) => Identity::Double(if d.is_nan() { f64::NAN.to_bits() } else { d.to_bits() }),
            Self::Str(s) => Identity::Str(s.clone()),
            Self::Date(ms) => Identity::Date(*ms),
            Self::List(items) => Identity::List(items.iter().map(Self::identity).collect()),
            Self::Set(items) => {
                let mut ids: Vec<_> = items.iter().map(Self::identity).collect();
                ids.sort();
                Identity::Set(ids)
            }
            Self::Map(entries) => {
                let mut ids: Vec<_> = entries.iter().map(|(k, v)| (k.identity(), v.identity())).collect();
                ids.sort();
                Identity::Map(ids)
            }
        }
    }
}

/// Hashable stand-in for Java equality.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Identity {
    Null,
    Bool(bool),
    Integer(String),
    Double(u64),
    Str(String),
    Date(i64),
    List(Vec<Self>),
    Set(Vec<Self>),
    Map(Vec<(Self, Self)>),
}

/// Java's `Double.toString` as the JDK up to version 18 prints it (the OAP runs on Java 11 or 17).
///
/// That JDK does not always print the shortest digits that round-trip (`1e23` prints as
/// `9.999999999999999E22`, `2.82879384806159e17` as `2.82879384806159008E17`); the OAP's digests
/// carry those digits, so skyconf reproduces the JDK's digit generation: exact integers below 2^63
/// print their decimal digits, everything else runs a Steele–White style generator whose stopping
/// rule and integer widths (32-bit, 64-bit or arbitrary precision, chosen by operand size) follow
/// the JDK's, wrap-arounds included. Pinned against JDK 17 by `tests/data/java-doubles.txt`.
pub(crate) fn double_to_string(d: f64) -> String {
    if d.is_nan() {
        return "NaN".to_owned();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let (digits, exponent) = jdk_digits(d.abs());
    let mut out = String::with_capacity(digits.len() + 8);
    if d < 0.0 {
        out.push('-');
    }
    layout(&mut out, &digits, exponent);
    out
}

/// Places `0.d1d2… × 10^exponent` the way `Double.toString` does: plain for exponents 1..=7,
/// `0.00ddd` for -2..=0, `d.dddE±n` otherwise, with at least one digit after the point.
fn layout(out: &mut String, digits: &[u8], exponent: i32) {
    let text = |ds: &[u8]| ds.iter().map(|&d| char::from(b'0' + d)).collect::<String>();
    if exponent > 0 && exponent < 8 {
        let int_len = exponent as usize;
        if digits.len() <= int_len {
            out.push_str(&text(digits));
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&text(&digits[..int_len]));
            out.push('.');
            out.push_str(&text(&digits[int_len..]));
        }
    } else if exponent <= 0 && exponent > -3 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exponent) as usize));
        out.push_str(&text(digits));
    } else {
        out.push_str(&text(&digits[..1]));
        out.push('.');
        out.push_str(if digits.len() > 1 { text(&digits[1..]) } else { "0".to_owned() }.as_str());
        let _ = write!(out, "E{}", exponent - 1);
    }
}

/// Bit length of 5^i as the JDK's table has it (0 for i = 0), or its rough bound 3i past the table.
fn pow5_bits(i: i32) -> i32 {
    if i == 0 {
        0
    } else if i < 27 {
        (5u64.pow(i as u32)).ilog2() as i32 + 1
    } else {
        i * 3
    }
}

/// Decimal digits (most significant first) and the exponent `e` with value = 0.digits × 10^e.
fn jdk_digits(d: f64) -> (Vec<u8>, i32) {
    const SIGNIFICAND_BITS: i32 = 52;
    const SIGNIFICAND_MASK: u64 = (1 << 52) - 1;
    let bits = d.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let (mut fraction, bin_exp, significant_bits) = if biased == 0 {
        // Subnormal: normalise so the leading one sits at bit 52.
        let raw = bits & SIGNIFICAND_MASK;
        let shift = raw.leading_zeros() as i32 - 11;
        (raw << shift, 1 - shift - 1023, 64 - raw.leading_zeros() as i32)
    } else {
        ((bits & SIGNIFICAND_MASK) | (1 << 52), biased - 1023, SIGNIFICAND_BITS + 1)
    };
    let tail_zeros = fraction.trailing_zeros() as i32;
    let fraction_bits = SIGNIFICAND_BITS + 1 - tail_zeros;
    let tiny_bits = (fraction_bits - bin_exp - 1).max(0);

    // An exact integer below 2^63: its digits, less those the binary precision cannot carry.
    if (-21..=62).contains(&bin_exp) && tiny_bits == 0 {
        let insignificant =
            if bin_exp > significant_bits { insignificant_digits(bin_exp - significant_bits - 1) } else { 0 };
        let mut value = if bin_exp >= SIGNIFICAND_BITS {
            fraction << (bin_exp - SIGNIFICAND_BITS)
        } else {
            fraction >> (SIGNIFICAND_BITS - bin_exp)
        };
        if insignificant > 0 {
            let pow10 = 10u64.pow(insignificant as u32);
            let residue = value % pow10;
            value /= pow10;
            if residue >= pow10 / 2 {
                value += 1;
            }
        }
        let text = value.to_string();
        let exponent = text.len() as i32 + insignificant;
        let digits = text.trim_end_matches('0').bytes().map(|b| b - b'0').collect();
        return (digits, exponent);
    }

    let mut dec_exp = estimate_decimal_exponent(fraction, bin_exp);
    let b5 = (-dec_exp).max(0);
    let mut b2 = b5 + tiny_bits + bin_exp;
    let s5 = dec_exp.max(0);
    let mut s2 = s5 + tiny_bits;
    let m5 = b5;
    let mut m2 = b2 - significant_bits;
    fraction >>= tail_zeros;
    b2 -= fraction_bits - 1;
    let common = b2.min(s2);
    b2 -= common;
    s2 -= common;
    m2 -= common;
    if fraction_bits == 1 {
        // At a power of two the next smaller double is only half as far away.
        m2 -= 1;
    }
    if m2 < 0 {
        b2 -= m2;
        s2 -= m2;
        m2 = 0;
    }
    let b_bits = fraction_bits + b2 + pow5_bits(b5);
    let ten_s_bits = s2 + 1 + pow5_bits(s5 + 1);
    let scale = Scale { fraction, b5, b2, s5, s2, m5, m2 };
    let generated = if b_bits < 32 && ten_s_bits < 32 {
        generate_fixed::<i32>(&scale, &mut dec_exp)
    } else if b_bits < 64 && ten_s_bits < 64 {
        generate_fixed::<i64>(&scale, &mut dec_exp)
    } else {
        generate_big(&scale, &mut dec_exp)
    };
    let Generated { mut digits, high, low, low_digit_difference } = generated;
    let mut exponent = dec_exp + 1;
    let round_up = high
        && (!low
            || low_digit_difference > 0
            || (low_digit_difference == 0 && digits.last().is_some_and(|d| d % 2 == 1)));
    if round_up {
        // Carry through trailing nines; the digit count stays (a carry-out leaves "1" and zeros).
        let mut i = digits.len() - 1;
        while digits[i] == 9 && i > 0 {
            digits[i] = 0;
            i -= 1;
        }
        if digits[i] == 9 {
            exponent += 1;
            digits[0] = 1;
        } else {
            digits[i] += 1;
        }
    }
    (digits, exponent)
}

/// How many low decimal digits a power-of-two gap of 2^p2 makes meaningless: floor(p2·log10 2).
fn insignificant_digits(p2: i32) -> i32 {
    if p2 > 1 && p2 < 64 { p2 * 30_103 / 100_000 } else { 0 }
}

/// floor(log10(d)) estimated from the binary exponent and the leading significand bits, with the
/// JDK's constants (so an estimate that is one too high is corrected the same way).
#[allow(clippy::approx_constant)] // the JDK's truncated log10(2), not f64::consts::LOG10_2
fn estimate_decimal_exponent(fraction: u64, bin_exp: i32) -> i32 {
    let significand = f64::from_bits(0x3ff0_0000_0000_0000 | (fraction & ((1 << 52) - 1)));
    let estimate = (significand - 1.5) * 0.289529654 + 0.176091259 + f64::from(bin_exp) * 0.301029995663981;
    estimate.floor() as i32
}

/// The scaled operands: B = fraction·5^b5·2^b2 (the value), S = 5^s5·2^s2 (one decimal unit),
/// M = 5^m5·2^m2 (half the gap to the neighbouring doubles).
struct Scale {
    fraction: u64,
    b5: i32,
    b2: i32,
    s5: i32,
    s2: i32,
    m5: i32,
    m2: i32,
}

struct Generated {
    digits: Vec<u8>,
    high: bool,
    low: bool,
    low_digit_difference: i64,
}

/// Wrapping integer arithmetic of one width, as Java's `int` and `long` behave.
trait Fixed: Copy + PartialOrd {
    const ZERO: Self;
    fn from_u64(v: u64) -> Self;
    fn pow5(n: i32) -> Self;
    fn shl(self, n: i32) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn to_i64(self) -> i64;
}

macro_rules! fixed {
    ($t:ty) => {
        impl Fixed for $t {
            const ZERO: Self = 0;
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn pow5(n: i32) -> Self {
                (5 as $t).wrapping_pow(n as u32)
            }
            fn shl(self, n: i32) -> Self {
                self.wrapping_shl(n as u32)
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Self {
                self.wrapping_div(o)
            }
            fn rem(self, o: Self) -> Self {
                self.wrapping_rem(o)
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
        }
    };
}
fixed!(i32);
fixed!(i64);

fn generate_fixed<T: Fixed>(sc: &Scale, dec_exp: &mut i32) -> Generated {
    let ten = T::from_u64(10);
    let mut b = T::from_u64(sc.fraction).mul(T::pow5(sc.b5)).shl(sc.b2);
    let s = T::pow5(sc.s5).shl(sc.s2);
    let mut m = T::pow5(sc.m5).shl(sc.m2);
    let tens = s.mul(ten);
    let mut digits = Vec::with_capacity(20);
    let mut q = b.div(s);
    b = ten.mul(b.rem(s));
    m = m.mul(ten);
    let mut low = b < m;
    let mut high = b.add(m) > tens;
    if q.to_i64() == 0 && !high {
        *dec_exp -= 1;
    } else {
        digits.push(q.to_i64() as u8);
    }
    if *dec_exp < -3 || *dec_exp >= 8 {
        low = false;
        high = false;
    }
    while !low && !high {
        q = b.div(s);
        b = ten.mul(b.rem(s));
        m = m.mul(ten);
        if m > T::ZERO {
            low = b < m;
            high = b.add(m) > tens;
        } else {
            // M overflowed: it is certainly past B.
            low = true;
            high = true;
        }
        digits.push(q.to_i64() as u8);
    }
    let low_digit_difference = b.shl(1).sub(tens).to_i64();
    Generated { digits, high, low, low_digit_difference }
}

fn generate_big(sc: &Scale, dec_exp: &mut i32) -> Generated {
    let s = BigUint::pow52(sc.s5, sc.s2);
    let mut b = BigUint::from_u64(sc.fraction).mul_pow5(sc.b5).shl(sc.b2);
    let mut m = BigUint::pow52(sc.m5 + 1, sc.m2 + 1);
    let ten_s = BigUint::pow52(sc.s5 + 1, sc.s2 + 1);
    let mut digits = Vec::with_capacity(20);
    let q = b.quo_rem_times_ten(&s);
    let mut low = b < m;
    let mut high = b.add(&m) >= ten_s;
    if q == 0 && !high {
        *dec_exp -= 1;
    } else {
        digits.push(q);
    }
    if *dec_exp < -3 || *dec_exp >= 8 {
        low = false;
        high = false;
    }
    while !low && !high {
        let q = b.quo_rem_times_ten(&s);
        m.mul_small(10);
        low = b < m;
        high = b.add(&m) >= ten_s;
        digits.push(q);
    }
    let low_digit_difference = if high && low {
        match b.shl(1).cmp(&ten_s) {
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Greater => 1,
        }
    } else {
        0
    };
    Generated { digits, high, low, low_digit_difference }
}

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// The first day of the Gregorian calendar in Java's default `GregorianCalendar`, 1582-10-15, in
/// days since the epoch. Before it Java counts days in the Julian calendar.
pub(crate) const GREGORIAN_CUTOVER_DAYS: i64 = -141_427;

/// `java.util.Date.toString()` in UTC: `EEE MMM dd HH:mm:ss zzz yyyy`, with Java's calendar
/// (Julian before the 1582 cutover, the year of the era without an era marker).
pub(crate) fn date_to_string(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = if days < GREGORIAN_CUTOVER_DAYS { julian_from_days(days) } else { civil_from_days(days) };
    let year_of_era = if year <= 0 { 1 - year } else { year };
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        year_of_era
    )
}

/// Days since 1970-01-01 of a Julian-calendar date (month 1..=12).
pub(crate) fn days_from_julian(year: i64, month: i64, day: i64) -> i64 {
    let a = (14 - month) / 12;
    let y = year + 4800 - a;
    let m = month + 12 * a - 3;
    let julian_day_number = day + (153 * m + 2) / 5 + 365 * y + y.div_euclid(4) - 32_083;
    julian_day_number - 2_440_588
}

fn julian_from_days(days: i64) -> (i64, i64, i64) {
    let c = days + 2_440_588 + 32_082;
    let d = (4 * c + 3).div_euclid(1461);
    let e = c - (1461 * d).div_euclid(4);
    let m = (5 * e + 2) / 153;
    let day = e - (153 * m + 2) / 5 + 1;
    let month = m + 3 - 12 * (m / 10);
    let year = d - 4800 + m / 10;
    (year, month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: the proleptic Gregorian (year, month, day) of a day
/// counted from 1970-01-01 (also how a rollout's id spells its start).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_does() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1000.5, "1000.5"),
            (1000.0, "1000.0"),
            (1500.0, "1500.0"),
            (10_000_000.0, "1.0E7"),
            (12_345_678.9, "1.23456789E7"),
            (9_999_999.0, "9999999.0"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (0.00123, "0.00123"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (f64::NAN, "NaN"),
            (1e21, "1.0E21"),
            (1.5e-10, "1.5E-10"),
            (f64::MAX, "1.7976931348623157E308"),
            (f64::MIN_POSITIVE, "2.2250738585072014E-308"),
            (0.1 + 0.2, "0.30000000000000004"),
            // JDK 17 is not always shortest; the OAP's digests carry these digits.
            (1e23, "9.999999999999999E22"),
            (2e23, "1.9999999999999998E23"),
            (8.41e21, "8.409999999999999E21"),
            (2.82879384806159e17, "2.82879384806159008E17"),
            (1234567890123456789.0, "1.23456789012345677E18"),
            (5e-324, "4.9E-324"),
        ];
        for (d, want) in cases {
            assert_eq!(double_to_string(*d), *want, "{d:?}");
        }
    }

    #[test]
    fn dates_print_as_java_does_in_utc() {
        assert_eq!(date_to_string(days_from_civil(2001, 12, 14) * 86_400_000), "Fri Dec 14 00:00:00 UTC 2001");
        assert_eq!(date_to_string(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(date_to_string(-1000), "Wed Dec 31 23:59:59 UTC 1969");
        assert_eq!(date_to_string(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
    }

    #[test]
    fn julian_dates_before_the_cutover() {
        assert_eq!(days_from_julian(1582, 10, 5), GREGORIAN_CUTOVER_DAYS);
        assert_eq!(date_to_string(days_from_julian(1500, 2, 29) * 86_400_000), "Sat Feb 29 00:00:00 UTC 1500");
        assert_eq!(date_to_string(days_from_julian(0, 1, 1) * 86_400_000), "Thu Jan 01 00:00:00 UTC 1");
        for days in -1_500_000..GREGORIAN_CUTOVER_DAYS {
            let (y, m, d) = julian_from_days(days);
            assert_eq!(days_from_julian(y, m, d), days);
        }
    }

    #[test]
    fn civil_round_trip() {
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn collections_print_as_java_does() {
        let v = JavaValue::Map(vec![
            (JavaValue::Str("x".into()), JavaValue::Integer("1".into())),
            (
                JavaValue::Str("y".into()),
                JavaValue::List(vec![JavaValue::Null, JavaValue::Double(0.5), JavaValue::Bool(true)]),
            ),
        ]);
        assert_eq!(v.to_java_string(), "{x=1, y=[null, 0.5, true]}");
        assert_eq!(JavaValue::List(vec![]).to_java_string(), "[]");
    }

    #[test]
    fn identity_follows_java_equals() {
        assert_eq!(JavaValue::Double(f64::NAN).identity(), JavaValue::Double(-f64::NAN).identity());
        assert_ne!(JavaValue::Double(0.0).identity(), JavaValue::Double(-0.0).identity());
        assert_ne!(JavaValue::Str("1".into()).identity(), JavaValue::Integer("1".into()).identity());
    }
}

#[cfg(test)]
mod jdk_golden {
    use super::double_to_string;

    /// Every line of the golden file (bits → JDK 17 `Double.toString`, made by
    /// `scripts/golden/double_corpus.py` and `JavaDoubles.java`) must print the same. Point
    /// `SKYCONF_JAVA_DOUBLES` at a larger file made the same way for a deeper check.
    #[test]
    fn matches_jdk17_double_to_string() {
        let text = match std::env::var("SKYCONF_JAVA_DOUBLES") {
            Ok(path) => std::fs::read_to_string(path).unwrap(),
            Err(_) => include_str!("../../tests/data/java-doubles.txt").to_owned(),
        };
        let mut failures = Vec::new();
        let mut checked = 0;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (bits, want) = line.split_once(' ').unwrap();
            let d = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
            for (value, want) in [(d, want.to_owned()), (-d, format!("-{want}"))] {
                let got = double_to_string(value);
                if got != want {
                    failures.push(format!("{bits}: want {want}, got {got}"));
                }
            }
            checked += 1;
        }
        assert!(checked > 1000, "golden file too small");
        assert!(
            failures.is_empty(),
            "{} of {checked} differ:\n{}",
            failures.len(),
            failures[..failures.len().min(30)].join("\n")
        );
    }
}
