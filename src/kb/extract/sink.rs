//! Where extractors put text: builds lines of the agreed shape (white space collapsed, tabs
//! between cells, at most one empty line in a row, none at the start or end) and stops the
//! extraction once the output cap is reached.

use super::{ExtractError, Extracted};

/// Why an extractor stopped before the end of its input.
#[derive(Debug)]
pub(super) enum Stop {
    /// The output cap is reached: the text so far is the result.
    Full,
    /// The file cannot be extracted.
    Failed(ExtractError),
}

impl From<ExtractError> for Stop {
    fn from(e: ExtractError) -> Self {
        Stop::Failed(e)
    }
}

pub(super) type Flow = Result<(), Stop>;

/// True when `s` would put something on a line (anything but white space and control
/// characters), so repeating it makes progress towards the cap.
pub(super) fn has_text(s: &str) -> bool {
    s.chars().any(|c| !c.is_whitespace() && !c.is_control())
}

pub(super) struct Sink {
    text: String,
    line: String,
    cap: usize,
    truncated: bool,
    /// An empty line is due before the next non-empty one.
    blank: bool,
    parts: Option<u32>,
}

impl Sink {
    pub(super) fn new(cap: usize) -> Self {
        Sink {
            text: String::new(),
            line: String::new(),
            cap,
            truncated: false,
            blank: false,
            parts: None,
        }
    }

    /// Bytes the text will have once the current line is added.
    fn used(&self) -> usize {
        let separators = if self.text.is_empty() {
            0
        } else {
            1 + usize::from(self.blank)
        };
        self.text.len() + separators + self.line.len()
    }

    /// Adds `s` to the current line: any run of white space or control characters becomes
    /// one space, and none starts a line.
    pub(super) fn push(&mut self, s: &str) -> Flow {
        for c in s.chars() {
            if c.is_whitespace() || c.is_control() {
                if self.line.is_empty() || self.line.ends_with([' ', '\t']) {
                    continue;
                }
                self.put(' ')?;
            } else {
                self.put(c)?;
            }
        }
        Ok(())
    }

    fn put(&mut self, c: char) -> Flow {
        if self.used() + c.len_utf8() > self.cap {
            self.truncated = true;
            return Err(Stop::Full);
        }
        self.line.push(c);
        Ok(())
    }

    /// Ends a table cell: a tab (the line's trailing tabs are dropped when it ends).
    pub(super) fn tab(&mut self) -> Flow {
        if self.line.ends_with(' ') {
            self.line.pop();
        }
        self.put('\t')
    }

    /// Ends the current line; an empty line is not written (see [`Sink::blank_line`]).
    pub(super) fn end_line(&mut self) -> Flow {
        let kept = self.line.trim_end_matches([' ', '\t']).len();
        self.line.truncate(kept);
        if self.line.is_empty() {
            return Ok(());
        }
        if !self.text.is_empty() {
            self.text.push('\n');
            if self.blank {
                self.text.push('\n');
            }
        }
        self.blank = false;
        self.text.push_str(&self.line);
        self.line.clear();
        Ok(())
    }

    /// Ends the current line and puts one empty line before the next text (between pages,
    /// sheets and slides).
    pub(super) fn blank_line(&mut self) -> Flow {
        self.end_line()?;
        self.blank = !self.text.is_empty();
        Ok(())
    }

    /// Counts a page, sheet or slide.
    pub(super) fn count_part(&mut self) {
        self.parts = Some(self.parts.unwrap_or(0).saturating_add(1));
    }

    /// True when no text has been written (the current line included).
    pub(super) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.line.trim_end_matches([' ', '\t']).is_empty()
    }

    pub(super) fn finish(mut self) -> Result<Extracted, ExtractError> {
        let _ = self.end_line();
        Ok(Extracted {
            text: self.text,
            truncated: self.truncated,
            parts: self.parts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(f: impl FnOnce(&mut Sink) -> Flow, cap: usize) -> (String, bool) {
        let mut s = Sink::new(cap);
        let _ = f(&mut s);
        let e = s.finish().unwrap();
        (e.text, e.truncated)
    }

    #[test]
    fn white_space_collapses_and_empty_lines_never_repeat() {
        let (text, truncated) = lines(
            |s| {
                s.blank_line()?;
                s.push("  een \n\r twee\u{0}drie  ")?;
                s.end_line()?;
                s.end_line()?;
                s.blank_line()?;
                s.blank_line()?;
                s.push("a")?;
                s.tab()?;
                s.push(" b ")?;
                s.tab()?;
                s.tab()?;
                s.end_line()?;
                s.blank_line()
            },
            1000,
        );
        assert_eq!(text, "een twee drie\n\na\tb");
        assert!(!truncated);
    }

    #[test]
    fn the_cap_cuts_on_a_character_boundary_and_stops() {
        let mut s = Sink::new(7);
        s.push("ab").unwrap();
        s.end_line().unwrap();
        assert!(matches!(s.push("cdé€"), Err(Stop::Full)));
        let e = s.finish().unwrap();
        // "ab\ncdé" is 7 bytes: the euro sign would need 3 more.
        assert_eq!(e.text, "ab\ncdé");
        assert!(e.truncated);
        assert!(e.text.len() <= 7);
    }
}
