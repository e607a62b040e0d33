//! Manifest tools bound to their engines.

use std::collections::HashMap;
use std::sync::Arc;

use flowgate_core::handle::ToolTag;
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
    /// One located error per tool whose engine is unknown or whose target the engine refuses.
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
            match registry.build(&spec.target.engine, target) {
                Ok(engine)
                    if engine.capabilities().synchronous_only
                        && spec.task != TaskSupport::Forbidden =>
                {
                    errors.push(spec.location.error(format!(
                        "tool {:?}: this {} target runs synchronously only; set `task: forbidden`",
                        spec.name, spec.target.engine
                    )));
                }
                Ok(engine) => {
                    // Every call of the tool's engine is traced and counted, in one place.
                    if let Some(metrics) = flowgate_telemetry::metrics::get() {
                        metrics.tool_engine(&spec.name, engine.kind());
                    }
                    let engine = flowgate_telemetry::Instrumented::new(engine, &spec.name);
                    let series = engine.series().cloned();
                    let engine: Arc<dyn Engine> = Arc::new(engine);
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
                        // Two tools whose 64-bit tags are equal: never met, but their ids
                        // would open as each other's, so the manifest is refused.
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
                Err(e) => errors.push(spec.target.locate(e.key.as_deref()).error(e.message)),
            }
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
