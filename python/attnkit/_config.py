"""AttentionConfig: core/config.proto as a Python dataclass.

Field for field the proto (a test checks the names and defaults against the
library's), enums by their proto names (case-insensitive on the way in:
"f16" is F16, "causal" is CAUSAL). It reads and writes the text format
`attnkit --config=F` uses, and crosses the C API as JSON.
"""

import dataclasses
import json
import os
import typing

from . import _capi

_ENUMS = {
    "dtype": ("DTYPE_UNSPECIFIED", "F32", "F16", "BF16"),
    "kv_dtype": ("DTYPE_UNSPECIFIED", "F32", "F16", "BF16", "INT8"),
    "layout": ("LAYOUT_UNSPECIFIED", "BHTD", "BTHD"),
    "alignment": ("ALIGNMENT_UNSPECIFIED", "TOP_LEFT", "BOTTOM_RIGHT"),
}
_MASK_KINDS = ("KIND_UNSPECIFIED", "NONE", "CAUSAL", "SLIDING_WINDOW")


def _enum(field, value, allowed):
    if not isinstance(value, str) or value.upper() not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
    return value.upper()


@dataclasses.dataclass
class MaskSpec:
    """MaskSpec: kind NONE, CAUSAL or SLIDING_WINDOW (keys in [diag -
    window_left, diag + window_right]; -1 = unbounded)."""

    kind: str = "KIND_UNSPECIFIED"
    window_left: int = 0
    window_right: int = 0

    def __post_init__(self):
        self.kind = _enum("mask.kind", self.kind, _MASK_KINDS)


@dataclasses.dataclass
class AttentionConfig:
    """One attention problem, as core/config.proto defines it.

    Unset fields mean what the proto says: num_kv_heads 0 = num_heads (MHA),
    kv_len 0 = q_len, batch 0 = 1, dtype DTYPE_UNSPECIFIED = F32, scale None =
    1/sqrt(head_dim), backend "" = auto. mask takes a MaskSpec, a dict or a
    kind name ("causal").
    """

    name: str = ""
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    model_dim: int = 0
    mask: MaskSpec = dataclasses.field(default_factory=MaskSpec)
    alignment: str = "ALIGNMENT_UNSPECIFIED"
    scale: typing.Optional[float] = None
    softcap: float = 0.0
    dtype: str = "DTYPE_UNSPECIFIED"
    kv_dtype: str = "DTYPE_UNSPECIFIED"
    layout: str = "LAYOUT_UNSPECIFIED"
    batch: int = 0
    q_len: int = 0
    kv_len: int = 0
    kv_lengths: typing.List[int] = dataclasses.field(default_factory=list)
    blocked_mask: bool = False
    additive_bias: bool = False
    return_lse: bool = False
    backend: str = ""
    seed: int = 0
    poison_blocked: bool = False
    memory_budget_bytes: int = 0
    nonfinite_inputs: int = 0
    page_size: int = 0
    num_pages: int = 0
    q_lengths: typing.List[int] = dataclasses.field(default_factory=list)
    backward: bool = False

    def __post_init__(self):
        if isinstance(self.mask, str):
            self.mask = MaskSpec(kind=self.mask)
        elif isinstance(self.mask, dict):
            self.mask = MaskSpec(**self.mask)
        elif not isinstance(self.mask, MaskSpec):
            raise ValueError(f"mask must be a MaskSpec, a dict or a kind name; got {self.mask!r}")
        for field, allowed in _ENUMS.items():
            setattr(self, field, _enum(field, getattr(self, field), allowed))
        self.kv_lengths = [int(x) for x in self.kv_lengths]
        self.q_lengths = [int(x) for x in self.q_lengths]

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
