//! How document content and extracted text are kept: compressed with zstd when that saves
//! space, as they are otherwise (PDF and Office files are compressed already). One byte in
//! front says which; a compressed value also records its length, so reading it back allocates
//! exactly that and a damaged value cannot make it allocate more.
//!
//! zstd was chosen over lz4 by measurement on the Dutch corpus (`benches/store.rs`,
//! `docs/performance.md`): about 3.4× against 2.1× smaller at level 3, still decompressing
//! far faster than search reads.

use std::borrow::Cow;
use std::cell::RefCell;

use super::StoreError;

const RAW: u8 = 0;
const ZSTD: u8 = 1;
/// zstd's level: 3 is its default, the knee of size against time for text.
const LEVEL: i32 = 3;
/// Larger values are never written (documents are far smaller), so claiming one is damage.
const MAX_VALUE: u64 = 4 << 30;
/// Shorter values are kept as they are: a frame's overhead would eat the saving.
const MIN_COMPRESSED: usize = 64;

thread_local! {
    // A zstd context costs more to set up than a small document costs to compress: each
    // thread keeps one of each kind.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        RefCell::new(zstd::bulk::Compressor::new(LEVEL).ok());
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        RefCell::new(zstd::bulk::Decompressor::new().ok());
}

fn compress(bytes: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| match c.try_borrow_mut().ok()?.as_mut() {
        Some(c) => c.compress(bytes).ok(),
        None => zstd::bulk::compress(bytes, LEVEL).ok(),
    })
}

fn decompress(frame: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|d| {
        match d
            .try_borrow_mut()
            .ok()
            .as_deref_mut()
            .and_then(Option::as_mut)
        {
            Some(d) => d.decompress(frame, len),
            None => zstd::bulk::decompress(frame, len),
        }
    })
}

/// The stored form of `bytes`.
pub fn encode(bytes: &[u8]) -> Vec<u8> {
    if bytes.len() >= MIN_COMPRESSED
        && let Some(frame) = compress(bytes)
        && frame.len() + 9 < bytes.len() - bytes.len() / 16
    {
        let mut out = Vec::with_capacity(frame.len() + 9);
        out.push(ZSTD);
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&frame);
        return out;
    }
    let mut out = Vec::with_capacity(bytes.len() + 1);
    out.push(RAW);
    out.extend_from_slice(bytes);
    out
}

/// The bytes a stored value holds.
pub fn decode(stored: &[u8]) -> Result<Cow<'_, [u8]>, StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        table: "kb_content".into(),
        message,
    };
    match stored.split_first() {
        Some((&RAW, rest)) => Ok(Cow::Borrowed(rest)),
        Some((&ZSTD, rest)) if rest.len() >= 8 => {
            let (len, frame) = rest.split_at(8);
            let mut n = [0u8; 8];
            n.copy_from_slice(len);
            let len = u64::from_le_bytes(n);
            // The frame states its own size too; both must agree before anything is allocated.
            let framed = zstd::zstd_safe::get_frame_content_size(frame)
                .ok()
                .flatten();
            if framed != Some(len) || len > MAX_VALUE {
                return Err(corrupt(
                    "a compressed value claims an impossible length".into(),
                ));
            }
            let len = usize::try_from(len)
                .map_err(|_| corrupt("a compressed value claims an impossible length".into()))?;
            let out = decompress(frame, len)
                .map_err(|e| corrupt(format!("a compressed value cannot be read: {e}")))?;
            if out.len() != len {
                return Err(corrupt("a compressed value has the wrong length".into()));
            }
            Ok(Cow::Owned(out))
        }
        _ => Err(corrupt("a stored value has an unknown encoding".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compressed_and_comes_back() {
        let text = "Het kozijn van meranti wordt geplaatst.\n".repeat(200);
        let stored = encode(text.as_bytes());
        assert_eq!(stored[0], ZSTD);
        assert!(stored.len() < text.len() / 10);
        assert_eq!(decode(&stored).unwrap(), text.as_bytes());
    }

    #[test]
    fn incompressible_and_short_values_are_kept_as_they_are() {
        let noise: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
        for bytes in [noise.as_slice(), b"kort", b""] {
            let stored = encode(bytes);
            assert_eq!(stored[0], RAW);
            assert_eq!(decode(&stored).unwrap(), bytes);
        }
    }

    #[test]
    fn damaged_values_are_errors_not_panics() {
        let good = encode("abc ".repeat(100).as_bytes());
        let mut wrong_len = good.clone();
        wrong_len[1] = wrong_len[1].wrapping_add(1);
        let mut huge = good.clone();
        huge[1..9].copy_from_slice(&u64::MAX.to_le_bytes());
        for bad in [
            &[][..],
            &[7u8, 1, 2][..],
            &[ZSTD, 1, 2][..],
            &good[..good.len() - 3],
            &wrong_len[..],
            &huge[..],
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
    }
}
