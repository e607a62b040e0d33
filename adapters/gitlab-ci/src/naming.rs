//! The pipeline name that marks a flowgate call, so that GitLab itself finds the pipeline of a
//! retried start (the pipelines list's `name` filter, GitLab 16.9+) and `list` finds a
//! principal's pipelines, without reading any pipeline's variables.
//!
//! flowgate sends the name as the value of the key input (or key variable); the project's
//! `.gitlab-ci.yml` makes it the pipeline's name with `workflow: name: $[[ inputs.flowgate_call ]]`
//! (or `$FLOWGATE_CALL`). GitLab expands variables in `workflow:name` and strips it, so the name
//! holds none of `$`, `%` or surrounding blanks: tool names are letters, digits, `_`, `-`, `.`.

use flowgate_core::StartRequest;

/// The marker between the tool name and the key.
const KEY_PREFIX: &str = " fg-";
/// What a declined question appends to the name.
const DECLINED: &str = " \u{b7} declined ";

/// The name of the pipeline of `request`: `<tool> fg-<key>.<principal tag>`, the tag verbatim
/// (at most 181 characters: GitLab allows 255).
pub(crate) fn call_name(request: &StartRequest) -> String {
    format!(
        "{}{KEY_PREFIX}{}.{}",
        request.tool, request.idempotency_key, request.principal_tag
    )
}

/// What a pipeline's name says about the call that started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marked<'a> {
    /// The principal tag the call was started for.
    pub(crate) principal_tag: &'a str,
    /// `job` and who declined it, when a question of the pipeline was declined.
    pub(crate) declined: Option<(&'a str, &'a str)>,
}

/// The call a pipeline name marks, or `None` for a pipeline flowgate did not start.
pub(crate) fn parse(name: &str) -> Option<Marked<'_>> {
    let (call, declined) = match name.split_once(DECLINED) {
        Some((call, rest)) => (call, rest.rsplit_once(" by ")),
        None => (name, None),
    };
    let (tool, marker) = call.rsplit_once(KEY_PREFIX)?;
    let (key, tag) = marker.split_once('.')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    // The tag as the server gave it (16 hex digits), or any other name-safe word a caller of
    // the engine chose.
    let word = |s: &str| {
        (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (!tool.is_empty() && hex(key, 32) && word(tag)).then_some(Marked {
        principal_tag: tag,
        declined,
    })
}

/// The name recording that `job` was declined by `who` (GitLab's limit of 255 characters
/// kept by shortening the job name, never the call marker).
pub(crate) fn declined_name(current: &str, job: &str, who: &str) -> String {
    let call = current.split(DECLINED).next().unwrap_or(current);
    let mut job = job.to_owned();
    let fixed = call.chars().count() + DECLINED.chars().count() + " by @".chars().count();
    let room = 255usize.saturating_sub(fixed + who.chars().count());
    if job.chars().count() > room {
        job = job.chars().take(room).collect();
    }
    format!("{call}{DECLINED}{job} by @{who}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_name_parses_back_and_records_a_decline() {
        let request = StartRequest::new("deploy.web", json!({}), "00ff00ff00ff00ff");
        let name = call_name(&request);
        assert!(name.starts_with("deploy.web fg-"), "{name}");
        assert!(name.len() <= 255);
        let marked = parse(&name).expect("ours");
        assert_eq!(marked.principal_tag, "00ff00ff00ff00ff");
        assert_eq!(marked.declined, None);
        let declined = declined_name(&name, "approve", "ops-bot");
        let marked = parse(&declined).expect("still ours");
        assert_eq!(marked.declined, Some(("approve", "@ops-bot")));
        // Declining twice records it once.
        assert_eq!(declined_name(&declined, "approve", "ops-bot"), declined);
        assert_eq!(parse("Build pipeline"), None);
        assert_eq!(parse("x fg-nothex.abc"), None);
        let key = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse(&format!("x fg-{key}.a b")), None);
        assert!(parse(&format!("x fg-{key}.principal-1")).is_some());
        let long = declined_name(&name, &"j".repeat(400), "who");
        assert_eq!(long.chars().count(), 255);
        assert!(parse(&long).is_some());
    }
}
