"""AttentionConfig: core/config.proto as a Python dataclass.

The dataclasses are not written field by field: at import the library
describes the message from its descriptor (attnkit_config_schema) and
AttentionConfig and MaskSpec are made from that, with the proto's field
names, order and defaults, so a field added to config.proto appears here
unwritten. Enums are their proto names (case-insensitive on the way in:
"f16" is F16, "causal" is CAUSAL). It reads and writes the text format
`attnkit --config=F` uses, and crosses the C API as JSON.
"""

import dataclasses
import json
import os
import typing

from . import _capi

_SCHEMA = json.loads(_capi.call_string(_capi.lib.attnkit_config_schema))
_PY_TYPES = {"int": int, "float": float, "bool": bool, "string": str, "enum": str}


def _enum(field, value, allowed):
    if not isinstance(value, str) or value.upper() not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return value.upper()


def _normalise(obj, schema, prefix=""):
    """Checks enum names and converts lists and nested messages in place,
    after the dataclass's own __init__."""
    for f in schema["fields"]:
        name, value = f["name"], getattr(obj, f["name"])
        if f["type"] == "message" and not f["repeated"]:
            cls = _MESSAGES[f["message"]["name"]]
            if isinstance(value, dict):
                value = cls(**value)
            elif isinstance(value, str):
                # A message given a name sets its first field (mask="causal").
                value = cls(**{f["message"]["fields"][0]["name"]: value})
            elif not isinstance(value, cls):
                raise ValueError(
                    f"{prefix}{name} must be a {cls.__name__}, a dict or a "
                    f"{f['message']['fields'][0]['name']} name; got {value!r}"
                )
        elif f["type"] == "enum":
            if f["repeated"]:
                value = [_enum(prefix + name, v, f["values"]) for v in value]
            else:
                value = _enum(prefix + name, value, f["values"])
        elif f["repeated"]:
            value = [_PY_TYPES[f["type"]](x) for x in value]
        setattr(obj, name, value)


def _dataclass_fields(schema):
    """(name, type, field) triples for dataclasses.make_dataclass."""
    out = []
    for f in schema["fields"]:
        if f["repeated"]:
            out.append((f["name"], list, dataclasses.field(default_factory=list)))
        elif f["type"] == "message":
            cls = _MESSAGES[f["message"]["name"]]
            out.append((f["name"], cls, dataclasses.field(default_factory=cls)))
        else:
            py = _PY_TYPES[f["type"]]
            if f["default"] is None:
                out.append((f["name"], typing.Optional[py], dataclasses.field(default=None)))
            else:
                out.append((f["name"], py, dataclasses.field(default=f["default"])))
    return out


def _make_message(schema, doc, namespace=None, prefix=""):
    """A dataclass for one message of the schema (its message fields first);
    `prefix` names it in errors ("mask.")."""
    for f in schema["fields"]:
        if f["type"] == "message" and f["message"]["name"] not in _MESSAGES:
            _make_message(
                f["message"], f"{f['message']['name']}: config.proto's message.",
                prefix=f"{prefix}{f['name']}.",
            )
    ns = dict(namespace or {})
    ns["__post_init__"] = lambda self: _normalise(self, schema, prefix)
    ns["__doc__"] = doc
    cls = dataclasses.make_dataclass(schema["name"], _dataclass_fields(schema), namespace=ns)
    cls.__module__ = __name__
    _MESSAGES[schema["name"]] = cls
    return cls


_MESSAGES = {}


class _ConfigMethods:
    """The methods of AttentionConfig (its fields come from the schema)."""

    # ---- conversions -----------------------------------------------------

    def to_dict(self):
        """The config as the JSON object the C API and `--json` reports use."""
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d):
        """From a dict with the proto's field names (a report's "config")."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"AttentionConfig has no field {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def from_text(cls, text):
        """From the text format (`num_heads: 8 mask { kind: CAUSAL }`);
        ValueError with the line and column of a parse error."""
        return cls.from_dict(json.loads(_capi.call_string(_capi.lib.attnkit_config_from_text,
                                                          text.encode())))

    @classmethod
    def from_file(cls, path):
        with open(os.fspath(path), encoding="utf-8") as f:
            return cls.from_text(f.read())

    def to_text(self):
        """The text format, as `attnkit --config=F` reads it."""
        return _capi.call_string(_capi.lib.attnkit_config_to_text, self.to_json().encode())

    def validate(self):
        """The problem id (e.g. "gqa_h8_g2_q64_k64_d64_causal_f32") when the
        config is a valid problem; ValueError naming the field, its value and
        the rule otherwise."""
        return _capi.call_string(_capi.lib.attnkit_config_validate, self.to_json().encode())

    @property
    def id(self):
        return self.validate()

    def cost(self):
        """What the problem costs (ops/cost.h): a dict with id, useful_flops
        (4 d per visible (query, key) pair), dense_flops, visible_pairs,
        bytes_moved (every tensor read or written once), kv_cache_bytes and
        score_entries."""
        return json.loads(_capi.call_string(_capi.lib.attnkit_config_cost, self.to_json().encode()))

    def replace(self, **changes):
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


AttentionConfig = _make_message(
    _SCHEMA,
    """One attention problem, as core/config.proto defines it.

    Unset fields mean what the proto says: num_kv_heads 0 = num_heads (MHA),
    kv_len 0 = q_len, batch 0 = 1, dtype DTYPE_UNSPECIFIED = F32, scale None =
    1/sqrt(head_dim), backend "" = auto. mask takes a MaskSpec, a dict or a
    kind name ("causal").
    """,
    {k: v for k, v in vars(_ConfigMethods).items() if not k.startswith("__")},
)
MaskSpec = _MESSAGES["MaskSpec"]
MaskSpec.__doc__ = """MaskSpec: kind NONE, CAUSAL or SLIDING_WINDOW (keys in [diag -
    window_left, diag + window_right]; -1 = unbounded)."""


def as_config(config):
    """An AttentionConfig from what the jobs accept: an AttentionConfig, a
    dict, a text-format string or the path of a text-format file."""
    if isinstance(config, AttentionConfig):
        return config
    if isinstance(config, dict):
        return AttentionConfig.from_dict(config)
    if isinstance(config, os.PathLike):
        return AttentionConfig.from_file(config)
    if isinstance(config, str):
        if ":" not in config and os.path.exists(config):
            return AttentionConfig.from_file(config)
        return AttentionConfig.from_text(config)
    raise ValueError(
        "config must be an AttentionConfig, a dict, a text-format string or a file path; "
        f"got {type(config).__name__}"
    )


def suite(name="standard"):
    """The configs of a benchmark suite (those `attnkit compare` runs)."""
    text = _capi.call_string(_capi.lib.attnkit_suite, name.encode())
    return [AttentionConfig.from_dict(d) for d in json.loads(text)]
