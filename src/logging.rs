//! The server's log on stderr: text (ANSI colours only on a terminal) or JSON, filtered by
//! `KENNIS_LOG`, and one line per event whatever the event holds.
//!
//! Events carry outside parties' text in their fields — a model endpoint's error message, an
//! agent's output, a reason built from a request — and a line break in it would start a line
//! that reads like the server's own (log forging, CWE-117). tracing-subscriber escapes terminal
//! escape sequences but not line breaks, so every event goes through [`OneLinePerEvent`],
//! which writes a line break inside an event as `\n` (and a carriage return as `\r`). JSON
//! already escapes them; there it changes nothing.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};

use tracing_subscriber::fmt::MakeWriter;

use crate::config::LogFormat;

/// Sets up logging on stderr; `default_level` applies without `KENNIS_LOG`.
pub fn init(format: LogFormat, default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("KENNIS_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(OneLinePerEvent);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Hands each event a buffer that reaches stderr as one line when the event is written.
struct OneLinePerEvent;

impl<'a> MakeWriter<'a> for OneLinePerEvent {
    type Writer = EventLine;

    fn make_writer(&'a self) -> EventLine {
        EventLine(Vec::new())
    }
}

/// One event's formatted bytes, written to stderr (line breaks inside escaped) when dropped.
struct EventLine(Vec<u8>);

impl Write for EventLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // A failing stderr has nowhere to report to.
        let _ = std::io::stderr().lock().write_all(&one_line(&self.0));
    }
}

/// `event` as one line: each line break or carriage return before its final line break
/// written as `\n` or `\r`, and a final line break. Nearly every event is one line already,
/// and is written as it is.
fn one_line(event: &[u8]) -> Cow<'_, [u8]> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    if body.len() < event.len() && !body.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Cow::Borrowed(event);
    }
    let mut out = Vec::with_capacity(body.len().saturating_add(8));
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
    out.push(b'\n');
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn an_event_is_one_line_whatever_its_fields_hold() {
        let line = |event: &[u8]| one_line(event).into_owned();
        assert_eq!(line(b"INFO started\n"), b"INFO started\n");
        assert_eq!(
            line(b"WARN gave up reason=denied\n2026-01-01T00:00:00Z ERROR forged\n"),
            b"WARN gave up reason=denied\\n2026-01-01T00:00:00Z ERROR forged\n"
        );
        assert_eq!(line(b"a\r\nb"), b"a\\r\\nb\n");
        assert_eq!(line(b"no final line break"), b"no final line break\n");
        assert_eq!(line(b"\n"), b"\n");
    }
}
