"""Where a ``model.path`` setting (``--model``) points: a checkpoint directory, a GGUF file, or a
model in a local Ollama store (``ollama:NAME[:TAG]``).

Nothing is fetched: an Ollama model resolves to the GGUF blob Ollama already downloaded, read in
place (read-only). Ollama keeps, under ``$OLLAMA_MODELS`` (default ``~/.ollama/models``):

- ``manifests/registry.ollama.ai/library/NAME/TAG``: a JSON manifest whose ``layers`` list has one
  entry of ``mediaType`` ``application/vnd.ollama.image.model`` with the model's ``digest``
  (``sha256:<hex>``); names with a namespace (``user/NAME``) or a host (``hf.co/user/NAME``) sit
  under ``registry.ollama.ai/user/NAME`` and ``hf.co/user/NAME``;
- ``blobs/sha256-<hex>``: the GGUF file of that digest.

Other tools keep plain ``.gguf`` files that ``--model FILE.gguf`` takes as they are (docs/model.md:
LM Studio under ``~/.lmstudio/models/PUBLISHER/REPO/``, llama.cpp's ``-hf`` downloads, which
llama.vscode uses, under ``~/.cache/llama.cpp/``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

OLLAMA_PREFIX = "ollama:"
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
DIGEST = re.compile(r"sha256[:-][0-9a-fA-F]{64}")  # as Ollama checks it (server/modelpath.go); the blob: blobs/sha256-<hex>
MAX_MANIFEST_BYTES = 1 << 20  # Ollama's manifests are under 1 kB


@dataclass(frozen=True)
class ModelSource:
    """A resolved model setting: ``path`` (a checkpoint directory or a GGUF file) and the name to
    show for it (``ollama:NAME:TAG`` for an Ollama model, else ``path``'s last component)."""

    path: Path
    name: str


def ollama_models_dir() -> Path:
    """Ollama's model store: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def _manifest_path(store: Path, spec: str) -> tuple[Path, str]:
    """The manifest file of ``NAME[:TAG]`` (tag ``latest`` when absent) and the canonical ``NAME:TAG``."""
    name, sep, tag = spec.rpartition(":")
    if not sep or "/" in tag:
        name, tag = spec, "latest"
    parts = [p for p in name.split("/") if p]
    if not parts or not tag or any(p in (".", "..") for p in [*parts, tag]):
        raise ModelError(f"{OLLAMA_PREFIX}{spec!r} is not an Ollama model name; write {OLLAMA_PREFIX}NAME[:TAG], "
                         f"as `ollama list` shows it (e.g. {OLLAMA_PREFIX}qwen2.5-coder:1.5b)")
    if len(parts) == 1:
        parts = [OLLAMA_REGISTRY, "library", *parts]
    elif "." not in parts[0]:  # user/NAME on Ollama's registry; a first part with a dot is a host (hf.co/...)
        parts = [OLLAMA_REGISTRY, *parts]
    return store.joinpath("manifests", *parts, tag), f"{name}:{tag}"


def resolve_ollama(spec: str, store: Path | None = None) -> ModelSource:
    """The GGUF blob of the Ollama model ``NAME[:TAG]`` in the local store (:func:`ollama_models_dir`),
    which must lie in the store's ``blobs/`` folder. Raises ModelError naming the fix when the store,
    the model, the tag or its blob is missing, or the manifest is malformed (:func:`_model_digest`)."""
    store = store or ollama_models_dir()
    manifest, canonical = _manifest_path(store, spec)
    if not manifest.is_file():
        if not (store / "manifests").is_dir():
            raise ModelError(f"no Ollama model store at {store} (no manifests/ folder); install Ollama and "
                             f"`ollama pull {canonical}`, or set OLLAMA_MODELS to the store's models folder")
        tags = sorted(p.name for p in manifest.parent.iterdir() if p.is_file()) if manifest.parent.is_dir() else []
        if tags:
            raise ModelError(f"Ollama has {canonical.rpartition(':')[0]} but not the tag {canonical.rpartition(':')[2]!r} "
                             f"(tags here: {', '.join(tags)}); `ollama pull {canonical}` or use one of those tags")
        raise ModelError(f"Ollama has no model {canonical} in {store}; `ollama pull {canonical}` first "
                         "(`ollama list` shows what is there)")
    digest = _model_digest(manifest, canonical)
    blobs = store / "blobs"
    blob = blobs / digest.replace(":", "-", 1)
    try:
        inside = blob.resolve(strict=True).is_relative_to(blobs.resolve(strict=True))
    except (OSError, RuntimeError):  # missing, or a loop of links
        inside = None
    if inside is None or not blob.is_file():
        raise ModelError(f"the Ollama blob {blob} of {canonical} is missing; `ollama pull {canonical}` again")
    if not inside:
        raise ModelError(f"the Ollama blob {blob} of {canonical} is a link to {blob.resolve()}, outside the store's "
                         f"blobs/ folder; remove it and `ollama pull {canonical}` again")
    return ModelSource(blob, f"{OLLAMA_PREFIX}{canonical}")


def _model_digest(manifest: Path, canonical: str) -> str:
    """The ``sha256:<64 hex>`` digest of the model layer of the Ollama manifest ``manifest``, every
    field read checked for its type (the manifest is input: a digest such as ``../../elsewhere``
    would name a file outside the store). Raises ModelError naming the field and the fix."""
    again = f"`ollama pull {canonical}` again"
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise ModelError(f"the Ollama manifest {manifest} is over {MAX_MANIFEST_BYTES:,} bytes, not a manifest; "
                             f"{again}")
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"the Ollama manifest {manifest} is not readable JSON ({exc}); {again}") from exc

    def bad(field: str, value, wanted: str) -> ModelError:
        return ModelError(f"the Ollama manifest {manifest} has {field} = {value!r:.80}, not {wanted}; {again}")

    if not isinstance(data, dict):
        raise bad("its top level", data, "an object")
    for field, kind, wanted in (("schemaVersion", int, "an integer"), ("mediaType", str, "a string"),
                                ("config", dict, "an object"), ("layers", list, "a list")):
        if field in data and (not isinstance(data[field], kind) or isinstance(data[field], bool)):
            raise bad(field, data[field], wanted)
    digest = None
    for i, layer in enumerate(data.get("layers") or []):
        if not isinstance(layer, dict):
            raise bad(f"layers[{i}]", layer, "an object")
        for field, kind, wanted in (("mediaType", str, "a string"), ("digest", str, "a string"),
                                    ("size", int, "an integer")):
            if field in layer and (not isinstance(layer[field], kind) or isinstance(layer[field], bool)):
                raise bad(f"layers[{i}].{field}", layer[field], wanted)
        if layer.get("mediaType") == OLLAMA_MODEL_LAYER and digest is None:
            digest = layer.get("digest")
            if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
                raise bad(f"layers[{i}].digest", digest, "sha256:<64 hexadecimal digits>")
    if digest is None:
        raise ModelError(f"the Ollama manifest {manifest} names no model layer ({OLLAMA_MODEL_LAYER}); {again}")
    return digest


def resolve_model(setting: str | os.PathLike, default: Path) -> ModelSource:
    """The model a ``model.path`` setting names: ``default`` when empty, an Ollama model for
    ``ollama:NAME[:TAG]``, else the path (``~`` expanded). Raises ModelError for an Ollama name that
    does not resolve; paths are checked when loaded (:func:`engine.model.load_model`)."""
    text = os.fspath(setting) if setting else ""
    if not text:
        return ModelSource(default, default.name)
    if text.startswith(OLLAMA_PREFIX):
        return resolve_ollama(text[len(OLLAMA_PREFIX):])
    path = Path(text).expanduser()
    return ModelSource(path, path.name)
