"""Short, stable names for runs: the settings that differ across the runs shown.

A run is named by what it *is* (its PE, extension method, heads, model, data, steps, seed),
never by where it lives or how it was run: paths, thread counts and logging intervals change
no result, so they never appear. ``run_settings`` turns a run's flattened config into those
settings (one key per thing a reader compares: ``extension`` is ``yarn x4``, not a method and a
factor apart); ``run_labels`` names a list of runs by the settings that vary among them, in a
fixed order, each in a short form (``rope h8 s1``). The report, its plots, ``posexp runs`` and
TensorBoard all name runs through here, so one run reads the same everywhere.
``finetune_label`` names a fine-tune (any run with ``parent=``) by what it changed from its
parent: ``rope → pe=none (DroPE) ft 200 steps``, ``yarn(factor=4) L256 ft 200 steps``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posexp.config.run import RunConfig

# Config keys that never name a run: where it lives, how it ran, or copies of other keys.
PLUMBING_PREFIXES = ("hydra.", "placement.", "attention.")
PLUMBING = frozenset(
    {
        "device",
        "cache_dir",
        "resume",
        "parent",
        "train_length",
        "model.n_heads",  # the heads setting again
        "extension.original_length",  # the training length again
        "extension.method",
        "extension.factor",  # both in "extension"
        "pe.name",
        "pe.layers",  # in "pe": a composition is named by its pattern
        "model.name",
        "data.source",
        "data.task",
        "tokenizer.name",
        "train.threads",
        "train.compile",
        "train.linear",  # who multiplies fp32 matrices: the same numbers (to fp32 rounding)
        "train.deterministic",
        "train.log_interval",
        "train.eval_interval",
        "train.checkpoint_interval",
        "train.stop_grace_s",
        "train.resume_schedule",
        "translate.batch_size",
    }
)
# Settings in the order a label lists them; the rest follow by name, the seed always last.
ORDER = (
    "pe",
    "pe.randomized",
    "fine-tuned",
    "extension",
    "heads",
    "model",
    "model.d_model",
    "model.n_layers",
    "data",
    "tokenizer",
    "train.seq_len",
    "train.max_steps",
    "train.lr",
)
# Short forms: a prefix before the value (h8, s1, L256) or a word after it (600 steps).
PREFIX = {"heads": "h", "seed": "s", "train.seq_len": "L"}
SUFFIX = {"train.max_steps": " steps"}
BARE = {"pe", "extension", "model", "data", "tokenizer"}  # the value alone is clear
# An override key names the setting it changes (``extension.factor=4`` changes ``extension``).
ALIASES = {
    "pe.name": "pe",
    "pe.layers": "pe",
    "model.name": "model",
    "data.source": "data",
    "data.task": "data",
    "tokenizer.name": "tokenizer",
    "extension.method": "extension",
    "extension.factor": "extension",
    "model.n_heads": "heads",
    "parent": "fine-tuned",
}


def extension_text(method: Any, factor: Any) -> str:
    """``none``, or the method with its factor (``yarn x4``)."""
    method = str(method or "none")
    if method == "none":
        return "none"
    try:
        return f"{method} x{float(factor):g}"
    except (TypeError, ValueError):
        return method


def composition_text(layers: Any) -> str:
    """A per-layer composition of encodings by its pattern (``rope*3+none``), so runs of two
    patterns read apart; the value as given if it is not a pattern."""
    from posexp.errors import PosexpError
    from posexp.pe.layered import pattern_text

    try:
        return pattern_text(layers)
    except PosexpError:
        return value_text(layers)


def design_text(flat: Mapping[str, Any]) -> str:
    """A per-layer composition as reports show it, with what else makes it a design (windows,
    sinks, gates: ``rope (window 32/full, sink logit)``), so that two presets of one pattern
    read apart; its pattern alone where its settings cannot be read."""
    from posexp.pe.base import describe_pe

    params = {k[3:]: v for k, v in flat.items() if k.startswith("pe.") and k != "pe.name"}
    try:
        return describe_pe(str(flat.get("pe.name")), False, params).label
    except Exception:  # noqa: BLE001  a failed job's half-written overrides: its pattern
        return composition_text(flat["pe.layers"])


def run_settings(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that say what a run is, from its flattened config (``{"train.lr": ...}``)."""
    out: dict[str, Any] = {}
    if "pe.name" in flat:
        out["pe"] = flat["pe.name"]
    if "pe.layers" in flat:
        out["pe"] = design_text(flat)
    if "extension.method" in flat:
        out["extension"] = extension_text(flat["extension.method"], flat.get("extension.factor"))
    if "model.name" in flat:
        out["model"] = flat["model.name"]
    if "data.source" in flat or "data.task" in flat:
        out["data"] = flat.get("data.task") or flat.get("data.source")
    if "tokenizer.name" in flat:
        out["tokenizer"] = flat["tokenizer.name"]
    if "parent" in flat:
        out["fine-tuned"] = flat["parent"] not in (None, "", "None")
    for key, value in flat.items():
        if key not in PLUMBING and not key.startswith(PLUMBING_PREFIXES):
            out[key] = value
    return out


def setting_key(override_key: str) -> str:
    """The setting an override key changes: ``extension.factor`` -> ``extension``."""
    key = override_key.lstrip("+~")
    return ALIASES.get(key, key)


def is_plumbing(override_key: str) -> bool:
    """Whether an override key changes no result (threads, intervals, paths, hydra.*)."""
    key = override_key.lstrip("+~")
    return key not in ALIASES and (key in PLUMBING or key.startswith(PLUMBING_PREFIXES))


def order_key(key: str) -> tuple[int, str]:
    """Sort key of a setting in a label: ORDER first, then by name, the seed last."""
    if key == "seed":
        return (len(ORDER) + 1, key)
    return (ORDER.index(key), key) if key in ORDER else (len(ORDER), key)


def varying(runs: list[Mapping[str, Any]]) -> list[str]:
    """The settings whose values differ between the runs that have them, in label order (a
    PE's own settings, ``pe.base``, do not make a RoPE run differ from an ALiBi one)."""
    keys = dict.fromkeys(k for run in runs for k in run)
    # Compared as shown: a failed job's override "5" is the same setting as a config's 5.
    differ = [k for k in keys if len({value_text(run[k]) for run in runs if k in run}) > 1]
    return sorted(differ, key=order_key)


def distinguishing(runs: list[Mapping[str, Any]], keys: Iterable[str]) -> list[str]:
    """Of ``keys`` (in label order), those that tell runs apart that the earlier ones do not:
    a fine-tune's learning rate and length follow from its being a fine-tune, so they add
    nothing to ``fine-tuned`` and stay out of its name."""
    chosen: list[str] = []
    groups = [list(range(len(runs)))]
    for key in keys:
        split = []
        for group in groups:
            by_value: dict[str, list[int]] = {}
            for i in group:
                by_value.setdefault(value_text(runs[i].get(key)), []).append(i)
            split += by_value.values()
        if len(split) > len(groups):
            chosen.append(key)
            groups = split
    return chosen


def value_text(value: Any) -> str:
    """A value as a label shows it: floats to 4 significant digits, lists joined by commas."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ",".join(value_text(v) for v in value)
    return "–" if value is None else str(value)


def part(key: str, value: Any, short_names: Mapping[str, str] | None = None) -> str:
    """One setting in its short form: ``h8``, ``s1``, ``L256``, ``600 steps``, ``lr=0.003``."""
    name = (short_names or {}).get(key, key.rsplit(".", 1)[-1])
    if key == "extension":
        return "no ext" if value == "none" else str(value)
    if isinstance(value, bool):
        return name if value else ""  # the runs that are get the word
    if key in BARE:
        return value_text(value)
    if key in PREFIX:
        return f"{PREFIX[key]}{value_text(value)}"
    if key in SUFFIX:
        return f"{value_text(value)}{SUFFIX[key]}"
    return f"{name}={value_text(value)}"


def short_names(keys: Iterable[str]) -> dict[str, str]:
    """Each key's last component, or the whole key where two keys share a last component."""
    keys = list(keys)
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


IDENTITY = ("pe", "extension")  # what names a run when nothing differs


def run_label(settings: Mapping[str, Any], keys: Iterable[str], identity: bool = True) -> str:
    """The run named by ``keys`` of its settings; with none of them, by its PE and extension
    (or '' when not ``identity``)."""
    keys = sorted(dict.fromkeys(k for k in keys if k in settings), key=order_key)
    if not keys and not identity:
        return ""
    if not keys:
        keys = [k for k in IDENTITY if k in settings and settings[k] != "none"]
    names = short_names(keys)
    parts = [part(k, settings[k], names) for k in keys]
    text = " ".join(p for p in parts if p)
    if text or not identity:
        return text
    return run_label(settings, []) if keys else "run"


def run_labels(
    runs: list[Mapping[str, Any]], exclude: Iterable[str] = (), fallback: list[str] | None = None
) -> list[str]:
    """A label per run from the settings that vary among them, less ``exclude`` (runs alike
    but for those share a label: a group). Without ``exclude``, runs that still read alike get
    ``#1``, ``#2`` (or their ``fallback`` name in brackets, when given)."""
    skip = {setting_key(k) for k in exclude}
    keys = distinguishing(runs, [k for k in varying(runs) if k not in skip])
    labels = [run_label(run, keys) for run in runs]
    seen: dict[str, int] = {}
    out = []
    for i, label in enumerate(labels):
        if labels.count(label) > 1 and not skip:
            seen[label] = seen.get(label, 0) + 1
            label = f"{label} ({fallback[i]})" if fallback else f"{label} #{seen[label]}"
        out.append(label)
    return out


def pe_text(config: RunConfig) -> str:
    """A run's encoding as a label shows it: its name, a per-layer composition by its pattern."""
    if "layers" in config.pe.params:
        return composition_text(config.pe.params["layers"])
    return config.pe.name


def extension_spec(config: RunConfig) -> str:
    """A run's trained-in extension as a method spec (``yarn(factor=4)``); ``none`` without."""
    from posexp.extension.spec import spec_of

    ext = config.extension
    if ext.method == "none":
        return "none"
    try:
        return spec_of(ext.method, dict(ext.params), ext.factor).label
    except Exception:  # a method no longer registered: its name and factor
        return extension_text(ext.method, ext.factor)


# Fine-tuning to no encoding from one (Gelberg et al. 2025: RoPE dropped, then recalibrated).
NO_ENCODING = "none"


def finetune_label(child: RunConfig, parent: RunConfig | None) -> str:
    """What a fine-tune changed relative to its parent, from the two saved configs, in this
    order: the encoding (``rope → pe=none``, ``(DroPE)`` when it drops one), the extension
    trained in as its spec (``yarn(factor=4)``, ``ext none`` where the parent had one), the
    training length (``L256``), PoSE's target (``PoSE 1024``), then the steps (``ft 200
    steps``). A learning rate or a schedule that fine-tuning sets is not named. Without the
    parent's config (moved or unreadable), the fine-tune's own extension and steps only."""
    parts = []
    if parent is not None and pe_text(child) != pe_text(parent):
        dropped = child.pe.name == NO_ENCODING and parent.pe.name != NO_ENCODING
        parts.append(f"{pe_text(parent)} → pe={pe_text(child)}" + (" (DroPE)" if dropped else ""))
    mine = extension_spec(child)
    theirs = None if parent is None else extension_spec(parent)
    if mine != theirs and not (mine == "none" and theirs is None):
        parts.append("ext none" if mine == "none" else mine)
    if parent is not None and child.train.seq_len != parent.train.seq_len:
        parts.append(part("train.seq_len", child.train.seq_len))
    pose = child.train.pose
    if pose.enabled and not (parent is not None and parent.train.pose == pose):
        parts.append(f"PoSE {pose.target_length}" if pose.target_length else "PoSE")
    parts.append(f"ft {child.train.max_steps} steps")
    return " ".join(parts)
