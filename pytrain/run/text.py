"""The text data of a run, fitted to its model: a text file cut into blocks of token ids for a causal LM, or a
CSV of texts and labels as ids (and attention mask) for a classifier (both through
:mod:`pytrain.text.datasets`), split for validation, and what the training model takes for a batch of them
(:func:`pytrain.text.hub_inputs.plan`). ``pytrain train --text/--text-csv``, the page's "Your text" and its
run file all encode with :func:`encode` and split with :func:`split`, so a run goes from one to the other with the
same ids."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain import data
from pytrain.data._source import read_text
from pytrain.errors import DataError
from pytrain.text import Tokenizer
from pytrain.text.datasets import classification_rows, lm_blocks, read_text_csv
from pytrain.text.hub_inputs import plan, read_config

#: the block size of a causal LM whose sequence length is not fixed, when none is given
DEFAULT_BLOCK = 64
#: the source kinds of a text run (the page's data_source "kind")
KINDS = ("text", "text_csv")


class TextData(NamedTuple):
    """Encoded text: ``x`` ids (N, L), or ids and mask (N, 2, L) for a model taking an attention mask; ``y``
    the labels (a causal LM: ``x`` itself, its loss reads the next tokens from the ids); task "lm" or
    "classification"; the label names."""
    x: np.ndarray
    y: np.ndarray
    task: str
    classes: Optional[List[str]]
    notes: List[str]


def vocab_size(graph: Any, ids: str, dims: Dict[str, Sequence[int]]) -> Optional[int]:
    """Rows of the embedding table the ids index (the first Gather by them of a tensor of known ``dims``:
    initializers, or a checkpoint's parameters)."""
    seen = {ids}
    for n in graph.node:   # the ids may pass through a Cast or Reshape first
        if n.op_type in ("Cast", "Reshape", "Unsqueeze", "Flatten") and n.input and n.input[0] in seen:
            seen.add(n.output[0])
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] in seen and n.input[0] in dims:
            return int(dims[n.input[0]][0])
    return None


def fixed(shape: Optional[Sequence[Any]], axis: int) -> Optional[int]:
    """The size of ``axis`` when the shape fixes it."""
    d = shape[axis] if shape is not None and len(shape) > axis else None
    return int(d) if isinstance(d, int) and d > 0 else None


def block_length(ids_shape: Optional[Sequence[Any]], block_size: Optional[int], where: str) -> Tuple[int, List[str]]:
    """(tokens per sample, notes): the model's fixed sequence length, else ``block_size``."""
    length = fixed(ids_shape, 1)
    if length is None:
        return int(block_size or DEFAULT_BLOCK), []
    if block_size is None or int(block_size) == length:
        return length, []
    return length, ["%s takes %d tokens at a time: blocks of %d" % (where, length, length)]


class TextInput(NamedTuple):
    """What :func:`encode` reads: ``text`` (a causal LM's text file) or ``csv`` (texts in ``text_column``, labels
    in ``label_column``); ``classes``: the label names of a run that goes on (else the CSV's, sorted);
    ``name``: the file as messages call it."""
    text: Optional[str] = None
    csv: Optional[str] = None
    text_column: Optional[str] = None
    label_column: Optional[str] = None
    classes: Optional[Sequence[str]] = None
    name: Optional[str] = None


def encode(tok: Tokenizer, out_shape: Sequence[Any], length: int, vocab: Optional[int], masked: bool,
           source: TextInput, where: str = "the model") -> TextData:
    """``source.text`` as blocks of ``length`` ids for a causal LM (output (batch, length, vocabulary)), or
    ``source.csv``'s texts and labels as rows of ``length`` ids for a classifier (output (batch, classes))."""
    text, csv, name = source.text, source.csv, source.name
    if (text is None) == (csv is None):
        raise DataError("give either a text file (a causal language model) or a CSV of texts and labels")
    if text is not None:
        if len(out_shape) != 3:
            raise DataError("a text file trains a causal language model, whose output is (batch, length, "
                            "vocabulary); %s's output has shape %s" % (where, list(out_shape)))
        x = lm_blocks(tok, text, length, vocab, name or "the text file")
        return TextData(x, x, "lm", None, ["%d blocks of %d tokens (the last partial block is left out)"
                                           % (len(x), length)])
    where_csv = name or "the CSV file"
    texts, labels = read_text_csv(csv, source.text_column, source.label_column, where_csv)
    rows = classification_rows(tok, texts, labels, length, vocab, source.classes, where_csv)
    n_out = fixed(out_shape, len(out_shape) - 1)
    if len(out_shape) != 2 or (n_out is not None and n_out != len(rows.classes)):
        raise DataError("the CSV has %d labels (%s) but %s's output has shape %s; a classifier's is (batch, %d)"
                        % (len(rows.classes), ", ".join(rows.classes), where, list(out_shape), len(rows.classes)))
    x = np.stack([rows.ids, rows.mask], axis=1) if masked else rows.ids
    return TextData(x, rows.labels, "classification", rows.classes, [])


def split(y: np.ndarray, task: str, val_fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(training, validation) sample indices: ``val_fraction`` held out (stratified for a classifier) when
    there are at least 2 samples."""
    n = len(y)
    if n > 1 and val_fraction and float(val_fraction) > 0:
        return data.split_indices(n, float(val_fraction), int(seed), stratify=y if task == "classification" else None)
    return np.arange(n), np.arange(0)


class TextRequest(NamedTuple):
    """Where a text run's data comes from (the CLI's text options): a text file (a causal LM) or a CSV of
    texts and labels (a classifier), each a path or its content (str), and the tokenizer.json (a path or bytes)."""
    text: Any = None
    text_csv: Any = None
    tokenizer: Any = None
    block_size: Optional[int] = None
    text_column: Optional[str] = None
    label_column: Optional[str] = None
    model_config: Any = None   # the model's config.json (a path, its text or a dict): an empty past's heads, size

    @classmethod
    def of(cls, args: Any) -> Optional["TextRequest"]:
        """The request an argparse namespace makes; None when it names no text."""
        req = cls(**{k: getattr(args, k, None) for k in cls._fields})
        return req if req.text is not None or req.text_csv is not None else None

    def sized(self, block_size: Optional[int]) -> "TextRequest":
        """This request, with ``block_size`` when it names none itself."""
        return self if self.block_size else self._replace(block_size=block_size)


class PreparedText(NamedTuple):
    """A text run's data as the model trains on it: the training and validation sets (ids, labels), what the
    training model takes for a batch of them, the tokens per sample and what was decided on the way."""
    train: data.Dataset
    val: Optional[data.Dataset]
    feeds: Callable[..., Tuple[np.ndarray, ...]]
    length: int
    notes: List[str]


def _read(src: Any, what: str) -> str:
    if isinstance(src, (bytes, bytearray)):   # the content itself (a run file's member)
        try:
            text = bytes(src).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError("the {} is not UTF-8 text (bad byte at offset {})".format(what, e.start)) from None
        return text[1:] if text.startswith("\ufeff") else text
    return read_text(src, None, what)[0]


def _config(src: Any) -> Optional[Dict[str, Any]]:
    """The model's config.json: a path, its text or bytes, or the dict."""
    if isinstance(src, str) and not src.lstrip().startswith("{"):
        src = _read(src, "config.json")
    return read_config(src)


def prepare_text(req: TextRequest, art: Any, state: Any, settings: Dict[str, Any],
                 classes: Optional[Sequence[str]] = None) -> PreparedText:
    """``req``'s text encoded for the model of ``art`` (a :class:`~pytrain.run.artifact_dir.ArtifactDir`) and
    split with ``settings``' validation_split and seed; ``classes``: the label names of a run that goes on."""
    where = "the model of {}".format(art.path)
    specs = art.text_inputs()
    labelled = specs is None
    if labelled:
        specs = art.inputs(state)[0]
    if (req.text is None) == (req.text_csv is None):
        raise DataError("give either --text FILE (a causal language model) or --text-csv FILE (a classifier)")
    if labelled and req.text is not None:
        raise DataError("{} trains with a label input ({} loss): a text file trains a causal language model (generated "
                        "with --loss clm); give a CSV of texts and labels (--text-csv)".format(
                            where, state.properties.get("pytrain.loss") or "its"))
    if not labelled and req.text_csv is not None:
        raise DataError("{} is a causal language model (no label input): give a text file (--text), not a CSV of "
                        "texts and labels".format(where))
    if req.tokenizer is None:
        raise DataError("text needs the model's tokenizer: give --tokenizer tokenizer.json (the tokenizer the model "
                        "was trained with)")
    raw = req.tokenizer if isinstance(req.tokenizer, (bytes, bytearray)) else _read(req.tokenizer, "tokenizer file")
    tok = Tokenizer.from_json(raw)
    feed = plan([(s.name, s.elem_type, s.shape) for s in specs], _config(req.model_config), where)
    ids = feed.ids
    length, notes = block_length(next(s.shape for s in specs if s.name == ids), req.block_size, where)
    graph = art.training_proto().graph
    dims: Dict[str, Sequence[int]] = {t.name: list(t.dims) for t in graph.initializer}
    dims.update({n: p.data.shape for n, p in state.parameters.items() if getattr(p, "data", None) is not None})
    outs = art.eval_outputs()
    if not outs or outs[0].shape is None:
        raise DataError("{} records no output shape; text needs (batch, length, vocabulary) or (batch, classes)"
                        .format(where))
    enc = encode(tok, outs[0].shape, length, vocab_size(graph, ids, dims), feed.masked,
                 TextInput(None if req.text is None else _read(req.text, "text file"),
                           None if req.text_csv is None else _read(req.text_csv, "CSV file"),
                           req.text_column, req.label_column, classes), where)
    tr, va = split(enc.y, enc.task, settings.get("validation_split") or 0.0, int(settings.get("seed") or 0))
    src = req.text if req.text is not None else req.text_csv
    full = data.Dataset(enc.x, enc.y, enc.classes, None, enc.task, src if isinstance(src, str) else "the text")
    return PreparedText(full.subset(tr), full.subset(va) if len(va) else None,
                        feed.feeder(labelled), length, notes + enc.notes)
