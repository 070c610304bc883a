//! Lines in the search index. The `words` field records as each word's position the line it
//! stands on (0-based, in the folded text), so that a search of several terms can tell from
//! the index alone that a candidate holds them only far apart — no [`WINDOW_LINES`]
//! consecutive lines holding every term — and the verifier need not read it. At 1 GB the
//! slowest searches were such pairs of words, verifying 125–200 candidates of which most held
//! both words but not within three lines (`docs/performance.md`).
//!
//! This only spares reading: a candidate ruled out here counts as verified, as before, so a
//! search's results, its `searched_documents` and what it leaves unsearched are the same. It
//! is sound because a term never spans a line break and each run of its letters and digits
//! lies within one word of the document ([`super::vocabulary`]): a term on line `l` puts a word
//! holding its run on line `l`. Only runs whose words are all in the `words` field are used
//! (not the `long` field's pieces, which have no lines).

use tantivy::postings::Postings;
use tantivy::schema::IndexRecordOption;
use tantivy::tokenizer::{BoxTokenStream, TextAnalyzer, Token, TokenStream, Tokenizer};
use tantivy::{DocId, DocSet, SegmentReader, TERMINATED, Term};

/// All terms must occur within this many consecutive lines.
pub const WINDOW_LINES: usize = 3;

/// Tokenizer of the `words` field: the words analyzer's tokens, each at its line's position.
#[derive(Clone)]
pub struct LineWords(pub TextAnalyzer);

impl Tokenizer for LineWords {
    type TokenStream<'a> = LineStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> LineStream<'a> {
        LineStream {
            inner: self.0.token_stream(text),
            text,
            scanned: 0,
            line: 0,
        }
    }
}

pub struct LineStream<'a> {
    inner: BoxTokenStream<'a>,
    text: &'a str,
    /// Line breaks before this byte are counted in `line`.
    scanned: usize,
    line: usize,
}

impl TokenStream for LineStream<'_> {
    fn advance(&mut self) -> bool {
        if !self.inner.advance() {
            return false;
        }
        let from = self.inner.token().offset_from;
        if let Some(between) = self.text.as_bytes().get(self.scanned..from) {
            self.line += memchr::memchr_iter(b'\n', between).count();
            self.scanned = from;
        }
        self.inner.token_mut().position = self.line;
        true
    }

    fn token(&self) -> &Token {
        self.inner.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.inner.token_mut()
    }
}

/// For each of `docs` (ascending, one segment's), whether its lines rule it out: no
/// [`WINDOW_LINES`] consecutive lines hold, for every entry of `terms`, one of its words.
/// `terms`: per query term, the words of the `words` field that one of its runs lies in.
pub fn apart(
    reader: &SegmentReader,
    terms: &[Vec<Term>],
    docs: &[DocId],
) -> tantivy::Result<Vec<bool>> {
    if !(2..32).contains(&terms.len()) {
        return Ok(vec![false; docs.len()]);
    }
    // Per document, (line, the terms on it as bits).
    let mut seen: Vec<Vec<(u32, u32)>> = vec![Vec::new(); docs.len()];
    let mut positions: Vec<u32> = Vec::new();
    for (i, words) in terms.iter().enumerate() {
        let bit = 1u32 << i;
        let Some(first) = words.first() else {
            continue;
        };
        // One field's words (the `words` field's): its index opened once.
        let inverted = reader.inverted_index(first.field())?;
        for word in words {
            let Some(mut postings) =
                inverted.read_postings(word, IndexRecordOption::WithFreqsAndPositions)?
            else {
                continue;
            };
            for (d, &doc) in docs.iter().enumerate() {
                if postings.doc() < doc {
                    postings.seek(doc);
                }
                if postings.doc() == TERMINATED {
                    break;
                }
                if postings.doc() == doc
                    && let Some(lines) = seen.get_mut(d)
                {
                    postings.positions(&mut positions);
                    lines.extend(positions.iter().map(|&p| (p, bit)));
                }
            }
        }
    }
    let all = (1u32 << terms.len()) - 1;
    Ok(seen
        .into_iter()
        .map(|mut lines| !has_window(&mut lines, all))
        .collect())
}

/// Whether some [`WINDOW_LINES`] consecutive lines together hold every bit of `all`.
fn has_window(lines: &mut [(u32, u32)], all: u32) -> bool {
    lines.sort_unstable_by_key(|(line, _)| *line);
    let window = WINDOW_LINES as u64;
    (0..lines.len()).any(|a| {
        let start = lines.get(a).map_or(0, |(l, _)| u64::from(*l));
        lines
            .iter()
            .skip(a)
            .take_while(|(l, _)| u64::from(*l) < start + window)
            .fold(0, |m, (_, bits)| m | bits)
            == all
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(text: &str) -> Vec<(String, usize)> {
        let analyzer = TextAnalyzer::builder(tantivy::tokenizer::SimpleTokenizer::default())
            .filter(tantivy::tokenizer::RemoveLongFilter::limit(40))
            .build();
        let mut tokenizer = LineWords(analyzer);
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push((t.text.clone(), t.position));
        }
        out
    }

    #[test]
    fn each_word_stands_at_its_line() {
        assert_eq!(
            lines_of("een twee\n\ndrie\nvier-vijf\n"),
            vec![
                ("een".into(), 0),
                ("twee".into(), 0),
                ("drie".into(), 2),
                ("vier".into(), 3),
                ("vijf".into(), 3),
            ]
        );
        // A long word left out does not shift the lines of those after it.
        let long = "x".repeat(50);
        assert_eq!(
            lines_of(&format!("a\n{long}\nb")),
            vec![("a".into(), 0), ("b".into(), 2)]
        );
    }

    #[test]
    fn a_window_is_three_consecutive_lines() {
        assert!(has_window(&mut [(4, 1), (6, 2)], 3));
        assert!(!has_window(&mut [(4, 1), (7, 2)], 3));
        assert!(has_window(&mut [(9, 2), (1, 1), (8, 1)], 3));
        assert!(has_window(&mut [(5, 3)], 3));
        assert!(!has_window(&mut [(1, 1), (2, 1), (3, 4), (5, 2)], 7));
        assert!(has_window(&mut [(1, 1), (3, 4), (3, 2)], 7));
        assert!(!has_window(&mut [], 3));
    }
}
