"""Write the manual's reference pages (docs/reference/*.md) from the code, so they cannot drift.

    python docs/gen_reference.py            # rewrite docs/reference/
    python docs/gen_reference.py --out DIR  # write elsewhere (the test compares DIR with docs/reference/)

Each page is read from the thing it documents:

    cli.md              the argparse parsers of `foresight` (foresight.cli.build_parser)
    crds.md             the OpenAPI schemas of manifests/crds/*.yaml
    helm-values.md      charts/foresight/values.schema.json, with values.yaml's defaults and comments
    workloads-config.md the workloads YAML: forecaster/config.py's dataclasses and the keys its parser accepts
    warmpool-policy.md  the warm-pool policy YAML: warmpool/policy.py's dataclasses and parser keys
    metrics.md          every Prometheus metric defined in the processes' source (found by AST)
    reasons.md          condition reasons and Event reasons of kubeoperator (found by AST), the
                        adapter's HTTP Status reasons
                        (these two pages: gen_reference_ops.py, beside this file)

Deterministic (sorted where the code has no order, no clock, no host paths) and fast: it imports
only the light modules that `foresight --help` imports.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import re
import sys
import typing
from pathlib import Path

import yaml

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent, _HERE):  # the project's packages, and the generator's modules beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from gen_reference_md import HEADER, ROOT, code, scrub, table  # noqa: E402  (beside this file: docs/)
from gen_reference_ops import page_metrics, page_reasons  # noqa: E402

# ---------------------------------------------------------------------------------------------- CLI

def _subcommands(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in a._choices_actions}
            seen = set()
            for name, p in a.choices.items():
                if id(p) in seen:  # aliases share a parser
                    continue
                seen.add(id(p))
                yield name, p, helps.get(name) or ""


@contextlib.contextmanager
def _plain_env():
    """Build the parsers without the caller's environment: some defaults read it
    (``--owner-namespace`` from $POD_NAMESPACE), and the page must not depend on where it was made."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: saved[k] for k in ("PATH", "HOME") if k in saved})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cli_commands(parser: argparse.ArgumentParser | None = None, prefix: str = "foresight", doc: str = ""):
    """(command, help, parser) for `foresight` and every (nested) sub-command, in order."""
    if parser is None:
        from foresight.cli import build_parser

        with _plain_env():
            parser = build_parser()
        doc = parser.description or ""
    yield prefix, doc, parser
    for name, sub, help_ in _subcommands(parser):
        yield from cli_commands(sub, f"{prefix} {name}", help_ or sub.description or "")


def cli_flags(parser: argparse.ArgumentParser):
    """(flags, metavar, default, help) of a parser's options and positionals."""
    fmt = parser._get_formatter()
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(a.option_strings) if a.option_strings else (a.metavar or a.dest)
        if a.choices and not isinstance(a, argparse._SubParsersAction):
            meta = "{" + ",".join(str(c) for c in a.choices) + "}"
        elif a.nargs == 0:
            meta = ""
        else:
            meta = a.metavar if isinstance(a.metavar, str) else (a.dest.upper() if a.option_strings else "")
        # identity, not equality: a default of 0 is a value to show, False on a switch is not
        hidden = a.default is None or a.default is argparse.SUPPRESS or a.default is False or a.nargs == 0
        default = "" if hidden else a.default
        help_ = "" if a.help in (None, argparse.SUPPRESS) else fmt._expand_help(a)
        required = "yes" if a.required else ""
        yield name, meta, scrub(repr(default)) if default != "" else "", required, scrub(help_)


def page_cli() -> str:
    out = [HEADER, "# Command line\n\n",
           "Every command and flag of `foresight`, read from its argparse parsers. `--log-format` and "
           "`-v` may also be given before the sub-command.\n\n"]
    for cmd, help_, parser in cli_commands():
        out.append(f"## `{cmd}`\n\n")
        if help_:
            out.append(help_.strip().rstrip(".") + ".\n\n")
        rows = [[code(n), code(m), code(d), r, h] for n, m, d, r, h in cli_flags(parser)]
        if rows:
            out.append(table(["flag", "value", "default", "required", "what it does"], rows))
            out.append("\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------- CRDs

def crd_files() -> list[Path]:
    return sorted((ROOT / "manifests" / "crds").glob("*.yaml"))


def _constraints(s: dict) -> str:
    parts = []
    if "enum" in s:
        parts.append("one of " + ", ".join(f"`{e}`" for e in s["enum"]))
    for k, word in (("minimum", ">="), ("maximum", "<=")):
        if k in s:
            strict = s.get("exclusive" + k[0].upper() + k[1:]) is True
            parts.append(f"{'>' if word == '>=' and strict else '<' if strict else word} {s[k]}")
    for k in ("minLength", "maxLength", "minItems", "maxItems", "pattern", "format"):
        if k in s:
            parts.append(f"{k} `{s[k]}`")
    return ", ".join(parts)


def crd_fields(schema: dict, path: str = ""):
    """(path, schema, required) of every field below ``schema``, depth first, in file order."""
    req = set(schema.get("required") or [])
    for name, sub in (schema.get("properties") or {}).items():
        p = f"{path}.{name}" if path else name
        yield p, sub, name in req
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
            yield from crd_fields(sub["items"], p + "[]")
        else:
            yield from crd_fields(sub, p)


def _type(s: dict) -> str:
    t = s.get("type", "")
    if t == "array" and isinstance(s.get("items"), dict):
        return f"[]{s['items'].get('type', 'object')}"
    return t


def page_crds() -> str:
    out = [HEADER, "# Custom resources\n\n",
           "Every field of the custom resources (`apiVersion: foresight.dev/v1alpha1`), read from the "
           "OpenAPI schemas in `manifests/crds/` (the chart installs the same files). The API server "
           "refuses unknown fields and the rules listed under each kind, with the field path.\n\n"]
    for f in crd_files():
        crd = yaml.safe_load(f.read_text())
        names = crd["spec"]["names"]
        for v in crd["spec"]["versions"]:
            schema = v["schema"]["openAPIV3Schema"]
            out.append(f"## {names['kind']} ({crd['spec']['group']}/{v['name']})\n\n")
            short = ", ".join(names.get("shortNames") or [])
            out.append(f"`kubectl get {names['plural']}`" + (f" (short: `{short}`)" if short else "")
                       + f"; scope {crd['spec']['scope']}; file `manifests/crds/{f.name}`.\n\n")
            cols = v.get("additionalPrinterColumns") or []
            if cols:
                out.append("Columns of `kubectl get`: " + ", ".join(
                    f"`{c['name'].upper()}`" + (" (`-o wide`)" if c.get("priority") else "") for c in cols) + ".\n\n")
            rows, rules = [], []
            for p, s, required in crd_fields(schema):
                if p in ("apiVersion", "kind", "metadata"):
                    continue
                default = json.dumps(s["default"]) if "default" in s else ""
                rows.append([code(p), _type(s), "yes" if required else "", code(default), _constraints(s),
                             s.get("description", "")])
                for r in s.get("x-kubernetes-validations") or []:
                    rules.append([code(p), r.get("message", ""), code(r["rule"])])
            out.append(table(["field", "type", "required", "default", "allowed", "description"], rows))
            if rules:
                out.append("\nRules the API server checks (CEL):\n\n")
                out.append(table(["at", "refused with", "rule"], rules))
            out.append("\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------- YAML comments

def yaml_comments(text: str) -> dict[str, str]:
    """key path -> the comment lines above the key and its trailing comment, from block-style YAML.
    List items add ``[]`` to the path (``pools[].name``). Enough for values.yaml and the examples in
    module docstrings; a flow mapping (``{a: 1}``) is one key."""
    out: dict[str, str] = {}
    parents: list[tuple[int, str]] = []  # (indent of a key, its path); list items push a marker
    pending: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped:
            pending = []
            continue
        indent = len(line) - len(stripped)
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        item = stripped.startswith("- ")
        if item:
            stripped = stripped[2:]
        m = re.match(r"([A-Za-z_$][\w.$-]*)\s*:(\s|$)", stripped)
        if not m:
            pending = []
            continue
        if item:
            # a new item: drop the previous item's keys and marker, keep the list's key
            while parents and parents[-1][0] > indent:
                parents.pop()
            parents.append((indent + 1, (parents[-1][1] if parents else "") + "[]"))
            key_indent = indent + 2
        else:
            key_indent = indent
            while parents and parents[-1][0] >= key_indent:
                parents.pop()
        parent = parents[-1][1] if parents else ""
        path = f"{parent}.{m.group(1)}" if parent else m.group(1)
        rest = stripped[m.end():]
        trailing = next((rest[i + 1:].strip() for i, ch in enumerate(rest)
                         if ch == "#" and (i == 0 or rest[i - 1] in " \t")), "")
        text_ = " ".join(pending + ([trailing] if trailing else []))
        if text_:
            out[path] = text_
        pending = []
        parents.append((key_indent, path))
    return out


# ---------------------------------------------------------------------------------------------- Helm values

def helm_values() -> list[tuple[str, dict, object, str]]:
    """(path, schema, default from values.yaml, description) of every value in values.schema.json."""
    chart = ROOT / "charts" / "foresight"
    schema = json.loads((chart / "values.schema.json").read_text())
    text = (chart / "values.yaml").read_text()
    defaults = yaml.safe_load(text) or {}
    comments = yaml_comments(text)
    rows = []

    def walk(s: dict, path: str, dflt: object) -> None:
        if "$ref" in s:
            s = {**schema["definitions"][s["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in s.items() if k != "$ref"}}
        props = s.get("properties") or {}
        for name, sub in props.items():
            p = f"{path}.{name}" if path else name
            d = dflt.get(name) if isinstance(dflt, dict) else None
            desc = sub.get("description") or comments.get(p, "")
            rows.append((p, sub, d, desc))
            walk(sub, p, d)

    walk(schema, "", defaults)
    return rows


def page_helm() -> str:
    out = [HEADER, "# Helm values\n\n",
           "Every value of `charts/foresight`, read from `values.schema.json` (which refuses unknown keys) "
           "with the default and the comment from `values.yaml`. Set them with `--set key=value` or `-f my-values.yaml`.\n\n"]
    rows = []
    for p, s, d, desc in helm_values():
        t = s.get("type", "")
        if isinstance(t, list):
            t = " or ".join(t)
        if not t and "enum" in s:
            t = "enum"
        if isinstance(d, (dict, list)) and (d or t == "object"):
            dflt = "" if isinstance(d, dict) and s.get("properties") else json.dumps(d, sort_keys=True)
        else:
            dflt = "" if d is None else json.dumps(d)
        rows.append([code(p), t, code(dflt), _constraints(s), desc])
    out.append(table(["value", "type", "default", "allowed", "description"], rows))
    return "".join(out)


# ---------------------------------------------------------------------------------------------- config dataclasses

def _docstring_fields(cls) -> dict[str, str]:
    """``name: text`` entries of a dataclass docstring (ServingSettings' style)."""
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    cur = None
    for line in doc.splitlines():
        m = re.match(r"^(\w+): (.*)$", line)
        if m and m.group(1) in {f.name for f in dataclasses.fields(cls)}:
            cur = m.group(1)
            out[cur] = m.group(2)
        elif cur and line.startswith("    "):
            out[cur] += " " + line.strip()
        else:
            cur = None
    return out


def _field_comments(cls) -> dict[str, str]:
    """Trailing ``# comments`` on a dataclass's field lines."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out = {}
    for line in src.splitlines():
        m = re.match(r"^\s+(\w+): [^#]*#\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        v = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(v):
            return ""
    else:
        return "(required)"
    if v is None:
        return "null"
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, (dict, list, str, bool, int, float)):
        return json.dumps(v)
    return repr(v)


def _type_name(t) -> str:
    s = t if isinstance(t, str) else t.__name__ if isinstance(t, type) else str(t)
    s = re.sub(r"\btyping\.", "", str(s))
    s = re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", s)  # forecaster.serving.ServingSettings -> ServingSettings
    s = s.replace("tuple[str, ...]", "list of strings").replace("tuple[float, ...]", "list of numbers")
    s = s.replace("tuple[int, ...]", "list of integers").replace("Mapping[str, Any]", "mapping")
    s = s.replace("Mapping[str, str]", "mapping of strings").replace(" | None", " or null")
    s = re.sub(r"tuple\[(\w+), \.\.\.\]", r"list of \1", s)
    return s


def config_sections():
    """(YAML path, dataclass or None, accepted keys, extra descriptions) of the workloads YAML."""
    from forecaster.config import CapacityConfig, SourceConfig, StoreConfig, TrainingConfig, WorkloadConfig
    from forecaster.predicted import PredictedMetric
    from forecaster.serving import ServingSettings

    return [
        ("source", SourceConfig, None),
        ("store", StoreConfig, None),
        ("training", TrainingConfig, None),
        ("serving", ServingSettings, None),
        ("workloads[]", WorkloadConfig, None),
        ("workloads[].capacity", CapacityConfig, None),
        ("workloads[].metrics[]", PredictedMetric, None),
    ]


def policy_sections():
    from warmpool.policy import POOL_KEYS, IdleModel, MemoryBudget, PoolSpec, RequestRate, Template
    from warmpool.ttl import IdleTTL

    return [
        ("memory_budget", MemoryBudget, None),
        ("pools[]", PoolSpec, POOL_KEYS),
        ("pools[].template", Template, None),
        ("pools[].idle_ttl", IdleTTL, None),
        ("pools[].idle_model", IdleModel, None),
        ("pools[].request_rate", RequestRate, None),
    ]


def section_rows(cls, keys, example: dict[str, str], path: str):
    """[key, type, default, allowed, description] per key; ``allowed`` comes from the checks
    the field's annotation carries (core.typedconfig), the ones the parser applies."""
    from core.typedconfig import constraint_text

    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    docs = {**_field_comments(cls), **_docstring_fields(cls)}
    rows = []
    for k in (keys or list(fields)):
        f = fields.get(k)
        desc = docs.get(k) or example.get(f"{path}.{k}", "")
        if f is None:
            rows.append([code(k), "", "", "", desc])
            continue
        allowed = constraint_text(cls, k)
        rows.append([code(k), _type_name(hints.get(k, f.type)), code(_default(f)), code(allowed) if allowed else "", desc])
    return rows


def _example(module) -> dict[str, str]:
    """Comments of the YAML example in a module's docstring, by key path."""
    doc = module.__doc__ or ""
    m = re.search(r"```yaml\n(.*?)```", doc, re.S)
    return yaml_comments(m.group(1)) if m else {}


def page_config(title: str, intro: str, sections, module) -> str:
    example = _example(module)
    out = [HEADER, f"# {title}\n\n", intro, "\n"]
    for path, cls, keys in sections:
        out.append(f"## `{path}`\n\n")
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
        if doc and not doc.startswith(cls.__name__ + "("):
            out.append(" ".join(doc.split()) + "\n\n")
        rows = section_rows(cls, keys, example, path)
        if any(r[3] for r in rows):
            out.append(table(["key", "type", "default", "allowed", "description"], rows))
        else:  # nothing declares its checks in its annotations (yet): no empty column
            out.append(table(["key", "type", "default", "description"], [r[:3] + r[4:] for r in rows]))
        out.append("\n")
    return "".join(out)


def page_workloads() -> str:
    import forecaster.config as mod

    intro = ("The workloads file that `foresight train --config` and `foresight serve --config` read "
             "(`apiVersion: foresight/v1alpha1`, `kind: WorkloadConfig`), key by key, from the dataclasses "
             "in `forecaster/config.py` and the sections it parses. Unknown keys, wrong types and impossible "
             "values are all reported at once, each with its path. A workload's `serving:` takes the same "
             "keys as the top-level `serving:` and overrides it key by key; a PredictiveAutoscaler's "
             "`spec.serving` takes them in camelCase.\n")
    return page_config("Workloads configuration", intro, config_sections(), mod)


def page_policy() -> str:
    import warmpool.policy as mod

    intro = ("The warm-pool policy that `foresight warmpool run --policy` reads (`apiVersion: foresight/v1alpha1`, "
             "`kind: WarmPoolPolicy`), key by key, from `warmpool/policy.py`. `foresight warmpool validate FILE` "
             "prints every problem with its path. A pool's `workload` is `{namespace, name}`; "
             "`runtime_classes.<name>` takes `runtime_ms`, `image_ms` and `sandbox_ms`, each `[p50, p90, p99]` in ms.\n")
    return page_config("Warm-pool policy", intro, policy_sections(), mod)


# ---------------------------------------------------------------------------------------------- main

PAGES = {
    "cli.md": page_cli,
    "crds.md": page_crds,
    "helm-values.md": page_helm,
    "workloads-config.md": page_workloads,
    "warmpool-policy.md": page_policy,
    "metrics.md": page_metrics,
    "reasons.md": page_reasons,
}


def generate(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in PAGES.items():
        p = out_dir / name
        p.write_text(page().rstrip("\n") + "\n")
        written.append(p)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gen_reference", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "reference", help="folder for the pages")
    args = ap.parse_args(argv)
    for p in generate(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
