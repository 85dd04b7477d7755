"""DP-rank imbalance: max/mean figures and the saturated/starving callout."""

import pytest

from specmon.analysis.ranks import rank_imbalance
from specmon.model import RankReading


def test_one_rank_full_while_the_other_idles_is_called_out():
    ranks = [RankReading(dp_rank=0, running_reqs=0, queued_reqs=0, kv_usage=0.02),
             RankReading(dp_rank=1, running_reqs=12, queued_reqs=5, kv_usage=0.97)]
    im = rank_imbalance(ranks)
    assert im.running_max_over_mean == pytest.approx(2.0) and im.kv_max_over_mean == pytest.approx(0.97 / 0.495)
    assert "dp1 saturated (KV 97%) while dp0 is not" in im.callout and "dp0 starving" in im.callout


def test_even_ranks_and_unknowns_say_nothing():
    even = [RankReading(dp_rank=i, running_reqs=6, kv_usage=0.5) for i in range(4)]
    assert rank_imbalance(even).callout is None and rank_imbalance(even).running_max_over_mean == 1.0
    full = [RankReading(dp_rank=i, running_reqs=6, kv_usage=0.99) for i in range(2)]
    assert rank_imbalance(full).callout is None  # a saturated worker, not an imbalance
    part = [RankReading(dp_rank=0, running_reqs=3), RankReading(dp_rank=1)]
    assert rank_imbalance(part).running_max_over_mean is None and rank_imbalance(part).kv_max_over_mean is None
    assert rank_imbalance([RankReading(dp_rank=0, running_reqs=3)]) is None
    assert "dp1 saturated" in rank_imbalance([RankReading(dp_rank=0, running_reqs=2),
                                              RankReading(dp_rank=1, running_reqs=8)], max_running=8).callout
