"""Masking renormalises the distribution over allowed tokens without distorting it."""

from __future__ import annotations

import torch

from engine.decode import logits_to_probs, mask_logits, sample


def test_masked_softmax_is_the_renormalised_original():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(500, generator=gen) * 3  # [vocab]
        blocked = torch.rand(500, generator=gen) < 0.7  # [vocab] bool
        blocked[0] = False  # at least one allowed
        p = logits_to_probs(logits, 1.0, 1.0)
        q = logits_to_probs(mask_logits(logits, blocked), 1.0, 1.0)
        assert torch.all(q[blocked] == 0)
        want = p[~blocked] / p[~blocked].sum()
        torch.testing.assert_close(q[~blocked], want, rtol=1e-5, atol=1e-7)


def test_sampling_frequencies_match_the_renormalised_distribution():
    """Chi-square goodness of fit of 20,000 masked samples against the renormalised probabilities."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 3.0, 1.5, -0.5])
    blocked = torch.tensor([False, True, False, False, True, True, False, False])
    masked = mask_logits(logits, blocked)
    n = 20_000
    counts = torch.zeros(8)
    for _ in range(n):
        counts[int(sample(masked, 1.0, 1.0, gen))] += 1
    assert counts[blocked].sum() == 0
    p = torch.softmax(logits[~blocked], -1)
    expected = p * n
    chi2 = float(((counts[~blocked] - expected) ** 2 / expected).sum())
    assert chi2 < 20.5  # 4 degrees of freedom, p = 0.0004: fails only if sampling is distorted


def test_greedy_picks_the_best_allowed_token():
    logits = torch.tensor([5.0, 4.0, 3.0])
    assert int(sample(mask_logits(logits, torch.tensor([True, False, False])), 0.0, 1.0, None)) == 1


def test_top_p_keeps_the_smallest_nucleus():
    probs = logits_to_probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), 1.0, 0.8)
    assert torch.count_nonzero(probs) == 2
    torch.testing.assert_close(probs[:2], torch.tensor([0.625, 0.375]))


def test_prefill_threads_leave_busy_cores_alone():
    """Prefill uses the cores other runnable tasks leave free (``/proc/loadavg``'s running count
    includes the caller), at least one, at most the limit."""
    from engine.decode import free_cores

    assert free_cores(4, "0.10 0.20 0.30 1/180 4242\n", cpus=4) == 4  # only the caller runs
    assert free_cores(4, "1.10 0.90 0.80 2/180 4242\n", cpus=4) == 3  # one other process keeps a core busy
    assert free_cores(2, "6.00 6.00 6.00 9/300 4242\n", cpus=2) == 1
    assert free_cores(8, "0 0 0 1/10 1\n", cpus=2) == 2
    assert free_cores(3, "garbage", cpus=2) == 3
    assert 1 <= free_cores(2) <= 2  # this machine's /proc
