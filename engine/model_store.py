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
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

OLLAMA_PREFIX = "ollama:"
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"


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
    """The GGUF blob of the Ollama model ``NAME[:TAG]`` in the local store (:func:`ollama_models_dir`).
    Raises ModelError naming the fix when the store, the model, the tag or its blob is missing."""
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
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        digest = next(layer["digest"] for layer in data["layers"] if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        raise ModelError(f"the Ollama manifest {manifest} names no model layer ({OLLAMA_MODEL_LAYER}); "
                         f"`ollama pull {canonical}` again") from exc
    algorithm, _, value = str(digest).partition(":")
    if not value or not value.isalnum():
        raise ModelError(f"the Ollama manifest {manifest} has a malformed digest {digest!r}; `ollama pull {canonical}` again")
    blob = store / "blobs" / f"{algorithm}-{value}"
    if not blob.is_file():
        raise ModelError(f"the Ollama blob {blob} of {canonical} is missing; `ollama pull {canonical}` again")
    return ModelSource(blob, f"{OLLAMA_PREFIX}{canonical}")


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
