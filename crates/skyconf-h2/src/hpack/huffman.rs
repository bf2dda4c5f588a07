//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B), decoding only: the server's encoder sends
//! raw literals.
//!
//! The code is canonical (within one length, codes rise with the symbol; the first code of a
//! length follows the last of the length before), so the symbols grouped by code length are the
//! whole table: each code is derived from them, and a code of `n` bits is decoded by checking
//! whether it falls in length `n`'s run of consecutive codes. Decoding walks the input a bit at
//! a time; header strings are short, and nothing but the output is allocated.

use std::sync::OnceLock;

/// The end-of-string symbol: never valid inside a string (§5.2).
const EOS: u16 = 256;

/// The symbols of each code length (bits, symbols in rising order), from RFC 7541 Appendix B.
const BY_LENGTH: &[(u8, &[u16])] = &[
    (5, &[48, 49, 50, 97, 99, 101, 105, 111, 115, 116]),
    (
        6,
        &[
            32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108, 109, 110, 112,
            114, 117,
        ],
    ),
    (
        7,
        &[
            58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107,
            113, 118, 119, 120, 121, 122,
        ],
    ),
    (8, &[38, 42, 44, 59, 88, 90]),
    (10, &[33, 34, 40, 41, 63]),
    (11, &[39, 43, 124]),
    (12, &[35, 62]),
    (13, &[0, 36, 64, 91, 93, 126]),
    (14, &[94, 125]),
    (15, &[60, 96, 123]),
    (19, &[92, 195, 208]),
    (20, &[128, 130, 131, 162, 184, 194, 224, 226]),
    (21, &[153, 161, 167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230]),
    (
        22,
        &[
            129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190,
            196, 198, 228, 232, 233,
        ],
    ),
    (
        23,
        &[
            1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166, 168, 174, 175, 180,
            182, 183, 188, 191, 197, 231, 239,
        ],
    ),
    (24, &[9, 142, 144, 145, 148, 159, 171, 206, 215, 225, 236, 237]),
    (25, &[199, 207, 234, 235]),
    (26, &[192, 193, 200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255]),
    (27, &[203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254]),
    (
        28,
        &[
            2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220,
            249,
        ],
    ),
    (30, &[10, 13, 22, 256]),
];

/// The longest code, in bits.
const MAX_BITS: usize = 30;

/// Per code length: its first code and where its symbols start in `symbols`.
struct Table {
    first: [u32; MAX_BITS + 1],
    count: [u32; MAX_BITS + 1],
    offset: [u32; MAX_BITS + 1],
    symbols: Vec<u16>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Table {
            first: [0; MAX_BITS + 1],
            count: [0; MAX_BITS + 1],
            offset: [0; MAX_BITS + 1],
            symbols: Vec::new(),
        };
        let mut code = 0u32;
        let mut bits = 0usize;
        for &(length, symbols) in BY_LENGTH {
            let length = usize::from(length);
            code <<= length - bits;
            bits = length;
            table.first[length] = code;
            table.count[length] = symbols.len() as u32;
            table.offset[length] = table.symbols.len() as u32;
            table.symbols.extend_from_slice(symbols);
            code += symbols.len() as u32;
        }
        table
    })
}

/// The code of every symbol, as (code, bits): for tests that encode.
#[cfg(test)]
pub(crate) fn codes() -> Vec<(u32, u8)> {
    let table = table();
    let mut codes = vec![(0, 0); 257];
    for bits in 1..=MAX_BITS {
        for i in 0..table.count[bits] {
            let symbol = table.symbols[(table.offset[bits] + i) as usize];
            codes[usize::from(symbol)] = (table.first[bits] + i, bits as u8);
        }
    }
    codes
}

/// A Huffman-coded string that does not decode (RFC 7541 §5.2: an EOS symbol, padding longer
/// than 7 bits or not of 1s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Invalid;

/// Appends the decoding of `input` to `out`.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), Invalid> {
    let table = table();
    let mut code = 0u32;
    let mut bits = 0usize;
    // Whether every bit of the current (unfinished) code is 1: only such a tail is padding.
    let mut ones = true;
    for &byte in input {
        for shift in (0..8).rev() {
            let bit = u32::from(byte >> shift) & 1;
            code = (code << 1) | bit;
            bits += 1;
            ones &= bit == 1;
            if bits > MAX_BITS {
                return Err(Invalid);
            }
            let count = table.count[bits];
            if count > 0 && code >= table.first[bits] && code - table.first[bits] < count {
                let symbol = table.symbols[(table.offset[bits] + code - table.first[bits]) as usize];
                if symbol == EOS {
                    return Err(Invalid);
                }
                out.push(symbol as u8);
                code = 0;
                bits = 0;
                ones = true;
            }
        }
    }
    if bits > 7 || !ones { Err(Invalid) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes `input` with the table: the inverse `decode` is checked against.
    pub(crate) fn encode(input: &[u8]) -> Vec<u8> {
        let codes = codes();
        let mut out = Vec::new();
        let (mut acc, mut n) = (0u64, 0u32);
        for &b in input {
            let (code, bits) = codes[usize::from(b)];
            acc = (acc << bits) | u64::from(code);
            n += u32::from(bits);
            while n >= 8 {
                out.push((acc >> (n - 8)) as u8);
                n -= 8;
            }
            acc &= (1 << n) - 1;
        }
        if n > 0 {
            out.push(((acc << (8 - n)) | ((1 << (8 - n)) - 1)) as u8);
        }
        out
    }

    #[test]
    fn the_table_is_a_complete_prefix_code_of_257_symbols() {
        let mut seen = [false; 257];
        let mut kraft = 0u64;
        for &(bits, symbols) in BY_LENGTH {
            for &s in symbols {
                assert!(!seen[usize::from(s)], "symbol {s} twice");
                seen[usize::from(s)] = true;
                kraft += 1u64 << (MAX_BITS - usize::from(bits));
            }
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(kraft, 1 << MAX_BITS, "the code fills its space exactly");
        assert_eq!(codes()[256], (0x3fff_ffff, 30), "EOS is 30 ones");
    }

    #[test]
    fn rfc_7541_appendix_c_examples_decode() {
        // C.4.1: "www.example.com"
        let mut out = Vec::new();
        decode(&[0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff], &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
        // C.4.2: "no-cache"
        out.clear();
        decode(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], &mut out).unwrap();
        assert_eq!(out, b"no-cache");
    }

    #[test]
    fn every_byte_round_trips_and_bad_padding_is_refused() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        decode(&encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
        let mut zero = Vec::new();
        assert_eq!(decode(&[0x07], &mut zero), Ok(()), "'0' (00000), then 111: padding");
        assert_eq!(zero, b"0");
        assert_eq!(decode(&[0x00], &mut Vec::new()), Err(Invalid), "'0', then 000: not padding");
        assert_eq!(decode(&[0xff], &mut Vec::new()), Err(Invalid), "8 bits of padding");
        assert_eq!(decode(&[0xff; 4], &mut Vec::new()), Err(Invalid), "EOS");
    }
}
