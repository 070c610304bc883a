//! `kennisbank_search`: query rules, the exact verifier, and the assembly of results. The
//! index (see [`super::index`]) only proposes candidates; the verifier decides, so what is
//! found is exactly what the rules select.

use memchr::memmem::Finder;
use serde::Serialize;

use super::fold::{fold_line, fold_text};
use super::index::{Candidate, PairTerms, Ranked, SearchIndex};
use super::{KbError, MAX_SEARCHED_BYTES, prefix_on_char_boundary};
use crate::store::{ReadTx, Store};

pub const MIN_QUERY_CHARS: usize = 2;
pub const MAX_QUERY_CHARS: usize = 200;
pub const MAX_TERMS: usize = 10;
pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 50;
pub const OUTPUT_CAP_CHARS: usize = 12_000;
pub use super::lines::WINDOW_LINES;
/// A snippet line longer than this is shortened, so one long paragraph cannot fill the output.
pub const SNIPPET_LINE_CHARS: usize = 600;

/// How much one call may verify.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_documents: usize,
    pub max_bytes: u64,
}

impl Budget {
    /// The specification's limits: 200 documents, 8 MB.
    pub const DEFAULT: Budget = Budget {
        max_documents: 200,
        max_bytes: 8 * 1024 * 1024,
    };
    /// No limits: for the reference comparison in tests and benchmarks.
    pub const UNLIMITED: Budget = Budget {
        max_documents: usize::MAX,
        max_bytes: u64::MAX,
    };
}

/// A parsed query: the folded terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub terms: Vec<String>,
}

/// Splits a query into terms (a double-quoted phrase is one term), folded like the documents.
pub fn parse_query(raw: &str) -> Result<Query, KbError> {
    let n = raw.trim().chars().count();
    if !(MIN_QUERY_CHARS..=MAX_QUERY_CHARS).contains(&n) {
        return Err(KbError::InvalidInput(format!(
            "query must be {MIN_QUERY_CHARS} to {MAX_QUERY_CHARS} characters (got {n})"
        )));
    }
    let folded = fold_line(raw);
    let mut terms: Vec<String> = Vec::new();
    let mut rest = folded.as_str();
    let is_quote = |c: char| matches!(c, '"' | '“' | '”' | '„');
    loop {
        rest = rest.trim_start();
        let Some(first) = rest.chars().next() else {
            break;
        };
        let (term, next) = if is_quote(first) {
            let inner = &rest[first.len_utf8()..];
            match inner.find(is_quote) {
                Some(end) => {
                    let q = inner[end..].chars().next().map_or(1, char::len_utf8);
                    (inner[..end].trim(), &inner[end + q..])
                }
                None => (inner.trim(), ""),
            }
        } else {
            let end = rest
                .find(|c: char| c == ' ' || is_quote(c))
                .unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        if !term.is_empty() && !terms.iter().any(|t| t == term) {
            terms.push(term.to_owned());
        }
        rest = next;
    }
    if terms.is_empty() {
        return Err(KbError::InvalidInput("query has no search terms".into()));
    }
    if terms.len() > MAX_TERMS {
        return Err(KbError::InvalidInput(format!(
            "query has {} terms; at most {MAX_TERMS} are allowed (a quoted phrase counts as one)",
            terms.len()
        )));
    }
    Ok(Query { terms })
}

/// Where the query's terms stand in a piece of text (a search result's snippet): byte ranges
/// of `text`, in order and not overlapping, found by folding `text` as the search folds
/// documents, so that `Naïef` is marked for the query `naief`. For people reading results.
pub fn marks(text: &str, terms: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut folded = String::with_capacity(text.len());
    // For each byte of `folded`, the original character it came from.
    let mut origin: Vec<std::ops::Range<usize>> = Vec::with_capacity(text.len());
    let mut buf = [0u8; 4];
    for (at, c) in text.char_indices() {
        let f = fold_line(c.encode_utf8(&mut buf));
        let f = if f.is_empty() && c.is_whitespace() {
            " ".to_owned()
        } else {
            f
        };
        origin.extend(std::iter::repeat_n(at..at + c.len_utf8(), f.len()));
        folded.push_str(&f);
    }
    let mut found: Vec<std::ops::Range<usize>> = Vec::new();
    for term in terms.iter().filter(|t| !t.is_empty()) {
        let mut from = 0;
        while let Some(p) = folded.get(from..).and_then(|rest| rest.find(term.as_str())) {
            let (start, end) = (from + p, from + p + term.len());
            if let (Some(first), Some(last)) = (origin.get(start), origin.get(end - 1)) {
                found.push(first.start..last.end);
            }
            from = end;
        }
    }
    found.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(found.len());
    for r in found {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// Finds the first window: the smallest 0-based line `L` such that line `L` contains a term
/// and lines `L..L+3` together contain every term. Each term is looked for once in the whole
/// text and its matches placed on their lines (a term never spans a line break), rather than
/// every term looked for in every line: most of a document is then skipped at memchr's pace.
pub fn first_match(folded: &str, finders: &[Finder<'_>]) -> Option<usize> {
    let bytes = folded.as_bytes();
    // Cheap rejection: every term must occur somewhere.
    let firsts: Vec<usize> = finders
        .iter()
        .map(|f| f.find(bytes))
        .collect::<Option<_>>()?;
    let breaks: Vec<usize> = memchr::memchr_iter(b'\n', bytes).collect();
    let mut masks = vec![0u32; breaks.len() + 1];
    for (i, (f, first)) in finders.iter().zip(firsts).enumerate() {
        let mut line = 0;
        let mut at = Some(first);
        while let Some(found) = at {
            while breaks.get(line).is_some_and(|&b| b < found) {
                line += 1;
            }
            if let Some(m) = masks.get_mut(line) {
                *m |= 1 << i;
            }
            // The rest of this line holds nothing new for this term: go on from the next.
            at = breaks.get(line).and_then(|&b| {
                bytes
                    .get(b + 1..)
                    .and_then(|rest| f.find(rest))
                    .map(|p| b + 1 + p)
            });
        }
    }
    let all: u32 = (1u32 << finders.len()) - 1;
    (0..masks.len()).find(|&l| {
        masks.get(l).is_some_and(|m| *m != 0)
            && masks
                .iter()
                .skip(l)
                .take(WINDOW_LINES)
                .fold(0, |m, x| m | x)
                == all
    })
}

/// How much of a document is folded before [`first_match`] is first asked: a document that
/// matches mostly does so early, and its remaining text need not be folded.
const FIRST_FOLD: usize = 1024;

/// [`first_match`] of `text` folded, folding a head of whole lines first and the rest only
/// when the head does not decide it: when the head holds a whole window of lines with every
/// term, no earlier window can lie beyond the head (folding is line by line, so the head's
/// folded lines are those of the whole text).
fn first_match_folding(text: &str, finders: &[Finder<'_>]) -> Option<usize> {
    let head_end = text
        .as_bytes()
        .get(..FIRST_FOLD)
        .and_then(|head| memchr::memrchr(b'\n', head))
        .map(|i| i + 1)
        .filter(|_| text.len() > 2 * FIRST_FOLD);
    let Some(head_end) = head_end else {
        return first_match(&fold_text(text), finders);
    };
    let (head, rest) = text.split_at(head_end);
    let mut folded = fold_text(head);
    let whole_lines = memchr::memchr_iter(b'\n', folded.as_bytes()).count();
    if let Some(line) = first_match(&folded, finders)
        && line + WINDOW_LINES <= whole_lines
    {
        return Some(line);
    }
    folded.push_str(&fold_text(rest));
    first_match(&folded, finders)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub path: String,
    pub version: u64,
    /// 1-based line of the first match.
    pub line: usize,
    pub snippet: String,
    /// The document is a binary file and the match is in the text extracted from it (lines
    /// count in that text). Left out for text documents.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub extracted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotSearched {
    pub documents: usize,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutput {
    pub query: String,
    pub results: Vec<Hit>,
    pub searched_documents: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_searched: Option<NotSearched>,
    pub truncated: bool,
}

/// One search request, validated.
pub struct SearchRequest<'a> {
    pub org_id: u64,
    pub raw_query: &'a str,
    pub query: &'a Query,
    pub folder: Option<&'a str>,
    pub limit: usize,
    pub budget: Budget,
    /// Characters of rendered results to keep ([`OUTPUT_CAP_CHARS`] for the tool).
    pub output_cap: usize,
}

/// A search as the connector's `kennisbank_search` and the portal's search box make it: the
/// raw query and folder checked and parsed, the default budget and output cap.
pub fn search_text(
    store: &Store,
    index: &SearchIndex,
    org_id: u64,
    raw: &str,
    folder: Option<&str>,
    limit: usize,
) -> Result<SearchOutput, KbError> {
    let query = parse_query(raw)?;
    let folder = super::path::normalize_folder(folder)?;
    search(
        store,
        index,
        &SearchRequest {
            org_id,
            raw_query: raw,
            query: &query,
            folder: folder.as_deref(),
            limit,
            budget: Budget::DEFAULT,
            output_cap: OUTPUT_CAP_CHARS,
        },
    )
}

/// Runs a search: candidates from the index in relevance order, verified one by one until
/// `limit` results are found or the budget is spent.
pub fn search(
    store: &Store,
    index: &SearchIndex,
    req: &SearchRequest<'_>,
) -> Result<SearchOutput, KbError> {
    let (terms, max) = (&req.query.terms, req.budget.max_documents);
    let ranked = |pairs| {
        index
            .ranked(req.org_id, req.folder, terms, max, pairs)
            .map(|r| r.expecting(req.limit))
    };
    let first = ranked(PairTerms::Adaptive)?;
    let loose = first.loose();
    let out = verify_ranked(store, index, req, first)?;
    // A term that many words in most of the index's documents hold was left to the verifier,
    // and the budget ran out: in this organisation it may be rare (another language than
    // the others'). Searched again, filtering through every word that holds it.
    if loose && out.not_searched.is_some() {
        return verify_ranked(store, index, req, ranked(PairTerms::Filtered)?);
    }
    Ok(out)
}

/// [`search`] over the candidates `ranked` proposes.
fn verify_ranked(
    store: &Store,
    index: &SearchIndex,
    req: &SearchRequest<'_>,
    mut ranked: Ranked,
) -> Result<SearchOutput, KbError> {
    // Candidates' stored fields, read as far as the search gets.
    let mut candidates: Vec<Candidate> = Vec::new();
    let finders: Vec<Finder<'_>> = req
        .query
        .terms
        .iter()
        .map(|t| Finder::new(t.as_bytes()))
        .collect();
    let mut results = Vec::new();
    let mut verified = 0usize;
    let mut bytes = 0u64;
    let mut reason = None;
    let mut enough = false;
    // Verdicts of candidates verified ahead, by position.
    let mut verdicts: Vec<Option<Hit>> = Vec::new();
    // One snapshot for the candidates verified here (a verifying thread takes its own).
    store.read(|tx| -> Result<(), KbError> {
        let live = ranked.all_live(super::last_change(tx)?);
        for pos in 0.. {
            if results.len() >= req.limit {
                enough = true;
                break;
            }
            let needed = req.limit.saturating_sub(results.len());
            // Ahead by twice the results still wanted: little is verified for nothing when they come.
            let want = if pos < ONE_BY_ONE {
                1
            } else {
                needed.saturating_mul(2).clamp(2, AHEAD)
            };
            while candidates.len() < pos + want {
                match ranked.to_verify(index, candidates.len())? {
                    Some(c) => candidates.push(c),
                    None => break,
                }
            }
            let Some(c) = candidates.get(pos) else {
                break;
            };
            let cost = c.size.min(MAX_SEARCHED_BYTES as u64);
            if verified >= req.budget.max_documents || bytes + cost > req.budget.max_bytes {
                reason = Some(if verified >= req.budget.max_documents {
                    format!(
                        "one search verifies at most {} documents",
                        req.budget.max_documents
                    )
                } else {
                    format!(
                        "one search reads at most {} MB",
                        req.budget.max_bytes / (1024 * 1024)
                    )
                });
                break;
            }
            if pos >= verdicts.len() {
                let ahead = verify_ahead(
                    (store, tx, live),
                    &ranked,
                    &candidates,
                    (pos, want),
                    (verified, bytes),
                    req,
                    &finders,
                )?;
                verdicts.extend(ahead);
            }
            verified += 1;
            bytes += cost;
            if let Some(hit) = verdicts.get_mut(pos).and_then(Option::take) {
                results.push(hit);
            }
        }
        Ok(())
    })?;
    // How many match in all matters only when the search stopped short of enough results.
    let total = if reason.is_some() || (!enough && results.len() < req.limit) {
        ranked.total()?
    } else {
        verified
    };
    // Only the budget's worth of candidates was fetched: more in all means the document cap.
    if reason.is_none() && !enough && results.len() < req.limit && total > verified {
        reason = Some(format!(
            "one search verifies at most {} documents",
            req.budget.max_documents
        ));
    }
    let skipped = total.saturating_sub(verified);
    let (results, truncated) = cap_output(results, req.output_cap);
    Ok(SearchOutput {
        query: req.raw_query.to_owned(),
        results,
        searched_documents: verified,
        not_searched: reason.map(|reason| NotSearched {
            documents: skipped,
            reason: format!("{reason}; narrow the search with `path` to reach the rest"),
        }),
        truncated,
    })
}

/// Candidates verified one at a time before verifying ahead: most searches have their
/// results by then.
const ONE_BY_ONE: usize = 24;
/// How many candidates are verified ahead at once, on two threads.
const AHEAD: usize = 32;
/// Below this much text, verifying ahead stays on one thread.
const PARALLEL_BYTES: u64 = 256 * 1024;

/// Verifies the candidate at `pos` — and, once past [`ONE_BY_ONE`], some after it that the
/// budget still allows, split over two threads when they hold enough text. A search that needs many candidates
/// (a rare combination, or a term in every document) then takes half the time; what it
/// returns is the same, as the caller takes the verdicts in order and stops where a
/// one-by-one search would have.
fn verify_ahead(
    (store, tx, live): (&Store, &ReadTx, bool),
    ranked: &Ranked,
    candidates: &[Candidate],
    (pos, want): (usize, usize),
    (verified, bytes): (usize, u64),
    req: &SearchRequest<'_>,
    finders: &[Finder<'_>],
) -> Result<Vec<Option<Hit>>, KbError> {
    let mut n = 0;
    let (mut v, mut b) = (verified, bytes);
    for c in candidates.iter().skip(pos).take(want) {
        let cost = c.size.min(MAX_SEARCHED_BYTES as u64);
        if v >= req.budget.max_documents || b + cost > req.budget.max_bytes {
            break;
        }
        v += 1;
        b += cost;
        n += 1;
    }
    let batch = candidates.get(pos..pos + n.max(1)).unwrap_or_default();
    let run = |tx: &ReadTx, live: bool, part: &[Candidate]| -> Result<Vec<Option<Hit>>, KbError> {
        part.iter()
            .map(|c| verify(tx, req.org_id, c, finders, live))
            .collect()
    };
    // A thread is worth starting only for enough text to read.
    let batch_bytes: u64 = batch
        .iter()
        .filter(|c| !c.apart)
        .map(|c| c.size.min(MAX_SEARCHED_BYTES as u64))
        .sum();
    if batch.len() < 2 || batch_bytes < PARALLEL_BYTES {
        return run(tx, live, batch);
    }
    let (first, second) = batch.split_at(batch.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| {
            store.read(|tx| {
                let live = ranked.all_live(super::last_change(tx)?);
                run(tx, live, second)
            })
        });
        let mut out = run(tx, live, first)?;
        let rest = other
            .join()
            .unwrap_or_else(|_| Err(KbError::Index("a verifying thread panicked".into())))?;
        out.extend(rest);
        Ok(out)
    })
}

/// Verifies one candidate in `tx`; `live`: the index had applied every change this snapshot
/// holds, so each candidate is its document's live version.
fn verify(
    tx: &ReadTx,
    org_id: u64,
    c: &Candidate,
    finders: &[Finder<'_>],
    live: bool,
) -> Result<Option<Hit>, KbError> {
    // The index's lines show the terms only far apart: verified without reading.
    if c.apart {
        return Ok(None);
    }
    // The index follows the change log a moment after each commit: a document deleted, moved
    // or rewritten meanwhile is found in it still, and its content is still kept (for the
    // trash or the older version). Only the live version counts.
    if !live {
        match super::get_document(tx, org_id, &c.path)? {
            Some(d) if d.version == c.version => {}
            _ => return Ok(None),
        }
    }
    let text = if c.extracted {
        super::extracted::text(tx, &c.hash)?
    } else {
        super::content(tx, &c.hash)?.map(|b| {
            String::from_utf8(b)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        })
    };
    let Some(text) = text else {
        return Ok(None);
    };
    // The folded copy is derived here rather than stored: it costs less than reading it.
    let Some(line) =
        first_match_folding(prefix_on_char_boundary(&text, MAX_SEARCHED_BYTES), finders)
    else {
        return Ok(None);
    };
    let snippet = text
        .split('\n')
        .skip(line)
        .take(WINDOW_LINES)
        .map(|l| shorten(l.strip_suffix('\r').unwrap_or(l)))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Some(Hit {
        path: c.path.clone(),
        version: c.version,
        line: line + 1,
        snippet,
        extracted: c.extracted,
    }))
}

fn shorten(line: &str) -> String {
    if line.chars().count() <= SNIPPET_LINE_CHARS {
        return line.to_owned();
    }
    let cut = line
        .char_indices()
        .nth(SNIPPET_LINE_CHARS)
        .map_or(line.len(), |(i, _)| i);
    format!("{}…", prefix_on_char_boundary(line, cut))
}

/// The readable rendering of one result; the output cap counts these.
pub fn render_hit(hit: &Hit) -> String {
    let source = if hit.extracted {
        ", in the text taken from the file"
    } else {
        ""
    };
    format!(
        "{} (version {}, line {}{source}):\n{}\n\n",
        hit.path, hit.version, hit.line, hit.snippet
    )
}

/// Keeps whole results while their rendering fits the output cap.
fn cap_output(results: Vec<Hit>, cap: usize) -> (Vec<Hit>, bool) {
    let mut used = 0;
    let mut kept = Vec::new();
    let total = results.len();
    for hit in results {
        let n = render_hit(&hit).chars().count();
        if used + n > cap {
            break;
        }
        used += n;
        kept.push(hit);
    }
    let truncated = kept.len() < total;
    (kept, truncated)
}

#[cfg(test)]
mod tests {

    #[test]
    fn marks_find_the_terms_as_the_search_folds_them() {
        let terms = |q: &str| parse_query(q).unwrap().terms;
        let text = "Een naïef plan: NAIEF en Kozijnmaat <b>";
        let r = marks(text, &terms("naief kozijn"));
        let shown: Vec<&str> = r.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(shown, ["naïef", "NAIEF", "Kozijn"]);
        assert_eq!(marks(text, &terms("\"plan: naief\"")).len(), 1);
        assert!(marks(text, &terms("dakgoot")).is_empty());
        // Overlapping terms make one mark.
        let r = marks("kozijnmaat", &terms("kozijn zijnm"));
        assert_eq!(r, vec![0..7]);
    }

    use super::*;

    fn terms(q: &str) -> Vec<String> {
        parse_query(q).unwrap().terms
    }

    #[test]
    fn query_rules() {
        assert_eq!(terms("Kozijn  Café"), vec!["kozijn", "cafe"]);
        assert_eq!(terms("\"open  haard\" hout"), vec!["open haard", "hout"]);
        assert_eq!(terms("\"niet gesloten"), vec!["niet gesloten"]);
        assert!(parse_query("a").is_err());
        assert!(parse_query(&"x".repeat(201)).is_err());
        assert!(parse_query("\"\" \"\"").is_err());
        assert!(parse_query("a b c d e f g h i j").is_ok());
        assert!(parse_query("a b c d e f g h i j k").is_err());
    }

    #[test]
    fn window_of_three_lines() {
        let f = |ts: &[&str]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let check = |text: &str, ts: &[String]| {
            let finders: Vec<Finder<'_>> = ts.iter().map(|t| Finder::new(t.as_bytes())).collect();
            first_match(text, &finders)
        };
        let ts = f(&["aa", "bb"]);
        assert_eq!(check("x\naa\ny\nbb\nz", &ts), Some(1));
        assert_eq!(check("aa\nx\ny\nbb", &ts), None, "four lines apart");
        assert_eq!(check("x\nbb aa", &ts), Some(1));
        assert_eq!(check("aa", &f(&["aa"])), Some(0));
    }

    /// The window rule applied the plain way: every term looked for in every line.
    fn first_match_by_lines(folded: &str, terms: &[String]) -> Option<usize> {
        let lines: Vec<&str> = folded.split('\n').collect();
        let has = |l: usize, t: &str| lines.get(l).is_some_and(|line| line.contains(t));
        (0..lines.len()).find(|&l| {
            terms.iter().any(|t| has(l, t))
                && terms
                    .iter()
                    .all(|t| (l..l + WINDOW_LINES).any(|m| has(m, t)))
        })
    }

    proptest::proptest! {
        #[test]
        fn first_match_agrees_with_the_rule_line_by_line(
            text in "[abc \n]{0,80}",
            terms in proptest::collection::vec("[abc ]{1,3}", 1..4),
        ) {
            let finders: Vec<Finder<'_>> = terms.iter().map(|t| Finder::new(t.as_bytes())).collect();
            proptest::prop_assert_eq!(
                first_match(&text, &finders),
                first_match_by_lines(&text, &terms)
            );
        }

        #[test]
        fn folding_a_head_first_sees_a_window_across_the_head_s_end(filler in 0usize..40) {
            // `aap` on the head's last line, `noot` just after it; an earlier `aap` alone.
            let line = "x".repeat(90 + filler);
            let mut text = String::from("aap\n");
            while text.len() + line.len() < FIRST_FOLD {
                text.push_str(&line);
                text.push('\n');
            }
            let at = text.matches('\n').count();
            text.push_str("Aap\nNoot\n");
            text.push_str(&format!("{line}\n").repeat(40));
            let finders = [Finder::new(b"aap"), Finder::new(b"noot")];
            proptest::prop_assert_eq!(first_match_folding(&text, &finders), Some(at));
        }

        #[test]
        fn folding_a_head_first_finds_what_folding_everything_finds(
            lines in proptest::collection::vec("[abcÉé \t]{0,300}", 0..40),
            terms in proptest::collection::vec("[abcé ]{1,3}", 1..4),
        ) {
            let text = lines.join("\n");
            let finders: Vec<Finder<'_>> = terms.iter().map(|t| Finder::new(t.as_bytes())).collect();
            proptest::prop_assert_eq!(
                first_match_folding(&text, &finders),
                first_match(&fold_text(&text), &finders)
            );
        }
    }
}
