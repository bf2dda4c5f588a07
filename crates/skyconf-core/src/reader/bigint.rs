//! The reader's one big integer: unsigned, little-endian base-2³² limbs, with just the operations
//! its two users need.
//!
//! - [`resolve`](super::resolve) reads an integer scalar of any length and radix and prints it in
//!   decimal, as SnakeYAML's `BigInteger` fallback does ([`BigUint::parse_radix`],
//!   [`BigUint::to_decimal`]).
//! - [`java`](super::java) generates a double's digits the JDK's way when the scaled operands
//!   overflow `long` (`pow52`, `mul_pow5`, `shl`, `add`, comparison and
//!   [`BigUint::quo_rem_times_ten`]).
//!
//! Every value is kept without high zero limbs, so zero is the empty vector and the derived
//! equality and the ordering below compare values.

use std::cmp::Ordering;

/// An unsigned integer of any size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BigUint(Vec<u32>);

impl BigUint {
    /// `v`.
    pub(crate) fn from_u64(v: u64) -> Self {
        Self(vec![v as u32, (v >> 32) as u32]).trimmed()
    }

    /// 5^`p5` · 2^`p2`.
    pub(crate) fn pow52(p5: i32, p2: i32) -> Self {
        Self::from_u64(1).mul_pow5(p5).shl(p2)
    }

    /// The value of `digits` in `radix` (2 to 36, either case); `None` when there are no digits
    /// or one is not a digit of `radix`. Leading zeros are allowed.
    pub(crate) fn parse_radix(digits: &str, radix: u32) -> Option<Self> {
        if digits.is_empty() {
            return None;
        }
        let mut n = Self::default();
        for c in digits.chars() {
            n.mul_add(radix, c.to_digit(radix)?);
        }
        Some(n)
    }

    /// Canonical decimal text: no sign, no leading zeros, `0` for zero.
    pub(crate) fn to_decimal(&self) -> String {
        if self.0.is_empty() {
            return "0".to_owned();
        }
        // Divide by 10⁹ repeatedly; each remainder is nine digits, least significant first.
        let mut limbs = self.0.clone();
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

    /// `self = self · mul + add`: the one multiplication both users build on.
    fn mul_add(&mut self, mul: u32, add: u32) {
        let mut carry = u64::from(add);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(mul) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    /// `self = self · k`.
    pub(crate) fn mul_small(&mut self, k: u32) {
        self.mul_add(k, 0);
    }

    /// `self · 5^n`, for `n` ≥ 0.
    pub(crate) fn mul_pow5(mut self, mut n: i32) -> Self {
        while n >= 13 {
            self.mul_small(1_220_703_125); // 5^13, the largest power of five in a u32
            n -= 13;
        }
        self.mul_small(5u32.pow(n as u32));
        self
    }

    /// `self · 2^n`, for `n` ≥ 0.
    pub(crate) fn shl(&self, n: i32) -> Self {
        let (words, bits) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; words];
        let mut carry = 0u32;
        for &limb in &self.0 {
            out.push((limb << bits) | carry);
            carry = if bits == 0 { 0 } else { limb >> (32 - bits) };
        }
        out.push(carry);
        Self(out).trimmed()
    }

    /// `self + o`.
    pub(crate) fn add(&self, o: &Self) -> Self {
        let mut out = Vec::with_capacity(self.0.len().max(o.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(o.0.len()) {
            let v = u64::from(*self.0.get(i).unwrap_or(&0)) + u64::from(*o.0.get(i).unwrap_or(&0)) + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        out.push(carry as u32);
        Self(out).trimmed()
    }

    /// `self = self − o`, for `o` ≤ `self`.
    fn sub_in_place(&mut self, o: &Self) {
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let v = i64::from(self.0[i]) - i64::from(*o.0.get(i).unwrap_or(&0)) - borrow;
            self.0[i] = v.rem_euclid(1 << 32) as u32;
            borrow = i64::from(v < 0);
        }
        self.trim();
    }

    /// One step of digit generation: q = self / s (a single decimal digit, so `self` < 10·`s`),
    /// then self = (self mod s) · 10. Returns q.
    pub(crate) fn quo_rem_times_ten(&mut self, s: &Self) -> u8 {
        let mut q = 0;
        while *self >= *s {
            self.sub_in_place(s);
            q += 1;
        }
        self.mul_small(10);
        q
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn trimmed(mut self) -> Self {
        self.trim();
        self
    }
}

impl PartialOrd for BigUint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BigUint {
    /// Without high zero limbs, a longer value is larger; equal lengths compare from the top limb.
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_u128(v: u128) -> BigUint {
        BigUint::parse_radix(&v.to_string(), 10).unwrap()
    }

    #[test]
    fn text_in_any_radix_prints_as_canonical_decimal() {
        let cases: [(&str, u32, u128); 6] = [
            ("0", 10, 0),
            ("000", 8, 0),
            ("0017", 8, 0o17),
            ("1000000000", 10, 1_000_000_000),
            ("ffffffffFFFFFFFF", 16, u64::MAX as u128),
            ("zz", 36, 35 * 36 + 35),
        ];
        for (text, radix, value) in cases {
            assert_eq!(BigUint::parse_radix(text, radix).unwrap().to_decimal(), value.to_string(), "{text}");
        }
        assert_eq!(BigUint::parse_radix("", 10), None);
        assert_eq!(BigUint::parse_radix("19", 8), None);
        assert_eq!(BigUint::parse_radix("1_0", 2), None);
        let huge = "123456789012345678901234567890123456789012345678901234567890";
        assert_eq!(BigUint::parse_radix(huge, 10).unwrap().to_decimal(), huge);
    }

    #[test]
    fn arithmetic_agrees_with_u128() {
        let values = [0u128, 1, 9, u32::MAX as u128, 1 << 32, u64::MAX as u128, 0xdead_beef_0000_0001_cafe];
        for &a in &values {
            for &b in &values {
                assert_eq!(from_u128(a).add(&from_u128(b)).to_decimal(), (a + b).to_string());
                assert_eq!(from_u128(a).cmp(&from_u128(b)), a.cmp(&b), "{a} vs {b}");
            }
            for shift in [0, 1, 31, 32, 33] {
                assert_eq!(from_u128(a).shl(shift).to_decimal(), (a << shift).to_string());
            }
            let mut times = from_u128(a);
            times.mul_small(1_000_003);
            assert_eq!(times.to_decimal(), (a * 1_000_003).to_string());
        }
        assert_eq!(BigUint::pow52(27, 5).to_decimal(), (5u128.pow(27) << 5).to_string());
        assert_eq!(BigUint::from_u64(0), BigUint::default());
    }

    #[test]
    fn a_digit_step_divides_then_scales_the_remainder() {
        let s = BigUint::from_u64(7);
        let mut b = BigUint::from_u64(66);
        assert_eq!(b.quo_rem_times_ten(&s), 9);
        assert_eq!(b, BigUint::from_u64(30));
        assert_eq!(b.quo_rem_times_ten(&s), 4);
        assert_eq!(b, BigUint::from_u64(20));
    }
}
