//! The hash both kube-proxy modes build chain names from: SHA-256 of a name, in RFC 4648 base32
//! (`base32.StdEncoding.EncodeToString(sha256.Sum256(...))`; iptables mode's `portProtoHash`
//! keeps 16 characters, nftables mode's `hashAndTruncate` 8).

use sha2::{Digest, Sha256};

/// RFC 4648 base32 alphabet, as Go's `base32.StdEncoding`.
const BASE32_ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// `base32.StdEncoding.EncodeToString(sha256.Sum256(input))`.
pub(crate) fn sha256_base32(input: &str) -> String {
    base32_std(&Sha256::digest(input.as_bytes()))
}

/// RFC 4648 base32 with `=` padding, as `base32.StdEncoding.EncodeToString`. Chain names only
/// use a prefix, but the full encoding keeps this testable against the RFC's vectors.
pub(crate) fn base32_std(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    for chunk in data.chunks(5) {
        let mut block = [0u8; 5];
        block[..chunk.len()].copy_from_slice(chunk);
        let bits = block.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        // Number of output characters carrying data for a partial block (RFC 4648 §6).
        let used = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < used {
                let index = ((bits >> (35 - 5 * i)) & 0x1f) as usize;
                out.push(char::from(BASE32_ALPHABET[index]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
