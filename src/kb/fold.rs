//! Case and accent folding, identical for the index, the query and the verifier. Done here,
//! line by line, before tantivy sees any text: tantivy's ASCII folding does not fold decomposed
//! input, and folding after n-gramming would change gram lengths.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Folds one line: lower case, NFKD, combining marks dropped, a few letters without a
/// decomposition spelled out, and every run of white space made one space.
pub fn fold_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_space = false;
    for c in line.to_lowercase().nfkd() {
        if is_combining_mark(c) {
            continue;
        }
        if c.is_whitespace() {
            if !in_space {
                out.push(' ');
                in_space = true;
            }
            continue;
        }
        in_space = false;
        match c {
            'ß' => out.push_str("ss"),
            'æ' => out.push_str("ae"),
            'œ' => out.push_str("oe"),
            'ø' => out.push('o'),
            'ł' => out.push('l'),
            'đ' => out.push('d'),
            'ı' => out.push('i'),
            'ĳ' => out.push_str("ij"),
            other => out.push(other),
        }
    }
    out
}

/// Folds a whole text line by line; line `n` of the result is line `n` of the input.
pub fn fold_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&fold_line(line.strip_suffix('\r').unwrap_or(line)));
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
    fn lines_are_kept() {
        assert_eq!(fold_text("Eén\r\nTwee\n\nDRIE"), "een\ntwee\n\ndrie");
    }
}
