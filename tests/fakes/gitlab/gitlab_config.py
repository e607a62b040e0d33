"""A project's .gitlab-ci.yml as GitLab reads it when it creates a pipeline: the `spec:inputs`
header and `$[[ inputs.* ]]` interpolation (doc/ci/inputs, lib/gitlab/ci/config/interpolation),
`!reference`, `extends`, `default`, `stages`, `variables`, `workflow:name` and `workflow:rules`,
and which jobs enter the pipeline through `rules`, `only` and `except` (doc/ci/yaml,
doc/ci/jobs/job_rules.md). Everything here raises ConfigError with GitLab's own wording; the
caller answers it as GitLab does (400 `{"message": {"base": [...]}}`, or a pipeline with
`yaml_errors` for a trigger).
"""

import copy
import fnmatch
import glob
import json
import os
import re

import yaml

import gitlab_expr


class ConfigError(Exception):
    """A configuration GitLab refuses; `messages` go into `{"message": {"base": messages}}`."""

    def __init__(self, *messages):
        super().__init__("; ".join(messages))
        self.messages = list(messages)


class Reference:
    """A `!reference [.job, key, ...]` tag, resolved after `extends`."""

    def __init__(self, path):
        self.path = path


class _Loader(yaml.SafeLoader):
    pass


def _reference(loader, node):
    return Reference(loader.construct_sequence(node, deep=True))


_Loader.add_constructor("!reference", _reference)

GLOBAL_KEYS = {"default", "include", "stages", "variables", "workflow", "image", "services", "cache",
               "before_script", "after_script", "spec"}
JOB_KEYS = {"after_script", "allow_failure", "artifacts", "before_script", "cache", "coverage",
            "dast_configuration", "dependencies", "environment", "extends", "hooks", "id_tokens",
            "identity", "image", "inherit", "inputs", "interruptible", "manual_confirmation", "needs",
            "only", "except", "pages", "parallel", "release", "resource_group", "retry", "rules",
            "run", "script", "secrets", "services", "stage", "tags", "timeout", "trigger",
            "variables", "when", "start_in"}
DEFAULT_KEYS = {"after_script", "artifacts", "before_script", "cache", "hooks", "id_tokens", "image",
                "interruptible", "retry", "services", "tags", "timeout"}
WHENS = {"on_success", "on_failure", "always", "manual", "delayed", "never"}
MAX_INPUTS = 20
BLOCK = re.compile(r"\$\[\[\s*(\S.*?\S|\S)\s*\]\]")


# ---------------------------------------------------------------- documents and the header

def documents(text):
    """(header or None, content): a file with two YAML documents whose first holds `spec` has a
    header (doc/ci/yaml, header keywords)."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader)]
    except yaml.YAMLError as e:
        raise ConfigError(f"(<unknown>): {_yaml_problem(e)}")
    docs = [d for d in docs if d is not None] or [{}]
    if len(docs) > 2:
        raise ConfigError("Invalid configuration format")
    if len(docs) == 2:
        header, content = docs
        if not isinstance(header, dict) or set(header) != {"spec"}:
            raise ConfigError("Invalid configuration format")
        return header, content
    if not isinstance(docs[0], dict):
        raise ConfigError("Invalid configuration format")
    return None, docs[0]


def _yaml_problem(e):
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    if mark is not None:
        return f"{problem} at line {mark.line + 1} column {mark.column + 1}"
    return problem


# ---------------------------------------------------------------- inputs

def _type_name(spec):
    return (spec or {}).get("type", "string")


def _check_input(name, spec, value):
    """The input's value (the given one or its default), or raises with GitLab's messages."""
    spec = spec or {}
    kind = _type_name(spec)
    errors = []

    def err(message):
        errors.append(f"`{name}` input: {message}")

    if kind not in ("string", "number", "boolean", "array"):
        raise ConfigError(f"unknown input specification for `{name}` (valid types: boolean, number, string, array)")
    required = "default" not in spec
    if required and value is None:
        err("required value has not been provided")
        raise ConfigError(*errors)

    def validate(v, default):
        which = "default" if default else "provided"
        ok = {"string": isinstance(v, str),
              "number": isinstance(v, (int, float)) and not isinstance(v, bool),
              "boolean": isinstance(v, bool),
              "array": isinstance(v, list)}[kind]
        if not ok:
            err(f"{which} value is not a{'n' if kind == 'array' else ''} {kind}")
            return
        options = spec.get("options")
        if options is not None:
            if kind not in ("string", "number"):
                err("Options can only be used with string and number inputs")
            elif v not in options:
                err(f"`{v}` cannot be used because it is not in the list of allowed options")
        if "regex" in spec:
            if kind != "string":
                err("RegEx validation can only be used with string inputs")
            else:
                try:
                    if not re.search(spec["regex"], v):
                        err(f"{which} value does not match required RegEx pattern")
                except re.error:
                    err("invalid regular expression")

    if not required:
        validate(spec.get("default"), True)
    if value is not None:
        validate(value, False)
    if errors:
        raise ConfigError(*errors)
    return spec.get("default") if value is None else value


def resolve_inputs(header, given):
    """The values of the header's inputs for a pipeline created with `given`."""
    if not isinstance(given, dict):
        raise ConfigError("Given inputs must be a hash")
    if header is None:
        if given:
            raise ConfigError("Given inputs not defined in the `spec` section of the included configuration file")
        return None
    spec = header.get("spec") or {}
    if not isinstance(spec, dict) or set(spec) - {"inputs", "include", "component", "description"}:
        unknown = ", ".join(sorted(set(spec) - {"inputs", "include", "component", "description"})) if isinstance(spec, dict) else "spec"
        raise ConfigError(f"header:spec config contains unknown keys: {unknown}")
    specs = spec.get("inputs") or {}
    if len(given) > MAX_INPUTS:
        raise ConfigError(f"There cannot be more than {MAX_INPUTS} inputs")
    unknown = [k for k in given if k not in specs]
    if unknown:
        raise ConfigError(f"unknown input arguments: {', '.join(unknown)}")
    values, errors = {}, []
    for name, s in specs.items():
        try:
            values[name] = _check_input(name, s, given.get(name))
        except ConfigError as e:
            errors += e.messages
    if errors:
        raise ConfigError(*errors)
    return values


def posix_escape(text):
    """Ruby's Shellwords.shellescape, which `posix_escape` is."""
    if text == "":
        return "''"
    out = re.sub(r"([^A-Za-z0-9_\-.,:+/@\n])", r"\\\1", text)
    return out.replace("\n", "'\n'")


def expand_vars(text, variables):
    """GitLab's ExpandVariables.expand: $VAR, ${VAR} and %VAR% (unknown ones become empty)."""
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return variables.get(name, "")
    return re.sub(r"\$([a-zA-Z_][a-zA-Z0-9_]*)|\$\{([a-zA-Z_][a-zA-Z0-9_]*)\}|%([a-zA-Z_][a-zA-Z0-9_]*)%", sub, text)


def _function(value, fn, variables, masked):
    fn = fn.strip()
    m = re.fullmatch(r"truncate\(\s*(\d+)\s*,\s*(\d+)\s*\)", fn)
    name = m and "truncate" or fn
    if name in ("truncate", "posix_escape", "posix_quote", "expand_vars") and not isinstance(value, str):
        raise ConfigError(f"invalid input type: {name} can only be used with string inputs")
    if m:
        start, length = int(m.group(1)), int(m.group(2))
        return value[start:start + length]
    if fn in ("posix_escape", "posix_quote"):
        return posix_escape(value)
    if fn == "expand_vars":
        for key in masked:
            if re.search(r"\$\{?" + re.escape(key) + r"\b", value):
                raise ConfigError(f"variable expansion error: masked variables cannot be expanded")
        return expand_vars(value, variables)
    raise ConfigError(f"no function matching `{fn}`: check that the function name, arguments, and types are correct")


def _block_value(data, inputs, variables, masked):
    access, *functions = [p.strip() for p in data.split("|")]
    parts = access.split(".", 4)
    if len(parts) <= 1:
        raise ConfigError("invalid interpolation access pattern")
    if len(access.encode()) > 1024:
        raise ConfigError("maximum interpolation expression size exceeded")
    if parts[0] != "inputs":
        raise ConfigError(f"unknown interpolation key: `{parts[0]}`")
    if parts[1] not in inputs:
        raise ConfigError(f"unknown interpolation key: `{parts[1]}`")
    if len(functions) > 3:
        raise ConfigError("too many functions in interpolation block")
    value = inputs[parts[1]]
    for fn in functions:
        value = _function(value, fn, variables, masked)
    return value


def _as_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list):
        return json.dumps(value, ensure_ascii=False).replace('","', '", "')
    return str(value)


def interpolate(content, inputs, variables, masked=()):
    """Replaces `$[[ inputs.x | fn ]]` blocks in every string of the parsed content (GitLab
    interpolates the loaded YAML, node by node): a string that is one block takes the input's
    own type; a block inside a longer string becomes text."""
    if inputs is None:
        return content

    def walk(node):
        if isinstance(node, dict):
            return {walk(k): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, Reference):
            return Reference(walk(node.path))
        if isinstance(node, str) and "$[[" in node:
            if len(node.encode()) > 1024 * 1024:
                raise ConfigError("config node too large")
            whole = BLOCK.fullmatch(node)
            if whole:
                return _block_value(whole.group(1), inputs, variables, masked)
            return BLOCK.sub(lambda m: _as_text(_block_value(m.group(1), inputs, variables, masked)), node)
        return node

    return walk(content)


# ---------------------------------------------------------------- structure

def _deep_merge(base, over):
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _extends(config, name, seen=()):
    job = config[name]
    parents = job.get("extends")
    if parents is None:
        return job
    if len(seen) > 10:
        raise ConfigError(f"{name}: nesting too deep in `extends`")
    parents = [parents] if isinstance(parents, str) else parents
    merged = {}
    for p in parents:
        if p not in config or not isinstance(config[p], dict):
            raise ConfigError(f"{name}: unknown keys in `extends` ({p})")
        if p in seen or p == name:
            raise ConfigError(f"{name}: circular dependency detected in `extends`")
        merged = _deep_merge(merged, _extends(config, p, seen + (name,)))
    own = {k: v for k, v in job.items() if k != "extends"}
    return _deep_merge(merged, own)


def _resolve_references(node, config, depth=0):
    if depth > 10:
        raise ConfigError("!reference: too many nested references")
    if isinstance(node, Reference):
        target = config
        for key in node.path:
            if not isinstance(target, dict) or key not in target:
                raise ConfigError(f"!reference [{', '.join(map(str, node.path))}] could not be found")
            target = target[key]
        return _resolve_references(copy.deepcopy(target), config, depth + 1)
    if isinstance(node, dict):
        return {k: _resolve_references(v, config, depth) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_references(v, config, depth) for v in node]
    return node


def _flatten(lines, key, where):
    """A script: a string or a nested array of strings (up to 10 levels)."""
    out = []

    def walk(v, depth):
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list) and depth < 10:
            for x in v:
                walk(x, depth + 1)
        else:
            raise ConfigError(f"{where}:{key} config should be a string or a nested array of strings up to 10 levels deep")
    if lines is None:
        return []
    walk(lines, 0)
    return out


def variables_of(block, where):
    """`variables:` as {name: {"value", "expand"}}."""
    out = {}
    if block is None:
        return out
    if not isinstance(block, dict):
        raise ConfigError(f"{where}:variables config should be a hash of key value pairs, value can be a hash")
    for k, v in block.items():
        if isinstance(v, dict):
            unknown = set(v) - {"value", "description", "expand", "options"}
            if unknown:
                raise ConfigError(f"{where}:variables:{k} config uses invalid data keys: {', '.join(sorted(unknown))}")
            out[str(k)] = {"value": _as_text(v.get("value", "")), "expand": v.get("expand", True) is not False}
        elif isinstance(v, (str, int, float, bool)) or v is None:
            out[str(k)] = {"value": _as_text(v), "expand": True}
        else:
            raise ConfigError(f"{where}:variables config should be a hash of key value pairs, value can be a hash")
    return out


class Pipeline:
    """What GitLab decided when it created a pipeline from the configuration."""

    def __init__(self):
        self.name = None
        self.stages = []
        self.global_variables = {}
        self.jobs = []  # job seeds, in configuration order
        self.config = {}  # the resolved configuration (for the runner)


def parse(text, given_inputs, variables, masked=()):
    """The resolved configuration of `text` with `given_inputs` (raises ConfigError)."""
    header, content = documents(text)
    inputs = resolve_inputs(header, given_inputs or {})
    content = interpolate(content, inputs, variables, masked)
    if not isinstance(content, dict):
        raise ConfigError("Invalid configuration format")
    if "include" in content:
        raise ConfigError("include: the GitLab fake does not read included files (a shortcut it lists)")
    config = _resolve_references(content, content)
    for name, value in list(config.items()):
        if name in GLOBAL_KEYS or name.startswith("."):
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"jobs:{name} config should be a hash")
        config[name] = _extends(config, name)
    config = _resolve_references(config, config)
    return config


def _stages(config):
    stages = config.get("stages") or ["build", "test", "deploy"]
    if not isinstance(stages, list) or not all(isinstance(s, str) for s in stages):
        raise ConfigError("stages config should be an array of strings")
    return [".pre"] + [s for s in stages if s not in (".pre", ".post")] + [".post"]


def _rule_matches(rule, variables, project_dir, source, where):
    if not isinstance(rule, dict):
        raise ConfigError(f"{where} config should be a hash")
    unknown = set(rule) - {"if", "changes", "exists", "when", "allow_failure", "variables", "needs",
                           "start_in", "interruptible", "auto_cancel"}
    if unknown:
        raise ConfigError(f"{where} config contains unknown keys: {', '.join(sorted(unknown))}")
    if "if" in rule:
        try:
            if not gitlab_expr.evaluate(rule["if"], variables):
                return False
        except gitlab_expr.ExpressionError:
            raise ConfigError(f"{where} if invalid expression syntax")
    if "changes" in rule and source in ("push", "merge_request_event"):
        # The fake has no pushes: `changes` is only ever evaluated for API, trigger and web
        # pipelines, where GitLab always takes it as true.
        pass
    if "exists" in rule:
        paths = rule["exists"]
        paths = paths.get("paths", []) if isinstance(paths, dict) else paths
        paths = [paths] if isinstance(paths, str) else paths
        if not any(_exists(project_dir, p, variables) for p in paths):
            return False
    return True


def _exists(project_dir, pattern, variables):
    pattern = expand_vars(pattern, variables)
    for path in glob.glob(os.path.join(project_dir, "**", "*"), recursive=True):
        rel = os.path.relpath(path, project_dir)
        if rel.startswith(".fake-") or not os.path.isfile(path):
            continue
        if fnmatch.fnmatchcase(rel, pattern.lstrip("/")):
            return True
    return False


def _only_except(spec, variables, source, ref, key):
    """Whether an `only`/`except` block matches this pipeline."""
    if isinstance(spec, (str, list)):
        spec = {"refs": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"{key} config should be an array of strings or a hash")
    unknown = set(spec) - {"refs", "variables", "changes", "kubernetes"}
    if unknown:
        raise ConfigError(f"{key} config contains unknown keys: {', '.join(sorted(unknown))}")
    matched = []
    if "refs" in spec:
        refs = spec["refs"]
        refs = [refs] if isinstance(refs, str) else refs
        sources = {"api": "api", "external": "external", "pipelines": "pipeline", "pushes": "push",
                   "schedules": "schedule", "triggers": "trigger", "web": "web",
                   "merge_requests": "merge_request_event", "chat": "chat",
                   "external_pull_requests": "external_pull_request_event"}
        hit = False
        for r in refs:
            if r == "branches":
                hit |= True
            elif r == "tags":
                hit |= False
            elif r in sources:
                hit |= source == sources[r]
            elif isinstance(r, str) and len(r) > 1 and r.startswith("/") and re.fullmatch(r"/.*/[a-z]*", r):
                body, flags = r[1:].rsplit("/", 1)
                hit |= re.search(body, ref, re.IGNORECASE if "i" in flags else 0) is not None
            else:
                hit |= r == ref
        matched.append(hit)
    if "variables" in spec:
        exprs = spec["variables"] if isinstance(spec["variables"], list) else [spec["variables"]]
        try:
            matched.append(any(gitlab_expr.evaluate(x, variables) for x in exprs))
        except gitlab_expr.ExpressionError:
            raise ConfigError(f"{key} variables invalid expression syntax")
    if "changes" in spec:
        matched.append(True)  # never a push in the fake: GitLab takes `changes` as true then
    if "kubernetes" in spec:
        matched.append(False)
    return all(matched)


def _dict_vars(vs):
    return {k: v["value"] for k, v in vs.items()}


def evaluate(config, variables, project_dir, source, ref):
    """The pipeline GitLab creates from `config` (resolved) with `variables` (predefined,
    project and pipeline variables), or raises ConfigError."""
    p = Pipeline()
    p.config = config
    p.stages = _stages(config)
    global_vars = variables_of(config.get("variables"), "root")
    workflow = config.get("workflow") or {}
    if not isinstance(workflow, dict):
        raise ConfigError("workflow config should be a hash")
    unknown = set(workflow) - {"rules", "name", "auto_cancel"}
    if unknown:
        raise ConfigError(f"workflow config contains unknown keys: {', '.join(sorted(unknown))}")
    scope = {**_dict_vars(global_vars), **variables}
    if "rules" in workflow:
        chosen = None
        for i, rule in enumerate(workflow["rules"] or []):
            if _rule_matches(rule, scope, project_dir, source, f"workflow:rules:rule"):
                chosen = rule
                break
        if chosen is None or chosen.get("when", "always") == "never":
            raise ConfigError("Pipeline filtered out by workflow rules.")
        global_vars.update(variables_of(chosen.get("variables"), "workflow:rules:rule"))
    p.global_variables = global_vars
    scope = {**_dict_vars(global_vars), **variables}
    name = workflow.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise ConfigError("workflow:name config should be a string")
        name = expand_vars(name, scope).strip()
        if len(name) > 255:
            raise ConfigError("Failed to build pipeline metadata! Name is too long (maximum is 255 characters)")
        p.name = name or None
    default = config.get("default") or {}
    if set(default) - DEFAULT_KEYS:
        raise ConfigError(f"default config contains unknown keys: {', '.join(sorted(set(default) - DEFAULT_KEYS))}")
    jobs = []
    for name_, spec in config.items():
        if name_ in GLOBAL_KEYS or name_.startswith("."):
            continue
        where = f"jobs:{name_}"
        unknown = set(spec) - JOB_KEYS
        if unknown:
            raise ConfigError(f"{where} config contains unknown keys: {', '.join(sorted(unknown))}")
        if "trigger" in spec:
            raise ConfigError(f"{where}: trigger jobs are a shortcut of the GitLab fake (it runs no downstream pipelines)")
        if "script" not in spec:
            raise ConfigError(f"{where} config should implement the script:, run:, or trigger: keyword")
        if "rules" in spec and ("only" in spec or "except" in spec):
            key = "only" if "only" in spec else "except"
            raise ConfigError(f"{where} config key may not be used with `rules`: {key}")
        inherit = spec.get("inherit") or {}
        inherit_default = inherit.get("default", True)
        job = {}
        for k in DEFAULT_KEYS:
            use = inherit_default is True or (isinstance(inherit_default, list) and k in inherit_default)
            if use and k in default:
                job[k] = copy.deepcopy(default[k])
        for k in ("before_script", "after_script"):
            if k not in job and k in config and inherit_default is not False:
                job[k] = copy.deepcopy(config[k])
        job.update(spec)
        job_vars = variables_of(job.get("variables"), where)
        inherit_vars = inherit.get("variables", True)
        if inherit_vars is True:
            visible_globals = dict(global_vars)
        elif isinstance(inherit_vars, list):
            visible_globals = {k: v for k, v in global_vars.items() if k in inherit_vars}
        else:
            visible_globals = {}
        job_scope = {**_dict_vars(visible_globals), **_dict_vars(job_vars), **variables}
        when = job.get("when", "on_success")
        allow = job.get("allow_failure")
        start_in = job.get("start_in")
        needs = job.get("needs")
        if "rules" in job:
            rules = job["rules"]
            if not isinstance(rules, list):
                raise ConfigError(f"{where}:rules config should be an array of hashes")
            flat = []
            for r in rules:
                flat += r if isinstance(r, list) else [r]
            chosen = None
            for rule in flat:
                if _rule_matches(rule, job_scope, project_dir, source, f"{where}:rules:rule"):
                    chosen = rule
                    break
            if chosen is None:
                continue
            when = chosen.get("when", when if "when" in job else "on_success")
            if "allow_failure" in chosen:
                allow = chosen["allow_failure"]
            if "start_in" in chosen:
                start_in = chosen["start_in"]
            if "needs" in chosen:
                needs = chosen["needs"]
            job_vars.update(variables_of(chosen.get("variables"), f"{where}:rules:rule"))
        else:
            only = job.get("only", ["branches", "tags"] if "except" not in job else None)
            if only is not None and not _only_except(only, job_scope, source, ref, f"{where}:only"):
                continue
            if "except" in job and _only_except(job["except"], job_scope, source, ref, f"{where}:except"):
                continue
        if when not in WHENS:
            raise ConfigError(f"{where} when should be one of: {', '.join(sorted(WHENS - {'never'}))}")
        if when == "never":
            continue
        if when == "delayed" and not start_in:
            raise ConfigError(f"{where} start in should be specified for delayed job")
        stage = job.get("stage", "test")
        if stage not in p.stages:
            raise ConfigError(f"{name_} job: chosen stage {stage} does not exist; available stages are {', '.join(p.stages)}")
        exit_codes = []
        if isinstance(allow, dict):
            codes = allow.get("exit_codes")
            exit_codes = [codes] if isinstance(codes, int) else list(codes or [])
            allow = False
        elif allow is None:
            allow = when == "manual"
        parsed_needs = None
        if needs is not None:
            parsed_needs = []
            for n in needs:
                if isinstance(n, str):
                    parsed_needs.append({"job": n, "optional": False, "artifacts": True})
                elif isinstance(n, dict) and "job" in n:
                    parsed_needs.append({"job": n["job"], "optional": bool(n.get("optional", False)),
                                         "artifacts": n.get("artifacts", True) is not False})
                else:
                    raise ConfigError(f"{where}:needs config can only be a string or a hash")
        for key in ("before_script", "script", "after_script"):
            _flatten(job.get(key), key, where)
        inputs = job.get("inputs") or {}
        for iname, ispec in inputs.items():
            if not isinstance(ispec, dict) or "default" not in ispec:
                raise ConfigError(f"{where}:inputs:{iname} input must have a default value")
            try:
                _check_input(iname, ispec, None)  # a job's inputs are checked when it is created
            except ConfigError as e:
                raise ConfigError(*[f"{where}:inputs: {m}" for m in e.messages])
        jobs.append({
            "name": name_, "stage": stage, "stage_idx": p.stages.index(stage), "when": when,
            "allow_failure": bool(allow), "exit_codes": exit_codes, "needs": parsed_needs,
            "start_in": start_in, "timeout": job.get("timeout"),
            "resource_group": job.get("resource_group"), "variables": job_vars,
            "visible_globals": visible_globals, "spec": job, "inputs": inputs,
            "artifacts": job.get("artifacts") or {},
            "interruptible": job.get("interruptible", False),
        })
    if not jobs:
        raise ConfigError("Pipeline will not run for the selected trigger. The rules configuration "
                          "prevented any jobs from being added to the pipeline.")
    names = {j["name"] for j in jobs}
    for j in jobs:
        kept = []
        for n in j["needs"] or []:
            if n["job"] in names:
                kept.append(n)
            elif not n["optional"]:
                raise ConfigError(f"'{j['name']}' job needs '{n['job']}' job, but '{n['job']}' does not exist in the "
                                  "pipeline. This might be because of the only, except, or rules keywords. To need "
                                  "a job that sometimes does not exist in the pipeline, use needs:optional.")
        if j["needs"] is not None:
            j["needs"] = kept
    p.jobs = jobs
    return p


DURATION_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
                  "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
                  "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
                  "w": 604800, "week": 604800, "weeks": 604800, "mo": 2592000, "month": 2592000,
                  "months": 2592000, "y": 31536000, "year": 31536000, "years": 31536000}


def duration(text):
    """Seconds in a GitLab duration (`3 mins 4 sec`, `2h`, `42`), or None for `never`."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return int(text)
    t = str(text).strip().lower()
    if t == "never":
        return None
    if t.isdigit():
        return int(t)
    total, found = 0, False
    for n, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", t):
        if unit not in DURATION_UNITS:
            raise ConfigError(f"invalid duration: {text}")
        total += float(n) * DURATION_UNITS[unit]
        found = True
    if not found:
        raise ConfigError(f"invalid duration: {text}")
    return int(total)

