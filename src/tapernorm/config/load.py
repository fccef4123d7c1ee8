"""Run configs: YAML validated by a JSON schema (with defaults), plus the checks a schema can't say.

A run config names its variant (tapernorm.variants: Table 1's variants and Sec. 6.4's fine-tuning
protocols); resolve_run_config turns it into `model.taper`, the scale-loss switch `anchor.enabled`
(and `model.norm` for the norm-free ones: DyT, FakeLN), fills in the taper start and FakeLN's
window, and builds the typed RunConfig (config/run.py) that everything else reads.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..variants import VARIANTS
from .run import RunConfig

if TYPE_CHECKING:
    import jsonschema

# Model keys of an earlier norm selector, and what says the same now (model.GPTConfig's table).
RETIRED_MODEL_KEYS = {
    "norm_mode": "model.norm says what the norms are; its scale and folded forms are what "
    "tapernorm fold writes, never trained",
    "norm_kind": "model.style sets it (llama: RMSNorm, gpt2: LayerNorm)",
}


class ConfigError(ValueError):
    """An invalid config; the message names the offending key."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads 3e-4 (no dot) as a string; read it as the float everyone means. A key given
    twice in one mapping is an error (plain YAML keeps the last and drops the first silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue  # merge keys (<<) may be overridden; complex keys are not ours
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {seen[key] + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def yaml_load(text: str, source: str = "YAML"):
    """Parse YAML text with `_Loader`; a syntax error or a duplicate key is a one-line ConfigError
    naming `source` (e.g. the file), the line and the column."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: {_yaml_problem(e)}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return f"invalid YAML: {problem}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def config_text(path: str | Path) -> str:
    """The text of a config file; ConfigError naming it (and the line) if it is not UTF-8."""
    from ..runtime.jsonio import FileError, read_text

    try:
        return read_text(path)
    except FileError as e:
        raise ConfigError(f"config file {e}") from None


def check_yaml_files(paths: list[str | Path]) -> None:
    """Raise ConfigError if a YAML file has a syntax error or a duplicate key (for config files that
    other tools, e.g. Snakemake, load themselves)."""
    for path in paths:
        yaml_load(config_text(path), f"config file {path}")


def _integral(sub: dict, value):
    """`value` as an int where the schema `sub` wants an integer and YAML gave an integral float
    (1e3 reads as 1000.0); anything else unchanged (the type check then refuses 1.5)."""
    types = sub.get("type") if isinstance(sub, dict) else None
    types = [types] if isinstance(types, str) else types or []
    if "integer" in types and "number" not in types and isinstance(value, float):
        return int(value) if value.is_integer() else value
    return value


def _with_defaults(validator_class):
    """The validator, filling defaults in and turning integral floats of integer keys into ints."""
    import jsonschema  # only where configs are validated: the GPU check's path runs without it

    checks = validator_class.VALIDATORS

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for key, sub in props.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
                elif key in instance:
                    instance[key] = _integral(sub, instance[key])
        yield from checks["properties"](validator, props, instance, schema)

    def pattern_properties(validator, patterns, instance, schema):
        if isinstance(instance, dict):
            for pattern, sub in patterns.items():
                for key in instance:
                    if re.search(pattern, str(key)):
                        instance[key] = _integral(sub, instance[key])
        yield from checks["patternProperties"](validator, patterns, instance, schema)

    def items(validator, sub, instance, schema):
        if isinstance(instance, list):
            instance[:] = [_integral(sub, v) for v in instance]
        yield from checks["items"](validator, sub, instance, schema)

    return jsonschema.validators.extend(
        validator_class,
        {"properties": properties, "patternProperties": pattern_properties, "items": items},
    )


@functools.cache
def _validator():
    import jsonschema

    return _with_defaults(jsonschema.Draft202012Validator)


def load_schema(name: str) -> dict:
    return copy.deepcopy(_schema(name))


@functools.cache
def _schema(name: str) -> dict:
    """schemas/NAME.schema.yaml of the package; schemas/config.schema.yaml is a link to the
    workflow's schema, read from the checkout where a copy of the package lost the link."""
    packaged = resources.files("tapernorm").joinpath("schemas", f"{name}.schema.yaml")
    checkout = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / f"{name}.schema.yaml"
    source = packaged if packaged.is_file() or not checkout.is_file() else checkout
    return yaml.safe_load(source.read_text())


def section_schema(path: str, name: str = "config") -> dict:
    """The schema of section `path` ("bench", "finetune.eval") of schema `name` (by default the
    workflow's config schema, schemas/config.schema.yaml), references and the "object or null"
    wrappers resolved; its `definitions` travel with it, so that it validates on its own."""
    root = _schema(name)

    def resolve(node: dict) -> dict:
        while True:
            if "$ref" in node:
                node = root["definitions"][node["$ref"].rsplit("/", 1)[1]]
            elif "then" in node and "properties" not in node:  # [object, "null"]: if object, then
                node = node["then"]
            else:
                return node

    node = root
    for part in path.split("."):
        properties = resolve(node).get("properties", {})
        if part not in properties:
            raise KeyError(f"schema {name} has no section {path}")
        node = properties[part]
    return copy.deepcopy({**resolve(node), "definitions": root.get("definitions", {})})


def section_defaults(path: str, name: str = "config") -> dict:
    """The defaults of every key of section `path` of schema `name` (nested sections filled in),
    as validate fills them into an empty section; without jsonschema (the command line's help
    states them)."""

    def fill(schema: dict, value: dict) -> dict:
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if isinstance(value.get(key), dict):
                fill(sub, value[key])
        return value

    return fill(section_schema(path, name), {})


def validate_section(value: Any, path: str, source: str, name: str = "config") -> dict:
    """`value` (e.g. a command's --config-json) validated as section `path` of schema `name`, its
    defaults filled in; ConfigError naming `source` and the key (as the config spells it)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: section {path} must be an object, not {type(value).__name__}")
    try:
        return validate(value, section_schema(path, name))
    except ConfigError as e:
        top = "config key <top level>"
        message = str(e)
        if message.startswith(top):
            message = f"config key {path}{message[len(top) :]}"
        else:
            message = message.replace("config key ", f"config key {path}.", 1)
        raise ConfigError(f"{source}: {message}") from None


INT64 = (-(2**63), 2**63 - 1)  # what torch and numpy hold an integer in
FLOAT32_MAX = 3.4028234663852886e38  # the largest float32: a run computes in float32 at most


def validate(config: dict, schema: dict) -> dict:
    """Fill defaults into a copy of `config` and validate it; raise ConfigError naming the key.
    Every number must be finite (NaN passes every bound of a schema, inf every lower one) and every
    integer fit 64 bits (torch and numpy would overflow on it mid-run)."""
    if not isinstance(config, dict):
        raise ConfigError(f"config: top level must be a mapping, not {type(config).__name__}")
    config = copy.deepcopy(config)
    _check_numbers(config)
    errors = sorted(_validator()(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(_describe(errors[0]))
    _check_numbers(config)  # again: integers written as floats (1e30) are ints now
    return config


def _numbers(node, path: str = ""):
    """(dotted key, value) of every number in a config (bools are not numbers)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _numbers(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{path}.{i}")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path or "<top level>", node


def _check_numbers(config: dict) -> None:
    for key, value in _numbers(config):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key {key}: {value} is not a finite number")
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            raise ConfigError(f"config key {key}: {value} does not fit a 64-bit integer")


def _check_float32(config: dict) -> None:
    """A run computes in float32 at most: a number beyond its range would be inf on the device."""
    for key, value in _numbers(config):
        if isinstance(value, float) and abs(value) > FLOAT32_MAX:
            raise ConfigError(
                f"config key {key}: {value:g} overflows float32 (at most {FLOAT32_MAX:.4g}), the "
                "type a run computes in"
            )


def _describe(e: jsonschema.ValidationError) -> str:
    """'config key a.b: <problem>', naming the leaf key of an unknown key and what is allowed."""
    path = [str(p) for p in e.absolute_path]
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        allowed = e.schema.get("properties", {})
        patterns = e.schema.get("patternProperties", {})
        unknown = [
            str(k)
            for k in e.instance
            if k not in allowed and not any(re.search(p, str(k)) for p in patterns)
        ]
        if unknown:
            hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
            hint += f"; keys must match {' or '.join(patterns)}" if patterns else ""
            return f"config key {'.'.join([*path, unknown[0]])}: unknown key{hint}"
    return f"config key {'.'.join(path) or '<top level>'}: {e.message}"


def set_key(config: dict, dotted: str, value: Any) -> None:
    """config['a']['b'] = value for dotted = 'a.b' (creating dicts on the way)."""
    *parents, last = dotted.split(".")
    node = config
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key {dotted}: {p} is not a mapping")
    node[last] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """['train.steps=100', 'model.taper=all'] -> [(key, YAML-parsed value)]."""
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"override {pair!r} must look like key.sub=value")
        key, raw = pair.split("=", 1)
        out.append((key.strip(), yaml_load(raw, f"override {pair!r}")))
    return out


def load_run_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """Read a run YAML (or start empty), apply `key=value` overrides, validate and resolve it."""
    config: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        config = yaml_load(config_text(path), f"config file {path}") or {}
        if not isinstance(config, dict):
            raise ConfigError(f"config file {path}: top level must be a mapping")
    for key, value in parse_overrides(list(overrides)):
        set_key(config, key, value)
    return resolve_run_config(config)


def resolve_run_config(config: dict) -> RunConfig:
    """The RunConfig of a run config dict: validated against the run schema, the variant applied,
    derived defaults filled in (the taper start: taper.start, or the end of the warmup where it is
    null; FakeLN's window), consistency checked. A resolved config's to_dict resolves to itself."""
    if not isinstance(config, dict):
        raise ConfigError(f"run config: top level must be a mapping, not {type(config).__name__}")
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    retired = sorted(RETIRED_MODEL_KEYS.keys() & model.keys())
    if retired:
        why = RETIRED_MODEL_KEYS[retired[0]]
        raise ConfigError(f"config key model.{retired[0]}: no longer a key; {why}")
    variant = config.get("variant")
    if isinstance(variant, str) and variant in VARIANTS:
        v = VARIANTS[variant]
        implied = (
            ("model.taper", v["taper"]),
            ("anchor.enabled", v["anchor"]),
            ("model.norm", v.get("norm", "default")),
            *((f"model.{key}", value) for key, value in v.get("model", {}).items()),
        )
        for key, value in implied:
            section, field = key.split(".")
            given = (
                config.get(section, {}).get(field)
                if isinstance(config.get(section), dict)
                else None
            )
            if given is not None and given != value:
                raise ConfigError(f"config key {key}: {given!r} contradicts variant {variant!r}")
            if key != "model.norm" or "norm" in v:  # (an absent model.norm is the default)
                set_key(config, key, value)
    cfg = validate(config, load_schema("run"))
    _check_float32(cfg)
    m, t, tp = cfg["model"], cfg["train"], cfg["taper"]
    if m["n_embd"] % m["n_head"]:
        raise ConfigError(
            f"config key model.n_embd: {m['n_embd']} not divisible by n_head={m['n_head']}"
        )
    if t["warmup_steps"] > t["steps"]:
        raise ConfigError(f"config key train.warmup_steps: {t['warmup_steps']} > train.steps")
    if t["min_lr"] > t["lr"]:
        raise ConfigError("config key train.min_lr: larger than train.lr")
    if tp["start"] is None:  # the one place the taper start is set: the end of the warmup
        tp["start"] = t["warmup_steps"]
    if tp["end"] is None:
        tp["end"] = t["steps"]
    if tp["start"] > tp["end"] or (m["taper"] != "none" and tp["start"] == tp["end"]):
        raise ConfigError(f"config key taper.start: {tp['start']} must be < taper.end={tp['end']}")
    if tp["end"] > t["steps"]:
        raise ConfigError(f"config key taper.end: {tp['end']} > train.steps={t['steps']}")
    if m["taper"] != "none" and tp["start"] < 1:
        raise ConfigError(
            "config key taper.start: must be >= 1 (c and s_tgt are calibrated on steps at g=1; "
            "set train.warmup_steps or taper.start)"
        )
    if cfg["anchor"]["enabled"] and tp["start"] < 1:
        raise ConfigError("config key taper.start: the scale loss needs taper.start >= 1")
    _resolve_norm(cfg)
    return RunConfig.from_dict(cfg)


def _resolve_norm(cfg: dict) -> None:
    """model.norm dyt / fakeln replaces every norm, so nothing tapers (what the norms are is
    described together in model.GPTConfig's docstring). FakeLN's removal window defaults to the
    taper window, its EMA weight to taper.ema_mu."""
    tp, m, norm = cfg["taper"], cfg["model"], cfg["model"].get("norm", "default")
    if norm != "default" and m["taper"] != "none":
        raise ConfigError(f"config key model.taper: must be none with model.norm {norm}")
    if "fakeln" in cfg and norm != "fakeln":
        raise ConfigError("config key fakeln: only for model.norm fakeln")
    if norm != "fakeln":
        return
    f = cfg.setdefault("fakeln", {"start": None, "end": None, "ema_mu": None})
    for key, default in (("start", tp["start"]), ("end", tp["end"]), ("ema_mu", tp["ema_mu"])):
        if f[key] is None:
            f[key] = default
    if not 1 <= f["start"] < f["end"] <= cfg["train"]["steps"]:
        raise ConfigError(
            f"config key fakeln: need 1 <= start < end <= train.steps, got start={f['start']}, "
            f"end={f['end']}, steps={cfg['train']['steps']}"
        )
