//! Splitting a YAML stream into its documents by line, keeping each document's first line.
//!
//! YAML forbids a line that starts with `---` or `...` (followed by a blank or the end of the
//! line) anywhere inside a document's content, even inside block or quoted scalars, so such a
//! line always separates documents and a line-based split is exact. The split works on bytes,
//! so that bytes that are not UTF-8 cost only their own document. Parsing each document on its
//! own lets the caller number documents and recover from every error document by document.

/// One document: its bytes (from the start of a line) and the number of that line in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    /// The document's lines, including a leading `---` marker line if any. Not checked to be
    /// UTF-8: a bad byte costs only the document it is in.
    pub(crate) bytes: &'a [u8],
    /// Line number in the file of the first line of `bytes`, from 1.
    pub(crate) first_line: u64,
}

/// The whole file as one document (JSON), or none when it is blank.
pub(crate) fn whole(bytes: &[u8]) -> Vec<Chunk<'_>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Vec::new();
    }
    vec![Chunk {
        bytes,
        first_line: 1,
    }]
}

/// The documents of a YAML stream that hold anything besides comments, blank lines and
/// directives, in order.
pub(crate) fn yaml(bytes: &[u8]) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0; // byte offset of the current document
    let mut first_line = 1;
    let mut has_content = false;
    let mut offset = 0;
    for (line_no, line) in (1..).zip(bytes.split_inclusive(|b| *b == b'\n')) {
        let end = offset + line.len();
        if let Some(rest) = marker(line, b"---") {
            if has_content {
                chunks.push(chunk(bytes, start, offset, first_line));
            }
            // A document without content so far (directives, comments) restarts here.
            start = offset;
            first_line = line_no;
            has_content = is_content(rest);
        } else if marker(line, b"...").is_some() {
            if has_content {
                chunks.push(chunk(bytes, start, end, first_line));
            }
            start = end;
            first_line = line_no + 1;
            has_content = false;
        } else if !has_content && !line.starts_with(b"%") && is_content(line) {
            has_content = true;
        }
        offset = end;
    }
    if has_content {
        chunks.push(chunk(bytes, start, bytes.len(), first_line));
    }
    chunks
}

fn chunk(bytes: &[u8], start: usize, end: usize, first_line: u64) -> Chunk<'_> {
    Chunk {
        bytes: bytes.get(start..end).unwrap_or_default(),
        first_line,
    }
}

const BOM: &[u8] = "\u{feff}".as_bytes();

/// When `line` is the document marker `mark` (`---` or `...`), what follows it on the line.
fn marker<'a>(line: &'a [u8], mark: &[u8]) -> Option<&'a [u8]> {
    let line = line.strip_prefix(BOM).unwrap_or(line);
    let rest = line.strip_prefix(mark)?;
    match rest.first() {
        None | Some(b' ' | b'\t' | b'\r' | b'\n') => Some(rest),
        Some(_) => None,
    }
}

/// Whether a line (or the rest of a marker line) holds anything but blanks and a comment.
fn is_content(line: &[u8]) -> bool {
    let mut line = line;
    while let Some(rest) = line.strip_prefix(BOM) {
        line = rest;
    }
    let line = line.trim_ascii();
    !line.is_empty() && !line.starts_with(b"#")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(u64, &str)> {
        yaml(text.as_bytes())
            .iter()
            .map(|c| (c.first_line, std::str::from_utf8(c.bytes).unwrap()))
            .collect()
    }

    #[test]
    fn splits_on_markers_and_keeps_first_lines() {
        let text = "a: 1\n---\nb: 2\n--- # third\n\nc: 3\n";
        assert_eq!(
            lines(text),
            vec![
                (1, "a: 1\n"),
                (2, "---\nb: 2\n"),
                (4, "--- # third\n\nc: 3\n")
            ]
        );
    }

    #[test]
    fn skips_empty_documents_and_leading_comments() {
        let text = "# header\n---\n# nothing here\n---\n---\na: 1\n---\n";
        assert_eq!(lines(text), vec![(5, "---\na: 1\n")]);
        assert!(yaml(b"").is_empty());
        assert!(yaml(b"\n# only a comment\n").is_empty());
    }

    #[test]
    fn content_on_the_marker_line_and_document_end_markers() {
        let text = "--- {a: 1}\n...\nb: 2\n...\n";
        assert_eq!(
            lines(text),
            vec![(1, "--- {a: 1}\n...\n"), (3, "b: 2\n...\n")]
        );
    }

    #[test]
    fn similar_lines_are_not_markers() {
        let text = "a: |\n  ---\nb: ---x\n----\n";
        assert_eq!(yaml(text.as_bytes()).len(), 1);
        assert_eq!(yaml(b"a: 1\r\n---\r\nb: 2\r\n").len(), 2);
    }

    #[test]
    fn json_is_one_document_unless_blank() {
        assert_eq!(whole(b"{}").len(), 1);
        assert!(whole(b" \n").is_empty());
    }
}
