"""AttentionGrad: the backward of ONNX Attention's output Y, recomputing the probabilities."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.linalg import matmul
from pytrain.ops.nn.op_attention import check_attributes, merge_heads, scores, split_heads, sum_heads, to_heads
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import sum_to_shape


@kernel("AttentionGrad", domain=PYTRAIN_DOMAIN)
def attention_grad(ctx: OpContext, dY: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray,
                   attn_mask: Optional[np.ndarray] = None, past_key: Optional[np.ndarray] = None,
                   past_value: Optional[np.ndarray] = None, nonpad_kv_seqlen: Optional[np.ndarray] = None, *,
                   is_causal: int = 0, kv_num_heads: Optional[int] = None, q_num_heads: Optional[int] = None,
                   scale: Optional[float] = None, softcap: float = 0.0, softmax_precision: Optional[int] = None,
                   left_window_size: int = -1, right_window_size: int = -1) -> tuple:
    """Outputs dQ, dK, dV, d_attn_mask (a float mask), d_past_key, d_past_value.

    With S the scaled scores, C = softcap * tanh(S / softcap) (C = S without softcap),
    P = softmax(C + bias) and Y = P V (K and V are the present key/value: the cache then the new
    ones, each key/value head repeated for the query heads it serves):
    dV = P^T dY;  dP = dY V^T;  dC = P * (dP - rowsum(dP * P)) (also the additive mask's gradient);
    dS = dC * (1 - tanh^2(S / softcap));  dQ = scale * dS K;  dK = scale * dS^T Q;
    the repeated heads' gradients summed back, and the cache's part split off dK and dV.
    """
    check_attributes(0, softcap, left_window_size, right_window_size)
    three_d = Q.ndim == 3
    q, k, v = to_heads(Q, K, V, q_num_heads, kv_num_heads)
    s = scores(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, is_causal, scale, softcap,
               softmax_precision, left_window_size, right_window_size)
    work = np.promote_types(s.probs.dtype, Q.dtype)
    p = s.probs.astype(work, copy=False)
    dy = split_heads(dY, q.shape[1]) if three_d else dY
    kv_heads, past_len = k.shape[1], 0 if past_key is None else past_key.shape[2]

    def split_cache(d: np.ndarray, new: np.ndarray, past: Optional[np.ndarray]) -> tuple:
        """The gradient of present = concat(past, new) (heads repeated) as (d_new, d_past)."""
        d = sum_heads(d, kv_heads)
        d_new = d[:, :, past_len:].astype(new.dtype, copy=False)
        d_past = None if past is None else d[:, :, :past_len].astype(past.dtype, copy=False)
        return (merge_heads(d_new) if three_d else d_new), d_past

    dQ = dK = dV = dMask = dPastK = dPastV = None
    if ctx.wants(2) or ctx.wants(5):
        dV, dPastV = split_cache(matmul(np.swapaxes(p, -1, -2), dy.astype(work, copy=False)), v, past_value)
    if any(ctx.wants(i) for i in (0, 1, 3, 4)):
        dP = matmul(dy.astype(work, copy=False), np.swapaxes(s.V.astype(work, copy=False), -1, -2))
        dC = p * (dP - np.sum(dP * p, axis=-1, keepdims=True))
        if ctx.wants(3) and attn_mask is not None and attn_mask.dtype.kind == "f":
            last = attn_mask.shape[-1] if attn_mask.ndim else 1
            d = dC[..., :last] if 1 < last < dC.shape[-1] else dC  # a short mask was padded with -inf
            dMask = sum_to_shape(d, attn_mask.shape).astype(attn_mask.dtype, copy=False)
        dS = dC
        if softcap > 0:
            t = np.tanh(s.raw.astype(work, copy=False) / work.type(softcap))
            dS = dC * (1 - t * t)
        dS = dS * work.type(s.scale)
        if ctx.wants(0):
            dq = matmul(dS, s.K.astype(work, copy=False)).astype(Q.dtype, copy=False)
            dQ = merge_heads(dq) if three_d else dq
        if ctx.wants(1) or ctx.wants(4):
            dK, dPastK = split_cache(matmul(np.swapaxes(dS, -1, -2), q.astype(work, copy=False)), k, past_key)
    return (dQ, dK, dV, dMask, dPastK if ctx.wants(4) else None, dPastV if ctx.wants(5) else None)
