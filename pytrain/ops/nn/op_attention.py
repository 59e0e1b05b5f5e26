"""Attention (opset 23; opset 24's nonpad_kv_seqlen and opset 25's sliding window too): scaled dot
product attention over 4-D (batch, heads, seq, head_size) or 3-D (batch, seq, heads * head_size)
inputs, with grouped-query heads, a key/value cache, boolean or additive masks and a causal mask::

    S = (Q * sqrt(scale)) @ (K * sqrt(scale))^T       scale defaults to 1 / sqrt(head_size)
    S = softcap * tanh(S / softcap)                    when softcap > 0
    P = softmax(S + bias)                              bias: attn_mask, causal, window and padding
    Y = P @ V

A query row whose bias is -inf everywhere (no key it may attend) gives P = 0 and a zero output row.
The helpers here are shared with AttentionGrad, which recomputes P from the same inputs.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import GraphError, InputError
from pytrain.ops.linalg import matmul
from pytrain.ops.registry import OpContext, kernel

OP = "Attention"


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, L, heads * D) -> (B, heads, L, D)."""
    b, l, hidden = x.shape
    return x.reshape(b, l, heads, hidden // heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, heads, L, D) -> (B, L, heads * D), the inverse of :func:`split_heads`."""
    b, h, l, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, l, h * d)


def to_heads(Q: np.ndarray, K: np.ndarray, V: np.ndarray, q_num_heads: Optional[int],
             kv_num_heads: Optional[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K, V as 4-D (batch, heads, seq, head_size) tensors, checked against each other."""
    if not Q.ndim == K.ndim == V.ndim or Q.ndim not in (3, 4):
        raise InputError("%s: Q, K and V must all be 3-D or all 4-D, got shapes %s, %s, %s"
                         % (OP, Q.shape, K.shape, V.shape))
    if Q.ndim == 3:
        if q_num_heads is None or kv_num_heads is None:
            raise GraphError("%s: 3-D Q, K, V need the attributes q_num_heads and kv_num_heads" % OP)
        for name, x, h in (("Q", Q, q_num_heads), ("K", K, kv_num_heads), ("V", V, kv_num_heads)):
            if h < 1 or x.shape[2] % h:
                raise InputError("%s: the hidden size %d of %s %s is not a multiple of its %d heads"
                                 % (OP, x.shape[2], name, x.shape, h))
        Q, K, V = split_heads(Q, q_num_heads), split_heads(K, kv_num_heads), split_heads(V, kv_num_heads)
    if not Q.shape[0] == K.shape[0] == V.shape[0] or K.shape[1] != V.shape[1] or K.shape[2] != V.shape[2] \
            or Q.shape[3] != K.shape[3]:
        raise InputError("%s: Q %s, K %s, V %s (as batch, heads, seq, head_size) do not match: they need "
                         "one batch size, K and V one head count and length, Q and K one head size"
                         % (OP, Q.shape, K.shape, V.shape))
    if Q.shape[1] % K.shape[1]:
        raise InputError("%s: the %d query heads are not a multiple of the %d key/value heads"
                         % (OP, Q.shape[1], K.shape[1]))
    return Q, K, V


def with_cache(x: np.ndarray, past: Optional[np.ndarray], name: str) -> np.ndarray:
    """present = concat(past, x) along the sequence axis (x itself without a cache)."""
    if past is None:
        return x
    if past.ndim != 4 or past.shape[:2] != x.shape[:2] or past.shape[3] != x.shape[3]:
        raise InputError("%s: %s %s must be (batch, kv_heads, past_len, head_size) matching %s"
                         % (OP, name, past.shape, x.shape))
    return np.concatenate([past, x], axis=2)


def repeat_heads(x: np.ndarray, q_heads: int) -> np.ndarray:
    """Grouped-query attention: key/value head h serves query heads h*r .. h*r + r - 1."""
    r = q_heads // x.shape[1]
    return x if r == 1 else np.repeat(x, r, axis=1)


def sum_heads(dx: np.ndarray, kv_heads: int) -> np.ndarray:
    """The gradient of :func:`repeat_heads`: each key/value head sums its query heads' gradients."""
    b, h, l, d = dx.shape
    return dx if h == kv_heads else dx.reshape(b, kv_heads, h // kv_heads, l, d).sum(axis=2)


def attention_bias(q_len: int, kv_len: int, past_len: int, dtype: np.dtype, attn_mask: Optional[np.ndarray],
                   nonpad_kv_seqlen: Optional[np.ndarray], is_causal: int, left_window_size: int,
                   right_window_size: int) -> np.ndarray:
    """The additive bias on the scores, broadcastable to (batch, q_heads, q_len, kv_len).

    A boolean mask adds 0 where True and -inf where False; a float mask is added as is. A mask
    shorter than kv_len in its last axis (but longer than 1) is padded with -inf, as onnx's
    reference does. The causal and window masks are aligned bottom-right: query i sits at
    position i + offset, offset = past_len (key/value cache), nonpad_kv_seqlen[b] - q_len
    (external cache), else 0; query at p attends key j iff j <= p (causal) and
    p - left_window_size <= j <= p + right_window_size (each bound only when >= 0).
    """
    t = dtype.type
    bias = np.zeros((q_len, kv_len), dtype=dtype)
    if attn_mask is not None:
        m = attn_mask
        last = m.shape[-1] if m.ndim else 1
        if m.dtype == np.bool_:
            m = np.where(m, t(0), t(-np.inf))
        elif m.dtype.kind != "f":
            raise InputError("%s: attn_mask must be bool or float, got %s" % (OP, m.dtype))
        m = m.astype(dtype, copy=False)
        if 1 < last < kv_len:
            pad = np.full(m.shape[:-1] + (kv_len - last,), -np.inf, dtype=dtype)
            m = np.concatenate([m, pad], axis=-1)
        elif last not in (1, kv_len):
            raise InputError("%s: attn_mask's last axis has %d entries, more than the %d keys"
                             % (OP, last, kv_len))
        if m.ndim > 4:
            raise InputError("%s: attn_mask of shape %s has more than 4 axes" % (OP, attn_mask.shape))
        bias = bias + m
    if nonpad_kv_seqlen is not None:
        lens = np.asarray(nonpad_kv_seqlen).reshape(-1).astype(np.int64)
        keep = np.arange(kv_len).reshape(1, -1) < lens.reshape(-1, 1)                  # (B, kv)
        bias = bias + np.where(keep, t(0), t(-np.inf)).reshape(len(lens), 1, 1, kv_len)
    if is_causal or left_window_size >= 0 or right_window_size >= 0:
        if nonpad_kv_seqlen is not None and past_len == 0:
            offset = (np.asarray(nonpad_kv_seqlen).reshape(-1, 1, 1).astype(np.int64) - q_len)  # (B, 1, 1)
        else:
            offset = np.array(past_len).reshape(1, 1, 1)
        # diff[b, i, j] = position of query i minus position of key j
        diff = np.arange(q_len).reshape(1, -1, 1) + offset - np.arange(kv_len).reshape(1, 1, -1)
        allowed = np.ones(diff.shape, dtype=bool)
        if is_causal:
            allowed &= diff >= 0
        if left_window_size >= 0:
            allowed &= diff <= left_window_size
        if right_window_size >= 0:
            allowed &= -diff <= right_window_size
        bias = bias + np.where(allowed, t(0), t(-np.inf)).reshape(diff.shape[0], 1, q_len, kv_len)
    return bias


def masked_softmax(s: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """softmax over the last axis; rows whose bias is all -inf (no allowed key) are all zero."""
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), np.zeros((), dtype=s.dtype), m)
    e = np.exp(s - m)
    total = np.sum(e, axis=-1, keepdims=True)
    p = e / np.where(total == 0, np.ones((), dtype=s.dtype), total)
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    return np.where(dead, np.zeros((), dtype=s.dtype), p) if dead.any() else p


class Scores:
    """The forward's intermediate values, as AttentionGrad needs them too."""

    def __init__(self, raw: np.ndarray, capped: np.ndarray, biased: np.ndarray, probs: np.ndarray,
                 scale: float, K: np.ndarray, V: np.ndarray) -> None:
        self.raw = raw          # (Q sqrt(scale)) (K sqrt(scale))^T
        self.capped = capped    # after softcap (raw itself without one)
        self.biased = biased    # capped + bias
        self.probs = probs      # softmax, in the softmax precision
        self.scale = scale
        self.K = K              # present key/value, heads repeated for grouped-query attention
        self.V = V


def scores(Q: np.ndarray, K: np.ndarray, V: np.ndarray, attn_mask: Optional[np.ndarray],
           past_key: Optional[np.ndarray], past_value: Optional[np.ndarray],
           nonpad_kv_seqlen: Optional[np.ndarray], is_causal: int, scale: Optional[float], softcap: float,
           softmax_precision: Optional[int], left_window_size: int, right_window_size: int) -> Scores:
    """Everything up to the softmax, for 4-D Q, K, V (see :func:`to_heads`)."""
    if (past_key is None) != (past_value is None):
        raise InputError("%s: past_key and past_value must be given together" % OP)
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise InputError("%s: nonpad_kv_seqlen cannot be combined with past_key/past_value" % OP)
    if nonpad_kv_seqlen is not None and np.asarray(nonpad_kv_seqlen).size != Q.shape[0]:
        raise InputError("%s: nonpad_kv_seqlen must have one length per batch entry (%d), got shape %s"
                         % (OP, Q.shape[0], np.shape(nonpad_kv_seqlen)))
    K = with_cache(K, past_key, "past_key")
    V = with_cache(V, past_value, "past_value")
    past_len = 0 if past_key is None else past_key.shape[2]
    dtype = Q.dtype
    sc = float(scale) if scale is not None else 1.0 / np.sqrt(Q.shape[3])
    root = dtype.type(np.sqrt(sc))
    Kr, Vr = repeat_heads(K, Q.shape[1]), repeat_heads(V, Q.shape[1])
    raw = matmul(Q * root, np.swapaxes(Kr * root, -1, -2))
    capped = raw
    if softcap > 0:
        c = dtype.type(softcap)
        capped = np.tanh(raw / c) * c
    bias = attention_bias(Q.shape[2], K.shape[2], past_len, dtype, attn_mask, nonpad_kv_seqlen, is_causal,
                          left_window_size, right_window_size)
    biased = capped + bias
    soft = dtypes.to_numpy(softmax_precision) if softmax_precision is not None else dtype
    probs = masked_softmax(biased.astype(soft, copy=False), bias)
    return Scores(raw, capped, biased, probs, sc, Kr, Vr)


def check_attributes(qk_matmul_output_mode: int, softcap: float, left_window_size: int,
                     right_window_size: int) -> None:
    if qk_matmul_output_mode not in (0, 1, 2, 3):
        raise GraphError("%s: qk_matmul_output_mode=%d, expected 0, 1, 2 or 3" % (OP, qk_matmul_output_mode))
    if softcap < 0:
        raise GraphError("%s: softcap=%g must be >= 0 (0: none)" % (OP, softcap))
    for name, w in (("left_window_size", left_window_size), ("right_window_size", right_window_size)):
        if w < -1:
            raise GraphError("%s: %s=%d, expected -1 (unbounded) or >= 0" % (OP, name, w))


@kernel("Attention")
def attention(ctx: OpContext, Q: np.ndarray, K: np.ndarray, V: np.ndarray,
              attn_mask: Optional[np.ndarray] = None, past_key: Optional[np.ndarray] = None,
              past_value: Optional[np.ndarray] = None, nonpad_kv_seqlen: Optional[np.ndarray] = None, *,
              is_causal: int = 0, kv_num_heads: Optional[int] = None, q_num_heads: Optional[int] = None,
              qk_matmul_output_mode: int = 0, scale: Optional[float] = None, softcap: float = 0.0,
              softmax_precision: Optional[int] = None, left_window_size: int = -1,
              right_window_size: int = -1) -> tuple:
    check_attributes(qk_matmul_output_mode, softcap, left_window_size, right_window_size)
    three_d = Q.ndim == 3
    if not three_d and (q_num_heads is not None or kv_num_heads is not None) and ctx.opset >= 25:
        raise GraphError("%s: q_num_heads and kv_num_heads are for 3-D inputs, Q is %s" % (OP, Q.shape))
    q, k, v = to_heads(Q, K, V, q_num_heads, kv_num_heads)
    s = scores(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, is_causal, scale, softcap,
               softmax_precision, left_window_size, right_window_size)
    Y = matmul(s.probs.astype(Q.dtype, copy=False), s.V)
    outs = [merge_heads(Y) if three_d else Y, None, None, None]
    if ctx.wants(1) or ctx.wants(2):
        outs[1] = with_cache(k, past_key, "past_key")
        outs[2] = with_cache(v, past_value, "past_value")
    if ctx.wants(3):
        # mode 0: the QK product; 1: after softcap; 2: plus the mask bias; 3: the softmax
        qk = (s.raw, s.capped, s.biased, s.probs)[qk_matmul_output_mode]
        outs[3] = qk.astype(Q.dtype, copy=False)
    return tuple(outs)
