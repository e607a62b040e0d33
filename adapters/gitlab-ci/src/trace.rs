//! The end of a job's log as failure text: bounded in bytes whatever the log holds (a runner
//! keeps up to 4 MiB of it, and one line may be all of that), without the runner's colours,
//! section markers and carriage-return redraws.

/// How many bytes of a log's end are read to find its last lines.
pub(crate) const READ_BYTES: usize = 64 * 1024;
/// The most a tail may hold, in bytes.
pub(crate) const MAX_BYTES: usize = 16 * 1024;
/// The most one line of a tail may hold, in bytes; longer lines are cut with a marker.
const MAX_LINE_BYTES: usize = 2 * 1024;

/// The last `lines` lines of the log whose end is `end`, cleaned, at most [`MAX_BYTES`].
/// `cut_front` says that `end` does not start at the log's beginning: its first line is the
/// end of a longer one, marked as cut.
pub(crate) fn tail(end: &[u8], lines: usize, cut_front: bool) -> String {
    let text = String::from_utf8_lossy(end);
    let mut all: Vec<&str> = text.split('\n').collect();
    if all.last().is_some_and(|l| l.is_empty()) {
        all.pop();
    }
    let mut kept: Vec<String> = Vec::new();
    let mut size = 0;
    for (i, raw) in all.iter().enumerate().rev() {
        // A runner redraws a line with `\r`; what shows is after the last one.
        let shown = raw.rsplit('\r').next().unwrap_or(raw);
        // Section markers frame the log's parts; their titles are not the job's output.
        if raw.starts_with("section_start:") || raw.starts_with("section_end:") {
            continue;
        }
        let mut line = shorten(&strip_ansi(shown));
        if cut_front && i == 0 {
            line = format!("[… cut] {line}");
        }
        // A line that was only colour codes (the runner resets colours on a line of its own).
        if line.is_empty() && raw.contains('\u{1b}') {
            continue;
        }
        if kept.len() == lines || size + line.len() + 1 > MAX_BYTES {
            break;
        }
        size += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

/// A line cut to [`MAX_LINE_BYTES`] on a character boundary, saying how much was cut.
fn shorten(line: &str) -> String {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_owned();
    }
    let mut end = MAX_LINE_BYTES - 64;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [… {} more bytes cut]", &line[..end], line.len() - end)
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else if c == '\r' || (c.is_control() && c != '\t') {
            continue;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_log_loses_its_markup() {
        let log = "section_start:1:x\r\u{1b}[0K\u{1b}[0K\u{1b}[36;1mExecuting \"step_script\"\u{1b}[0;m\n\
                   \u{1b}[32;1m$ make\u{1b}[0;m\nred\u{1b}[31m!\u{1b}[0m\nsection_end:2:x\r\u{1b}[0K\n\
                   \u{1b}[0K\u{1b}[31;1mERROR: Job failed: exit code 3\n\u{1b}[0;m\n";
        assert_eq!(
            tail(log.as_bytes(), 3, false),
            "$ make\nred!\nERROR: Job failed: exit code 3"
        );
        assert_eq!(
            tail(log.as_bytes(), 10, false),
            "$ make\nred!\nERROR: Job failed: exit code 3"
        );
    }

    #[test]
    fn a_tail_is_bounded_in_bytes_and_long_lines_are_cut() {
        let long = "é".repeat(300_000);
        let log = format!("first\n{long}\nlast line\n");
        let t = tail(log.as_bytes(), 30, false);
        assert!(t.len() <= MAX_BYTES, "{}", t.len());
        assert!(t.ends_with("last line"), "{t:.200}");
        assert!(t.contains("more bytes cut]"), "{t:.200}");
        let many: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let t = tail(many.as_bytes(), 100_000, false);
        assert!(t.len() <= MAX_BYTES);
        assert!(t.ends_with("line 99999"));
        // A cut front marks the partial first line.
        assert_eq!(
            tail(b"ial line\nwhole\n", 5, true),
            "[… cut] ial line\nwhole"
        );
    }
}
