"""Fill-in-the-middle prompt templates per model family, and prompt truncation to the model window.

Templates (PSM order: prefix, suffix, then the middle is generated):

============  =====================================================================  ==================
family        layout                                                                  stop tokens
============  =====================================================================  ==================
fsm-complete  ``<fim_prefix><fim_suffix>S<fim_middle>P`` (SPM; the embedded default       ``<|endoftext|>``
              model, named by ``fim_template`` in its config.json)
starcoder     ``<fim_prefix>P<fim_suffix>S<fim_middle>`` (StarCoder/StarCoder2)       ``<|endoftext|>``,
                                                                                      ``<file_sep>``
qwen          ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` (Qwen2.5-Coder)        ``<|endoftext|>``,
                                                                                      ``<|fim_pad|>``,
                                                                                      ``<|file_sep|>``
deepseek      ``<｜fim▁begin｜>P<｜fim▁hole｜>S<｜fim▁end｜>`` (DeepSeek-Coder)        EOS
codellama     ``<PRE> P <SUF>S <MID>`` (CodeLlama)                                     ``<EOT>``
declared      PSM with the markers a GGUF file names (``tokenizer.ggml.fim_*_token_id``)  its EOS/EOT/FIM ends
============  =====================================================================  ==================

A template is chosen by name (the ``model.fimTemplate`` setting, or ``fim_template`` in a checkpoint's
config.json / ``fsm_complete.fim_template`` in a GGUF file), else from the markers the checkpoint's
metadata declares (:class:`FimTokens`), else from the tokenizer's special tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ModelError
from .text import scalar_text


@dataclass(frozen=True)
class FimTemplate:
    family: str
    prefix_token: str
    suffix_token: str
    middle_token: str
    stop_tokens: tuple[str, ...]
    prefix_sep: str = ""  # text inserted after the prefix marker (CodeLlama: " ")
    suffix_sep: str = ""  # text inserted before the suffix marker (CodeLlama: " ")
    order: str = "psm"  # "psm": prefix, suffix, middle; "spm": suffix, then prefix continued by the middle


TEMPLATES = {
    # the embedded default model: StarCoder's tokens in SPM order (``<fim_prefix><fim_suffix>S<fim_middle>P``),
    # where the middle simply continues the prefix; the suffix first also lets typing reuse the whole KV cache
    "fsm-complete": FimTemplate("fsm-complete", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                                ("<|endoftext|>", "<fim_pad>"), order="spm"),
    "starcoder": FimTemplate("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                             ("<|endoftext|>", "<file_sep>", "<fim_pad>")),
    "qwen": FimTemplate("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                        ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>")),
    "deepseek": FimTemplate("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>",
                            ("<｜end▁of▁sentence｜>", "<|EOT|>")),
    "codellama": FimTemplate("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>", ("▁<EOT>", "<EOT>"), " ", " "),
}


@dataclass(frozen=True)
class FimTokens:
    """The fill-in-the-middle markers a checkpoint declares in its metadata (GGUF:
    ``tokenizer.ggml.fim_pre_token_id`` / ``fim_suf`` / ``fim_mid`` as token strings), and the
    tokens it declares as ends of text (EOS, EOT, ``fim_pad``, ``fim_sep``, ``fim_rep``)."""

    prefix: str
    suffix: str
    middle: str
    stops: tuple[str, ...] = ()


def _markers(tpl: FimTemplate) -> tuple[str, str, str]:
    return tpl.prefix_token, tpl.suffix_token, tpl.middle_token


def _missing(markers: tuple[str, ...], vocab: dict[str, int]) -> list[str]:
    return [t for t in markers if t not in vocab]


def _matching(vocab: dict[str, int]) -> list[str]:
    """The names of the templates whose three markers ``vocab`` has."""
    return [name for name, tpl in TEMPLATES.items() if not _missing(_markers(tpl), vocab)]


def detect_template(vocab: dict[str, int], requested: str = "auto", declared: FimTokens | None = None) -> FimTemplate:
    """Pick the template: ``requested`` (a name of :data:`TEMPLATES`) when not ``"auto"``; else the one
    whose markers ``declared`` names (a checkpoint's metadata; a template of its own when no known
    family uses those markers); else the first family whose markers are special tokens of ``vocab``.
    Raises ModelError for an unknown name, a template whose markers ``vocab`` lacks (naming the
    templates that would match), or a tokenizer without FIM markers."""
    if requested and requested != "auto":
        if requested not in TEMPLATES:
            raise ModelError(f"unknown FIM template {requested!r}; choose one of {', '.join(TEMPLATES)} or auto")
        tpl = TEMPLATES[requested]
        missing = _missing(_markers(tpl), vocab)
        if missing:
            fits = _matching(vocab)
            hint = (f"templates this tokenizer has the markers of: {', '.join(fits)}" if fits
                    else "this tokenizer has no fill-in-the-middle markers of a known family")
            raise ModelError(f"FIM template {requested!r} needs {', '.join(missing)}, which this model's tokenizer "
                             f"lacks ({hint}); set model.fimTemplate (--fim-template) to \"auto\" or one that fits")
        return tpl
    marked = None if declared is None else (declared.prefix, declared.suffix, declared.middle)
    if marked and not _missing(marked, vocab):
        for tpl in TEMPLATES.values():
            if tpl.family != "fsm-complete" and _markers(tpl) == marked:
                return tpl
        stops = tuple(t for t in declared.stops if t in vocab)
        return FimTemplate("declared", declared.prefix, declared.suffix, declared.middle, stops)
    for tpl in TEMPLATES.values():
        if tpl.family == "fsm-complete":
            continue  # chosen by name only (same tokens as StarCoder)
        if tpl.prefix_token in vocab and tpl.middle_token in vocab:
            return tpl
    if "<PRE>" in vocab and "<MID>" in vocab:
        return FimTemplate("codellama", "<PRE>", "<SUF>", "<MID>", ("<EOT>",), " ", " ")
    raise ModelError("the tokenizer has no fill-in-the-middle tokens (<fim_prefix>, <|fim_prefix|>, <｜fim▁begin｜>, "
                     "<PRE>) and its metadata declares none; use a FIM-trained code model (e.g. Qwen2.5-Coder) or "
                     "name the template with model.fimTemplate (--fim-template)")


def control_tokens(tokenizer) -> tuple[frozenset[int], tuple[str, ...]]:
    """``(ids, strings)`` of the tokenizer's control tokens: its special tokens and every added
    token (Qwen2.5's FIM markers are plain added tokens, not special ones). :mod:`engine.vocab`
    treats the same ids as no text."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    strings = set(getattr(tokenizer, "all_special_tokens", None) or [])
    try:
        for i, added in tokenizer.added_tokens_decoder.items():
            ids.add(int(i))
            strings.add(str(getattr(added, "content", added)))
    except (AttributeError, TypeError):
        pass
    return frozenset(ids), tuple(sorted((s for s in strings if s), key=len, reverse=True))


def split_controls(text: str, controls: tuple[str, ...]) -> list[str]:
    """``text`` cut into pieces none of which holds a whole string of ``controls``: each occurrence
    is cut after its first character (``"a<|fim_middle|>b"`` -> ``["a<", "|fim_middle|>b"]``)."""
    cuts = set()
    for control in controls:
        if len(control) < 2:
            continue
        at = text.find(control)
        while at >= 0:
            cuts.add(at + 1)
            at = text.find(control, at + 1)
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@dataclass
class Prompt:
    ids: list[int]  # full prompt token ids
    prefix_chars: int  # characters of the prefix that made it into the prompt
    suffix_chars: int
    prefix_ids: list[int] = field(default_factory=list)  # the prefix's ids in the prompt (its tail: nearest the cursor)
    suffix_ids: list[int] = field(default_factory=list)  # the suffix's ids in the prompt (its head)


class PromptBuilder:
    """Builds FIM prompts within ``budget`` tokens, keeping the text nearest the cursor.

    The prefix keeps about three quarters of the budget, the suffix the rest (unused share moves to
    the other side, the suffix's in steps of :data:`SUFFIX_STEP` tokens). The prefix is cut at a line
    start so that typing does not shift the cut, and the suffix's length does not follow the prefix's
    token by token: both keep the KV-cache prefix reusable while typing (in SPM order the suffix
    comes first).
    """

    CHARS_PER_TOKEN_MAX = 8  # generous bound used to pre-cut long texts before tokenizing

    def __init__(self, tokenizer, template: FimTemplate, budget: int):
        self.tok = tokenizer
        self.tpl = template
        self.budget = budget
        vocab = tokenizer.get_vocab()
        try:
            self.pre_id = vocab[template.prefix_token]
            self.suf_id = vocab[template.suffix_token]
            self.mid_id = vocab[template.middle_token]
        except KeyError as exc:
            raise ModelError(f"FIM template {template.family} does not match this tokenizer (missing {exc})") from exc
        self.stop_ids = tuple(sorted({vocab[t] for t in template.stop_tokens if t in vocab}
                                     | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())))
        self.control_ids, self._control_strings = control_tokens(tokenizer)

    def _encode(self, text: str) -> list[int]:
        """Document text -> ids; text is data, never control: no id of :attr:`control_ids` comes out
        (a document holding ``"<|fim_middle|>"`` is encoded as the characters it is). Lone surrogates
        are encoded as U+FFFD."""
        if not text:
            return []
        text = scalar_text(text)
        ids = self.tok.encode(text, add_special_tokens=False)
        if self.control_ids.isdisjoint(ids):
            return ids
        out: list[int] = []
        for piece in split_controls(text, self._control_strings):
            part = self.tok.encode(piece, add_special_tokens=False)
            if not self.control_ids.isdisjoint(part):  # matched after normalisation: character by character
                part = [i for ch in piece for i in self.tok.encode(ch, add_special_tokens=False)]
            out.extend(part)
        return out

    SUFFIX_STEP = 64  # the suffix's room beyond its quarter moves in steps of this many tokens (see build)
    CUT_LINES = 4  # the prefix starts on a document line whose index is a multiple of this

    def _fitting_line(self, prefix: str, room: int, first_line: int) -> int:
        """Where ``prefix`` (starting on document line ``first_line``, 0-based) should start so that
        about ``room`` tokens remain: the first line start after the token that many from the end
        whose document line is a multiple of :data:`CUT_LINES` (typing on the cursor's line moves
        the start only every few lines, so the KV-cache prefix stays reusable). One encoding with
        offsets instead of re-encoding shorter and shorter texts; 0 when the tokenizer gives no
        offsets (the caller drops lines itself)."""
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is None:
            return 0
        enc = backend.encode(scalar_text(prefix), add_special_tokens=False)
        if len(enc.ids) <= room:
            return 0
        start = enc.offsets[len(enc.ids) - room][0]  # code points (a byte-level BPE without normaliser)
        pos = prefix.rfind("\n", 0, start)
        line = first_line + prefix.count("\n", 0, pos + 1)
        while pos >= 0 or line == first_line:
            pos = prefix.find("\n", pos + 1)
            if pos < 0:
                return 0
            line += 1
            if line % self.CUT_LINES == 0:
                return pos + 1
        return 0

    def build(self, prefix: str, suffix: str) -> Prompt:
        """Prompt ids ``[PRE] prefix [SUF] suffix [MID]`` (PSM) or ``[PRE] [SUF] suffix [MID] prefix``
        (SPM), with both sides truncated to fit."""
        room = max(16, self.budget - 3)
        max_chars = room * self.CHARS_PER_TOKEN_MAX
        first_line = 0  # the document line (0-based) the kept prefix starts on
        if len(prefix) > max_chars:
            cut = prefix.find("\n", len(prefix) - max_chars)
            first_line = prefix.count("\n", 0, cut + 1) if cut >= 0 else 0
            prefix = prefix[cut + 1:] if cut >= 0 else prefix[-max_chars:]
        suffix = suffix[:max_chars]
        p_ids = self._encode(self.tpl.prefix_sep + prefix) if self.tpl.prefix_sep else self._encode(prefix)
        s_ids = self._encode(suffix)
        # the suffix gets a quarter of the room, or what the prefix leaves, rounded down to a multiple of
        # SUFFIX_STEP tokens: typing grows the prefix a token at a time, and a suffix cut that moved with
        # it would change the prompt's head in SPM order (the whole KV cache prefilled again per keystroke)
        free = room - len(p_ids)
        s_room = max(room // 4, free - free % self.SUFFIX_STEP)
        s_ids = s_ids[: min(len(s_ids), s_room)]
        p_room = room - len(s_ids)
        if len(p_ids) > p_room:
            cut = self._fitting_line(prefix, p_room, first_line)
            if cut:
                prefix = prefix[cut:]
                p_ids = self._encode(prefix)
        if len(p_ids) > p_room:
            # drop whole lines from the start until it fits, so the cut is stable while typing
            lines = prefix.split("\n")
            lo = 0
            while len(p_ids) > p_room and lo < len(lines) - 1:
                drop = max(1, (len(lines) - lo) // 8)
                lo = min(len(lines) - 1, lo + drop)
                prefix = "\n".join(lines[lo:])
                p_ids = self._encode(prefix)
            p_ids = p_ids[-p_room:]
        suffix_text_ids = s_ids
        if self.tpl.suffix_sep:
            suffix_text_ids = self._encode(self.tpl.suffix_sep)[:1] + s_ids
        if self.tpl.order == "spm":
            ids = [self.pre_id, self.suf_id, *suffix_text_ids, self.mid_id, *p_ids]
        else:
            ids = [self.pre_id, *p_ids, self.suf_id, *suffix_text_ids, self.mid_id]
        return Prompt(ids, len(prefix), len(suffix), p_ids, s_ids)
