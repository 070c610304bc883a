//! Case and accent folding, identical for the index, the query and the verifier. Done here,
//! line by line, before tantivy sees any text: tantivy's ASCII folding does not fold decomposed
//! input, and folding after n-gramming would change gram lengths.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::{decompose_compatible, is_combining_mark};

/// Folds one line: lower case, NFKD, combining marks dropped, a few letters without a
/// decomposition spelled out, and every run of white space made one space.
pub fn fold_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    fold_line_into(&mut out, line);
    out
}

/// [`fold_line`], appended to `out`.
fn fold_line_into(out: &mut String, line: &str) {
    if line.is_ascii() {
        return fold_ascii_into(out, line);
    }
    // Lower case depends on context only for Σ (final sigma); such lines take the general
    // path. Elsewhere each character folds on its own: NFKD decomposes character by
    // character, and its reordering moves only combining marks, which are dropped.
    if line.contains('Σ') {
        return out.push_str(&fold_general(line));
    }
    let mut folded = Folded(std::mem::take(out), false);
    let mut rest = line;
    while !rest.is_empty() {
        // The ASCII run up to the next other character, at once where it allows.
        let run = rest
            .bytes()
            .position(|b| !b.is_ascii())
            .unwrap_or(rest.len());
        let (ascii, tail) = rest.split_at(run);
        folded.push_ascii_run(ascii);
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            for lower in c.to_lowercase() {
                decompose_compatible(lower, |d| folded.push(d));
            }
        }
        rest = chars.as_str();
    }
    *out = folded.0;
}

/// The definition, applied to the whole line at once.
fn fold_general(line: &str) -> String {
    let mut out = Folded::with_capacity(line.len());
    for c in line.to_lowercase().nfkd() {
        out.push(c);
    }
    out.0
}

/// A folded line being built: the string and whether it ends in white space.
struct Folded(String, bool);

impl Folded {
    fn with_capacity(n: usize) -> Folded {
        Folded(String::with_capacity(n), false)
    }

    /// An ASCII byte, already decomposed.
    fn push_ascii(&mut self, b: u8) {
        // What `char::is_whitespace` is for ASCII.
        if matches!(b, b' ' | b'\t'..=b'\r') {
            if !self.1 {
                self.0.push(' ');
                self.1 = true;
            }
            return;
        }
        self.1 = false;
        self.0.push(char::from(b.to_ascii_lowercase()));
    }

    /// A run of ASCII: copied and lower-cased at once when it has no white space to collapse
    /// (none but single spaces, and no space first after white space), else byte by byte.
    fn push_ascii_run(&mut self, run: &str) {
        let bytes = run.as_bytes();
        let Some(&last) = bytes.last() else {
            return;
        };
        let starts_clean = !(self.1 && bytes.first() == Some(&b' '));
        if starts_clean && plain_ascii(bytes) {
            let start = self.0.len();
            self.0.push_str(run);
            if let Some(added) = self.0.get_mut(start..) {
                added.make_ascii_lowercase();
            }
            self.1 = last == b' ';
            return;
        }
        for &b in bytes {
            self.push_ascii(b);
        }
    }

    /// A character of the lower-cased, decomposed text.
    fn push(&mut self, c: char) {
        if c.is_ascii() {
            return self.push_ascii(c as u8);
        }
        if is_combining_mark(c) {
            return;
        }
        if c.is_whitespace() {
            if !self.1 {
                self.0.push(' ');
                self.1 = true;
            }
            return;
        }
        self.1 = false;
        match c {
            'ß' => self.0.push_str("ss"),
            'æ' => self.0.push_str("ae"),
            'œ' => self.0.push_str("oe"),
            'ø' => self.0.push('o'),
            'ł' => self.0.push('l'),
            'đ' => self.0.push('d'),
            'ı' => self.0.push('i'),
            'ĳ' => self.0.push_str("ij"),
            other => self.0.push(other),
        }
    }
}

/// Whether ASCII `bytes` fold to themselves lower-cased: no white space but single spaces
/// (`char::is_whitespace` for ASCII is the space and \t..=\r). Branch-free passes, which the
/// compiler vectorises.
fn plain_ascii(bytes: &[u8]) -> bool {
    let control = bytes
        .iter()
        .fold(false, |acc, &b| acc | (b.wrapping_sub(b'\t') < 5));
    let doubled = bytes
        .iter()
        .zip(bytes.iter().skip(1))
        .fold(false, |acc, (&a, &b)| acc | ((a == b' ') & (b == b' ')));
    !control && !doubled
}

/// [`fold_line`] for a line of ASCII only, where lower case, NFKD and the marks come down to
/// ASCII lower case: the same result, many times faster (search folds what it verifies, and
/// nearly every line of Dutch prose is ASCII).
fn fold_ascii_into(out: &mut String, line: &str) {
    let mut folded = Folded(std::mem::take(out), false);
    folded.push_ascii_run(line);
    *out = folded.0;
}

/// Folds a whole text line by line; line `n` of the result is line `n` of the input.
///
/// Most lines of most texts are plain ASCII (nothing but single spaces between words), which
/// fold to themselves lower-cased: those are copied and lower-cased in bulk, and only a line
/// holding something else (another character, a tab, a carriage return, two spaces) is
/// folded on its own.
pub fn fold_text(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    // Folded so far: the text up to here, always at the start of a line.
    let mut done = 0;
    while let Some(at) = next_unplain(bytes, done) {
        let head = bytes.get(done..at).unwrap_or_default();
        let start = memchr::memrchr(b'\n', head).map_or(done, |i| done + i + 1);
        let end = bytes
            .get(at..)
            .and_then(|rest| memchr::memchr(b'\n', rest))
            .map_or(text.len(), |i| at + i);
        push_lower(&mut out, text.get(done..start).unwrap_or_default());
        let line = text.get(start..end).unwrap_or_default();
        fold_line_into(&mut out, line.strip_suffix('\r').unwrap_or(line));
        if end < text.len() {
            out.push('\n');
        }
        done = end + 1;
    }
    push_lower(&mut out, text.get(done..).unwrap_or_default());
    out
}

/// Appends plain ASCII lines (and their line breaks) lower-cased.
fn push_lower(out: &mut String, plain: &str) {
    let start = out.len();
    out.push_str(plain);
    if let Some(added) = out.get_mut(start..) {
        added.make_ascii_lowercase();
    }
}

/// Where, from `from` on, the first byte is that keeps its line from folding to itself
/// lower-cased: a byte of another character than ASCII, white space other than the space
/// and the line break, or a space after a space. Scanned in blocks without branches, which
/// the compiler vectorises.
fn next_unplain(bytes: &[u8], from: usize) -> Option<usize> {
    const BLOCK: usize = 32;
    let rest = bytes.get(from..)?;
    let unplain = |i: usize, b: u8| {
        let next = rest.get(i + 1).copied().unwrap_or(0);
        b >= 0x80 || matches!(b, b'\t' | 0x0b | 0x0c | b'\r') || (b == b' ' && next == b' ')
    };
    let mut offset = 0;
    while offset < rest.len() {
        let end = (offset + BLOCK).min(rest.len());
        let block = rest.get(offset..end).unwrap_or_default();
        // The byte after each of the block's (one fewer at the very end).
        let next = rest
            .get(offset + 1..(end + 1).min(rest.len()))
            .unwrap_or_default();
        let odd = block.iter().fold(0u8, |acc, &b| {
            acc | (b & 0x80) | u8::from(b == b'\t') | u8::from(b.wrapping_sub(0x0b) < 3)
        });
        let doubled = block.iter().zip(next).fold(0u8, |acc, (&a, &b)| {
            acc | u8::from((a == b' ') & (b == b' '))
        });
        if odd | doubled != 0 {
            let i = block
                .iter()
                .enumerate()
                .position(|(i, &b)| unplain(offset + i, b))?;
            return Some(from + offset + i);
        }
        offset = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_accents_and_special_letters_fold() {
        assert_eq!(fold_line("Café CRÈME"), "cafe creme");
        assert_eq!(
            fold_line("Straße Ærø Œuvre Łódź Đak İstanbul"),
            "strasse aero oeuvre lodz dak istanbul"
        );
        assert_eq!(fold_line("ĳsbeer IJsbeer"), "ijsbeer ijsbeer");
        assert_eq!(fold_line("a \t  b\u{a0}c"), "a b c");
        // Decomposed input folds like composed input.
        assert_eq!(fold_line("cafe\u{301}"), fold_line("café"));
    }

    #[test]
    fn ascii_lines_fold_as_the_general_path_does() {
        let general = |line: &str| {
            // The general path, forced by a non-ASCII character that folds away.
            fold_line(&format!("{line}\u{301}"))
        };
        for line in [
            "Kozijn  DEUR\t\x0b\x0c\rklaar ",
            "",
            "  ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ 0123456789 AZaz",
            "\x00\x01\x1c\x1f\x7f",
        ] {
            assert!(line.is_ascii());
            assert_eq!(fold_line(line), general(line), "{line:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_line_folds_as_the_definition_says(line in "(?s)[a-zA-Z ĲĳéÉëÈçÇßæŒøŁđıİΣσςΑΩωﬁ①ｶ\u{300}\u{301}\u{327}\u{a0}\u{2003}\t\u{b}\u{c}\r.,-]{0,40}") {
            proptest::prop_assert_eq!(fold_line(&line), fold_general(&line));
        }

        #[test]
        fn any_text_folds_as_the_definition_says(line in "\\PC{0,30}") {
            proptest::prop_assert_eq!(fold_line(&line), fold_general(&line));
        }

        #[test]
        fn texts_fold_line_by_line(text in "(?s)[a-zA-Z  Éëé\u{a0}\u{301}\t\r\n.]{0,120}") {
            let lines: Vec<String> = text
                .split('\n')
                .map(|l| fold_general(l.strip_suffix('\r').unwrap_or(l)))
                .collect();
            proptest::prop_assert_eq!(fold_text(&text), lines.join("\n"));
        }
    }

    #[test]
    fn lines_are_kept() {
        assert_eq!(fold_text("Eén\r\nTwee\n\nDRIE"), "een\ntwee\n\ndrie");
    }
}
