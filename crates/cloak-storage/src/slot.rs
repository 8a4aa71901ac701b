//! Redis Cluster's hash slots: `CRC16(key) mod 16384`, with `{hash tags}`.
//!
//! The same function Redis uses (CRC16-XMODEM, `src/cluster.c`'s `keyHashSlot`), so a cluster
//! client computes the same slot for a key as the proxy does, and sends it to the right proxy.

/// How many hash slots the keyspace has (Redis's `CLUSTER_SLOTS`).
pub const SLOTS: u16 = 16_384;

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), one table entry per byte value.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// CRC16-XMODEM of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// The part of `key` that is hashed: what is between the first `{` and the first `}` after it,
/// if that is not empty; otherwise the whole key (Redis's rule, so `{user1}.a` and `{user1}.b`
/// share a slot, while `{}x` hashes whole).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(length) = key[open + 1..].iter().position(|&b| b == b'}')
        && length > 0
    {
        return &key[open + 1..open + 1 + length];
    }
    key
}

/// The hash slot of `key`, as `CLUSTER KEYSLOT` answers.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOTS - 1)
}

/// The one slot all of `keys` hash to: `Ok(None)` for no keys, `Err(CrossSlot)` when two differ
/// (Redis refuses such a command with `-CROSSSLOT`).
pub fn common_slot<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Result<Option<u16>, CrossSlot> {
    let mut common = None;
    for key in keys {
        let slot = key_slot(key);
        match common {
            None => common = Some(slot),
            Some(seen) if seen != slot => return Err(CrossSlot),
            Some(_) => {}
        }
    }
    Ok(common)
}

/// A command's keys hash to different slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("CROSSSLOT Keys in request don't hash to the same slot")]
pub struct CrossSlot;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        // The standard check value of CRC-16/XMODEM, and the one Redis's cluster spec gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
        assert_eq!(hash_tag(b"open{only"), b"open{only");
    }

    #[test]
    fn common_slot_refuses_keys_of_two_slots() {
        assert_eq!(common_slot([]), Ok(None));
        let tagged: [&[u8]; 2] = [b"{a}1", b"{a}2"];
        assert_eq!(common_slot(tagged), Ok(Some(key_slot(b"a"))));
        let apart: [&[u8]; 2] = [b"a", b"b"];
        assert_eq!(common_slot(apart), Err(CrossSlot));
    }
}
