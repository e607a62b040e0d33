//! Manifest tools bound to their engines.

use std::collections::HashMap;
use std::sync::Arc;

use flowgate_core::handle::ToolTag;
use flowgate_core::retrying::Retrying;
use flowgate_core::wire::Presentation;
use flowgate_core::{Engine, Registry};
use flowgate_manifest::{Manifest, ManifestError, Schema, TaskSupport, ToolSpec};
use rmcp::model::Tool;

/// One tool: its spec, its engine, and its MCP description.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// The manifest entry.
    pub spec: ToolSpec,
    /// The engine bound to the tool's target.
    pub engine: Arc<dyn Engine>,
    /// What `tools/list` shows.
    pub tool: Tool,
    /// How results and tasks are shaped (with the TTL resolved against the engine).
    pub presentation: Presentation,
    /// The compiled output schema every result must match, when the tool declares one.
    pub output: Option<Schema>,
    /// The tool's metric series, when metrics are on (its engine counts its calls in them).
    pub series: Option<Arc<flowgate_telemetry::metrics::ToolSeries>>,
    /// What its task ids name it by (module `flowgate_core::handle`).
    pub tag: ToolTag,
}

/// Every tool the server offers, in manifest order. Entries are shared: a request holds the
/// entry it works with even when a reload replaces the set meanwhile.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    entries: Vec<Arc<ToolEntry>>,
    by_name: HashMap<String, usize>,
    by_tag: HashMap<ToolTag, usize>,
}

impl ToolSet {
    /// Binds each manifest tool to an engine from `registry`.
    ///
    /// # Errors
    /// Every located error found: an unknown engine, and each problem an engine finds in a
    /// target (see [`further_target_errors`]).
    pub fn build(manifest: &Manifest, registry: &Registry) -> Result<Self, Vec<ManifestError>> {
        let mut set = ToolSet::default();
        let mut errors = Vec::new();
        for spec in &manifest.tools {
            let base = spec
                .location
                .file
                .parent()
                .map(ToOwned::to_owned)
                .unwrap_or_default();
            let target = flowgate_core::TargetSpec {
                config: &spec.target.config,
                base_dir: &base,
                input_schema: &spec.input_schema,
            };
            let engine = match registry.build(&spec.target.engine, target) {
                Ok(engine) => engine,
                Err(first) => {
                    // An engine stops at a target's first problem; the rest are found by asking
                    // again without each offending key, so one run lists them all.
                    let located = |e: &flowgate_core::TargetError| {
                        spec.target
                            .locate(e.key.as_deref())
                            .error(e.message.clone())
                    };
                    errors.push(located(&first));
                    for e in further_target_errors(registry, spec, &base, &first) {
                        let e = located(&e);
                        if !errors.contains(&e) {
                            errors.push(e);
                        }
                    }
                    continue;
                }
            };
            if engine.capabilities().synchronous_only && spec.task != TaskSupport::Forbidden {
                errors.push(spec.location.error(format!(
                    "tool {:?}: this {} target runs synchronously only; set `task: forbidden`",
                    spec.name, spec.target.engine
                )));
                continue;
            }
            // Every call of the tool's engine is traced and counted, in one place; outside
            // that, retried and bounded by its deadlines (each attempt a call of its own).
            if let Some(metrics) = flowgate_telemetry::metrics::get() {
                metrics.tool_engine(&spec.name, engine.kind());
            }
            let engine = flowgate_telemetry::Instrumented::new(engine, &spec.name);
            let series = engine.series().cloned();
            let engine: Arc<dyn Engine> = Arc::new(Retrying::new(engine));
            let output = match spec.output_check() {
                Ok(output) => output,
                Err(e) => {
                    errors.push(spec.location.error(format!(
                        "tool {:?}: output_schema is not a valid JSON Schema: {e}",
                        spec.name
                    )));
                    continue;
                }
            };
            let mut tool = Tool::new(
                spec.name.clone(),
                spec.description.clone(),
                Arc::new(spec.input_schema.clone()),
            );
            if let Some(out) = &spec.output_schema {
                tool = tool.with_raw_output_schema(Arc::new(out.clone()));
            }
            let presentation = spec.presentation(engine.retention_ms());
            let tag = ToolTag::of(engine.kind(), &spec.name, &engine.reference_scope());
            if let Some(&other) = set.by_tag.get(&tag) {
                // Two tools whose 64-bit tags are equal: never met, but their ids would open
                // as each other's, so the manifest is refused.
                errors.push(spec.location.error(format!(
                    "tool {:?}: its task-id tag equals tool {:?}'s; rename one of them",
                    spec.name, set.entries[other].spec.name
                )));
                continue;
            }
            set.by_tag.insert(tag, set.entries.len());
            set.by_name.insert(spec.name.clone(), set.entries.len());
            set.entries.push(Arc::new(ToolEntry {
                spec: spec.clone(),
                engine,
                tool,
                presentation,
                output,
                series,
                tag,
            }));
        }
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// The tool whose task ids carry `tag`.
    pub fn by_tag(&self, tag: &ToolTag) -> Option<&Arc<ToolEntry>> {
        self.by_tag.get(tag).map(|&i| &self.entries[i])
    }

    /// All tools, in manifest order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ToolEntry>> {
        self.entries.iter()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How many more of a target's problems are looked for after its first.
const MORE_TARGET_ERRORS: usize = 20;

/// A target's problems after `first`: the engine is asked again with each offending key
/// removed, until it accepts what is left or names no key. A complaint that follows from a
/// removal (about the removed key itself, now missing, or a missing field of the mapping a
/// misspelt key was removed from) is not reported, but its key is removed too so that the
/// keys after it are still checked; a complaint about the block as a whole ends the search.
fn further_target_errors(
    registry: &Registry,
    spec: &ToolSpec,
    base: &std::path::Path,
    first: &flowgate_core::TargetError,
) -> Vec<flowgate_core::TargetError> {
    let mut config = spec.target.config.clone();
    let mut removed: Vec<String> = Vec::new();
    let mut found = Vec::new();
    let mut next = first.clone();
    // Each round removes one key, so the rounds are bounded by the target's keys too.
    for _ in 0..2 * MORE_TARGET_ERRORS {
        let Some(key) = next.key.clone() else { break };
        if found.len() >= MORE_TARGET_ERRORS || !remove_key(&mut config, &key) {
            break;
        }
        removed.push(key);
        let target = flowgate_core::TargetSpec {
            config: &config,
            base_dir: base,
            input_schema: &spec.input_schema,
        };
        let Err(e) = registry.build(&spec.target.engine, target) else {
            break;
        };
        let Some(at) = e.key.as_deref() else { break };
        let follows_from_removal = removed.iter().any(|r| {
            at == r.as_str()
                || e.message.contains(&format!("`{}`", leaf(r)))
                || (e.message.contains("missing field") && Some(at) == parent(r))
        });
        if !follows_from_removal {
            found.push(e.clone());
        }
        next = e;
    }
    found
}

/// The path of the mapping a dotted key path is in (`None` at the target's top level).
fn parent(path: &str) -> Option<&str> {
    path.rsplit_once('.').map(|(parent, _)| parent)
}

/// The last segment of a dotted key path.
fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// Removes the key at a dotted path (`inputs.approve.message`, `command.0`) from a target's
/// keys; whether there was one.
fn remove_key(config: &mut serde_json::Map<String, serde_json::Value>, path: &str) -> bool {
    use serde_json::Value;
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else {
        return false;
    };
    let Some((head, rest)) = parts.split_first() else {
        return config.remove(last).is_some();
    };
    let mut node = match config.get_mut(*head) {
        Some(v) => v,
        None => return false,
    };
    for part in rest {
        node = match node {
            Value::Object(map) => match map.get_mut(*part) {
                Some(v) => v,
                None => return false,
            },
            Value::Array(items) => {
                match part.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    Some(v) => v,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    match node {
        Value::Object(map) => map.remove(last).is_some(),
        Value::Array(items) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}
