"""Preparing a request's decoding: the :class:`engine.spec.ConstraintSpec` built from the request
(:func:`constraint_spec`: the prefix lexer, token healing, the mode policy, the semantic monitors
with jedi) and the decode loop's :class:`engine.decode_loop.Start` built back from a spec
(:func:`start_from_spec`), wherever the model runs. :mod:`engine.spec` is the record alone (its
fields and its JSON codec); this module holds what needs the runtime (the lexer, jedi, the FSM).
"""

from __future__ import annotations

import dataclasses

from .lexing.automaton import Lex
from .monitors.semantics import Semantics
from .spec import ConstraintSpec, ResolverSpec, healed_text


def constraint_spec(req, plan, settings, prefix_lexer, policies_for, *, stop_ids=(), stop_tokens=(),
                    vocab_digest: str = "", stages=None) -> ConstraintSpec:
    """The spec of a constrained request (``plan.constrained``): lex the prefix
    (:class:`engine.lexing.PrefixLexer`), give the half-typed word or a typed space back to the
    model (token healing, :func:`engine.spec.healed_text`), apply the mode policy's comment rule and set up the
    semantic monitors (jedi; ``policies_for(profile, path) -> PolicyTable``). The monitors' setup
    time is added to ``stages.semantics`` (seconds; :class:`engine.stages.Stages`, None: not timed)."""
    import time

    from .fsm import detect_indent_style
    from .lexing.vocabulary import indent_unit
    from .monitors.base import PROSE_MODES
    from .monitors.setup import monitors_at

    s = settings
    style = detect_indent_style(plan.prefix)
    prefix, cursor_line = plan.prefix, plan.cursor_line
    heal = healed_text(prefix, cursor_line, plan.suffix)
    state = None
    if heal:
        state, _recoveries = prefix_lexer.lex(prefix[: len(prefix) - len(heal)], style)
        heal = heal if state.mode not in PROSE_MODES else ""
    if not heal:
        state, _recoveries = prefix_lexer.lex(prefix, style)
    mode_policy = plan.fp.policy if plan.fp is not None else None
    state = state.copy()
    if s.constraints.code_only and state.mode not in PROSE_MODES and (mode_policy is None or mode_policy.code_only):
        state.code_only = True  # completing code: comments are masked (the mode policy)
    monitors = resolver = None
    if s.constraints.semantic:
        c = s.constraints
        ts = time.perf_counter()
        policies = policies_for(c.required_arguments, req.path)
        monitors = monitors_at(prefix[: len(prefix) - len(heal)], plan.suffix, req.path, state, policies,
                               member_access=c.member_access, domain_vocabulary=c.domain_vocabulary,
                               multiline=plan.multiline, healed=heal, budget_ms=semantic_budget_ms(req.deadline))
        if monitors.resolver is not None:
            resolver = ResolverSpec(req.path, policies.profile, dict(policies.rules))
            monitors.resolver = None  # travels as its configuration (see ResolverSpec)
        if stages is not None:
            stages.semantics += time.perf_counter() - ts
    c = s.constraints
    tail = prefix[-max(64, len(cursor_line)):]
    return ConstraintSpec(
        lex=state, style=style, indent_unit=indent_unit(prefix + plan.suffix, len(prefix), style), heal=heal, tail=tail, multiline=plan.multiline, wrap_ok=plan.wrap_ok,
        single_line=plan.single_line, max_tokens=plan.max_tokens, temperature=plan.temperature,
        top_p=plan.top_p, seed=plan.seed, stop_ids=sorted(set(stop_ids)), stop_tokens=list(stop_tokens),
        vocab_digest=vocab_digest, monitors=monitors, resolver=resolver,
        domain_vocabulary=list(c.domain_vocabulary), domain_boost=c.domain_boost,
        fuse_threshold=c.fuse_threshold, fuse_bias=c.fuse_bias,
        mode=plan.fp.mode if plan.fp is not None else None,
        policy=dataclasses.asdict(mode_policy) if dataclasses.is_dataclass(mode_policy) else None)


SEMANTIC_SHARE = 0.3  # keeping pace: the share of the time left before the deadline a jedi query may take


def semantic_budget_ms(deadline: float | None, now: float | None = None) -> float | None:
    """How long (ms) a jedi query of the monitors' setup may take for a request that must end its
    decoding by ``deadline`` (:attr:`engine.api.CompletionRequest.deadline`, ``time.perf_counter()``
    seconds; keeping pace with a typist): :data:`SEMANTIC_SHARE` of the time left, 0 when none is
    left (jedi's cache only); None (no limit) without a deadline, or when the jedi worker is off
    (:mod:`engine.resolve.worker`: a query left to finish on a thread of this process would hold
    the GIL while the request decodes). The query goes on in the worker and its answer is memoised
    for the next keystroke; the prefill and decoding need the rest of the time."""
    from .resolve import worker

    if deadline is None or not worker.enabled():
        return None
    import time

    left = deadline - (time.perf_counter() if now is None else now)
    return max(0.0, SEMANTIC_SHARE * left * 1e3)


def healing_spec(plan, heal: str, *, stop_ids=(), stop_tokens=(), vocab_digest: str = "") -> ConstraintSpec:
    """The spec of an unconstrained request whose prompt gives ``heal`` back to the model
    (:func:`engine.spec.healed_text`): no FSM and no monitor, only the heal rule and the stop rules, for a remote
    backend's logits processor (the in-process loop applies the same rules without a spec)."""
    tail = plan.prefix[-max(64, len(plan.cursor_line)):]
    return ConstraintSpec(lex=Lex(None), style=None, heal=heal, tail=tail, multiline=plan.multiline,
                          wrap_ok=plan.wrap_ok, single_line=plan.single_line, max_tokens=plan.max_tokens,
                          temperature=plan.temperature, top_p=plan.top_p, seed=plan.seed,
                          stop_ids=sorted(set(stop_ids)), stop_tokens=list(stop_tokens), vocab_digest=vocab_digest,
                          constrained=False)


def make_resolver(spec: ResolverSpec):
    """The callee resolver of :class:`engine.monitors.semantics.Semantics` for ``spec``
    (:func:`engine.signatures.callee_resolver`: jedi's cache only, memoised per callee text)."""
    from . import signatures

    return signatures.callee_resolver(spec.path, spec.policies())


def start_from_spec(spec: ConstraintSpec, index, memo, masks):
    """The decoder's :class:`engine.decode_loop.Start` for ``spec`` over the token ``index``
    (:class:`engine.fsm.TokenIndex`), the shared mask ``memo`` and ``masks``
    (:class:`engine.step_mask.StepMask`, for the first-token rule). The spec is not changed (its
    lexer state and monitors are copied). ``Start.sem`` is None when no monitor is active."""
    from .decode_loop import Start
    from .fsm import PythonGuide

    start = Start(style=spec.style, heal=spec.heal, indent=spec.indent_unit)
    if not spec.constrained:  # token healing's rule only (healing_spec)
        start.first = masks.first_token_rule(spec.heal, spec.cursor_line, spec.multiline) if spec.heal else None
        return start
    state = spec.lex.copy()
    start.guide = PythonGuide(index, state, memo)
    start.lex = state.copy()
    start.first = masks.first_token_rule(spec.heal, spec.cursor_line, spec.multiline)
    if spec.monitors is not None:
        sem = _copy_monitors(spec.monitors)
        if spec.resolver is not None:
            sem.resolver = make_resolver(spec.resolver)
        start.sem_start = (state.copy(), sem.copy())
        start.sem = sem if sem.active else None
    return start


def _copy_monitors(sem: Semantics) -> Semantics:
    """A copy of the spec's monitors with their own refusal counts (decoding never changes the spec)."""
    out = sem.copy()
    out.refusals = dict(sem.refusals)
    return out
