//! The search index's vocabulary: every word its `words` field holds and every piece of a long
//! word its `long` field holds, each once, found through the 2- and 3-character grams they
//! contain. A query term is a substring of a document's folded text; split where the words
//! are split (anything but a letter or digit), each of its runs lies within one word of the
//! document, so the documents holding the term are among those holding a word that contains
//! the run — which the vocabulary names, and the index's own lists of those words give.
//!
//! Grams over the vocabulary instead of over every document: a gram names the words that
//! hold it, each once, rather than the documents — at 100 MB of Dutch, 48,583 words against
//! 28,000 documents' 32.7 million distinct grams. The vocabulary is read from the index's
//! term dictionaries (no file of its own), segment by segment as a searcher first shows one,
//! and only grows: a word whose documents are all gone still names no document.

use std::ops::Range;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustc_hash::FxHashMap;
use tantivy::index::SegmentId;
use tantivy::schema::Field;

/// Words of at least this many bytes are in the `long` field, in pieces, rather than in
/// `words` (whose analyzer drops them: BM25 has no use for them).
pub const LONG_WORD: usize = 40;
/// A long word is indexed in pieces of at most this many characters, each starting this many
/// before the previous one ends: a run of a query term (at most 200 characters) lies wholly
/// within one piece.
pub const PIECE_CHARS: usize = 1024;
pub const PIECE_OVERLAP: usize = 200;

/// One run of letters and digits of a query term, and whether the term holds something else
/// just before (`starts`: the run begins a word) or just after it (`ends`: it ends one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    pub text: String,
    pub starts: bool,
    pub ends: bool,
}

/// The runs of a term, split as the `words` field's tokenizer splits text.
pub fn runs(term: &str) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut current = String::new();
    let mut before = false;
    for c in term.chars() {
        if c.is_alphanumeric() {
            current.push(c);
        } else {
            if !current.is_empty() {
                out.push(Run {
                    text: std::mem::take(&mut current),
                    starts: before,
                    ends: true,
                });
            }
            before = true;
        }
    }
    if !current.is_empty() {
        out.push(Run {
            text: current,
            starts: before,
            ends: false,
        });
    }
    out
}

/// What a run asks of the documents.
#[derive(Debug, PartialEq)]
pub enum Words {
    /// Nothing the vocabulary can narrow (one character inside a word): the verifier decides.
    Any,
    /// A word among these, by number ([`Vocabulary::words`]; none: no document holds the
    /// run), and how many entries their lists hold together (deleted documents included).
    Some { ids: Vec<u32>, postings: u64 },
}

impl Words {
    fn none() -> Words {
        Words::Some {
            ids: Vec::new(),
            postings: 0,
        }
    }
}

/// The vocabulary ([`module`](self)); shared by every search.
#[derive(Default)]
pub struct Vocabulary {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The segments whose words are in, and what each added to `postings`.
    segments: FxHashMap<SegmentId, Vec<(u32, u32)>>,
    words: Vec<Box<str>>,
    /// Each word's documents in the segments of `segments`.
    postings: Vec<u64>,
    known: FxHashMap<Box<str>, u32>,
    /// Gram (packed by [`pack`]) → the words holding it, ascending.
    grams: FxHashMap<u64, Vec<u32>>,
}

/// Two or three characters in a u64: 21 bits each, the top bit set for two.
fn pack(chars: &[char]) -> u64 {
    match chars {
        [a, b] => 1 << 63 | u64::from(*a) << 21 | u64::from(*b),
        [a, b, c] => u64::from(*a) << 42 | u64::from(*b) << 21 | u64::from(*c),
        _ => u64::MAX,
    }
}

impl Inner {
    /// The word's number, added if new (`None`: four billion words already).
    fn add(&mut self, word: &str) -> Option<u32> {
        if let Some(id) = self.known.get(word) {
            return Some(*id);
        }
        let id = u32::try_from(self.words.len()).ok()?;
        let chars: Vec<char> = word.chars().collect();
        let mut grams: Vec<u64> = chars
            .windows(2)
            .map(pack)
            .chain(chars.windows(3).map(pack))
            .collect();
        grams.sort_unstable();
        grams.dedup();
        for g in grams {
            self.grams.entry(g).or_default().push(id);
        }
        self.words.push(word.into());
        self.postings.push(0);
        self.known.insert(word.into(), id);
        Some(id)
    }

    fn postings_of(&self, id: u32) -> u64 {
        self.postings.get(id as usize).copied().unwrap_or(0)
    }

    /// The words holding `run` as [`Run`] says.
    fn find(&self, run: &Run) -> Words {
        let chars: Vec<char> = run.text.chars().collect();
        // A whole word: one lookup (a word this short is never a long word's piece).
        if run.starts && run.ends && run.text.len() < LONG_WORD {
            return match self.known.get(run.text.as_str()) {
                Some(id) => Words::Some {
                    ids: vec![*id],
                    postings: self.postings_of(*id),
                },
                None => Words::none(),
            };
        }
        let lists: Vec<&[u32]> = match chars.len() {
            0 | 1 => return Words::Any,
            2 => vec![self.grams.get(&pack(&chars)).map_or(&[][..], Vec::as_slice)],
            _ => {
                let mut grams: Vec<u64> = chars.windows(3).map(pack).collect();
                grams.sort_unstable();
                grams.dedup();
                let mut lists = Vec::with_capacity(grams.len());
                for g in grams {
                    match self.grams.get(&g) {
                        Some(l) => lists.push(l.as_slice()),
                        None => return Words::none(),
                    }
                }
                lists.sort_by_key(|l| l.len());
                lists
            }
        };
        let Some((shortest, others)) = lists.split_first() else {
            return Words::none();
        };
        let mut out = Vec::new();
        let mut postings = 0;
        for &id in *shortest {
            if !others.iter().all(|l| l.binary_search(&id).is_ok()) {
                continue;
            }
            let Some(word) = self.words.get(id as usize) else {
                continue;
            };
            let holds = if word.len() >= LONG_WORD {
                // A piece of a long word: where the word itself begins or ends is not known.
                word.contains(run.text.as_str())
            } else {
                match (run.starts, run.ends) {
                    (true, true) => **word == *run.text,
                    (true, false) => word.starts_with(run.text.as_str()),
                    (false, true) => word.ends_with(run.text.as_str()),
                    (false, false) => word.contains(run.text.as_str()),
                }
            };
            if holds {
                out.push(id);
                postings += self.postings_of(id);
            }
        }
        Words::Some { ids: out, postings }
    }
}

impl Vocabulary {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes in the words of every segment of `searcher` not seen before (`fields`: the
    /// fields whose terms are words).
    pub fn ensure(&self, searcher: &tantivy::Searcher, fields: &[Field]) -> tantivy::Result<()> {
        let readers = searcher.segment_readers();
        {
            let inner = self.read();
            if readers.len() == inner.segments.len()
                && readers
                    .iter()
                    .all(|r| inner.segments.contains_key(&r.segment_id()))
            {
                return Ok(());
            }
        }
        let mut inner = self.write();
        let (started, before) = (std::time::Instant::now(), inner.words.len());
        let mut read = 0;
        for reader in readers {
            if inner.segments.contains_key(&reader.segment_id()) {
                continue;
            }
            read += 1;
            let mut added = Vec::new();
            for field in fields {
                let inverted = reader.inverted_index(*field)?;
                let mut stream = inverted.terms().stream()?;
                while stream.advance() {
                    // Terms of a text field are UTF-8.
                    let Ok(word) = std::str::from_utf8(stream.key()) else {
                        continue;
                    };
                    let docs = stream.value().doc_freq;
                    if let Some(id) = inner.add(word)
                        && let Some(p) = inner.postings.get_mut(id as usize)
                    {
                        *p += u64::from(docs);
                        added.push((id, docs));
                    }
                }
            }
            inner.segments.insert(reader.segment_id(), added);
        }
        // Segments merged away are forgotten, and their documents taken off the words' counts
        // (the words stay): a searcher still holding one reads its dictionary again.
        let gone: Vec<SegmentId> = inner
            .segments
            .keys()
            .filter(|id| !readers.iter().any(|r| r.segment_id() == **id))
            .copied()
            .collect();
        for id in gone {
            for (word, docs) in inner.segments.remove(&id).unwrap_or_default() {
                if let Some(p) = inner.postings.get_mut(word as usize) {
                    *p = p.saturating_sub(u64::from(docs));
                }
            }
        }
        if read > 0 {
            tracing::debug!(
                segments = read,
                new_words = inner.words.len() - before,
                words = inner.words.len(),
                ms = started.elapsed().as_millis() as u64,
                "search vocabulary: read new segments"
            );
        }
        Ok(())
    }

    /// The words holding `run` ([`Words`]).
    pub fn find(&self, run: &Run) -> Words {
        self.read().find(run)
    }

    /// The words of these numbers (from [`find`](Self::find): words are never taken out).
    pub fn words(&self, ids: &[u32]) -> Vec<String> {
        let inner = self.read();
        ids.iter()
            .filter_map(|id| inner.words.get(*id as usize))
            .map(|w| w.to_string())
            .collect()
    }

    /// How many words it holds.
    pub fn len(&self) -> usize {
        self.read().words.len()
    }

    /// [`len`](Self::len) without waiting: `None` while words are being read in.
    pub fn len_now(&self) -> Option<usize> {
        match self.inner.try_read() {
            Ok(inner) => Some(inner.words.len()),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner().words.len()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The pieces of a long word ([`PIECE_CHARS`]), as byte ranges of it: the word itself when
/// it is short enough.
pub fn pieces(word: &str) -> Vec<Range<usize>> {
    let starts: Vec<usize> = word.char_indices().map(|(i, _)| i).collect();
    if starts.len() <= PIECE_CHARS {
        return std::iter::once(0..word.len()).collect();
    }
    let at = |i: usize| starts.get(i).copied().unwrap_or(word.len());
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let to = from + PIECE_CHARS;
        out.push(at(from)..at(to));
        if to >= starts.len() {
            return out;
        }
        from = to - PIECE_OVERLAP;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary(words: &[&str]) -> Inner {
        let mut v = Inner::default();
        for w in words {
            v.add(w);
        }
        v
    }

    fn run(text: &str, starts: bool, ends: bool) -> Run {
        Run {
            text: text.into(),
            starts,
            ends,
        }
    }

    fn some(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn found(v: &Inner, run: &Run) -> Vec<String> {
        match v.find(run) {
            Words::Some { ids, .. } => ids
                .iter()
                .map(|id| v.words[*id as usize].to_string())
                .collect(),
            Words::Any => panic!("{run:?} narrows nothing"),
        }
    }

    fn pieces_of(word: &str) -> Vec<&str> {
        pieces(word).into_iter().map(|r| &word[r]).collect()
    }

    #[test]
    fn a_term_splits_where_words_split() {
        assert_eq!(runs("kozijn"), vec![run("kozijn", false, false)]);
        assert_eq!(
            runs("e-mail"),
            vec![run("e", false, true), run("mail", true, false)]
        );
        assert_eq!(
            runs("de kat."),
            vec![run("de", false, true), run("kat", true, true)]
        );
        assert_eq!(runs("-x"), vec![run("x", true, false)]);
        assert_eq!(runs("--"), vec![]);
        assert_eq!(runs("naïef"), vec![run("naïef", false, false)]);
    }

    #[test]
    fn a_run_finds_the_words_holding_it() {
        let v = vocabulary(&["kozijn", "kozijnen", "bekozijning", "kat", "krat", "e"]);
        assert_eq!(
            found(&v, &run("kozijn", false, false)),
            some(&["kozijn", "kozijnen", "bekozijning"])
        );
        assert_eq!(
            found(&v, &run("kozijn", true, false)),
            some(&["kozijn", "kozijnen"])
        );
        assert_eq!(found(&v, &run("ijn", false, true)), some(&["kozijn"]));
        assert_eq!(found(&v, &run("kozijn", true, true)), some(&["kozijn"]));
        assert_eq!(found(&v, &run("at", false, false)), some(&["kat", "krat"]));
        assert_eq!(found(&v, &run("e", true, true)), some(&["e"]));
        assert_eq!(v.find(&run("e", false, false)), Words::Any);
        assert_eq!(found(&v, &run("naïef", false, false)), some(&[]));
        assert_eq!(found(&v, &run("zzz", true, true)), some(&[]));
        // All grams present, the run not: turned down by the words themselves.
        assert_eq!(found(&v, &run("kozat", false, false)), some(&[]));
    }

    #[test]
    fn a_long_word_is_found_in_its_pieces_whatever_its_bounds() {
        let long: String = (0..3000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let ps = pieces_of(&long);
        assert_eq!(ps.len(), 4);
        assert!(ps.iter().all(|p| p.chars().count() <= PIECE_CHARS));
        // Every substring of at most 200 characters is wholly in one piece.
        for from in (0..2800).step_by(97) {
            let sub = &long[from..from + 200];
            assert!(ps.iter().any(|p| p.contains(sub)), "{from}");
        }
        let v = vocabulary(&ps);
        let sub = long[1500..1520].to_string();
        assert!(!found(&v, &run(&sub, false, false)).is_empty());
        assert_eq!(pieces_of("kort"), vec!["kort"]);
    }
}
