//! How records are kept: serde JSON, as every code path reads and writes them — stored
//! compressed when that is smaller. A compressed record is one byte [`COMPACT_V1`] and a zstd
//! frame made with [`DICTIONARY_V1`], a dictionary of what records look like (field names,
//! the usual values, written here, never taken from anyone's data), so even a record of a
//! hundred bytes shrinks: most of a run's or an audit record's bytes are its field names,
//! timestamps and repeated text. A plain JSON value never starts with that byte, so records
//! written before (or too small to gain) are read as they are.
//!
//! The dictionary is part of the format: records compressed with it can only be read with it,
//! byte for byte. A better one would get its own first byte, beside this one.

use std::borrow::Cow;
use std::sync::{LazyLock, Mutex, PoisonError};

use zstd::bulk::{Compressor, Decompressor};
use zstd::dict::{DecoderDictionary, EncoderDictionary};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{StoreError, Table};

/// First byte of a record compressed with [`DICTIONARY_V1`].
pub const COMPACT_V1: u8 = 0x01;

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

// The dictionary is digested once (loading it costs more than a record costs to compress);
// contexts referring to it are kept in small pools rather than one per thread, as the runtime's
// blocking pool may run hundreds of threads, each of which would keep its own.
static ENCODER_DICTIONARY: LazyLock<EncoderDictionary<'static>> =
    LazyLock::new(|| EncoderDictionary::copy(DICTIONARY_V1.as_bytes(), LEVEL));
static DECODER_DICTIONARY: LazyLock<DecoderDictionary<'static>> =
    LazyLock::new(|| DecoderDictionary::copy(DICTIONARY_V1.as_bytes()));
static COMPRESSORS: Mutex<Vec<Compressor<'static>>> = Mutex::new(Vec::new());
static DECOMPRESSORS: Mutex<Vec<Decompressor<'static>>> = Mutex::new(Vec::new());
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
        || Compressor::with_prepared_dictionary(&ENCODER_DICTIONARY),
        |c| c.compress(&json),
    )
    .ok()
    .and_then(Result::ok);
    match frame {
        Some(frame) if frame.len() + 1 < json.len() => {
            let mut out = Vec::with_capacity(frame.len() + 1);
            out.push(COMPACT_V1);
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

/// The JSON a stored record holds.
pub fn json(stored: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let Some((&COMPACT_V1, frame)) = stored.split_first() else {
        return Ok(Cow::Borrowed(stored));
    };
    let len = zstd::zstd_safe::get_frame_content_size(frame)
        .ok()
        .flatten()
        .filter(|&n| n <= MAX_RECORD)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("a compressed record claims an impossible length")?;
    let out = pooled(
        &DECOMPRESSORS,
        || Decompressor::with_prepared_dictionary(&DECODER_DICTIONARY),
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
    const MAGIC: [u8; 5] = [COMPACT_V1, 0x28, 0xb5, 0x2f, 0xfd];
    let mut out = bytes.to_vec();
    let mut from = 0;
    while let Some(at) = bytes
        .get(from..)
        .and_then(|rest| memchr::memmem::find(rest, &MAGIC))
    {
        let start = from + at;
        let frame = bytes.get(start + 1..).unwrap_or_default();
        if let Some(json) = read_frame(frame) {
            out.push(b'\n');
            out.extend_from_slice(&json);
        }
        from = start + 1;
    }
    out
}

/// One frame at the start of `bytes` (which may go on after it), decompressed.
fn read_frame(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let len = zstd::zstd_safe::get_frame_content_size(bytes)
        .ok()
        .flatten()
        .filter(|&n| n <= MAX_RECORD)?;
    let decoder =
        zstd::stream::read::Decoder::with_dictionary(bytes, DICTIONARY_V1.as_bytes()).ok()?;
    let mut decoder = decoder.single_frame();
    let mut out = Vec::new();
    decoder.by_ref().take(len).read_to_end(&mut out).ok()?;
    Some(out)
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
        assert_eq!(stored[0], COMPACT_V1);
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
        for bad in [
            &[COMPACT_V1][..],
            &[COMPACT_V1, 1, 2, 3][..],
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
        let expanded = expand(&file);
        assert!(expanded.starts_with(&file));
        // Field names come from the dictionary, so the JSON around a value is not in the file.
        let needle = br#""status":"succeeded","result":"Klaar"#;
        assert!(!file.windows(needle.len()).any(|w| w == needle));
        assert!(expanded.windows(needle.len()).any(|w| w == needle));
    }
}
