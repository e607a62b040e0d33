//! flowgate's MCP surface: the tools of a manifest, whose calls start workflow executions and
//! answer at once with a task.
//!
//! The server holds configuration, engine clients and the handle keys, and nothing else: no
//! task table. A task id is a sealed handle (see `flowgate_core::handle`); `tasks/get`,
//! `tasks/update` and `tasks/cancel` open it and ask the engine, so any instance answers for any
//! task and a restart loses nothing.
//!
//! Layered from the engines up, each module depending only on those below it:
//!
//! - [`ToolSet`] (`tools`, `output`): manifest tools bound to their engines, with their
//!   compiled schemas and the output schema enforced on every result.
//! - [`Caller`]: who is calling, as the transport established it.
//! - [`FlowgateServer`] (`server`) and the task operations, which take a [`Caller`] and no
//!   transport's types: `calls` (`tools/call`, with `mrtr` for arguments asked for first),
//!   `tasks` (`tasks/get`, `update`, `cancel`, the listing), `wait` (the one wait until an
//!   execution finishes), with `errors`, `answers`, `hang_up` and `audit` beneath. They call
//!   each tool's engine plainly: retries and deadlines are the decorator the tool set wraps
//!   it in (`flowgate_core::retrying`), bounded by the request's deadline, which the
//!   dispatcher sets once per request ([`Caller::bounded`]).
//! - The dispatcher (`dispatch`): the one table of MCP methods, by lifecycle (2026-07-28's
//!   per-request one; older revisions' sessions, with `dialect_2025` for the 2025-11-25 tasks
//!   revision), over the operations; `jsonrpc` is the one parse of a message, `reply` what the
//!   dispatcher answers and the one writer of its bytes, `shapes` the wire's task shapes.
//! - The transports, which decide only what they alone know and write each reply once:
//!   [`http`] (stateless Streamable HTTP at `/mcp`) and [`stdio`].

mod answers;
mod audit;
mod caller;
mod calls;
mod dialect_2025;
mod dispatch;
mod errors;
mod hang_up;
mod holds;
pub mod http;
mod jsonrpc;
mod listen;
mod mrtr;
mod output;
mod params;
mod reply;
mod server;
mod shapes;
pub mod stdio;
mod tasks;
mod tools;
mod wait;

pub use caller::Caller;
pub use flowgate_auth::principal::ANONYMOUS;
pub use server::{DEFAULT_MAX_HOLDS_PER_CALLER, FlowgateServer, ServerOptions};
pub use tools::{ToolEntry, ToolSet};

#[cfg(test)]
mod layering {
    //! The modules form layers: none reaches, through `crate::` paths, back to itself.

    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The module each root re-export comes from.
    const REEXPORTS: [(&str, &str); 6] = [
        ("DEFAULT_MAX_HOLDS_PER_CALLER", "server"),
        ("Caller", "caller"),
        ("FlowgateServer", "server"),
        ("ServerOptions", "server"),
        ("ToolEntry", "tools"),
        ("ToolSet", "tools"),
    ];

    /// The first segments of every `crate::` path in `text` (`crate::{a, b::c}` gives a, b).
    fn targets(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => {
                    let mut depth = 1;
                    let end = group
                        .char_indices()
                        .find(|&(_, c)| {
                            depth += match c {
                                '{' => 1,
                                '}' => -1,
                                _ => 0,
                            };
                            depth == 0
                        })
                        .map_or(group.len(), |(i, _)| i);
                    let mut parts = Vec::new();
                    let (mut depth, mut start) = (0, 0);
                    for (i, c) in group[..end].char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                parts.push(&group[start..i]);
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                    parts.push(&group[start..end]);
                    parts
                }
                None => vec![rest],
            };
            for name in names {
                let first: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !first.is_empty() {
                    out.insert(first);
                }
            }
        }
        out
    }

    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }

    #[test]
    fn the_modules_form_layers_without_an_import_circle() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        walk(&src, &mut files);
        let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&src).expect("under src");
            let first = relative.components().next().expect("a component");
            let module = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if module == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read");
            let used = uses.entry(module.clone()).or_default();
            for target in targets(&text) {
                let target = REEXPORTS
                    .iter()
                    .find(|(name, _)| *name == target)
                    .map_or(target.clone(), |(_, m)| (*m).to_owned());
                if target != module {
                    used.insert(target);
                }
            }
        }
        // Depth-first: a module met again while on the path is a circle.
        fn visit(
            module: &str,
            uses: &BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) {
            if let Some(at) = path.iter().position(|m| m == module) {
                panic!(
                    "import circle: {}",
                    [&path[at..], &[module.to_owned()]].concat().join(" -> ")
                );
            }
            if !done.insert(module.to_owned()) {
                return;
            }
            path.push(module.to_owned());
            for next in uses.get(module).into_iter().flatten() {
                visit(next, uses, path, done);
            }
            path.pop();
        }
        for module in uses.keys() {
            visit(module, &uses, &mut Vec::new(), &mut BTreeSet::new());
        }
        assert!(
            uses["caller"].is_empty(),
            "the caller depends on nothing: {uses:?}"
        );
        assert!(!uses["tasks"].contains("http"), "{uses:?}");
        assert_eq!(
            targets("use crate::{a, b::{c, d}, E};\ncrate::f::g"),
            ["E", "a", "b", "f"].map(String::from).into()
        );
    }
}
