"""The shared forward checks of the GPU tests (``tests/helpers.py``), held to what they must catch, on the CPU:
the reference's own output passes, and a wrong element, a NaN, a wrong lse or an empty row written wrong fails."""

import math

import pytest
import torch
from tests.helpers import check_forward, check_packed_forward, packed_sequences

from attnlab.reference import attention_ref, attention_ref_varlen


def _dense():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 9, 16, generator=gen)
    k, v = (torch.randn(1, 2, 12, 16, generator=gen) for _ in range(2))
    return q, k, v


def test_check_forward_passes_the_reference_and_catches_wrong_outputs():
    q, k, v = _dense()
    kw = dict(causal=False, scale=0.25, window=(2, 0))  # no row is empty: the window holds its diagonal
    out, lse = attention_ref(q, k, v, **kw)
    check_forward(q, k, v, out, lse, **kw)
    bad = out.clone()
    bad[0, 1, 4, 3] += 0.05
    with pytest.raises(AssertionError):
        check_forward(q, k, v, bad, lse, **kw)
    bad = out.clone()
    bad[0, 0, 0, 0] = math.nan
    with pytest.raises(AssertionError, match="not written"):
        check_forward(q, k, v, bad, lse, **kw)
    with pytest.raises(AssertionError):
        check_forward(q, k, v, out, lse + 0.1, **kw)


def test_check_forward_holds_empty_rows_to_zero_and_minus_inf():
    _, k, v = _dense()
    q = torch.randn(1, 2, 15, 16, generator=torch.Generator().manual_seed(4))  # 15 queries, 12 keys
    kw = dict(causal=True, scale=0.25)  # the first 3 rows see no key
    out, lse = attention_ref(q, k, v, **kw)
    assert torch.isinf(lse[..., :3]).all()
    check_forward(q, k, v, out, lse, **kw)
    bad = out.clone()
    bad[0, 0, 1] = 1e-7  # within the criterion's floor: only the empty-row rule can catch it
    with pytest.raises(AssertionError, match="out = 0"):
        check_forward(q, k, v, bad, lse, **kw)
    bad_lse = lse.clone()
    bad_lse[0, 1, 2] = 0.0
    with pytest.raises(AssertionError):
        check_forward(q, k, v, out, bad_lse, **kw)


def test_check_packed_forward_and_the_sequences_it_walks():
    lens_q, lens_k = [3, 0, 5, 2], [4, 2, 0, 6]
    cu = [torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32) for lens in (lens_q, lens_k)]
    assert list(packed_sequences(cu)) == [(0, 0, 3, 0, 4), (3, 8, 10, 6, 12)]  # sequences with queries and keys
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(sum(lens_q), 2, 8, generator=gen)
    k, v = (torch.randn(sum(lens_k), 1, 8, generator=gen) for _ in range(2))
    out, lse = attention_ref_varlen(q, k, v, *cu, causal=True, scale=0.3)
    check_packed_forward(q, k, v, out, lse, cu, causal=True, scale=0.3)  # sequence 2 has no keys: empty rows
    bad = out.clone()
    bad[4, 1, 0] = 1e-7  # a row of the keyless sequence, within the criterion's floor
    with pytest.raises(AssertionError, match="out = 0"):
        check_packed_forward(q, k, v, bad, lse, cu, causal=True, scale=0.3)
    bad = out.clone()
    bad[9, 0, 2] -= 0.05
    with pytest.raises(AssertionError):
        check_packed_forward(q, k, v, bad, lse, cu, causal=True, scale=0.3)
