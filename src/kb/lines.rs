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
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};
use tantivy::{DocId, DocSet, SegmentReader, TERMINATED, Term};

use super::vocabulary::LONG_WORD;

/// All terms must occur within this many consecutive lines.
pub const WINDOW_LINES: usize = 3;

/// Tokenizer of the `words` and `title` fields: the runs of alphanumeric characters (as
/// tantivy's `SimpleTokenizer` splits them) shorter than [`LONG_WORD`] bytes (as its
/// `RemoveLongFilter` keeps them), each at its line's position.
///
/// Written as one pass over the bytes rather than those two with the line breaks counted
/// between tokens: the text is folded, so nearly every byte is ASCII and is classed by a table
/// (only a character beyond ASCII is decoded). The three passes were a ninth of the indexing
/// threads' CPU in an import's profile; an import of 100 MB now takes 7 % less CPU
/// (`docs/performance.md`, stop 53). The tests hold it to the composition it replaces.
#[derive(Clone, Default)]
pub struct LineWords {
    token: Token,
}

impl Tokenizer for LineWords {
    type TokenStream<'a> = LineStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> LineStream<'a> {
        self.token.reset();
        LineStream {
            text,
            at: 0,
            line: 0,
            token: &mut self.token,
        }
    }
}

pub struct LineStream<'a> {
    text: &'a str,
    /// Where the next token is looked for: everything before it is read.
    at: usize,
    /// Line breaks before `at`.
    line: usize,
    token: &'a mut Token,
}

const OTHER: u8 = 0;
const ALNUM: u8 = 1;
const BREAK: u8 = 2;
/// What each ASCII byte is to [`LineStream`]: part of a word, a line break, or neither.
// Indexed while the program is built: an index out of bounds fails the build, never a run.
#[allow(clippy::indexing_slicing)]
const CLASS: [u8; 128] = {
    let mut table = [OTHER; 128];
    let mut b = 0;
    while b < 128 {
        if (b as u8).is_ascii_alphanumeric() {
            table[b] = ALNUM;
        }
        b += 1;
    }
    table[b'\n' as usize] = BREAK;
    table
};

impl LineStream<'_> {
    /// The class of the character at byte `i` and its length, or `None` at the end.
    #[inline]
    fn class_at(&self, i: usize) -> Option<(u8, usize)> {
        let byte = *self.text.as_bytes().get(i)?;
        if let Some(&class) = CLASS.get(usize::from(byte)) {
            return Some((class, 1));
        }
        // A character beyond ASCII starts here (`i` is always on a character boundary).
        let c = self.text.get(i..)?.chars().next()?;
        let class = if c.is_alphanumeric() { ALNUM } else { OTHER };
        Some((class, c.len_utf8()))
    }
}

impl TokenStream for LineStream<'_> {
    fn advance(&mut self) -> bool {
        loop {
            // To the next word, counting the line breaks passed.
            let from = loop {
                match self.class_at(self.at) {
                    None => return false,
                    Some((ALNUM, _)) => break self.at,
                    Some((class, len)) => {
                        if class == BREAK {
                            self.line += 1;
                        }
                        self.at += len;
                    }
                }
            };
            // To its end.
            let mut to = from;
            while let Some((ALNUM, len)) = self.class_at(to) {
                to += len;
            }
            self.at = to;
            if to - from >= LONG_WORD {
                continue;
            }
            let Some(word) = self.text.get(from..to) else {
                return false;
            };
            self.token.text.clear();
            self.token.text.push_str(word);
            self.token.offset_from = from;
            self.token.offset_to = to;
            self.token.position = self.line;
            return true;
        }
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
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
        let mut tokenizer = LineWords::default();
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push((t.text.clone(), t.position));
        }
        out
    }

    /// What `LineWords` replaces: tantivy's `SimpleTokenizer` and `RemoveLongFilter`, each
    /// token at the count of line breaks before it.
    fn composed(text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut analyzer = tantivy::tokenizer::TextAnalyzer::builder(
            tantivy::tokenizer::SimpleTokenizer::default(),
        )
        .filter(tantivy::tokenizer::RemoveLongFilter::limit(LONG_WORD))
        .build();
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            let line = text[..t.offset_from].matches('\n').count();
            out.push((t.text.clone(), line, t.offset_from, t.offset_to));
        }
        out
    }

    fn fused(text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut tokenizer = LineWords::default();
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            assert_eq!(t.position_length, 1);
            out.push((t.text.clone(), t.position, t.offset_from, t.offset_to));
        }
        out
    }

    #[test]
    fn the_words_are_tantivys_simple_tokens_shorter_than_long_words() {
        let long = "x".repeat(LONG_WORD);
        let short = "y".repeat(LONG_WORD - 1);
        for text in [
            "",
            "\n\n",
            "een",
            "een twee\r\ndrie\n\nvier-vijf",
            "straße café naïef ﬁne ǅemal",
            "中文字符 と かな\n١٢٣ ½ ² x\u{301}y",
            "tabs\tand\u{a0}non-breaking\u{2028}separators",
            "emoji 🙂 between🙂words\n",
            &format!("{long} a\n{short}\n{long}é{short}"),
            &format!("ü{}", "é".repeat(20)),
        ] {
            assert_eq!(fused(text), composed(text), "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_split_as_the_composition_splits_it(
            text in "([a-z0-9]{1,45}|[ \n\r\t.,;:/-]|é|ß|ǅ|中|١|\u{301}|🙂|\u{a0}|\u{2028}){0,40}"
        ) {
            proptest::prop_assert_eq!(fused(&text), composed(&text));
        }
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
