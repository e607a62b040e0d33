//! `${NAME}` references to the server's environment in manifest values.
//!
//! A reference is expanded in every scalar style: plain, `"double"`, `'single'`, `|` literal
//! and `>` folded blocks, inside flow collections too (where YAML needs the value quoted:
//! `{X: "${X}"}`). serde-saphyr's Compose-style interpolation does the expansion on the
//! scalar's decoded value, so a value holding quotes, colons or newlines cannot change the
//! document's structure, and an expanded value stays a string unless the field is a number.
//!
//! Compose syntax is wider than flowgate's, so this pass reads the document's scalars first
//! (with their source spans) and decides what Compose may see:
//! - `${NAME}` is looked up; an unset `NAME` is an error at the `$`'s line and column, and
//!   every unset reference of the file is reported in one run.
//! - `$${` is the escape for a literal `${` (Compose reads `$$` as `$`).
//! - Every other `$` is literal: shell forms such as `${X:-default}`, `$HOME` and `$$`, and
//!   the variables flowgate itself sets for each command (`${FLOWGATE_ARG_NAME}`,
//!   `${FLOWGATE_RUN_DIR}`, ...), which a command's shell expands when it runs. The pass
//!   doubles such a `$` so Compose leaves it alone; that shifts later columns of the same line
//!   by one in messages from the YAML reader, never lines.
//! - `${FLOWGATE_HANDLE_KEYS...}` is refused: the handle-sealing keys never enter a manifest.
//!
//! Mapping keys are never expanded (JSON Schema's `$ref` and `$defs` are keys), and neither
//! are comments.

use std::collections::HashMap;
use std::path::Path;

use serde_saphyr::granit_parser::{Event, Parser};

use crate::ManifestError;

/// The manifest text made ready for serde-saphyr's Compose interpolation, and the variables
/// it references (only those: the rest of the environment is not handed to the reader).
pub(super) struct Prepared {
    pub text: String,
    pub vars: HashMap<String, String>,
}

/// Variables flowgate sets for each local command; a reference to one is left for the
/// command's shell.
const RUN_VARIABLES: [&str; 5] = [
    "FLOWGATE_RUN_DIR",
    "FLOWGATE_STATUS_FILE",
    "FLOWGATE_TOOL",
    "FLOWGATE_ARGS",
    "FLOWGATE_BIN",
];

/// At most this many reference errors are listed; the rest are counted in one more error (a
/// file of a million bad references gets a readable answer, in linear time).
const MAX_LISTED_ERRORS: usize = 50;

fn is_run_variable(name: &str) -> bool {
    RUN_VARIABLES.contains(&name) || name.starts_with("FLOWGATE_ARG_")
}

/// Finds the references in `text`, checks them against `env`, and marks every other `$`
/// literal.
///
/// A document the YAML parser refuses is returned unchanged (with no variables): the reader
/// that follows reports the syntax error at its place.
///
/// # Errors
/// One error per unset, refused or malformed reference, each at its line and column.
pub(super) fn prepare(
    text: &str,
    env: impl Fn(&str) -> Option<String>,
    file: &Path,
) -> Result<Prepared, Vec<ManifestError>> {
    let Some(spans) = value_scalar_spans(text) else {
        return Ok(Prepared {
            text: text.to_owned(),
            vars: HashMap::new(),
        });
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut vars = HashMap::new();
    let mut errors = Vec::new();
    let mut locator = Locator::new(text);
    let mut unlisted = 0usize;
    let mut first_unlisted = None;
    let mut report = |offset: usize, message: String, errors: &mut Vec<ManifestError>| {
        let (line, column) = locator.at(offset);
        if errors.len() < MAX_LISTED_ERRORS {
            errors.push(error(file, line, column, message));
        } else {
            unlisted += 1;
            first_unlisted.get_or_insert((line, column));
        }
    };
    for (start, end) in spans {
        let bytes = text.as_bytes();
        let mut i = start;
        while i < end {
            if bytes[i] != b'$' {
                i += 1;
                continue;
            }
            if text[i..end].starts_with("$${") {
                i += 3;
                continue;
            }
            match reference_at(&text[i..end]) {
                Some(name) if name.starts_with("FLOWGATE_HANDLE_KEYS") => {
                    report(
                        i,
                        format!(
                            "`${{{name}}}` is refused: the handle-sealing keys never enter a \
                             manifest"
                        ),
                        &mut errors,
                    );
                    i += name.len() + 3;
                }
                Some(name) if !is_run_variable(name) => {
                    match env(name) {
                        Some(value) => {
                            vars.insert(name.to_owned(), value);
                        }
                        None => report(
                            i,
                            format!(
                                "environment variable `{name}` is not set (`${{{name}}}`); \
                                 write `$${{{name}}}` for a literal `${{{name}}}`"
                            ),
                            &mut errors,
                        ),
                    }
                    i += name.len() + 3;
                }
                _ => {
                    // A literal `$`: doubled, so Compose gives back one.
                    out.push_str(&text[copied..i]);
                    out.push('$');
                    copied = i;
                    i += 1;
                }
            }
        }
    }
    if let Some((line, column)) = first_unlisted {
        errors.push(error(
            file,
            line,
            column,
            format!(
                "{unlisted} more references from here on are unset or refused (only the first \
                 {MAX_LISTED_ERRORS} are listed)"
            ),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    out.push_str(&text[copied..]);
    Ok(Prepared { text: out, vars })
}

/// The `NAME` of a `${NAME}` at the start of `s` (`NAME`: a letter or `_`, then letters,
/// digits, `_`), `None` for any other use of `$`.
fn reference_at(s: &str) -> Option<&str> {
    let rest = s.strip_prefix("${")?;
    let close = rest.find('}')?;
    let name = &rest[..close];
    let mut chars = name.chars();
    let first = chars.next()?;
    ((first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric()))
    .then_some(name)
}

fn error(file: &Path, line: u64, column: u64, message: String) -> ManifestError {
    ManifestError {
        file: file.to_owned(),
        line,
        column,
        message,
    }
}

/// Lines and columns (1-based, columns in characters) of byte offsets asked for in increasing
/// order, found by one walk over the text rather than a scan from the start for each: a line
/// of many references stays linear. Line breaks are YAML's (LF, CRLF, and a lone CR), so the
/// places agree with the YAML reader's.
struct Locator<'a> {
    text: &'a str,
    offset: usize,
    line: u64,
    column: u64,
    after_cr: bool,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Self {
        Locator {
            text,
            offset: 0,
            line: 1,
            column: 1,
            after_cr: false,
        }
    }

    fn at(&mut self, offset: usize) -> (u64, u64) {
        if offset < self.offset {
            *self = Locator::new(self.text);
        }
        for c in self.text[self.offset..offset].chars() {
            match c {
                // The LF of a CRLF: the CR already broke the line.
                '\n' if self.after_cr => {}
                '\n' | '\r' => {
                    self.line += 1;
                    self.column = 1;
                }
                _ => self.column += 1,
            }
            self.after_cr = c == '\r';
        }
        self.offset = offset;
        (self.line, self.column)
    }
}

/// Where each scalar that is a value (not a mapping key, at any depth) lies in `text`, as
/// byte ranges in document order; `None` when the parser refuses the document.
fn value_scalar_spans(text: &str) -> Option<Vec<(usize, usize)>> {
    /// One open collection: whether it is (inside) a mapping key, and for a mapping whether
    /// the next node is a key.
    struct Open {
        in_key: bool,
        mapping: bool,
        next_is_key: bool,
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut spans = Vec::new();
    // Called when a node starts: is it a key (or inside one)?
    let node_in_key = |stack: &[Open]| {
        stack
            .last()
            .is_some_and(|o| o.in_key || (o.mapping && o.next_is_key))
    };
    // Called when a node ends: the enclosing mapping alternates key and value.
    let node_done = |stack: &mut Vec<Open>| {
        if let Some(o) = stack.last_mut()
            && o.mapping
        {
            o.next_is_key = !o.next_is_key;
        }
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.ok()?;
        match event {
            Event::Scalar(..) => {
                if !node_in_key(&stack) {
                    let start = span.start.byte_offset()?;
                    let end = span.end.byte_offset()?;
                    if start <= end && end <= text.len() && text.is_char_boundary(start) {
                        spans.push((start, end));
                    }
                }
                node_done(&mut stack);
            }
            Event::Alias(..) | Event::UnresolvedAlias(..) => node_done(&mut stack),
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                let in_key = node_in_key(&stack);
                stack.push(Open {
                    in_key,
                    mapping: matches!(event, Event::MappingStart(..)),
                    next_is_key: true,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                stack.pop();
                node_done(&mut stack);
            }
            _ => {}
        }
    }
    Some(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "X" => Some("a \"b\": c".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn prepared(text: &str) -> Prepared {
        prepare(text, env, Path::new("t.yaml")).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn keys_and_comments_are_left_alone() {
        let p = prepared("$ref: \"#/$defs/a\" # ${NOPE}\n");
        assert_eq!(p.text, "$ref: \"#/$$defs/a\" # ${NOPE}\n");
        assert!(p.vars.is_empty());
    }

    #[test]
    fn every_style_is_seen_and_only_references_are_kept() {
        let p = prepared(
            "a: ${X}\nb: \"${X}\"\nc: '${EMPTY}'\nd: |\n  ${X} $HOME ${X:-d}\ne: [\"${X}\"]\n",
        );
        assert_eq!(
            p.text,
            "a: ${X}\nb: \"${X}\"\nc: '${EMPTY}'\nd: |\n  ${X} $$HOME $${X:-d}\ne: [\"${X}\"]\n"
        );
        assert_eq!(p.vars.len(), 2);
    }

    #[test]
    fn run_variables_and_the_escape_stay_literal() {
        let p = prepared("a: echo ${FLOWGATE_ARG_N} $${X} $$\n");
        assert_eq!(p.text, "a: echo $${FLOWGATE_ARG_N} $${X} $$$$\n");
        assert!(p.vars.is_empty());
    }

    #[test]
    fn unset_and_refused_references_are_located() {
        let e = prepare(
            "a: x\nb: \"  ${UNSET}\"\nc: ${FLOWGATE_HANDLE_KEYS}\n",
            env,
            Path::new("t.yaml"),
        )
        .err()
        .expect("errors");
        let at: Vec<(u64, u64)> = e.iter().map(|e| (e.line, e.column)).collect();
        assert_eq!(at, [(2, 7), (3, 4)], "{e:?}");
        assert!(e[0].message.contains("`UNSET` is not set"), "{e:?}");
        assert!(e[1].message.contains("refused"), "{e:?}");
    }

    #[test]
    fn many_bad_references_are_listed_up_to_a_bound_and_counted() {
        let text = format!("a: x\nb: \"{}\"\n", "${UNSET}".repeat(200));
        let e = prepare(&text, env, Path::new("t.yaml"))
            .err()
            .expect("errors");
        assert_eq!(e.len(), MAX_LISTED_ERRORS + 1, "{e:?}");
        assert_eq!((e[1].line, e[1].column), (2, 13), "{:?}", e[1]);
        let last = &e[MAX_LISTED_ERRORS];
        assert_eq!((last.line, last.column), (2, 5 + 8 * 50), "{last:?}");
        assert!(last.message.starts_with("150 more references"), "{last:?}");
    }

    #[test]
    fn places_count_lines_as_yaml_does() {
        for (text, line) in [
            ("a: x\nb: ${UNSET}\n", 2),
            ("a: x\r\nb: ${UNSET}\r\n", 2),
            ("a: x\rb: ${UNSET}\r", 2),
            ("a: |\r\n  x\r\n\r\n  ${UNSET}\r\n", 4),
        ] {
            let e = prepare(text, env, Path::new("t.yaml"))
                .err()
                .expect("errors");
            assert_eq!(e[0].line, line, "{text:?}: {e:?}");
        }
    }

    #[test]
    fn a_document_the_parser_refuses_is_left_to_the_reader() {
        let p = prepared("a: [${X}\n");
        assert_eq!(p.text, "a: [${X}\n");
    }
}
