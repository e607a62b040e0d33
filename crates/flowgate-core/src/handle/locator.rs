//! The locator a task id carries, packed into the fewest bytes its shape allows.
//!
//! A locator is what an engine needs, beyond the tool, to find an execution again
//! ([`Engine::locator`](crate::Engine::locator)): a run id, an execution name, a pipeline
//! number. Engines make them of a few shapes, and each shape has a denser form than its text:
//!
//! | first byte | shape | bytes after it |
//! |---|---|---|
//! | `0x00` | any UTF-8 text | the text |
//! | `0x01` | a decimal `u64` without leading zeros (a GitHub run id, a GitLab pipeline id) | the number, big-endian, leading zero bytes dropped |
//! | `0x02` | lowercase hexadecimal of even length (a local run id) | the bytes the digits spell |
//! | `0x03` | a lowercase UUID, `8-4-4-4-12` (a Workflows execution id) | its 16 bytes |
//! | `0x80 + n` | `n` (1-127) characters of `[A-Za-z0-9_-]` (a Step Functions execution name) | 6 bits a character, most significant first, the last byte padded with zero bits |
//!
//! The packing picks the shortest form that reads back to the same text, so a locator's
//! packed size is a function of its shape alone, and each engine's longest locator has a
//! known size: [`packed_len`] is what the engines' worst-case tests measure.

/// The 64 characters of the 6-bit form, in base64url's order.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

const RAW: u8 = 0x00;
const DECIMAL: u8 = 0x01;
const HEX: u8 = 0x02;
const UUID: u8 = 0x03;
const SIXBIT: u8 = 0x80;
/// The most characters the 6-bit form holds (its count shares the first byte).
const SIXBIT_MAX: usize = 0x7f;

/// Appends `locator` packed.
pub(super) fn pack(locator: &str, out: &mut Vec<u8>) {
    if let Some(n) = decimal(locator) {
        out.push(DECIMAL);
        let bytes = n.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.extend_from_slice(&bytes[skip..]);
    } else if let Some(bytes) = uuid(locator) {
        out.push(UUID);
        out.extend_from_slice(&bytes);
    } else if let Some(bytes) = hex(locator) {
        out.push(HEX);
        out.extend_from_slice(&bytes);
    } else if let Some(symbols) = sixbit(locator) {
        // A count of 1..=127 fits in the low bits: SIXBIT_MAX bounds it.
        out.push(SIXBIT | symbols.len() as u8);
        let mut acc: u32 = 0;
        let mut bits = 0;
        for s in symbols {
            acc = (acc << 6) | u32::from(s);
            bits += 6;
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            out.push((acc << (8 - bits)) as u8);
        }
    } else {
        out.push(RAW);
        out.extend_from_slice(locator.as_bytes());
    }
}

/// The locator `bytes` pack, or `None` when they are not a packing [`pack`] makes.
pub(super) fn unpack(bytes: &[u8]) -> Option<String> {
    let (&first, rest) = bytes.split_first()?;
    match first {
        RAW => String::from_utf8(rest.to_vec()).ok(),
        DECIMAL => {
            if rest.len() > 8 || rest.first() == Some(&0) {
                return None;
            }
            let n = rest.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b));
            Some(n.to_string())
        }
        HEX => {
            let mut s = String::with_capacity(rest.len() * 2);
            for b in rest {
                s.push(char::from(HEX_DIGITS[usize::from(b >> 4)]));
                s.push(char::from(HEX_DIGITS[usize::from(b & 0xf)]));
            }
            (!s.is_empty()).then_some(s)
        }
        UUID => {
            let hex = unpack(&[&[HEX][..], rest].concat())?;
            (hex.len() == 32).then(|| {
                format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                )
            })
        }
        count if count > SIXBIT => {
            let count = usize::from(count & !SIXBIT);
            if rest.len() != (count * 6).div_ceil(8) {
                return None;
            }
            let mut s = String::with_capacity(count);
            let mut acc: u32 = 0;
            let mut bits = 0;
            let mut bytes = rest.iter();
            while s.len() < count {
                if bits < 6 {
                    acc = (acc << 8) | u32::from(*bytes.next()?);
                    bits += 8;
                }
                bits -= 6;
                s.push(char::from(ALPHABET[((acc >> bits) & 0x3f) as usize]));
            }
            Some(s)
        }
        _ => None,
    }
}

/// How many bytes `locator` packs into.
pub fn packed_len(locator: &str) -> usize {
    let mut out = Vec::new();
    pack(locator, &mut out);
    out.len()
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn decimal(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |b: u8| HEX_DIGITS.iter().position(|&d| d == b);
    s.as_bytes()
        .chunks(2)
        .map(|pair| Some((digit(pair[0])? << 4 | digit(pair[1])?) as u8))
        .collect()
}

fn uuid(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let dashes = b.len() == 36 && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-');
    if !dashes {
        return None;
    }
    hex(&s.replace('-', ""))
}

fn sixbit(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || s.len() > SIXBIT_MAX {
        return None;
    }
    s.bytes()
        .map(|b| ALPHABET.iter().position(|&a| a == b).map(|p| p as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: &str) -> usize {
        let mut out = Vec::new();
        pack(s, &mut out);
        assert_eq!(unpack(&out).as_deref(), Some(s), "{s:?} packed as {out:?}");
        out.len()
    }

    #[test]
    fn every_shape_reads_back_and_takes_its_size() {
        assert_eq!(round_trip("0"), 1);
        assert_eq!(round_trip("7"), 2);
        assert_eq!(round_trip(&u64::MAX.to_string()), 9);
        assert_eq!(
            round_trip("18446744073709551616"),
            11,
            "past u64: hex digits"
        );
        assert_eq!(round_trip("0123"), 3, "a leading zero is hex, not a number");
        assert_eq!(round_trip(&"ab".repeat(16)), 17);
        assert_eq!(round_trip("1f0e3c9a-55b2-4c1e-9a7d-0123456789ab"), 17);
        assert_eq!(round_trip("1F0E3C9A-55B2-4C1E-9A7D-0123456789AB"), 1 + 27);
        assert_eq!(round_trip(&"z".repeat(80)), 61);
        assert_eq!(round_trip("run-Name_1"), 1 + 8);
        assert_eq!(round_trip(&"_".repeat(127)), 1 + 96);
        assert_eq!(round_trip(&"_".repeat(128)), 1 + 128, "past 127: raw");
        assert_eq!(round_trip("run 1"), 6);
        assert_eq!(round_trip("é"), 3);
        assert_eq!(round_trip(""), 1);
        for n in 1..=12 {
            round_trip(&"-_9aZ".repeat(n)[..n]);
        }
    }

    #[test]
    fn bytes_that_no_packing_makes_do_not_read() {
        assert_eq!(unpack(&[]), None);
        assert_eq!(unpack(&[DECIMAL, 0, 1]), None, "leading zero byte");
        assert_eq!(unpack(&[DECIMAL, 1, 2, 3, 4, 5, 6, 7, 8, 9]), None);
        assert_eq!(unpack(&[UUID, 1, 2]), None);
        assert_eq!(unpack(&[SIXBIT | 3, 0]), None, "too few bytes");
        assert_eq!(unpack(&[0x42]), None);
        assert_eq!(unpack(&[RAW, 0xff]), None);
    }
}
