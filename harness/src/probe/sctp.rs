//! SCTP on the wire, as much as a probe needs (RFC 9260): an INIT to open an association, and
//! the INIT-ACK or ABORT that answers it. pnet has no SCTP builder; the format is small.
//!
//! A crafted INIT leaves no state behind: the server answers with a state cookie and keeps
//! nothing until a COOKIE ECHO, which a probe never sends.

/// Common header: source port, destination port, verification tag, checksum.
pub const HEADER_LEN: usize = 12;
/// INIT chunk without optional parameters.
const INIT_CHUNK_LEN: usize = 20;
pub const INIT_LEN: usize = HEADER_LEN + INIT_CHUNK_LEN;

const CHUNK_INIT: u8 = 1;
const CHUNK_INIT_ACK: u8 = 2;
const CHUNK_ABORT: u8 = 6;

/// Writes an INIT from `sport` to `dport` whose Initiate Tag is `tag` (the probe's marker:
/// the answer carries it as its verification tag, across NAT).
pub fn write_init(buf: &mut [u8], sport: u16, dport: u16, tag: u32) {
    let Some(buf) = buf.get_mut(..INIT_LEN) else {
        return;
    };
    buf.fill(0);
    buf[0..2].copy_from_slice(&sport.to_be_bytes());
    buf[2..4].copy_from_slice(&dport.to_be_bytes());
    // Verification tag 0: an INIT is the one chunk sent before the peer's tag is known.
    let chunk = &mut buf[HEADER_LEN..];
    chunk[0] = CHUNK_INIT;
    chunk[2..4].copy_from_slice(&(INIT_CHUNK_LEN as u16).to_be_bytes());
    chunk[4..8].copy_from_slice(&tag.to_be_bytes());
    chunk[8..12].copy_from_slice(&65535u32.to_be_bytes()); // a_rwnd
    chunk[12..14].copy_from_slice(&1u16.to_be_bytes()); // outbound streams
    chunk[14..16].copy_from_slice(&1u16.to_be_bytes()); // inbound streams
    chunk[16..20].copy_from_slice(&tag.to_be_bytes()); // initial TSN
    let crc = crc32c(buf);
    // The checksum goes on the wire least significant byte first (RFC 9260 appendix A).
    buf[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// The parts of an SCTP packet a probe looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub sport: u16,
    pub dport: u16,
    pub vtag: u32,
    pub first_chunk: Chunk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    Init { initiate_tag: u32 },
    InitAck,
    Abort,
    Other(u8),
}

pub fn parse(l4: &[u8]) -> Option<Packet> {
    let u16_at = |i: usize| Some(u16::from_be_bytes([*l4.get(i)?, *l4.get(i + 1)?]));
    let u32_at = |i: usize| {
        Some(u32::from_be_bytes([
            *l4.get(i)?,
            *l4.get(i + 1)?,
            *l4.get(i + 2)?,
            *l4.get(i + 3)?,
        ]))
    };
    let first_chunk = match *l4.get(HEADER_LEN)? {
        CHUNK_INIT => Chunk::Init {
            initiate_tag: u32_at(HEADER_LEN + 4)?,
        },
        CHUNK_INIT_ACK => Chunk::InitAck,
        CHUNK_ABORT => Chunk::Abort,
        other => Chunk::Other(other),
    };
    Some(Packet {
        sport: u16_at(0)?,
        dport: u16_at(2)?,
        vtag: u32_at(4)?,
        first_chunk,
    })
}

/// CRC-32C of `packet` with its checksum field taken as zero, as SCTP computes it.
pub fn crc32c(packet: &[u8]) -> u32 {
    crc32c_of(
        packet
            .iter()
            .enumerate()
            .map(|(i, &b)| if (8..12).contains(&i) { 0 } else { b }),
    )
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final XOR all ones).
fn crc32c_of(bytes: impl Iterator<Item = u8>) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_published_vectors() {
        // The catalogued check value, and RFC 3720 B.4's 32 zero bytes.
        assert_eq!(crc32c_of(b"123456789".iter().copied()), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }

    #[test]
    fn init_round_trips_and_verifies() {
        let mut buf = [0u8; INIT_LEN];
        write_init(&mut buf, 40000, 9999, 0x1234_5678);
        assert_eq!(
            parse(&buf),
            Some(Packet {
                sport: 40000,
                dport: 9999,
                vtag: 0,
                first_chunk: Chunk::Init {
                    initiate_tag: 0x1234_5678
                },
            })
        );
        let stored = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
        assert_eq!(stored, crc32c(&buf));
    }
}
