//! Texts an import hands to the search index with the documents it stores, so that the index
//! takes them from memory instead of reading each back from the store and decompressing it
//! (about a twentieth of a 100 MB import's CPU, stop 47). Only a help: the index uses a text
//! when it is exactly the content of the document's current version (the same BLAKE3 hash,
//! made when the import prepared the bytes: [`Prepared`]) and reads from the store whatever
//! it was not handed. What is held is bounded ([`MAX_BYTES`]): an import that is more than
//! that ahead of the index waits for it ([`Handed::wait_for_room`]) rather than letting texts
//! go that the index would then read back (at 1 GB a quarter to a third of them were, stop 54),
//! and texts past the bound are not held, so an index far behind costs no memory.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::{DocKind, DocText, Document, Prepared, doc_key};

/// The most text held at once: a few of an import's batches.
pub const MAX_BYTES: usize = 64 << 20;

#[derive(Default)]
pub struct Handed {
    inner: Mutex<Inner>,
    /// Told when the index took texts and room was waited for.
    taken: Condvar,
}

#[derive(Default)]
struct Inner {
    /// By [`doc_key`]: the bytes and their hash.
    texts: HashMap<Vec<u8>, (blake3::Hash, Vec<u8>)>,
    bytes: usize,
    /// What each [`Handed::wait_for_room`] under way waits to fit, in bytes.
    wanted: Vec<usize>,
}

impl Handed {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Holding texts is only a help: whatever a panic left is as good as nothing.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds these documents' texts (organisation, normalised path, the content just stored)
    /// until the index takes them, as far as [`MAX_BYTES`] allows; returns how many it took.
    /// The bytes of a file whose name says it is binary (a PDF, an Office file) are no text
    /// the index could use, and are not held.
    pub fn hand(&self, texts: impl IntoIterator<Item = (u64, String, Prepared)>) -> usize {
        let mut inner = self.inner();
        let mut taken = 0;
        for (org_id, path, prepared) in texts {
            let (hash, bytes) = prepared.into_hashed();
            if inner.bytes + bytes.len() > MAX_BYTES || !holds(&path) {
                continue;
            }
            inner.bytes += bytes.len();
            if let Some((_, old)) = inner.texts.insert(doc_key(org_id, &path), (hash, bytes)) {
                inner.bytes -= old.len();
            }
            taken += 1;
        }
        taken
    }

    /// The text handed for this document and its hash, if any (it is held no longer).
    pub fn take(&self, org_id: u64, path: &str) -> Option<(blake3::Hash, Vec<u8>)> {
        let mut inner = self.inner();
        if inner.texts.is_empty() {
            return None;
        }
        let (hash, bytes) = inner.texts.remove(&doc_key(org_id, path))?;
        inner.bytes -= bytes.len();
        if inner.wanted.iter().any(|&w| inner.bytes + w <= MAX_BYTES) {
            self.taken.notify_all();
        }
        Some((hash, bytes))
    }

    /// [`hand`](Self::hand) once these texts fit beside those held, waiting for that as long
    /// as the index keeps taking them ([`wait_for_room`](Self::wait_for_room)); returns how
    /// many it took.
    pub fn hand_when_room(&self, texts: Vec<(u64, String, Prepared)>, patience: Duration) -> usize {
        let (count, bytes) = texts
            .iter()
            .filter(|(_, path, _)| holds(path))
            .fold((0, 0), |(n, b), (_, _, p)| (n + 1, b + p.bytes().len()));
        self.wait_for_room(bytes, patience);
        let taken = self.hand(texts);
        if taken < count {
            tracing::debug!(
                count,
                taken,
                "texts not held for the search index (it reads them back)"
            );
        }
        taken
    }

    /// Waits until `bytes` more fit beside what is held (all of the bound, when they are
    /// more), as long as the index keeps taking texts: when it takes none for `patience` (it is
    /// not following, or what is held is not what it follows) the wait ends all the same, and
    /// what is held is let go if they still do not fit (the index reads from the store what it
    /// was not handed). Whether the wait ended with room made by the index. Several may wait
    /// at once (imports through the admin socket beside one another), each for its own room.
    fn wait_for_room(&self, bytes: usize, patience: Duration) -> bool {
        // More than the bound never fits: an empty hold is as much room as there is.
        let bytes = bytes.min(MAX_BYTES);
        let mut inner = self.inner();
        if inner.bytes + bytes <= MAX_BYTES {
            return true;
        }
        inner.wanted.push(bytes);
        let fits = loop {
            let (next, waited) = self
                .taken
                .wait_timeout(inner, patience)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            inner = next;
            if inner.bytes + bytes <= MAX_BYTES {
                break true;
            }
            if waited.timed_out() {
                inner.texts = HashMap::new();
                inner.bytes = 0;
                // Room for every other wait too.
                self.taken.notify_all();
                break false;
            }
        };
        if let Some(i) = inner.wanted.iter().position(|&w| w == bytes) {
            inner.wanted.swap_remove(i);
        }
        fits
    }

    /// Lets go of every text not taken (an import that ended, or stopped).
    pub fn clear(&self) {
        let mut inner = self.inner();
        inner.texts = HashMap::new();
        inner.bytes = 0;
    }

    /// How many bytes are held.
    pub fn bytes(&self) -> usize {
        self.inner().bytes
    }
}

/// Whether a document's handed bytes are held: not those of a file whose name says it is
/// binary (a PDF, an Office file), which are no text the index could use.
fn holds(path: &str) -> bool {
    super::path::binary_type(path).is_none()
}

/// `bytes` (whose BLAKE3 hash is `hash`) as the text of `doc`, when they are the content of its
/// current version and it is a text document: what [`super::text_of`] would read from the store.
pub fn text_for(doc: &Document, (hash, bytes): (blake3::Hash, Vec<u8>)) -> Option<DocText> {
    if doc.kind != DocKind::Text || hash.to_hex().as_str() != doc.hash {
        return None;
    }
    Some(DocText {
        text: super::text_from_bytes(bytes),
        extracted: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Handed {
        /// Returns once `n` waits for room have begun (and not yet ended).
        fn until_waited_on(&self, n: usize) {
            while self.inner().wanted.len() < n {
                std::thread::yield_now();
            }
        }
    }

    /// `bytes` as an import prepares them (not compressed: not needed here).
    fn prepared(bytes: &[u8]) -> Prepared {
        Prepared {
            hash: blake3::hash(bytes),
            stored: None,
            bytes: bytes.to_vec(),
        }
    }

    fn hashed(bytes: &[u8]) -> (blake3::Hash, Vec<u8>) {
        (blake3::hash(bytes), bytes.to_vec())
    }

    fn doc(kind: DocKind, bytes: &[u8]) -> Document {
        Document {
            org_id: 1,
            path: "a.md".into(),
            version: 1,
            size: bytes.len() as u64,
            hash: blake3::hash(bytes).to_hex().to_string(),
            kind,
            content_type: "text/markdown".into(),
            updated_at: jiff::Timestamp::UNIX_EPOCH,
            updated_by: None,
        }
    }

    #[test]
    fn a_text_is_taken_once_and_only_as_far_as_the_bound_allows() {
        let handed = Handed::default();
        let big = vec![b'a'; MAX_BYTES / 2];
        assert_eq!(
            handed.hand([
                (1, "a.md".into(), prepared(&big)),
                (1, "b.md".into(), prepared(&big)),
                // Past the bound: not held.
                (1, "c.md".into(), prepared(b"c")),
            ]),
            2
        );
        handed.clear();
        // A binary file's bytes are not held, whatever they hold.
        assert_eq!(
            handed.hand([(1, "plaat.pdf".into(), prepared(b"kozijn"))]),
            0
        );
        assert_eq!((handed.bytes(), handed.take(1, "plaat.pdf")), (0, None));
        handed.hand([
            (1, "a.md".into(), prepared(&big)),
            (1, "b.md".into(), prepared(&big)),
        ]);
        assert_eq!(handed.bytes(), MAX_BYTES);
        assert_eq!(handed.take(1, "c.md"), None);
        // Per organisation: the same path elsewhere is another document.
        assert_eq!(handed.take(2, "a.md"), None);
        assert_eq!(
            handed.take(1, "a.md").map(|(_, b)| b.len()),
            Some(big.len())
        );
        assert_eq!(handed.take(1, "a.md"), None);
        assert_eq!(handed.bytes(), MAX_BYTES / 2);
        // Handed again for the same document: the newer text replaces the older.
        assert_eq!(handed.hand([(1, "b.md".into(), prepared(b"nieuw"))]), 1);
        assert_eq!(handed.bytes(), 5);
        assert_eq!(handed.take(1, "b.md"), Some(hashed(b"nieuw")));
        handed.hand([(1, "d.md".into(), prepared(b"over"))]);
        handed.clear();
        assert_eq!((handed.bytes(), handed.take(1, "d.md")), (0, None));
    }

    /// A hold that is full: `a.md` and `b.md`, half the bound each.
    fn full() -> Handed {
        let handed = Handed::default();
        let half = vec![b'a'; MAX_BYTES / 2];
        handed.hand([
            (1, "a.md".into(), prepared(&half)),
            (1, "b.md".into(), prepared(&half)),
        ]);
        assert_eq!(handed.bytes(), MAX_BYTES);
        handed
    }

    #[test]
    fn a_wait_for_room_ends_when_the_index_takes_enough_or_takes_nothing() {
        let handed = full();
        let half = vec![b'a'; MAX_BYTES / 2];
        // Room already, or nothing held (a text larger than the bound is then handed alone).
        assert!(Handed::default().wait_for_room(MAX_BYTES * 2, Duration::ZERO));
        // More than the bound, waited for: the index taking everything held ends the wait.
        let all = Handed::default();
        all.hand([(1, "a.md".into(), prepared(b"kozijn"))]);
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| all.wait_for_room(MAX_BYTES * 2, Duration::from_secs(60)));
            all.until_waited_on(1);
            assert!(all.take(1, "a.md").is_some());
            assert!(waiting.join().unwrap());
        });
        std::thread::scope(|scope| {
            // A patience the test would not wait out: the take must end the wait.
            let waiting = scope.spawn(|| handed.wait_for_room(10, Duration::from_secs(60)));
            handed.until_waited_on(1);
            assert!(handed.take(1, "a.md").is_some());
            assert!(waiting.join().unwrap());
        });
        assert_eq!(handed.bytes(), MAX_BYTES / 2);
        // Full, and nothing is taken: the wait gives up and lets go of what is held.
        handed.hand([(1, "c.md".into(), prepared(&half))]);
        assert!(!handed.wait_for_room(10, Duration::from_millis(1)));
        assert_eq!((handed.bytes(), handed.take(1, "b.md")), (0, None));
    }

    /// Two imports through the admin socket may wait at once, each for its own room: each
    /// wait ends when the index has made room for it, not when the other's would fit (the
    /// smaller waited out its patience while the larger was the one remembered), nor after
    /// its patience once the other's wait ended (nobody was told any more).
    #[test]
    fn two_waits_for_room_each_end_when_their_own_room_is_made() {
        let handed = Handed::default();
        let half = vec![b'a'; MAX_BYTES / 2];
        let rest = vec![b'b'; MAX_BYTES / 2 - 10];
        handed.hand([
            (1, "a.md".into(), prepared(&half)),
            (1, "b.md".into(), prepared(&rest)),
            (1, "c.md".into(), prepared(&[b'c'; 10])),
        ]);
        assert_eq!(handed.bytes(), MAX_BYTES);
        // A patience the test would not wait out: only the takes may end the waits.
        let patience = Duration::from_secs(60);
        let ended = |rx: &std::sync::mpsc::Receiver<bool>| {
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the wait ends once its room is made")
        };
        std::thread::scope(|scope| {
            let (small_tx, small) = std::sync::mpsc::channel();
            let (large_tx, large) = std::sync::mpsc::channel();
            let handed = &handed;
            scope.spawn(move || small_tx.send(handed.wait_for_room(10, patience)));
            handed.until_waited_on(1);
            scope.spawn(move || large_tx.send(handed.wait_for_room(MAX_BYTES / 2, patience)));
            handed.until_waited_on(2);
            // Room for the small one only.
            assert!(handed.take(1, "c.md").is_some());
            assert!(ended(&small));
            assert!(large.try_recv().is_err(), "no room for the large one yet");
            // Then for the large one, the small one's wait over, once the large one (woken
            // with it) has had a moment to wait again: woken now, it would find its room
            // whether or not the take told it.
            std::thread::sleep(Duration::from_millis(100));
            assert!(handed.take(1, "a.md").is_some());
            assert!(ended(&large));
        });
        assert!(handed.inner().wanted.is_empty());
        assert_eq!(handed.bytes(), MAX_BYTES / 2 - 10);
    }

    /// A wait that gives up lets go of every text held, which is room for every other wait:
    /// those are told at once, not left to wait out their own patience while the index takes
    /// nothing more (there is nothing left to take).
    #[test]
    fn a_wait_that_gives_up_tells_the_others_there_is_room() {
        let handed = full();
        std::thread::scope(|scope| {
            let (tx, patient) = std::sync::mpsc::channel();
            let handed = &handed;
            // A patience the test would not wait out.
            scope.spawn(move || tx.send(handed.wait_for_room(10, Duration::from_secs(60))));
            handed.until_waited_on(1);
            // Nothing is taken: this wait gives up and lets go of the texts.
            assert!(!handed.wait_for_room(10, Duration::from_millis(50)));
            assert_eq!(
                patient.recv_timeout(Duration::from_secs(5)),
                Ok(true),
                "the other wait is told it has room"
            );
        });
        assert!(handed.inner().wanted.is_empty());
        assert_eq!(handed.bytes(), 0);
    }

    #[test]
    fn only_a_text_documents_own_content_is_its_text() {
        let d = doc(DocKind::Text, b"kozijn");
        assert_eq!(
            text_for(&d, hashed(b"kozijn")),
            Some(DocText {
                text: "kozijn".into(),
                extracted: false
            })
        );
        assert_eq!(text_for(&d, hashed(b"kozijnen")), None);
        assert_eq!(
            text_for(&doc(DocKind::Binary, b"kozijn"), hashed(b"kozijn")),
            None
        );
        // Not UTF-8: read as the store's text would be, with replacement characters.
        let odd = doc(DocKind::Text, b"koz\xffijn");
        assert_eq!(
            text_for(&odd, hashed(b"koz\xffijn")).map(|t| t.text),
            Some("koz\u{fffd}ijn".into())
        );
    }
}
