//! flowgate's tool manifests: YAML files that declare which tools exist and which workflow each
//! one starts.
//!
//! ```yaml
//! default_scopes: [tools.run]   # OAuth scopes of tools without their own `scopes` (this file)
//! tools:
//!   - name: nightly_etl
//!     description: Run the nightly ETL for one day.
//!     input_schema:
//!       type: object
//!       properties: { day: { type: string, format: date } }
//!       required: [day]
//!     task: required            # required | optional (default) | forbidden
//!     poll_interval_ms: 5000
//!     ttl_ms: 604800000
//!     failure: tool_error       # or jsonrpc_error
//!     elicit:                   # ask for missing arguments before starting (MCP MRTR)
//!       - argument: day
//!         message: Which day should the ETL run for?
//!     scopes: [etl.run]         # a caller needs these to see and call the tool (when auth is on)
//!     target:
//!       engine: local
//!       command: ["./etl.sh"]
//! ```
//!
//! Parsing is strict: unknown keys are errors, and every error names the file, line and column.
//! `${NAME}` in any value, whatever its scalar style, is replaced by the environment variable
//! `NAME` at load; an unset variable is an error at its position, `$${` is a literal `${`, and
//! every other `$` (shell forms, the run variables flowgate sets) is left for the command.

mod error;
mod load;
mod schema;
mod tool;

pub use error::ManifestError;
pub use load::{load_path, load_path_all, parse_str, parse_str_all, variables};
pub use schema::{Naming, Schema};
pub use tool::{Elicit, Location, Manifest, Target, TaskSupport, ToolSpec, Ttl};
