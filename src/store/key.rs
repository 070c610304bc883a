//! Key encodings. Integers are big-endian so byte order is numeric order and prefix scans work.

/// One id.
pub fn id(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// Two ids, e.g. (organisation, person).
pub fn pair(a: u64, b: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&b.to_be_bytes());
    k
}

/// Reads the id at `offset` of a key made by [`id`] or [`pair`].
pub fn id_at(key: &[u8], offset: usize) -> Option<u64> {
    key.get(offset..offset.checked_add(8)?)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
}
