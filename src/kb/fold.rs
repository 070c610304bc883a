//! Case and accent folding, identical for the index, the query and the verifier. Done here,
//! line by line, before tantivy sees any text: tantivy's ASCII folding does not fold decomposed
//! input, and folding after n-gramming would change gram lengths.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

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
    for c in line.chars() {
        if c.is_ascii() {
            folded.push_ascii(c as u8);
        } else {
            for lower in c.to_lowercase() {
                decompose_compatible(lower, |d| folded.push(d));
            }
        }
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

/// [`fold_line`] for a line of ASCII only, where lower case, NFKD and the marks come down to
/// ASCII lower case: the same result, many times faster (search folds what it verifies, and
/// nearly every line of Dutch prose is ASCII).
fn fold_ascii_into(out: &mut String, line: &str) {
    let bytes = line.as_bytes();
    // Nothing to collapse: no white space but single spaces (`char::is_whitespace` for ASCII
    // is the space and \t..=\r). Two stateless scans, which the compiler vectorises.
    let plain =
        !bytes.iter().any(|b| (b'\t'..=b'\r').contains(b)) && !bytes.windows(2).any(|w| w == b"  ");
    if plain {
        let start = out.len();
        out.push_str(line);
        if let Some(added) = out.get_mut(start..) {
            added.make_ascii_lowercase();
        }
        return;
    }
    let mut folded = Folded(std::mem::take(out), false);
    for &b in bytes {
        folded.push_ascii(b);
    }
    *out = folded.0;
}

/// Folds a whole text line by line; line `n` of the result is line `n` of the input.
pub fn fold_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        fold_line_into(&mut out, line.strip_suffix('\r').unwrap_or(line));
    }
    out
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
    }

    #[test]
    fn lines_are_kept() {
        assert_eq!(fold_text("Eén\r\nTwee\n\nDRIE"), "een\ntwee\n\ndrie");
    }
}
