//! How records are kept: serde JSON, as every code path reads and writes them — stored
//! compressed when that is smaller. A compressed record is one byte [`COMPACT_V2`] and a zstd
//! frame made with [`DICTIONARY_V2`], a dictionary of what records look like (field names,
//! the usual values, written here, never taken from anyone's data), so even a record of a
//! hundred bytes shrinks: most of a run's or an audit record's bytes are its field names,
//! timestamps and repeated text. A plain JSON value never starts with either first byte, so
//! records written before (or too small to gain) are read as they are.
//!
//! A dictionary is part of the format: records compressed with it can only be read with it,
//! byte for byte. [`DICTIONARY_V1`] (first byte [`COMPACT_V1`]) was only content, so each
//! frame carried its own Huffman and FSE tables, and building them was half of what
//! compressing a run's record cost on the single writer's thread; [`DICTIONARY_V2`] is the
//! same content with tables made from synthetic records (stop 53): a run's record compresses
//! in about a third of the time, a sixth smaller. Records written with the first are read as
//! they are and kept so (`kennis compact` copies them unchanged).

use std::borrow::Cow;
use std::sync::{LazyLock, Mutex, PoisonError};

use zstd::bulk::{Compressor, Decompressor};
use zstd::dict::{DecoderDictionary, EncoderDictionary};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{StoreError, Table};

/// First byte of a record compressed with [`DICTIONARY_V1`] (written until stop 53, read still).
pub const COMPACT_V1: u8 = 0x01;
/// First byte of a record compressed with [`DICTIONARY_V2`].
pub const COMPACT_V2: u8 = 0x02;

/// Shorter JSON is kept as it is (`true`, ids, small keys' values): a frame would not pay.
const MIN_COMPRESSED: usize = 48;
/// zstd's level: records are small, and 1 compresses them as well as 3, faster.
const LEVEL: i32 = 1;
/// No record is this large (transcripts and conversations are capped far below); a frame
/// that claims more is damage.
const MAX_RECORD: u64 = 256 << 20;

/// What records look like, most used last (the nearest bytes are the cheapest to refer to).
/// Never change it: add `DICTIONARY_V2` with its own first byte instead.
pub const DICTIONARY_V1: &str = concat!(
    r#"{"id":1,"name":"","slug":"","connector_access":"all_members","require_second_factor":true,"personal_tokens":"allow","created_at":"2026-01-01T00:00:00.000000000Z"}"#,
    r#"{"id":1,"email":"","name":null,"password_hash":"$argon2id$v=19$m=19456,t=2,p=1$","totp":null,"accepted_terms":null,"language":null,"disabled":false,"created_at":""}"#,
    r#"{"org_id":1,"person_id":1,"role":"admin","connector":true,"role":"member","created_at":""}"#,
    r#"{"id":1,"org_id":1,"person_id":1,"client_id":"","scopes":["kennisbank"],"resource":"","created_at":"","revoked_at":null,"expires_at":"","grant_id":1,"kind":"access","token_id":1}"#,
    r#"{"id":1,"org_id":1,"name":"","kind":"generic","executor":{"exec":"echo"},"timeout_secs":60,"rollout":"ready","created_at":""}"#,
    r#"{"id":"","org_id":1,"name":"","instructions":"","agent_id":1,"project_id":1,"cooldown_secs":0,"secret_hash":"","paused":false,"deleted":false,"created_at":"","updated_at":"","callback_url":null}"#,
    r#"{"run_id":1,"url":"","webhook_id":"","state":"pending","attempts":[],"status":200,"error":null}"#,
    r#"{"entries":[{"at":"","elapsed_ms":0,"type":"model","type":"tool","tool":"kennisbank_search","arguments":{},"type":"event","event":{"type":"text","type":"result","text":""}},{"at":"","elapsed_ms":0,"type":"end","status":"succeeded","note":""}],"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"tool_calls":0,"dropped":0}"#,
    r#"{"id":1,"org_id":1,"kind":"feature_request","kind":"run","agent_id":1,"trigger_id":null,"event_key":null,"instructions":"","status":"queued","status":"running","status":"failed","status":"succeeded","result":null,"created_at":"","updated_at":"","attempts":0,"started_at":null,"app_id":null,"title":"","description":"","author_id":null,"conversation":[],"questions":[],"answers":[],"job":null,"redispatch":false,"settings":{}}"#,
    r#"{"run_id":1,"started_at":"2026-01-01T00:00:00.000000000Z"}"#,
    r#"{"at":"2026-01-01T00:00:00.000000000Z","org_id":1,"person_id":0,"grant_id":0,"agent_id":1,"run_id":1,"tool":"admin","target":null,"outcome":"refused","outcome":"error","error":null,"duration_ms":0.0,"actor":"operator","action":""}"#,
    r#"{"at":"2026-01-01T00:00:00.000000000Z","org_id":1,"person_id":1,"grant_id":1,"tool":"kennisbank_search","tool":"kennisbank_write","tool":"kennisbank_list","tool":"kennisbank_read","target":"","outcome":"ok","error":null,"duration_ms":0.0}"#,
    r#"{"org_id":1,"path":""}"#,
    r#"{"version":1,"size":0,"hash":"","created_at":"2026-01-01T00:00:00.000000000Z","created_by":null}"#,
    r#"{"org_id":1,"path":"","version":1,"size":0,"hash":"","kind":"binary","kind":"text","content_type":"text/plain; charset=utf-8","content_type":"text/markdown; charset=utf-8","updated_at":"2026-01-01T00:00:00.000000000Z","updated_by":null}"#,
);

/// [`DICTIONARY_V1`]'s content behind zstd's dictionary header: its ID (2) and entropy
/// tables for literals, offsets and lengths, made by `ZDICT_finalizeDictionary` at level 1
/// from synthetic records (the recipe is a test: `the_second_dictionary_is_its_recipe`).
/// Never change it: add `DICTIONARY_V3` with its own first byte instead.
pub const DICTIONARY_V2: &[u8] = include_bytes!("dictionary_v2.zstd");

// A dictionary is digested once (loading it costs more than a record costs to compress);
// contexts referring to it are kept in small pools rather than one per thread, as the runtime's
// blocking pool may run hundreds of threads, each of which would keep its own.
static ENCODER_DICTIONARY: LazyLock<EncoderDictionary<'static>> =
    LazyLock::new(|| EncoderDictionary::copy(DICTIONARY_V2, LEVEL));
static DECODER_V1: LazyLock<DecoderDictionary<'static>> =
    LazyLock::new(|| DecoderDictionary::copy(DICTIONARY_V1.as_bytes()));
static DECODER_V2: LazyLock<DecoderDictionary<'static>> =
    LazyLock::new(|| DecoderDictionary::copy(DICTIONARY_V2));
static COMPRESSORS: Mutex<Vec<Compressor<'static>>> = Mutex::new(Vec::new());
static DECOMPRESSORS_V1: Mutex<Vec<Decompressor<'static>>> = Mutex::new(Vec::new());
static DECOMPRESSORS_V2: Mutex<Vec<Decompressor<'static>>> = Mutex::new(Vec::new());
/// Idle contexts kept per pool.
const POOLED: usize = 8;

/// Runs `f` with a context from `pool` (or a new one from `make`), then gives it back.
fn pooled<C, T>(
    pool: &Mutex<Vec<C>>,
    make: impl FnOnce() -> std::io::Result<C>,
    f: impl FnOnce(&mut C) -> T,
) -> std::io::Result<T> {
    let idle = pool.lock().unwrap_or_else(PoisonError::into_inner).pop();
    let mut context = match idle {
        Some(c) => c,
        None => make()?,
    };
    let out = f(&mut context);
    let mut pool = pool.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.len() < POOLED {
        pool.push(context);
    }
    Ok(out)
}

/// The stored form of JSON `json`: compressed when that is smaller, else as it is.
pub fn compact(json: Vec<u8>) -> Vec<u8> {
    if json.len() < MIN_COMPRESSED {
        return json;
    }
    let frame = pooled(
        &COMPRESSORS,
        || {
            let mut c = Compressor::with_prepared_dictionary(&ENCODER_DICTIONARY)?;
            // The first byte says which dictionary; the frame need not repeat its ID.
            c.set_parameter(zstd::stream::raw::CParameter::DictIdFlag(false))?;
            Ok(c)
        },
        |c| c.compress(&json),
    )
    .ok()
    .and_then(Result::ok);
    match frame {
        Some(frame) if frame.len() + 1 < json.len() => {
            let mut out = Vec::with_capacity(frame.len() + 1);
            out.push(COMPACT_V2);
            out.extend_from_slice(&frame);
            out
        }
        _ => json,
    }
}

/// The stored form of a record.
pub fn encode<R: Serialize>(record: &R) -> Vec<u8> {
    // Serialising plain data (strings, numbers, maps with string keys) cannot fail.
    compact(serde_json::to_vec(record).unwrap_or_default())
}

/// Whether `stored` is a compressed record (of either dictionary), not plain JSON.
pub fn is_compact(stored: &[u8]) -> bool {
    matches!(stored.first(), Some(&(COMPACT_V1 | COMPACT_V2)))
}

/// The JSON a stored record holds.
pub fn json(stored: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let (pool, dictionary, frame) = match stored.split_first() {
        Some((&COMPACT_V2, frame)) => (&DECOMPRESSORS_V2, &*DECODER_V2, frame),
        Some((&COMPACT_V1, frame)) => (&DECOMPRESSORS_V1, &*DECODER_V1, frame),
        _ => return Ok(Cow::Borrowed(stored)),
    };
    let len = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|&n| n <= MAX_RECORD)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("a compressed record claims an impossible length")?;
    let out = pooled(
        pool,
        || Decompressor::with_prepared_dictionary(dictionary),
        |d| d.decompress(frame, len),
    )
    .and_then(|r| r)
    .map_err(|e| format!("a compressed record cannot be read: {e}"))?;
    if out.len() != len {
        return Err("a compressed record has the wrong length".into());
    }
    Ok(Cow::Owned(out))
}

/// A stored record, read.
pub fn decode<R: DeserializeOwned>(table: &Table, stored: &[u8]) -> Result<R, StoreError> {
    decode_measured(table, stored).map(|(record, _)| record)
}

/// [`decode`], and the length of the record's JSON (what it holds, however well it compressed).
pub fn decode_measured<R: DeserializeOwned>(
    table: &Table,
    stored: &[u8],
) -> Result<(R, usize), StoreError> {
    let corrupt = |message: String| StoreError::Corrupt {
        table: redb::TableHandle::name(table).to_owned(),
        message,
    };
    let json = json(stored).map_err(corrupt)?;
    let record = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
    Ok((record, json.len()))
}

/// `bytes` (a file of the data directory, say) followed by the JSON of every compressed
/// record found in it — so a test or an operator looking for a string in the files sees what
/// the records hold, as they did when records were plain JSON.
pub fn expand(bytes: &[u8]) -> Vec<u8> {
    const FRAME: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    let mut out = bytes.to_vec();
    let mut from = 0;
    while let Some(at) = bytes
        .get(from..)
        .and_then(|rest| memchr::memmem::find(rest, &FRAME))
    {
        let start = from + at;
        let dictionary = match start.checked_sub(1).and_then(|i| bytes.get(i)) {
            Some(&COMPACT_V1) => Some(DICTIONARY_V1.as_bytes()),
            Some(&COMPACT_V2) => Some(DICTIONARY_V2),
            _ => None,
        };
        if let Some(json) = dictionary.and_then(|d| read_frame(bytes.get(start..)?, d)) {
            out.push(b'\n');
            out.extend_from_slice(&json);
        }
        from = start + 1;
    }
    out
}

/// One frame at the start of `bytes` (which may go on after it), decompressed.
fn read_frame(bytes: &[u8], dictionary: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let len = zstd::zstd_safe::get_frame_content_size(bytes)
        .ok()
        .flatten()
        .filter(|&n| n <= MAX_RECORD)?;
    let decoder = zstd::stream::read::Decoder::with_dictionary(bytes, dictionary).ok()?;
    let mut decoder = decoder.single_frame();
    let mut out = Vec::new();
    decoder.by_ref().take(len).read_to_end(&mut out).ok()?;
    Some(out)
}

/// A record as kennis stored it until stop 53: compressed with the first dictionary.
#[cfg(test)]
pub(crate) fn written_with_v1<R: Serialize>(record: &R) -> Vec<u8> {
    let json = serde_json::to_vec(record).unwrap_or_default();
    let mut out = vec![COMPACT_V1];
    if let Ok(frame) = Compressor::with_dictionary(LEVEL, DICTIONARY_V1.as_bytes())
        .and_then(|mut c| c.compress(&json))
    {
        out.extend(frame);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Run {
        id: u64,
        org_id: u64,
        status: String,
        result: Option<String>,
        created_at: String,
    }

    const T: Table = Table::new("t");

    fn run() -> Run {
        Run {
            id: 42,
            org_id: 7,
            status: "succeeded".into(),
            result: Some("Klaar: de kozijnen zijn geschilderd.".into()),
            created_at: "2026-11-26T17:14:04.463159678Z".into(),
        }
    }

    #[test]
    fn records_are_compressed_and_read_back() {
        let stored = encode(&run());
        let plain = serde_json::to_vec(&run()).unwrap();
        assert_eq!(stored[0], COMPACT_V2);
        assert!(
            stored.len() < plain.len() * 3 / 4,
            "{} of {}",
            stored.len(),
            plain.len()
        );
        assert_eq!(decode::<Run>(&T, &stored).unwrap(), run());
        assert_eq!(json(&stored).unwrap(), plain.as_slice());
    }

    #[test]
    fn plain_json_and_small_values_are_read_as_they_are() {
        let plain = serde_json::to_vec(&run()).unwrap();
        assert_eq!(decode::<Run>(&T, &plain).unwrap(), run());
        assert_eq!(encode(&true), b"true");
        assert_eq!(encode(&17u64), b"17");
        assert!(decode::<bool>(&T, b"true").unwrap());
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let good = encode(&run());
        let mut wrong = good.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 0xff;
        let v1 = written_with_v1(&run());
        let mut wrong_v1 = v1.clone();
        let last = wrong_v1.len() - 1;
        wrong_v1[last] ^= 0xff;
        // A frame of the one dictionary read with the other.
        let mut swapped = good.clone();
        swapped[0] = COMPACT_V1;
        for bad in [
            &[COMPACT_V1][..],
            &[COMPACT_V1, 1, 2, 3][..],
            &[COMPACT_V2][..],
            &[COMPACT_V2, 1, 2, 3][..],
            &v1[..v1.len() - 4],
            &wrong_v1[..],
            &swapped[..],
            &good[..good.len() - 4],
            &wrong[..],
        ] {
            assert!(decode::<Run>(&T, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn files_are_expanded_with_their_records() {
        let mut file = b"page header".to_vec();
        file.extend(encode(&run()));
        file.extend(b"more bytes");
        let mut older = run();
        older.status = "queued".into();
        file.extend(written_with_v1(&older));
        let expanded = expand(&file);
        assert!(expanded.starts_with(&file));
        // Field names come from the dictionary, so the JSON around a value is not in the file.
        for needle in [
            &br#""status":"succeeded","result":"Klaar"#[..],
            &br#""status":"queued","result":"Klaar"#[..],
        ] {
            assert!(!file.windows(needle.len()).any(|w| w == needle));
            assert!(expanded.windows(needle.len()).any(|w| w == needle));
        }
    }

    #[test]
    fn records_written_with_the_first_dictionary_are_read_and_stay_as_they_are() {
        let v1 = written_with_v1(&run());
        assert_eq!(decode::<Run>(&T, &v1).unwrap(), run());
        assert!(is_compact(&v1) && is_compact(&encode(&run())));
        assert!(!is_compact(&serde_json::to_vec(&run()).unwrap()));
        // The second is smaller for the same record.
        assert!(encode(&run()).len() < v1.len());
    }

    /// Synthetic records the second dictionary's tables were made from: each entry of the
    /// first dictionary, its numbers, timestamps and empty strings filled in a few hundred
    /// ways. Nobody's data.
    fn samples() -> Vec<Vec<u8>> {
        let words = [
            "kozijn",
            "verf",
            "offerte",
            "planning",
            "Benchmark",
            "onderhoud",
            "ok",
            "klaar",
            "map/notitie.md",
            "run-17",
            "echo",
            "dakgoot",
            "Jansen",
            "nl",
        ];
        let entries: Vec<&str> = DICTIONARY_V1.split_inclusive("}{").collect();
        let mut out = Vec::new();
        for i in 0..200u64 {
            for (e, entry) in entries.iter().enumerate() {
                let mut text = entry.trim_end_matches('{').to_owned();
                if !text.starts_with('{') {
                    text.insert(0, '{');
                }
                let n = i * 7919 + e as u64 * 104_729;
                let stamp = format!(
                    "2026-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
                    1 + n % 12,
                    1 + n % 28,
                    n % 24,
                    n % 60,
                    (n / 7) % 60,
                    n % 1_000_000_000
                );
                text = text
                    .replace("2026-01-01T00:00:00.000000000Z", &stamp)
                    .replace("\"\"", &format!("\"{}\"", words[(n % 14) as usize]))
                    .replace(":1,", &format!(":{},", 1 + n % 100_000))
                    .replace(":1}", &format!(":{}}}", 1 + n % 1000))
                    .replace(":0,", &format!(":{},", n % 50))
                    .replace(":0.0", &format!(":{}.{}", n % 9, n % 1000));
                out.push(text.into_bytes());
            }
        }
        out
    }

    /// How [`DICTIONARY_V2`] was made; it must stay these bytes. `KENNIS_WRITE_DICTIONARY_V2=1`
    /// writes the file instead (done once, at stop 53).
    #[test]
    fn the_second_dictionary_is_its_recipe() {
        let samples = samples();
        let flat: Vec<u8> = samples.concat();
        let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
        let mut made = vec![0u8; DICTIONARY_V1.len() + 4096];
        let params = zstd_sys::ZDICT_params_t {
            compressionLevel: LEVEL,
            notificationLevel: 0,
            dictID: 2,
        };
        // SAFETY: every pointer and length is of a live buffer of that length.
        let n = unsafe {
            zstd_sys::ZDICT_finalizeDictionary(
                made.as_mut_ptr().cast(),
                made.len(),
                DICTIONARY_V1.as_ptr().cast(),
                DICTIONARY_V1.len(),
                flat.as_ptr().cast(),
                sizes.as_ptr(),
                sizes.len() as u32,
                params,
            )
        };
        // SAFETY: a plain function of the returned code.
        assert_eq!(unsafe { zstd_sys::ZDICT_isError(n) }, 0, "{n}");
        made.truncate(n);
        if std::env::var_os("KENNIS_WRITE_DICTIONARY_V2").is_some() {
            std::fs::write("src/store/dictionary_v2.zstd", &made).unwrap();
        }
        assert_eq!(
            made, DICTIONARY_V2,
            "the recipe no longer makes DICTIONARY_V2"
        );
        // zstd's dictionary format: its magic, the ID, then the tables and the same content.
        assert_eq!(DICTIONARY_V2[..8], [0x37, 0xa4, 0x30, 0xec, 2, 0, 0, 0]);
        assert!(DICTIONARY_V2.ends_with(DICTIONARY_V1.as_bytes()));
    }
}
