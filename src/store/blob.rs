//! How document content and extracted text are kept: compressed with zstd when that saves
//! space, as they are otherwise (PDF and Office files are compressed already). One byte in
//! front says which; a compressed value also records its length, so reading it back allocates
//! exactly that and a damaged value cannot make it allocate more.
//!
//! zstd was chosen over lz4 by measurement on the Dutch corpus (`benches/store.rs`,
//! `docs/performance.md`): about 3.4× against 2.1× smaller, still decompressing far faster
//! than search reads. Its level is 1 since stop 45 ([`LEVEL`]).
//!
//! A stored form longer than [`PART`] bytes is kept in parts of equal length, each a row of
//! its own: the first under the value's key (its head, which says how many parts there are
//! and how long they are together), part `i` under the key followed by `i` as four bytes,
//! big-endian, so the parts follow their head in key order and one range reads them all.
//! redb keeps whole rows in 4 KiB pages: a document compressed to 1–3 KB left about 29 % of
//! its pages unused, parts of at most 1 KB about 15 % (measured in `docs/performance.md`).
//! A value of one part is the form kennis always wrote, so stores written before need no
//! migration; `kennis compact` splits their long values as it rewrites the file.
//!
//! Content is keyed by its hash, which is random: values written under their hashes land on
//! pages all over the table, and a large import left those pages about two thirds full
//! until the file was rewritten. So content is kept in the order it is written: its rows
//! (head and parts as above) under a number counting up in a table of rows
//! ([`rows_table`]), and under its hash only a location, [`AT`] and that number. redb packs
//! the last page full when a key greater than every other arrives, so the rows' pages are
//! full as they are written; the locations are small. Content written before under its
//! hash itself is read as before.

use std::borrow::Cow;
use std::cell::RefCell;

use redb::{ReadableTable, Table as RedbTable, TableHandle};

use super::{KB_CONTENT, KB_CONTENT_DATA, StoreError, Table};

const RAW: u8 = 0;
const ZSTD: u8 = 1;
/// A head of parts: the count (u32) and the stored form's whole length (u64), little-endian,
/// then the first part.
const PARTS: u8 = 2;
const HEAD: usize = 1 + 4 + 8;
/// A location: the value's key in the table of rows (a u64, big-endian) follows.
const AT: u8 = 3;
/// The longest part. Rows of about a quarter of a page fill pages well without many rows per
/// document (`docs/performance.md`, stop 35).
pub const PART: usize = 1000;
/// zstd's level. Over the Dutch corpus's documents (a few KB each) 1 compresses them as well
/// as 3, zstd's default, does (to 0.525 of their size against 0.522) in 70 % of the time
/// (measured at stop 45, `docs/performance.md`).
const LEVEL: i32 = 1;
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

/// A value in its stored form, made outside a transaction: compressing is most of what
/// storing a document costs, and need not hold the single writer (an import compresses the
/// next batch on its reading thread). Written with
/// [`WriteTx::put_encoded`](super::WriteTx::put_encoded).
#[derive(Debug)]
pub struct Encoded(Vec<u8>);

impl Encoded {
    /// `bytes` in the form [`WriteTx::put_blob`](super::WriteTx::put_blob) would store them.
    pub fn of(bytes: &[u8]) -> Encoded {
        Encoded(encode(bytes))
    }
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

/// The bytes a stored value of one part holds.
pub fn decode(stored: &[u8]) -> Result<Cow<'_, [u8]>, StoreError> {
    decode_in("kb_content", stored)
}

fn corrupt(table: &str, message: String) -> StoreError {
    StoreError::Corrupt {
        table: table.into(),
        message,
    }
}

fn decode_in<'a>(table: &str, stored: &'a [u8]) -> Result<Cow<'a, [u8]>, StoreError> {
    let corrupt = |message: String| corrupt(table, message);
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

/// The key of part `i` (from 1) of the value under `key`.
fn part_key(key: &[u8], i: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 4);
    k.extend_from_slice(key);
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn is_part(key: &[u8], head: &[u8], i: u32) -> bool {
    key.strip_prefix(head) == Some(&i.to_be_bytes()[..])
}

/// A stored form of one part (`encode`'s) as the rows it is kept in: itself when it is at most
/// [`PART`] long, else a head and the parts after it.
pub(super) fn split(stored: &[u8]) -> Result<Vec<Cow<'_, [u8]>>, StoreError> {
    if stored.len() <= PART {
        return Ok(vec![Cow::Borrowed(stored)]);
    }
    let size = stored.len().div_ceil(stored.len().div_ceil(PART));
    let mut chunks = stored.chunks(size);
    let count = u32::try_from(chunks.len()).map_err(|_| {
        StoreError::Db(format!(
            "a value of {} bytes is too long to store",
            stored.len()
        ))
    })?;
    let first = chunks.next().unwrap_or_default();
    let mut head = Vec::with_capacity(HEAD + first.len());
    head.push(PARTS);
    head.extend_from_slice(&count.to_le_bytes());
    head.extend_from_slice(&(stored.len() as u64).to_le_bytes());
    head.extend_from_slice(first);
    let mut rows = Vec::with_capacity(count as usize);
    rows.push(Cow::Owned(head));
    rows.extend(chunks.map(Cow::Borrowed));
    Ok(rows)
}

/// Whether `stored` (a row under a value's own key) is the head of parts.
pub(super) fn is_head(stored: &[u8]) -> bool {
    stored.first() == Some(&PARTS)
}

/// The table that holds the rows of `table`'s values in the order they were written, when
/// `table` keeps only where they are: content.
pub(super) fn rows_table(table: &Table) -> Option<Table> {
    (table.name() == KB_CONTENT.name()).then_some(KB_CONTENT_DATA)
}

/// What a location points to is not there (or is a location itself).
pub(super) fn misplaced(table: &Table) -> StoreError {
    corrupt(
        table.name(),
        "a value is missing from where it was kept".into(),
    )
}

/// What is kept under a key: the value, or where it is.
#[derive(Debug)]
pub(super) enum Held {
    Bytes(Vec<u8>),
    /// The value's key in the table of rows.
    At([u8; 8]),
}

fn location(stored: &[u8]) -> Option<[u8; 8]> {
    match stored.split_first() {
        Some((&AT, at)) => at.try_into().ok(),
        _ => None,
    }
}

/// What is kept under `key` in `t`: its parts joined, then decoded, or where it is.
pub(super) fn read_in(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
    table: &Table,
    key: &[u8],
) -> Result<Option<Held>, StoreError> {
    let name = table.name();
    let corrupt = |message: &str| corrupt(name, message.into());
    // One descent: the head, then its parts, which follow it in key order.
    let mut rows = t.range::<&[u8]>(key..)?;
    let head = match rows.next() {
        Some(row) => {
            let (k, v) = row?;
            if k.value() != key {
                return Ok(None);
            }
            v
        }
        None => return Ok(None),
    };
    let head = head.value();
    if let Some(at) = location(head) {
        return Ok(Some(Held::At(at)));
    }
    if !is_head(head) {
        return Ok(Some(Held::Bytes(decode_in(name, head)?.into_owned())));
    }
    let (Some(count), Some(total), Some(first)) = (
        head.get(1..5)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes),
        head.get(5..13)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes),
        head.get(HEAD..),
    ) else {
        return Err(corrupt("the head of a value in parts is cut short"));
    };
    let total = usize::try_from(total)
        .ok()
        .filter(|&t| t as u64 <= MAX_VALUE + 9)
        .ok_or_else(|| corrupt("a value in parts claims an impossible length"))?;
    // The head's figures are not trusted with an allocation: the parts that are there decide.
    let mut joined = Vec::with_capacity(total.min(1 << 20));
    joined.extend_from_slice(first);
    for i in 1..count {
        let Some(row) = rows.next() else {
            return Err(corrupt("a part of a value is missing"));
        };
        let (k, v) = row?;
        if !is_part(k.value(), key, i) {
            return Err(corrupt("a part of a value is missing"));
        }
        if joined.len() + v.value().len() > total {
            return Err(corrupt(
                "the parts of a value are longer than their head says",
            ));
        }
        joined.extend_from_slice(v.value());
    }
    if joined.len() != total {
        return Err(corrupt(
            "the parts of a value are shorter than their head says",
        ));
    }
    if joined.first() == Some(&RAW) {
        joined.remove(0);
        return Ok(Some(Held::Bytes(joined)));
    }
    if is_head(&joined) {
        return Err(corrupt("a value in parts holds parts"));
    }
    Ok(Some(Held::Bytes(decode_in(name, &joined)?.into_owned())))
}

/// A table of blobs opened for writing.
pub(super) type BlobTable<'t> = RedbTable<'t, &'static [u8], &'static [u8]>;

/// Keeps `bytes` under `key` in `t` in their stored form, in place of what was there: with
/// `rows` (`t`'s [`rows_table`]), in `rows` under the number after the greatest there and
/// under `key` where they are; without, under `key` itself.
pub(super) fn write(
    t: &mut BlobTable<'_>,
    rows: Option<&mut BlobTable<'_>>,
    key: &[u8],
    value: &Encoded,
) -> Result<(), StoreError> {
    let Some(rows) = rows else {
        remove(t, None, key)?;
        return insert_value(t, key, value);
    };
    remove(t, Some(&mut *rows), key)?;
    // The greatest key is a value's own or one of its parts: its first eight bytes say whose.
    let next = match rows.last()? {
        None => 1,
        Some((k, _)) => k
            .value()
            .get(..8)
            .and_then(|n| <[u8; 8]>::try_from(n).ok())
            .map(u64::from_be_bytes)
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| {
                corrupt(
                    rows.name(),
                    "a key in the table of rows is not a number".into(),
                )
            })?,
    };
    let at = next.to_be_bytes();
    insert_value(rows, &at, value)?;
    let mut here = [AT; 9];
    here[1..].copy_from_slice(&at);
    t.insert(key, here.as_slice())?;
    Ok(())
}

/// A value in its stored form under `key` in `t`: one row, or a head and its parts.
fn insert_value(t: &mut BlobTable<'_>, key: &[u8], value: &Encoded) -> Result<(), StoreError> {
    for (i, row) in split(&value.0)?.iter().enumerate() {
        insert_row(t, key, i, row)?;
    }
    Ok(())
}

/// Copies a row of another file's table of blobs into `t` (a compaction): a long value written
/// in one piece before parts existed is split on the way; every other row is copied as it is.
pub(super) fn copy_in(t: &mut BlobTable<'_>, key: &[u8], stored: &[u8]) -> Result<(), StoreError> {
    // Parts are at most PART long and heads say so: only a value of one piece is longer.
    if stored.len() <= PART || is_head(stored) {
        t.insert(key, stored)?;
        return Ok(());
    }
    for (i, row) in split(stored)?.iter().enumerate() {
        insert_row(t, key, i, row)?;
    }
    Ok(())
}

fn insert_row(t: &mut BlobTable<'_>, key: &[u8], i: usize, row: &[u8]) -> Result<(), StoreError> {
    if i == 0 {
        t.insert(key, row)?;
    } else {
        // `split` counted its parts in a u32.
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        t.insert(part_key(key, i).as_slice(), row)?;
    }
    Ok(())
}

/// Removes the value under `key` from `t`, with its parts, or with its rows in `rows` where
/// `t` keeps only its location; whether there was one.
pub(super) fn remove(
    t: &mut BlobTable<'_>,
    rows: Option<&mut BlobTable<'_>>,
    key: &[u8],
) -> Result<bool, StoreError> {
    let Some(old) = t.remove(key)? else {
        // Parts are written and removed with their head, in one transaction.
        return Ok(false);
    };
    let (at, head) = (location(old.value()), is_head(old.value()));
    drop(old);
    if head {
        let (from, to) = (part_key(key, 1), part_key(key, u32::MAX));
        // Every part, also any a damaged head would not count.
        t.retain_in(from.as_slice()..=to.as_slice(), |_, _| false)?;
    }
    if let (Some(at), Some(rows)) = (at, rows) {
        remove(rows, None, &at)?;
    }
    Ok(true)
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

    use crate::store::{KB_CONTENT, KB_CONTENT_DATA, KB_TEXT, Store, key};

    /// Text that compresses about as well as documents do, `n` bytes long.
    fn words(n: usize, seed: u64) -> Vec<u8> {
        let list = [
            "kozijn", "meranti", "opmaak", "tabel", "noot", "verf", "glas", "deur",
        ];
        let mut x = seed;
        let mut out = Vec::with_capacity(n + 10);
        while out.len() < n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            out.extend_from_slice(list[(x >> 61) as usize].as_bytes());
            out.extend_from_slice(format!(" {} ", x >> 50).as_bytes());
        }
        out.truncate(n);
        out
    }

    /// The rows under keys starting with `k` in `table`, and their lengths.
    fn rows_in(store: &Store, table: Table, k: &[u8]) -> Vec<(Vec<u8>, usize)> {
        store
            .read(|tx| {
                Ok::<_, StoreError>(
                    tx.scan_keys(table, k, usize::MAX)?
                        .into_iter()
                        .map(|key| {
                            let len = tx.get_raw(table, &key).unwrap().unwrap().len();
                            (key, len)
                        })
                        .collect(),
                )
            })
            .unwrap()
    }

    /// Extracted text keeps its values under their own keys.
    fn rows_of(store: &Store, k: &[u8]) -> Vec<(Vec<u8>, usize)> {
        rows_in(store, KB_TEXT, k)
    }

    #[test]
    fn long_values_are_kept_in_parts_and_come_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let noise: Vec<u8> = (0..20_000).map(|_| rand::random::<u8>()).collect();
        let cases = [
            words(40_000, 1),
            noise,
            words(500, 2),
            words(3_000, 3),
            Vec::new(),
        ];
        store
            .write(|tx| {
                for (i, bytes) in cases.iter().enumerate() {
                    tx.put_blob(KB_TEXT, &key::id(i as u64), bytes)?;
                }
                Ok::<_, StoreError>(())
            })
            .unwrap();
        for (i, bytes) in cases.iter().enumerate() {
            let k = key::id(i as u64);
            let back = store.read(|tx| tx.get_blob(KB_TEXT, &k)).unwrap();
            assert_eq!(back.as_deref(), Some(bytes.as_slice()), "case {i}");
            let rows = rows_of(&store, &k);
            // Every row fits a quarter of a page; only what is longer than a part is split.
            assert!(rows.iter().all(|(_, len)| *len <= PART + HEAD), "{rows:?}");
            let stored = encode(bytes).len();
            assert_eq!(rows.len(), stored.div_ceil(PART), "case {i}");
            for (n, (key, _)) in rows.iter().enumerate().skip(1) {
                assert_eq!(key, &part_key(&k, n as u32));
            }
        }
        assert_eq!(
            store.read(|tx| tx.get_blob(KB_TEXT, b"absent")).unwrap(),
            None
        );
    }

    #[test]
    fn replacing_or_removing_a_value_leaves_none_of_its_parts() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (a, b) = (key::id(1), key::id(2));
        let long = words(30_000, 4);
        store
            .write(|tx| {
                tx.put_blob(KB_TEXT, &a, &long)?;
                tx.put_blob(KB_TEXT, &b, &long)
            })
            .unwrap();
        let parts = rows_of(&store, &a).len();
        assert!(parts > 3, "{parts}");
        // Shorter now: one row, none of the old parts left over.
        store.write(|tx| tx.put_blob(KB_TEXT, &a, b"kort")).unwrap();
        assert_eq!(rows_of(&store, &a).len(), 1);
        assert_eq!(
            store.read(|tx| tx.get_blob(KB_TEXT, &a)).unwrap().unwrap(),
            b"kort"
        );
        store.write(|tx| tx.put_blob(KB_TEXT, &a, &long)).unwrap();
        assert!(store.write(|tx| tx.delete_blob(KB_TEXT, &a)).unwrap());
        assert!(!store.write(|tx| tx.delete_blob(KB_TEXT, &a)).unwrap());
        assert!(rows_of(&store, &a).is_empty());
        // The neighbour is whole.
        assert_eq!(rows_of(&store, &b).len(), parts);
        assert_eq!(
            store.read(|tx| tx.get_blob(KB_TEXT, &b)).unwrap().unwrap(),
            long
        );
        assert_eq!(store.read(|tx| tx.count(KB_CONTENT)).unwrap(), 0);
    }

    #[test]
    fn damaged_parts_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let k = key::id(7);
        let long: Vec<u8> = (0..5_000).map(|_| rand::random::<u8>()).collect();
        let put = |f: &dyn Fn(&mut crate::store::WriteTx) -> Result<(), StoreError>| {
            store
                .write(|tx| {
                    tx.delete_blob(KB_TEXT, &k)?;
                    tx.put_blob(KB_TEXT, &k, &long)?;
                    f(tx)
                })
                .unwrap();
            store.read(|tx| tx.get_blob(KB_TEXT, &k))
        };
        assert_eq!(put(&|_| Ok(())).unwrap().unwrap(), long);
        let head =
            |tx: &crate::store::WriteTx| tx.get_raw(KB_TEXT, &k).map(Option::unwrap_or_default);
        type Damage<'a> = Box<dyn Fn(&mut crate::store::WriteTx) -> Result<(), StoreError> + 'a>;
        let damaged: Vec<Damage<'_>> = vec![
            // A part gone.
            Box::new(|tx| tx.delete(KB_TEXT, &part_key(&k, 2)).map(drop)),
            // The last part gone.
            Box::new(|tx| tx.delete(KB_TEXT, &part_key(&k, 5)).map(drop)),
            // A part longer than the head says.
            Box::new(|tx| tx.put_raw(KB_TEXT, &part_key(&k, 1), &[1; 1_200])),
            // A part shorter.
            Box::new(|tx| tx.put_raw(KB_TEXT, &part_key(&k, 3), &[1; 10])),
            // The head cut short, claiming more parts, claiming a huge length.
            Box::new(|tx| tx.put_raw(KB_TEXT, &k, &[PARTS, 9, 0])),
            Box::new(move |tx| {
                let mut h = head(tx)?;
                h[1] = 200;
                tx.put_raw(KB_TEXT, &k, &h)
            }),
            Box::new(move |tx| {
                let mut h = head(tx)?;
                h[5..13].copy_from_slice(&u64::MAX.to_le_bytes());
                tx.put_raw(KB_TEXT, &k, &h)
            }),
        ];
        for (i, damage) in damaged.iter().enumerate() {
            assert!(put(damage.as_ref()).is_err(), "damage {i}");
        }
    }

    #[test]
    fn a_value_written_in_one_piece_reads_and_compaction_splits_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (k, long, short) = (key::id(3), words(20_000, 5), words(100, 6));
        // As kennis wrote content before parts existed.
        store
            .write(|tx| {
                tx.put_raw(KB_CONTENT, &k, &encode(&long))?;
                tx.put_raw(KB_CONTENT, &key::id(4), &encode(&short))
            })
            .unwrap();
        assert_eq!(rows_in(&store, KB_CONTENT, &k).len(), 1);
        let read = |k: &[u8]| {
            store
                .read(|tx| tx.get_blob(KB_CONTENT, k))
                .unwrap()
                .unwrap()
        };
        assert_eq!(read(&k), long);
        store.compact(std::time::Duration::from_secs(1)).unwrap();
        assert_eq!(
            rows_in(&store, KB_CONTENT, &k).len(),
            encode(&long).len().div_ceil(PART)
        );
        assert_eq!(read(&k), long);
        assert_eq!(read(&key::id(4)), short);
        // A second compaction copies the parts as they are.
        store.compact(std::time::Duration::from_secs(1)).unwrap();
        assert_eq!(read(&k), long);
        assert_eq!(
            rows_in(&store, KB_CONTENT, &k).len(),
            encode(&long).len().div_ceil(PART)
        );
    }

    /// Where content under `k` is kept: the number its location names.
    fn located(store: &Store, k: &[u8]) -> [u8; 8] {
        let here = store.read(|tx| tx.get_raw(KB_CONTENT, k)).unwrap().unwrap();
        assert_eq!(here.len(), 9, "{here:?}");
        assert_eq!(here[0], AT);
        location(&here).unwrap()
    }

    #[test]
    fn content_is_kept_in_write_order_and_found_by_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // Keys as random as hashes; some values long enough for parts, one empty.
        let values: Vec<(Vec<u8>, Vec<u8>)> = (0..300u64)
            .map(|i| {
                let k = blake3::hash(&i.to_le_bytes()).as_bytes().to_vec();
                let n = [0, 40, 900, 2_500, 9_000][i as usize % 5];
                (k, words(n, i))
            })
            .collect();
        for batch in values.chunks(37) {
            store
                .write(|tx| {
                    batch
                        .iter()
                        .try_for_each(|(k, v)| tx.put_blob(KB_CONTENT, k, v))
                })
                .unwrap();
        }
        let content = |k: &[u8]| store.read(|tx| tx.get_blob(KB_CONTENT, k)).unwrap();
        // The numbers count up in write order, whatever the hashes are.
        let at: Vec<u64> = values
            .iter()
            .map(|(k, _)| u64::from_be_bytes(located(&store, k)))
            .collect();
        assert_eq!(at, (1..=300).collect::<Vec<_>>());
        let mut rows = 0;
        for (k, v) in &values {
            let here = located(&store, k);
            assert_eq!(content(k).as_ref(), Some(v));
            let kept = rows_in(&store, KB_CONTENT_DATA, &here);
            assert_eq!(
                kept.len(),
                encode(v).len().div_ceil(PART).max(1),
                "{kept:?}"
            );
            assert!(kept.iter().all(|(_, len)| *len <= PART + HEAD), "{kept:?}");
            rows += kept.len();
        }
        assert_eq!(store.read(|tx| tx.count(KB_CONTENT)).unwrap(), 300);
        assert_eq!(
            store.read(|tx| tx.count(KB_CONTENT_DATA)).unwrap(),
            rows as u64
        );

        // Replaced: the old rows go, the new ones come last.
        let (k, _) = &values[3];
        let old = located(&store, k);
        store
            .write(|tx| tx.put_blob(KB_CONTENT, k, &words(5_000, 99)))
            .unwrap();
        assert!(rows_in(&store, KB_CONTENT_DATA, &old).is_empty());
        assert_eq!(u64::from_be_bytes(located(&store, k)), 301);
        assert_eq!(content(k), Some(words(5_000, 99)));
        // Removed: its location and every row.
        let here = located(&store, k);
        assert!(store.write(|tx| tx.delete_blob(KB_CONTENT, k)).unwrap());
        assert!(!store.write(|tx| tx.delete_blob(KB_CONTENT, k)).unwrap());
        assert!(rows_in(&store, KB_CONTENT_DATA, &here).is_empty());
        assert_eq!(content(k), None);
        // The neighbours are whole.
        for (k, v) in values.iter().skip(4).take(5) {
            assert_eq!(content(k).as_ref(), Some(v));
        }
    }

    #[test]
    fn content_kept_under_its_hash_before_goes_whole_when_replaced_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let long: Vec<u8> = (0..5_000).map(|_| rand::random::<u8>()).collect();
        // As kennis kept content before it was located: a head and its parts under the hash.
        let old = |k: &[u8]| {
            store
                .write(|tx| {
                    let stored = encode(&long);
                    for (i, row) in split(&stored)?.iter().enumerate() {
                        let key = if i == 0 {
                            k.to_vec()
                        } else {
                            part_key(k, i as u32)
                        };
                        tx.put_raw(KB_CONTENT, &key, row)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .unwrap();
            assert!(rows_in(&store, KB_CONTENT, k).len() > 3);
        };
        let (a, b) = (key::id(1), key::id(2));
        old(&a);
        old(&b);
        // Replaced: located now, none of its old parts left.
        store
            .write(|tx| tx.put_blob(KB_CONTENT, &a, b"nieuw"))
            .unwrap();
        assert_eq!(rows_in(&store, KB_CONTENT, &a).len(), 1);
        located(&store, &a);
        // Removed: head and parts.
        assert!(store.write(|tx| tx.delete_blob(KB_CONTENT, &b)).unwrap());
        assert!(rows_in(&store, KB_CONTENT, &b).is_empty());
        assert_eq!(
            store
                .read(|tx| tx.get_blob(KB_CONTENT, &a))
                .unwrap()
                .unwrap(),
            b"nieuw"
        );
    }

    #[test]
    fn content_written_in_batches_fills_its_pages() {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // As an import writes it: documents of a few KB under random hashes, in batches.
        for batch in 0..20u64 {
            store
                .write(|tx| {
                    (0..100u64).try_for_each(|i| {
                        let n = batch * 100 + i;
                        let k = blake3::hash(&n.to_le_bytes());
                        let v = words(1_000 + (n as usize * 37) % 4_000, n);
                        tx.put_blob(KB_CONTENT, k.as_bytes(), &v)?;
                        // The same kept under the hashes themselves, to compare.
                        tx.put_blob(KB_TEXT, k.as_bytes(), &v)
                    })
                })
                .unwrap();
        }
        let db = store.db();
        let txn = db.begin_read().unwrap();
        let filled = |table| {
            let stats = txn.open_table(table).unwrap().stats().unwrap();
            stats.stored_bytes() as f64 / (stats.leaf_pages() * 4096) as f64
        };
        let (in_order, by_hash) = (filled(KB_CONTENT_DATA), filled(KB_TEXT));
        assert!(in_order > 0.85, "{in_order:.2}");
        // Keyed by the hashes themselves, pages end about two thirds full.
        assert!(by_hash < 0.8, "{by_hash:.2}");
    }

    #[test]
    fn damaged_locations_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (k, other) = (key::id(1), key::id(2));
        let long: Vec<u8> = (0..5_000).map(|_| rand::random::<u8>()).collect();
        store
            .write(|tx| {
                tx.put_blob(KB_CONTENT, &k, &long)?;
                tx.put_blob(KB_CONTENT, &other, b"ander")
            })
            .unwrap();
        let here = located(&store, &k);
        let read = || store.read(|tx| tx.get_blob(KB_CONTENT, &k));
        assert_eq!(read().unwrap().unwrap(), long);
        let mut nowhere = [AT; 9];
        nowhere[1..].copy_from_slice(&77u64.to_be_bytes());
        let mut to_location = [AT; 9];
        to_location[1..].copy_from_slice(&9u64.to_be_bytes());
        for damage in [
            // Pointing where nothing is.
            nowhere.to_vec(),
            // Cut short.
            vec![AT, 0, 0, 1],
            // Pointing at a location.
            to_location.to_vec(),
        ] {
            store
                .write(|tx| {
                    tx.put_raw(KB_CONTENT_DATA, &9u64.to_be_bytes(), &nowhere)?;
                    tx.put_raw(KB_CONTENT, &k, &damage)
                })
                .unwrap();
            assert!(read().is_err(), "{damage:?}");
        }
        // A part of the rows gone.
        store
            .write(|tx| {
                let mut back = [AT; 9];
                back[1..].copy_from_slice(&here);
                tx.put_raw(KB_CONTENT, &k, &back)?;
                tx.delete(KB_CONTENT_DATA, &part_key(&here, 2)).map(drop)
            })
            .unwrap();
        assert!(read().is_err());
        assert_eq!(
            store
                .read(|tx| tx.get_blob(KB_CONTENT, &other))
                .unwrap()
                .unwrap(),
            b"ander"
        );
    }
}
