"""Study config files: the schema (config/schema.yaml, package data) with the name lists the
registries define filled in, validation that fills in defaults, and the files merged as
`snakemake --configfile` merges them."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import jsonschema
import yaml

# Package data (config/schema.yaml links to it): read through importlib.resources, so an
# installed wheel has it too.
SCHEMA = Path(str(resources.files("pods") / "data" / "schema.yaml"))


# The study protocol every study layers over first (config/protocol.yaml, relative to the folder the
# workflow runs in): the Snakefile reads it before config/config.yaml, and so does load_study_config.
PROTOCOL_FILE = Path("config/protocol.yaml")
# its keys: what a study that keeps the protocol's name may not change (pods.study.plan.Study)
PROTOCOL_KEYS = ("trainer_config", "aten_cpu_capability", "clock", "step_costs", "train")


class StudyError(ValueError):
    """A study config that cannot be run; the message names the file or config key."""


def refuse(message: object) -> NoReturn:
    """Stop the workflow while it is read, on a study config it cannot run: the package's one line
    (`pods: error: ...`, as the `pods` commands say theirs) on stderr and exit status 1. Snakemake
    prints an exception raised while it parses or builds the DAG with its rule file, line and a
    traceback around the message; an exit is printed as nothing but the line."""
    print(f"pods: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


@contextmanager
def refused_in_one_line() -> Iterator[None]:
    """A StudyError raised inside (a bad key or value, naming its file and key) as `refuse` says it."""
    try:
        yield
    except StudyError as exc:
        refuse(exc)


def load_schema(path: str | Path = SCHEMA) -> dict:
    """The study schema, with the name lists that registries define filled in as enums (the file
    states none of them): the designs, how curves are aligned, what they are aligned by, how runs launch."""
    from pods.study.curves import ALIGNERS, AXES
    from pods.study.hardware import LAUNCHERS
    from pods.vocabulary import DESIGNS

    schema = yaml.safe_load(Path(path).read_text())
    definitions = schema["definitions"]
    definitions["comparison"]["properties"]["design"]["enum"] = list(DESIGNS)
    definitions["comparison"]["properties"]["align"]["enum"] = list(ALIGNERS)
    definitions["comparison"]["properties"]["axis"]["enum"] = list(AXES)
    definitions["hardware_profile"]["properties"]["launcher"]["enum"] = list(LAUNCHERS)
    return schema


def schema_default(key: str) -> Any:
    """The schema's default of a top-level study key (for a workflow file run without the Snakefile)."""
    return load_schema()["properties"][key]["default"]


def _with_defaults(validator_class):
    """A validator that also fills in each property's `default` (the jsonschema FAQ recipe; what
    Snakemake's `validate(set_default=True)` does for the study config)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, json.loads(json.dumps(subschema["default"])))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate(instance: Any, schema: Mapping, where: str, definition: str | None = None) -> Any:
    """Check `instance` against the schema (or one of its definitions), filling in defaults in
    place; a failure raises StudyError `where: key.path: message`."""
    if definition is not None:
        schema = {**schema["definitions"][definition], "definitions": schema["definitions"]}
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise StudyError(f"{where}: {key}: {error.message}")
    return instance


def typed_command_line(value: Any) -> Any:
    """`--config` values as YAML reads them. Snakemake types a top-level number or boolean but
    reads the items of a list or mapping, and `null`, as strings (`seeds=[0,1]` -> ['0', '1']):
    each string that YAML reads as a number, a boolean or null becomes one; other strings stay."""
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value
    if isinstance(value, Mapping):
        return {key: typed_command_line(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [typed_command_line(item) for item in value]
    return value


def load_study_config(*paths: str | Path, overrides: Mapping | None = None, schema: Mapping | None = None) -> dict:
    """The study config as the workflow sees it: the protocol (PROTOCOL_FILE, where it exists), then
    the files merged as `--configfile` merges them (nested mappings key by key), then `overrides`
    (`--config`), validated with defaults filled in."""
    from snakemake.utils import update_config

    config: dict = {}
    protocol = [PROTOCOL_FILE] if PROTOCOL_FILE.is_file() and PROTOCOL_FILE not in map(Path, paths) else []
    for path in [*protocol, *paths]:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    update_config(config, typed_command_line(dict(overrides or {})))
    where = " + ".join([*map(str, paths), *(["--config"] if overrides else [])]) or "study config"
    return validate(config, schema or load_schema(), where)
